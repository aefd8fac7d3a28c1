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
    assert exact.merged.out[0].got.rational() == F(c["expected"]["output"])
    assert isinstance(exact.merged.out[0].got, ExpRatio)
    floats = check_split_merge(raw, None, values, 2, float_pairs(rows, values), dtype="float64")
    assert floats.passed and floats.merged.out[0].got == 2.0


def test_blockwise_nan_for_an_empty_block_is_caught():
    raw = raw_of(["-inf", "-inf", "0", "0"])
    values = [[9], [9], [1], [3]]
    pairs = [([math.nan], -math.inf), ([2.0], math.log(2))]
    naive_merge = ([0.0 * math.nan + 2.0], math.log(2))        # exp(-inf) * NaN = NaN
    res = check_split_merge(raw, None, values, 2, pairs, merged=naive_merge, dtype="float64")
    assert [(f.where, f.what, f.compared.status) for f in res.failures()] == \
        [("block 0 [0, 2)", "output 0", "hard"), ("merged", "output 0", "hard")]
    careful = check_split_merge(raw, None, values, 2, pairs, dtype="float64")   # merged here
    assert [f.where for f in careful.failures()] == ["block 0 [0, 2)"]


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
            assert res.merged.out[1].got == full.combine([v[1] for v in values])


# ----------------------------------------------------------------------------- sinks in splits
def test_sink_counted_in_each_block_is_caught():
    c = case("attention-sink")
    raw, values = raw_of(c["input"]["scores"][0]), [[F(v)] for v in c["input"]["V"]]
    pol = Policy(scale="none", sink=F(c["input"]["sink_logit"]))
    good = check_split_merge(raw, None, values, 1, exact_pairs(split_rows(raw, None, 1,
                                                                          policy=pol)[1], values),
                             policy=pol)
    assert good.passed and good.merged.out[0].got.decimal(6) == c["expected"]["output_decimal"]
    assert good.merged.lse.got.text() == "log(2 + exp(1))"
    twice = [softmax_row([r if j == b else None for j, r in enumerate(raw)], None,
                         pol.replace(empty_row="zero"), 0, 1, 2) for b in range(2)]
    kernel = exact_pairs(twice, values)          # the kernel merges without a sink of its own
    bad = check_split_merge(raw, None, values, 1, kernel, merged=merge(kernel), policy=pol)
    assert not bad.passed
    assert {(f.where, f.what) for f in bad.failures()} == {
        ("block 0 [0, 1)", "output 0"), ("block 0 [0, 1)", "lse"), ("block 1 [1, 2)", "output 0"),
        ("block 1 [1, 2)", "lse"), ("merged", "output 0"), ("merged", "lse")}
    got = bad.merged.out[0].got
    assert got.decimal(6) == "1.600978" and c["faulty"]["sink counted in each of two key "
                                                        "blocks"].endswith(got.decimal(6))
    floats = check_split_merge(raw, None, values, 1, float_pairs(twice, values), policy=pol,
                               merged=([float(got)], float(bad.merged.lse.got.decimal(20))),
                               dtype="float64")
    assert ("merged", "output 0") in {(f.where, f.what) for f in floats.failures()}


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
    assert [f.what for f in base2.failures()] == ["lse", "lse", "output 0", "lse"]


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
