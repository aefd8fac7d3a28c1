"""The split-merge checker (flash-decoding / split-KV): per-block (output, LSE) pairs and their
merge against exact rows; the blockwise and attention-sink cases."""

import json
import math
from fractions import Fraction as F
from pathlib import Path

import pytest

from exactattn.call.policy import Policy
from exactattn.errors import InputError, ShapeError
from exactattn.reference.logits import softmax_row
from exactattn.numbers.lse import LogSumExp
from exactattn.call.modifiers import Alibi
from exactattn.reference.online import all_splits, merge, split_rows
from exactattn.numbers.softmax import ExpRatio
from exactattn.verify.split import check_split_merge
from exactattn.testing import assert_typed_equal as typed

CASES = Path(__file__).parents[1] / "data" / "cases"


def case(name):
    return json.loads((CASES / f"{name}.json").read_text())


def raw_of(scores):
    return [None if x == "-inf" else F(x) for x in scores]


def exact_pairs(rows, values):
    cols = list(zip(*values))
    return [([r.combine(list(c)) for c in cols], LogSumExp(r)) for r in rows]


def float_pairs(rows, values, base=1.0):
    out = []
    for outs, lse in exact_pairs(rows, values):
        x = -math.inf if lse.neg_inf else float(lse.decimal(20)) / base
        out.append(([float(o) for o in outs], x))
    return out


# ----------------------------------------------------------------------------- blockwise case
def test_blockwise_case_exact_and_float():
    c = case("blockwise")
    raw = raw_of(c["input"]["scores"][0])
    values = [[F(v)] for v in c["input"]["V"]]
    lengths, rows, full = split_rows(raw, None, c["input"]["block_size"])
    assert lengths == [2, 2] and LogSumExp(rows[0]).decimal(3) == "-inf"
    exact = check_split_merge(raw, None, values, 2, exact_pairs(rows, values))
    assert exact.passed and exact.merged_here
    assert exact.value("merged", "output 0").got.rational() == F(c["expected"]["output"])
    assert isinstance(exact.value("merged", "output 0").got, ExpRatio)
    floats = check_split_merge(raw, None, values, 2, float_pairs(rows, values), dtype="float64")
    assert floats.passed and floats.value("merged", "output 0").got == 2.0


def test_blockwise_nan_for_an_empty_block_is_caught():
    raw = raw_of(["-inf", "-inf", "0", "0"])
    values = [[9], [9], [1], [3]]
    pairs = [([math.nan], -math.inf), ([2.0], math.log(2))]
    naive_merge = ([0.0 * math.nan + 2.0], math.log(2))        # exp(-inf) * NaN = NaN
    res = check_split_merge(raw, None, values, 2, pairs, merged=naive_merge, dtype="float64")
    assert [(f.where, f.what, f.status) for f in res.found.failures] == \
        [("block 0 [0, 2)", "output 0", "hard"), ("merged", "output 0", "hard")]
    careful = check_split_merge(raw, None, values, 2, pairs, dtype="float64")   # merged here
    assert [f.where for f in careful.found.failures] == ["block 0 [0, 2)"]


def test_every_split_merges_to_the_one_pass_row_exactly():
    raw = [F(1), None, F(-2), F(3), F(1)]
    values = [[F(1), F(0)], [F(7), F(7)], [F(-2), F(5)], [F(3), F(1, 3)], [F(0), F(2)]]
    pol = Policy(sink=F(1, 2))
    for split in all_splits(5):
        for where in ["merge", *range(len(split))]:
            _, rows, full = split_rows(raw, F(4), split, policy=pol, sink_at=where)
            res = check_split_merge(raw, F(4), values, split, exact_pairs(rows, values),
                                    policy=pol, sink_at=where)
            assert res.passed, (split, where)
            assert res.value("merged", "output 1").got == full.combine([v[1] for v in values])


