"""``verify --search`` over every shape (issue 28, item 3): batches, query and key/value heads
(GQA, both head maps), and masks in SDPA's broadcast shapes, shrunk to the smallest failing one.

The buggy kernels are torch functions in SDPA's convention; each search is seeded (Hypothesis
runs derandomised by ``seed``), so every shape below is the one that search always ends at.
"""

import json

import pytest

from exactattn.call.limits import PASSING_SHRINK_TRIES
from exactattn.call.policy import Policy
from exactattn.call.spec import load_problem
from exactattn.cli import main
from exactattn.errors import InputError
from exactattn.verify import verify
from exactattn.verify.impls import load_impl
from exactattn.verify.search import MASK_FORMS, mask_form_shape, search

KERNELS = '''
import torch
import torch.nn.functional as F


def gqa_tiled(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    """Grouped heads repeated with repeat (head h reads h % H_kv), not repeat_interleave."""
    if enable_gqa:
        rep = query.shape[-3] // key.shape[-3]
        key, value = key.repeat(1, rep, 1, 1), value.repeat(1, rep, 1, 1)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale)


def batch0_mask(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    """Batch 0's mask used for every batch."""
    if attn_mask is not None and attn_mask.dim() == 4:
        attn_mask = attn_mask[:1]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale,
                                          enable_gqa=enable_gqa)


def two_d(query, key, value):
    """Takes no mask and no enable_gqa: the search draws neither for it."""
    return F.scaled_dot_product_attention(query, key, value)
'''


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "shapekern.py").write_text(KERNELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return lambda name: load_impl(f"shapekern:{name}", arrays="torch")


def shape(res):
    return tuple(res.call.shape.values()), res.call.mask_shape


def test_mask_forms_are_sdpa_broadcast_shapes():
    assert MASK_FORMS[0] is None
    assert [mask_form_shape(f, 2, 4, 3, 5) for f in MASK_FORMS[1:]] == [
        (3, 5), (1, 1, 3, 5), (1, 1, 1, 5), (2, 1, 1, 5), (2, 1, 3, 5), (2, 4, 3, 5)]


@pytest.mark.slow
def test_a_gqa_tiling_bug_is_found_and_shrinks_to_four_query_heads_over_two(kernels):
    res = search(kernels("gqa_tiled"), "float32", examples=30, seed=3, max_size=2)
    # B, H_q, H_kv, L, S, E, E_v: wrong only when H_kv > 1 and H_q / H_kv > 1
    assert shape(res) == ((1, 4, 2, 1, 1, 1, 1), None)
    assert res.goal == "fail" and not res.report.passed and not res.stopped
    assert res.score == 1040187392.0     # 1/8 against 0 in float32: 0x3e000000 ULPs
    # the same shape under the tile map is right: the bug is the map
    again = verify(kernels("gqa_tiled"), res.call.with_policy(res.call.policy.replace(gqa="tile")),
                   "float32")
    assert again.passed


def test_a_batch_mask_bug_is_found_with_two_batches_and_a_padding_mask(kernels):
    res = search(kernels("batch0_mask"), "float32", examples=30, seed=3, max_size=2)
    assert shape(res) == ((2, 1, 1, 1, 1, 1, 1), (2, 1, 1, 1))
    assert res.goal == "fail" and not res.report.passed
    given = res.call.mask_given()
    assert given.shape == (2, 1, 1, 1) and given[0, 0, 0, 0] != given[1, 0, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("empty_row", ["zero", "nan"])
def test_numpy_passes_the_search_over_every_shape(empty_row):
    # numpy answers a row its mask hides entirely as the policy says
    res = search("numpy", "float64", Policy(empty_row=empty_row), examples=30, seed=3,
                 max_size=2)
    assert res.report.passed and res.goal == "worst"
    assert [p.passed for p in res.report.probes] == [True, True, True]
    # nothing fails, so shrinking keeps any input scoring at least the largest score seen
    # (1 ULP): it runs out of its tries for a passing search on the largest shape, grouped
    # heads and a 4-D mask
    assert (res.unshrunk_score, res.stopped, res.shrink_tries) == \
        (1.0, True, PASSING_SHRINK_TRIES)
    assert shape(res) == ((2, 2, 1, 2, 2, 2, 2), (2, 1, 2, 2)) and res.report.found.over == 0


@pytest.mark.slow
def test_numpy_naive_fails_on_a_row_its_mask_hides_under_empty_row_zero():
    res = search("numpy-naive", "float64", examples=30, seed=3, max_size=2, probes="none")
    assert res.goal == "hard" and res.score == 2.0 ** 63 and res.report.probes == []
    assert shape(res) == ((1, 1, 1, 1, 1, 1, 1), (1, 1))
    assert res.call.mask_given().tolist() == [[False]]


def test_search_refuses_an_unknown_probe():
    with pytest.raises(InputError, match="probe must be one of ones, identity, positive, none"):
        search("numpy", "float64", examples=3, max_size=1, probes="bogus")


@pytest.mark.slow
def test_a_function_without_a_mask_or_gqa_gets_neither(kernels):
    impl = kernels("two_d")
    assert (impl.takes_mask, impl.takes_gqa) == (False, False)
    res = search(impl, "float32", examples=20, seed=0, max_size=2)
    assert res.report.passed and res.call.mask is None
    assert res.call.shape["H_q"] == res.call.shape["H_kv"]


def test_heads_and_kv_heads_fix_the_heads_and_find_the_tiling_bug(kernels):
    res = search(kernels("gqa_tiled"), "float32", examples=30, seed=3, max_size=2, heads=4,
                 kv_heads=2, probes="none")
    assert shape(res) == ((1, 4, 2, 1, 1, 1, 1), None)
    assert res.goal == "fail" and not res.report.passed and not res.stopped


@pytest.mark.slow
def test_cli_search_prints_a_reproducer_that_fails_again(kernels, capsys, tmp_path):
    argv = ["verify", "--impl", "shapekern:gqa_tiled", "--arrays", "torch", "--search", "30",
            "--seed", "3", "--max-size", "2", "--no-progress"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    line = next(t for t in out.splitlines() if t.startswith("search: "))
    assert "shape B=1 H_q=4 H_kv=2 L=1 S=1 E=1 E_v=1 (shrunk reproducer below" in line
    spec = tmp_path / "repro.json"
    spec.write_text(out[out.index("{\n"):])
    doc = json.loads(spec.read_text())
    assert doc["policy"]["gqa"] == "interleave" and len(doc["query"][0]) == 4
    problem, _, dtype = load_problem(str(spec))
    assert tuple(problem.shape.values()) == (1, 4, 2, 1, 1, 1, 1) and dtype == "float32"
    assert main(["verify", "--impl", "shapekern:gqa_tiled", "--arrays", "torch",
                 "--spec", str(spec), "--no-progress"]) == 1
    assert "result: FAIL" in capsys.readouterr().out


def test_cli_fixed_heads_find_the_tiling_bug_without_probes(kernels, capsys):
    assert main(["verify", "--impl", "shapekern:gqa_tiled", "--arrays", "torch", "--search",
                 "30", "--seed", "3", "--max-size", "2", "--heads", "4", "--kv-heads", "2",
                 "--probes", "none", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "probes (derived values)" not in out      # --probes reaches the search
    assert "search: 30 inputs, largest error 2.17789e+09 ULPs; the smallest failing input has " \
           "1.04019e+09 ULPs; shape B=1 H_q=4 H_kv=2 L=1 S=1 E=1 E_v=1 (shrunk reproducer" in out
    doc = json.loads(out[out.index("{\n"):])
    # key/value head 1 holds 1/8: query heads 2 and 3 read it (interleave); tiling hands it to 1, 3
    assert doc["value"] == [[[["0"]], [["1/8"]]]]


def test_cli_batch_mask_reproducer_keeps_the_mask_shape(kernels, capsys, tmp_path):
    assert main(["verify", "--impl", "shapekern:batch0_mask", "--arrays", "torch", "--search",
                 "30", "--seed", "3", "--max-size", "2", "--no-progress"]) == 1
    out = capsys.readouterr().out
    # every value shrinks to 0, so only the ones probe sees batch 1's row emptied by batch 0's mask
    assert "the smallest failing input has 0 ULPs on its outputs and fails 2 probes (ones, " \
           "identity key 1); shape B=2 H_q=1 H_kv=1 L=1 S=1 E=1 E_v=1 mask 2x1x1x1" in out
    spec = tmp_path / "repro.json"
    spec.write_text(out[out.index("{\n"):])
    problem, _, _ = load_problem(str(spec))
    assert problem.mask_shape == (2, 1, 1, 1)
    assert main(["verify", "--impl", "shapekern:batch0_mask", "--arrays", "torch",
                 "--spec", str(spec), "--no-progress"]) == 1


def one_line(capsys, argv, start):
    rc = main(["verify", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith(start), err


def test_search_shape_options_are_refused_where_they_cannot_apply(capsys):
    one_line(capsys, ["--max-heads", "2"], "exactattn: error: --max-heads must come with --search")
    one_line(capsys, ["--max-batch", "2"], "exactattn: error: --max-batch must come with --search")
    one_line(capsys, ["--search", "3", "--heads", "2", "--max-heads", "4"],
             "exactattn: error: --max-heads must come without --heads (got both)")
    one_line(capsys, ["--search", "3", "--gqa", "tile", "--max-heads", "1"],
             "exactattn: error: --gqa must come with more query heads than key/value heads "
             "(got 1 and 1); pass --max-heads 2 or more")
    one_line(capsys, ["--search", "3", "--max-heads", "33"],
             "exactattn: error: --max-heads must be at most 32 (got 33)")
    one_line(capsys, ["--search", "3", "--heads", "3", "--kv-heads", "2"],
             "exactattn: error: --heads must be a multiple of --kv-heads (got 3 and 2)")


def test_a_search_whose_worst_input_passes_says_so(capsys):
    pytest.importorskip("torch")
    from exactattn.cli import main
    rc = main(["verify", "--impl", "torch", "--dtype", "float32", "--search", "5",
               "--probes", "none"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("search: "))
    assert rc == 0 and "; it passes (within the tolerance by one of the two counts);" in line