# ----------------------------------------------------------------------------- sinks in splits
def test_sink_counted_in_each_block_is_caught():
    c = case("attention-sink")
    raw, values = raw_of(c["input"]["scores"][0]), [[F(v)] for v in c["input"]["V"]]
    pol = Policy(scale="none", sink=F(c["input"]["sink_logit"]))
    good = check_split_merge(raw, None, values, 1, exact_pairs(split_rows(raw, None, 1,
                                                                          policy=pol)[1], values),
                             policy=pol)
    assert good.passed and good.value("merged", "output 0").got.decimal(6) == c["expected"]["output_decimal"]
    assert good.value("merged", "lse").got.text() == "log(2 + exp(1))"
    twice = [softmax_row([r if j == b else None for j, r in enumerate(raw)], None,
                         pol.replace(empty_row="zero"), 0, 1, 2) for b in range(2)]
    kernel = exact_pairs(twice, values)          # the kernel merges without a sink of its own
    bad = check_split_merge(raw, None, values, 1, kernel, merged=merge(kernel), policy=pol)
    assert not bad.passed
    assert {(f.where, f.what) for f in bad.found.failures} == {
        ("block 0 [0, 1)", "output 0"), ("block 0 [0, 1)", "lse"), ("block 1 [1, 2)", "output 0"),
        ("block 1 [1, 2)", "lse"), ("merged", "output 0"), ("merged", "lse")}
    got = bad.value("merged", "output 0").got
    assert got.decimal(6) == "1.600978" and c["faulty"]["sink counted in each of two key "
                                                        "blocks"].endswith(got.decimal(6))
    floats = check_split_merge(raw, None, values, 1, float_pairs(twice, values), policy=pol,
                               merged=([float(got)], float(bad.value("merged", "lse").got.decimal(20))),
                               dtype="float64")
    assert ("merged", "output 0") in {(f.where, f.what) for f in floats.found.failures}


def test_sink_in_one_block_and_at_the_merge_agree():
    raw, values = [F(1), F(0), F(2)], [[F(3)], [F(1)], [F(5)]]
    pol = Policy(scale="none", sink=F(0))
    for where in ("merge", 0, 2):
        _, rows, _ = split_rows(raw, None, 1, policy=pol, sink_at=where)
        assert sum(r.has_sink for r in rows) == (0 if where == "merge" else 1)
        assert check_split_merge(raw, None, values, 1, float_pairs(rows, values), policy=pol,
                                 sink_at=where, dtype="float64").passed


# ----------------------------------------------------------------------------- LSE units
def test_lse_in_base_two_from_a_kernel_is_caught():
    raw, values = [F(1), F(2), F(3)], [[F(1)], [F(2)], [F(3)]]
    _, rows, _ = split_rows(raw, None, [1, 2])
    base2 = check_split_merge(raw, None, values, [1, 2], float_pairs(rows, values, math.log(2)),
                              dtype="float64")
    assert [f.what for f in base2.found.failures] == ["lse", "lse", "output 0", "lse"]


# ----------------------------------------------------------------------------- other modifiers
def test_soft_capped_and_alibi_rows_split_exactly():
    raw, values = [F(3), F(-1), F(3), F(0)], [[F(1)], [F(2)], [F(3)], [F(4)]]
    for pol in (Policy(softcap=F(2)), Policy(alibi=Alibi(12), head=9, query_offset=3),
                Policy(softcap=F(1), sink=F(0))):
        _, rows, full = split_rows(raw, F(2), [2, 2], policy=pol)
        res = check_split_merge(raw, F(2), values, [2, 2], exact_pairs(rows, values), policy=pol)
        assert res.passed, pol
        assert check_split_merge(raw, F(2), values, [2, 2], float_pairs(rows, values),
                                 policy=pol).passed


def test_merge_needs_pairs_from_one_row_and_blocks_must_fit():
    _, rows, _ = split_rows([F(1), F(2)], None, 1)
    with pytest.raises(InputError, match=r"pairs\[0\] must hold outputs over the row of its lse"):
        merge([([rows[1].combine([1, 1])], LogSumExp(rows[0]))])
    with pytest.raises(ShapeError, match=r"pairs must have one \(output, lse\) per block, 2"):
        check_split_merge([F(1), F(2)], None, [[1], [1]], 1, [([1.0], 0.0)])
    with pytest.raises(InputError, match="sink_at must be 'merge' or a block index from 0 to 1"):
        split_rows([F(1), F(2)], None, 1, sink_at=2)


# ----------------------------------------------------------------------------- a kernel's call
KERNEL = '''
import numpy as np

def partial(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False,
            return_lse=False, **kw):
    """One block's (output, lse); a row that sees no key of the block: (0, -inf)."""
    if enable_gqa:
        r = query.shape[-3] // key.shape[-3]
        key, value = np.repeat(key, r, axis=-3), np.repeat(value, r, axis=-3)
    s = query @ np.swapaxes(key, -1, -2) * (1 / np.sqrt(query.shape[-1]) if scale is None
                                            else scale)
    if attn_mask is not None:
        s = np.where(attn_mask, s, -np.inf) if attn_mask.dtype == bool else s + attn_mask
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    w = np.exp(s - top)
    den = w.sum(axis=-1, keepdims=True)
    some = den > 0
    out = np.where(some, (w @ value) / np.where(some, den, 1), 0)
    lse = np.where(some, top + np.log(np.where(some, den, 1)), -np.inf)[..., 0]
    return out.astype(value.dtype), lse.astype(value.dtype)

def merge(states, sink=None):
    """lse = log(sum_b exp(lse_b) [+ exp(sink)]), out = sum_b exp(lse_b - lse) out_b;
    blocks at -inf skipped, a row with none left is (0, -inf)."""
    lses = [l.astype(np.float64) for _, l in states] + ([np.full_like(states[0][1], sink, np.float64)] if sink is not None else [])
    top = np.max(lses, axis=0)
    top = np.where(np.isfinite(top), top, 0)
    tot = sum(np.exp(l - top) for l in lses)
    lse = np.where(tot > 0, top + np.log(np.where(tot > 0, tot, 1)), -np.inf)
    at = np.where(np.isfinite(lse), lse, 0)
    out = sum(np.where(np.isfinite(l), np.exp(l.astype(np.float64) - at), 0)[..., None] * o
              for o, l in states)
    return out.astype(states[0][0].dtype), lse.astype(states[0][1].dtype)

def no_rescale(states):
    """Averages the blocks' outputs: no exp(lse_b - lse) weights."""
    lses = np.stack([l for _, l in states])
    top = lses.max(axis=0)
    return sum(o for o, _ in states) / len(states), top + np.log(np.exp(lses - top).sum(axis=0))

def textbook(states):
    """The textbook merge without a guard: two blocks at -inf give -inf - (-inf) = NaN."""
    lses = np.stack([l for _, l in states])
    top = lses.max(axis=0)
    with np.errstate(invalid="ignore"):
        lse = top + np.log(np.exp(lses - top).sum(axis=0))
        return sum(np.exp(l - lse)[..., None] * o for o, l in states), lse

def kinds(states):
    """Says what it was handed, by failing: the array types and dtypes."""
    raise TypeError(" ".join(f"{type(o).__name__}:{o.dtype}/{type(l).__name__}:{l.dtype}"
                             for o, l in states))

def broken(states):
    raise RuntimeError("merge kernel not built")

def partial_broken(query, key, value, **kw):
    raise RuntimeError("partial kernel not built")

def short_merge(states, sink=None):
    o, l = merge(states, sink)
    return o[..., :0], l

def partial_short(query, key, value, **kw):
    return np.zeros(3), np.zeros(3)
'''

TWO_KEYS = {"name": "two keys", "dtype": "float32", "policy": {"scale": "none"},
            "query": [["1"]], "key": [["0"], ["1"]], "value": [["0"], ["1"]]}
#: query 1 sees no key: both blocks of --splits 1 are empty for it
MASKED = {"name": "a masked row", "dtype": "float32", "policy": {"scale": "none"},
          "query": [["1"], ["0"]], "key": [["0"], ["1"]], "value": [["0"], ["1"]],
          "mask": {"kind": "bool_keep", "values": [[True, True], [False, False]]}}


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernel module ``splitkern`` in the current directory; spec files beside it."""
    (tmp_path / "splitkern.py").write_text(KERNEL)
    (tmp_path / "two.json").write_text(json.dumps(TWO_KEYS))
    (tmp_path / "masked.json").write_text(json.dumps(MASKED))
    monkeypatch.chdir(tmp_path)
    import sys
    sys.modules.pop("splitkern", None)
    yield tmp_path
    sys.modules.pop("splitkern", None)


def split_cli(capsys, *argv):
    from exactattn.cli import main
    rc = main(["verify", "--split-merge", "--impl", "splitkern:partial", "--width", "0", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def table_rows(out: str, title_start: str) -> list[list[str]]:
    """The rows of the text table whose title starts with ``title_start``, cells split on 2+ spaces."""
    import re
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    rows = []
    for line in lines[at + 4:]:
        if not line.strip() or not line[0].isdigit() and not line.startswith("float"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_a_right_merge_passes_with_empty_blocks(kernel, capsys):
    rc, out, err = split_cli(capsys, "--merge", "splitkern:merge", "--causal", "--n", "8",
                             "--d-k", "4", "--splits", "4")
    assert (rc, err) == (0, "") and "result: PASS" in out
    assert "rows with a block that sees no key: 4 of 8 (that block must give output 0 and lse " \
           "-inf); rows that see no key at all: 0" in out
    assert [r[1] for r in table_rows(out, "Summary per dtype and block")] == \
        ["block 0 [0, 4)", "block 1 [4, 8)", "merged"]
    rc, out, err = split_cli(capsys, "--merge", "splitkern:merge", "--causal", "--heads", "4",
                             "--kv-heads", "2", "--n", "5", "--n-keys", "7", "--alignment",
                             "bottom_right", "--d-k", "2", "--splits", "3,5", "--dtype",
                             "float64,float32")
    assert (rc, err) == (0, "") and "result: PASS" in out
    assert "rows with a block that sees no key: 12 of 20" in out
    assert len(table_rows(out, "Summary per dtype and block")) == 8


def test_a_merge_without_the_rescale_fails_at_the_exact_value(kernel, capsys):
    rc, out, err = split_cli(capsys, "--merge", "splitkern:no_rescale", "--spec", "two.json",
                             "--splits", "1")
    assert (rc, err) == (1, "") and "result: FAIL" in out
    worst = table_rows(out, "splitkern:partial on 2 key blocks")[0]
    # exact e/(1 + e); the average of the blocks' 0 and 1 is 1/2, (e/(1+e) - 1/2) 2^24 ULPs off
    assert worst == ["0,0,0", "merged", "output 0", "7.31058578630e-01", "0.7310586", "0.5",
                     "3876520", "over"]
    import numpy as np                        # float32 ULPs in [1/2, 1) are 2^-24
    assert (np.float32(math.e / (1 + math.e)) - np.float32(0.5)) * 2 ** 24 == 3876520
    summary = table_rows(out, "Summary per dtype and block")
    assert summary[-1] == ["float32", "merged", "2", "3876520", "1", "0"]


def test_two_empty_blocks_merged_to_nan_fail_hard(kernel, capsys):
    rc, out, err = split_cli(capsys, "--merge", "splitkern:textbook", "--spec", "masked.json",
                             "--splits", "1")
    assert (rc, err) == (1, "")
    rows = table_rows(out, "splitkern:partial on 2 key blocks")
    # the defined answer of a row that sees no key is verify's: empty_row zero, output 0, lse -inf
    assert rows[:2] == [["0,0,1", "merged", "output 0", "0", "0", "nan", "-", "hard"],
                        ["0,0,1", "merged", "lse", "-inf", "-inf", "nan", "-", "hard"]]
    assert "rows that see no key at all: 1 (the merge must give the policy's empty row, " \
           "empty_row zero: output 0, lse -inf)" in out
    rc, out, _ = split_cli(capsys, "--merge", "splitkern:merge", "--spec", "masked.json",
                           "--splits", "1")
    assert rc == 0 and "result: PASS" in out
    rc, out, _ = split_cli(capsys, "--merge", "splitkern:merge", "--spec", "masked.json",
                           "--splits", "1", "--empty-row", "nan")      # one rule: the policy's
    assert rc == 1 and table_rows(out, "splitkern")[0][:6] == \
        ["0,0,1", "merged", "output 0", "nan", "nan", "0"]


def test_a_row_that_sees_no_key_merged_here_is_the_policys_empty_row(kernel, capsys):
    """Merged here (no --merge), a row that sees no key gets the policy's empty row
    (Policy.empty_share), as the one-pass row does: a correct partial passes under every rule
    (the merge answered 0: over under uniform, hard under nan)."""
    for rule in ("zero", "uniform", "nan"):
        rc, out, _ = split_cli(capsys, "--spec", "masked.json", "--splits", "1", "--empty-row",
                               rule)
        assert rc == 0 and "result: PASS" in out, rule
    raw, values = [None, None], [[F(1)], [F(2)]]
    for rule, want in (("zero", 0.0), ("uniform", 1.5), ("nan", math.nan)):
        pol = Policy(empty_row=rule)
        rows = split_rows(raw, None, 1, policy=pol)[1]
        floats = check_split_merge(raw, None, values, 1, float_pairs(rows, values), policy=pol,
                                   dtype="float64")
        exact = check_split_merge(raw, None, values, 1, exact_pairs(rows, values), policy=pol)
        assert floats.passed and exact.passed and floats.merged_here, rule
        typed(floats.value("merged", "output 0").got, want)
        typed(floats.value("merged", "lse").got, math.nan if rule == "nan" else -math.inf)


def test_a_function_that_raises_is_a_hard_failure(kernel, capsys):
    rc, out, err = split_cli(capsys, "--merge", "splitkern:broken", "--spec", "two.json",
                             "--splits", "1")
    assert (rc, err) == (1, "") and "Traceback" not in out
    assert out.count("hard failure: splitkern:broken raised RuntimeError: merge kernel not "
                     "built; the merged values count as failed\n") == 1
    assert table_rows(out, "Summary per dtype and block")[-1] == \
        ["float32", "merged", "2", "-", "0", "2"]
    from exactattn.cli import main
    rc = main(["verify", "--split-merge", "--impl", "splitkern:partial_broken", "--merge",
               "splitkern:merge", "--spec", "two.json", "--splits", "1"])
    out, err = capsys.readouterr()
    assert (rc, err) == (1, "") and "Traceback" not in out
    assert "hard failure: splitkern:partial_broken raised RuntimeError: partial kernel not " \
           "built; block 0 [0, 1)'s values count as failed" in out
    assert "hard failure: splitkern:merge was not called: a block raised" in out
    assert [r[-1] for r in table_rows(out, "Summary per dtype and block")] == ["2", "2", "2"]


def test_an_answer_of_the_wrong_shape_is_a_hard_failure_as_in_verify(kernel, capsys):
    """A merge or block answering with the wrong shape fails what it should have produced
    (exit 1, the shapes named), as a forward check's kernel does: not a bad input."""
    rc, out, err = split_cli(capsys, "--merge", "splitkern:short_merge", "--spec", "two.json",
                             "--splits", "1")
    assert (rc, err) == (1, "") and "Traceback" not in out
    assert out.count("hard failure: splitkern:short_merge raised an answer of the wrong shape: "
                     "splitkern:short_merge's output must be 1 x 1") == 1
    assert table_rows(out, "Summary per dtype and block")[-1] == \
        ["float32", "merged", "2", "-", "0", "2"]
    from exactattn.cli import main
    rc = main(["verify", "--split-merge", "--impl", "splitkern:partial_short", "--merge",
               "splitkern:merge", "--spec", "two.json", "--splits", "1"])
    out, err = capsys.readouterr()
    assert (rc, err) == (1, "") and "Traceback" not in out
    assert "hard failure: splitkern:partial_short raised an answer of the wrong shape: " \
           "splitkern:partial_short's output on block 0 [0, 1) must be 1 x 1" in out
    assert [r[-1] for r in table_rows(out, "Summary per dtype and block")] == ["2", "2", "2"]


@pytest.mark.parametrize("argv, message", [
    (["--splits", "1,1"], "--splits must be increasing key positions from 1 to 1 (got 1,1); "
                          "each block holds at least one key, e.g. 1 cuts 2 keys into [0, 1), "
                          "[1, 2)"),
    (["--splits", "2"], "--splits must be increasing key positions from 1 to 1 (got 2)"),
    (["--splits", "x"], "--splits must be a positive whole number (got 'x')"),
    (["--splits", "0"], "--splits must be"),
    (["--merge", "numpy"], "--merge must be module:function, your merge of the blocks' "
                           "(output, lse) states (got 'numpy')"),
    (["--merge", "splitkern:nothere"], "--merge 'splitkern:nothere' must name a function in "
                                       "splitkern"),
    (["--lse"], "--lse must come without --split-merge (got both)"),
    (["--alibi", "8"], "--alibi must come without --split-merge (got both); a block's keys "
                       "reach the function without their positions"),
    (["--backward"], "--backward must come without --split-merge (got both)"),
    (["--search", "3"], "--search must come without --split-merge (got both)"),
    (["--merge", "splitkern:merge", "--sink", "0", "--splits", "1"], None),
])
def test_bad_split_options_are_one_line(kernel, capsys, argv, message):
    try:
        rc, out, err = split_cli(capsys, "--spec", "two.json", *argv)
    except SystemExit as e:
        rc, (out, err) = e.code, capsys.readouterr()
    if message is None:                       # the kernel's merge takes sink=: a sink runs
        assert rc == 0 and "result: PASS" in out, err
        return
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("exactattn: error: ") and message in err, err


def test_split_options_need_split_merge(kernel, capsys):
    from exactattn.cli import main
    for argv, flag in ((["--splits", "1"], "--splits"), (["--merge", "splitkern:merge"],
                                                         "--merge")):
        rc = main(["verify", *argv])
        out, err = capsys.readouterr()
        assert (rc, out) == (2, "") and err == \
            f"exactattn: error: {flag} must come with --split-merge (got {flag} alone)\n"


def test_each_split_option_changes_the_report(kernel, capsys):
    base = ("--causal", "--n", "4", "--d-k", "2")
    from exactattn.cli import main
    assert main(["verify", *base]) == 0
    plain = capsys.readouterr()
    runs = [split_cli(capsys, *base), split_cli(capsys, *base, "--splits", "1,3"),
            split_cli(capsys, *base, "--merge", "splitkern:merge")]
    assert [r[0] for r in runs] == [0, 0, 0]
    outs = [plain.out] + [r[1] for r in runs]
    assert len(set(outs)) == 4
    assert "merge: none given (--merge); the states were merged here in float64" in outs[1]
    assert "blocks: [0, 1), [1, 3), [3, 4) of S = 4 keys" in outs[2]
    assert "merge: splitkern:merge, judged against the exact one-pass row" in outs[3]


def test_the_merge_is_handed_the_states_in_the_documented_dtypes(kernel, capsys):
    rc, out, _ = split_cli(capsys, "--merge", "splitkern:kinds", "--spec", "two.json",
                           "--splits", "1", "--dtype", "float16")
    assert rc == 1 and "raised TypeError: ndarray:float16/ndarray:float32 " \
                       "ndarray:float16/ndarray:float32;" in out
    pytest.importorskip("torch")
    from exactattn.cli import main                # a built-in partial, your merge on tensors
    rc = main(["verify", "--split-merge", "--impl", "numpy", "--merge", "splitkern:kinds",
               "--spec", "two.json", "--splits", "1", "--dtype", "float64", "--arrays", "torch"])
    out = capsys.readouterr().out
    assert rc == 1 and "raised TypeError: Tensor:torch.float64/Tensor:torch.float64 " in out


def test_verify_split_from_python_float64_and_a_sink():
    from exactattn.call import Call
    from exactattn.verify.split import FunctionMerge, SplitReport, verify_split
    import numpy as np
    space: dict = {}
    exec(KERNEL, space)
    c = Call([[1]], [[0], [1]], [[0], [1]], policy=Policy(scale="none", sink=F(0)))
    rep = verify_split(space["partial"], c, "float64", [1, 1], merge=space["merge"])
    assert isinstance(rep, SplitReport) and rep.passed and rep.raised == {}
    m = rep.rows[0, 0, 0]
    out, lse = m.value("merged", "output 0"), m.value("merged", "lse")
    assert out.exact.decimal(9) == "0.576116885" and lse.exact.text() == "log(2 + exp(1))"
    typed(out.rounded, float(out.exact.decimal(20)))
    bad = verify_split(space["partial"], c, "float64", [1, 1],
                       merge=lambda states, sink=None: space["merge"](states))  # sink dropped
    assert [(x.index[:3], x.where, x.what, x.status) for x in bad.found.failures] == \
        [((0, 0, 0), "merged", "output 0", "over"), ((0, 0, 0), "merged", "lse", "over")]
    with pytest.raises(InputError, match="must take sink= for this call"):
        verify_split(space["partial"], c, "float64", [1, 1], merge=space["no_rescale"])
    with pytest.raises(InputError, match="policy must have no alibi or rope or dropout for a "
                                         "split-merge check \\(got alibi\\)"):
        verify_split("numpy", c.with_policy(Policy(alibi=Alibi(8))), "float64", [1, 1])
    got = FunctionMerge(lambda states: states[-1])([(np.zeros((1, 1)), np.zeros(1)),
                                                    (np.ones((1, 1)), np.ones(1))], "float32")
    assert got.dtype == "float32" and got.lse.tolist() == [1.0]


def test_the_default_tolerance_is_verifys_rule_with_the_rows_largest_logit():
    """check_split_merge's default is verify's (check.tolerance): the row's largest |logit|
    enters it, so a 20-ULP lse at scores near 40 is within it, not over.  The merged output
    that lse moves is 159 ULPs off at the size of its terms (sum p|v|, verify's measure: verify
    judges the same float over), so it is over; measured at max|v| it passed at 40."""
    from exactattn.numbers.formats import default_max_ulps
    raw = [F(40), F(0), F(38), F(1)]
    rows, full = split_rows(raw, None, 2, policy=Policy(scale="none"))[1:]
    pairs = float_pairs(rows, [[1], [2], [3], [4]])
    got = check_split_merge(raw, None, [[1], [2], [3], [4]], 2, pairs, dtype="float32",
                            policy=Policy(scale="none"))
    typed(got.max_ulps, default_max_ulps("float32", 4, 1, 40.0))
    typed(got.max_ulps, 50)
    off = [(o, math.nextafter(l, math.inf) * (1 + 19 * 2.0 ** -23)) for o, l in pairs[:1]]
    found = check_split_merge(raw, None, [[1], [2], [3], [4]], 2, off + pairs[1:],
                              dtype="float32", policy=Policy(scale="none")).found
    assert [(e.index[-2:], e.status, e.ulps) for e in found.kept if e.index[-1] == "lse"] == [
        (("block 0 [0, 2)", "lse"), "ok", 24), (("block 1 [2, 4)", "lse"), "ok", 0),
        (("merged", "lse"), "ok", 21)]
    assert [(e.index[-2:], e.ulps, round(e.terms_ulps, 2)) for e in found.failures] == [
        (("merged", "output 0"), 159, 159.58)]


# ------------------------------------------ split-merge judges as verify does (a reviewer's cases)
def _sdpa(q, k, v, scale=None, return_lse=False, **kw):
    import numpy as np
    s = (q @ np.swapaxes(k, -1, -2)) * (1.0 if scale is None else scale)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    return ((e / z) @ v, (m + np.log(z))[..., 0]) if return_lse else (e / z) @ v


def test_an_output_is_measured_at_its_terms_not_at_one():
    from exactattn.call import Call
    from exactattn.verify.check import verify
    from exactattn.verify.split import verify_split

    def big(q, k, v, scale=None, return_lse=False, **kw):     # every output 5% too large
        o, l = _sdpa(q, k, v, scale, True)
        return (o * 1.05, l) if return_lse else o * 1.05
    c = Call([[0]], [[0], [0]], [[F(1, 2 ** 20)], [F(3, 2 ** 20)]], policy=Policy(scale="none"))
    assert not verify(big, c, "float32").passed
    rep = verify_split(big, c, "float32", [1, 1])
    assert not rep.passed and rep.rows[0, 0, 0].value("merged", "output 0").status == "over"


def test_a_log_sum_exp_is_measured_as_verify_measures_it():
    import numpy as np
    from exactattn.call import Call
    from exactattn.verify.check import verify
    from exactattn.verify.split import verify_split

    def lse_off(q, k, v, scale=None, return_lse=False, **kw):   # the lse 12 float32 ULPs high
        o, l = _sdpa(q, k, v, scale, True)
        l = l.astype(np.float32)
        for _ in range(12):
            l = np.nextafter(l, np.float32(np.inf))
        return (o, l) if return_lse else o
    c = Call([[0]], [[0], [0]], [[1], [3]], policy=Policy(scale="none"))
    assert not verify(lse_off, c, "float32", lse="e", max_ulps=8).passed
    rep = verify_split(lse_off, c, "float32", [2], max_ulps=8)
    assert not rep.passed and rep.rows[0, 0, 0].value("block 0 [0, 2)", "lse").status == "over"


def test_blocks_are_partial_states_whatever_the_policys_empty_row():
    from exactattn.call import Call
    from exactattn.verify.split import verify_split
    c = Call([[0]] * 4, [[0]] * 4, [[1], [2], [3], [4]],
             policy=Policy(scale="none", causal=True, empty_row="uniform"))
    rep = verify_split("numpy", c, "float32", [2, 2])    # rows 0, 1 see no key of block 1
    assert rep.passed
    assert rep.rows[0, 0, 0].value("block 1 [2, 4)", "lse").rounded == -math.inf


def test_a_nan_rows_log_sum_exp_is_nan_as_verify_says():
    r = check_split_merge([None, None], None, [[1], [3]], 1,
                          [([0.0], -math.inf), ([0.0], -math.inf)], merged=([math.nan], math.nan),
                          policy=Policy(empty_row="nan"), dtype="float32")
    assert r.passed and r.value("merged", "lse").status == "ok"
    assert math.isnan(r.value("merged", "lse").rounded)


def test_a_merge_named_by_an_impl_object_merges_with_its_function(tmp_path, monkeypatch):
    # --merge module:NAME where NAME is a FunctionImpl: its function is the merge, named as
    # the impl names itself (not the object, which takes a FloatCall, not the blocks' states)
    from exactattn.verify.split import load_merge
    (tmp_path / "implmerge.py").write_text(
        "from exactattn.verify.adapter import FunctionImpl\n"
        "def first(states):\n    return states[0]\n"
        "IMPL = FunctionImpl(first, name='inner')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = load_merge("implmerge:IMPL")
    assert got.name == "inner" and got.fn.__name__ == "first"
