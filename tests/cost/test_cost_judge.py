"""`exactattn cost --judge`: one reported FLOP figure judged, exact values and exit codes."""

import json

import pytest

from exactattn.audit.flops import formula, judge_figure as judge
from exactattn.commands.cost import parse_shape


def _run(cli, *argv):
    rc, out, err = cli("cost", "--no-progress", *argv)
    return rc, out, err


def test_counted_twice_sdpa(cli):
    # B 2, H 5, L = S = 9, E = E_v = 4: 2 x 2 x 5 x 81 x 8 = 12960 FLOPs; twice: 25920
    rc, out, _ = _run(cli, "--judge", "25920", "--call", "sdpa", "--shape", "2,5,9,9,4")
    assert rc == 1
    assert "verdict: wrong: 25920 is not 12960 (right: 12960); attention twice, an error" in out
    assert "2 x 2 x B x H x L x S x (E + E_v) = 2 x 2 x 2 x 5 x 9 x 9 x (4 + 4) = 25920" in out


def test_layout_swap_flash(cli):
    # right 2 x 1 x 2 x 36 x 8 = 1152; (B,S,H,D) read as (B,H,S,D): 2 x 1 x 6 x 2 x 2 x 8 = 384
    rc, out, _ = _run(cli, "--judge", "384", "--call", "flash", "--shape", "1,2,6,6,4")
    assert rc == 1
    assert "verdict: wrong: 384 is not 1152 (right: 1152); layout swap, an error" in out
    assert "2 x B x L x H x H_kv x (E + E_v) = 2 x 1 x 6 x 2 x 2 x (4 + 4) = 384" in out


def test_right_figure_exits_0(cli):
    rc, out, _ = _run(cli, "--judge", "12960", "--shape", "2,5,9,9,4")
    assert rc == 0 and "verdict: right: 12960 is the exact count" in out


def test_causal_halving():
    # causal 8 x 8: 36 pairs a head, exact 2 x 1 x 1 x 36 x 8 = 576; n^2/2: 2 x 32 x 8 = 512
    j = judge(512, "sdpa", (1, 1, 8, 8, 4, 4), causal=True)
    assert (j.expected, j.findings) == (576, ("causal_half",))
    assert j.alternatives == (("full_square", "macs_as_flops"),)
    assert formula(j, j.findings)[1:] == ("2 x 1 x 1 x (8 x 8 / 2) x (4 + 4)", 512)
    assert judge(1024, "sdpa", (1, 1, 8, 8, 4, 4), causal=True).findings == \
        ("full_square",)


def test_kv_heads():
    # H 8 over 2 KV heads, L = S = 4, E 4: exact 2 x 8 x 16 x 8 = 2048; at 2 heads 512
    right = judge(2048, "sdpa", (1, 8, 4, 4, 4), kv_heads=2)
    assert right.right and right.ledger.call.shape.shape["H_kv"] == 2
    v = judge(512, "sdpa", (1, 8, 4, 4, 4), kv_heads=2)
    assert (v.findings, str(v.factor)) == (("kv_heads",), "1/4")


def test_macs_reported_as_flops():
    # E 4, E_v 6 so one product alone differs: MACs 1 x 2 x 25 x 10 = 500, FLOPs 1000
    v = judge(500, "mem_efficient", (1, 2, 5, 5, 4, 6))
    assert (v.expected, v.findings, v.alternatives) == (1000, ("macs_as_flops",), ())


def test_backward():
    # fused: 2 x B H P (3E + 2E_v) = 2 x 2 x 36 x 20 = 2880; math keeps P: 2 x 2 x 36 x 16
    assert judge(2880, "flash", (1, 2, 6, 6, 4), backward=True).right
    assert judge(2304, "math", (1, 2, 6, 6, 4), backward=True).right
    assert judge(2304, "flash", (1, 2, 6, 6, 4), backward=True).findings == \
        ("no_recompute",)


def test_unexplained(cli):
    rc, out, _ = _run(cli, "--judge", "12961", "--shape", "2,5,9,9,4")
    assert rc == 1 and "no departure tried gives it (unexplained" in out


def test_json(cli):
    rc, out, _ = _run(cli, "--judge", "384", "--call", "flash", "--shape", "1,2,6,6,4",
                      "--format", "json")
    doc = json.loads(out)
    data = doc["tables"][0]["data"]
    assert (data["expected"], data["findings"], data["right"]) == (1152, ["layout_swap"], False)
    assert data["explanations"][0]["numbers"] == "2 x 1 x 6 x 2 x 2 x (4 + 4)"


@pytest.mark.parametrize("argv, message", [
    (["--judge", "abc", "--shape", "2,5,9,9,4"], "--judge must be a FLOP figure"),
    (["--judge", "-3", "--shape", "2,5,9,9,4"], "--judge must be a FLOP figure"),
    (["--judge", "1", "--shape", "2,5,9"], "--shape must be B,H,L,S,E"),
    (["--judge", "1", "--call", "foo", "--shape", "2,5,9,9,4"], "--call must be one of"),
    (["--judge", "1", "--shape", "1,8,4,4,4", "--kv-heads", "3"],
     "--kv-heads must divide the query heads H = 8 (got 3)"),
    (["--judge", "1"], "--judge needs --shape"),
    (["--call", "flash"], "--call needs --judge"),
    (["--judge", "1", "--shape", "2,5,9,9,4", "--rows", "4"], "--rows must be left out"),
])
def test_bad_input_one_line_exit_2(cli, argv, message):
    rc, out, err = _run(cli, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_parse_shape():
    assert parse_shape("1,2,3,4,5,6") == (1, 2, 3, 4, 5, 6)


def test_the_formula_of_a_doubled_attention_counts_its_softmax_twice():
    # the explanation adds the softmax once per attention run; its formula did so once only
    # (and the judge's own check of the formula failed on the figure)
    j = judge(10, "sdpa", (1, 1, 1, 1, 1), causal=True, alignment="bottom_right")
    assert j.findings == ("attention_twice", "softmax")
    assert formula(j, j.findings)[1:] == (
        "2 x 2 x 1 x 1 x 1 x (1 + 1) + 2 x 1 x 1 x 1 x 1", 10)


def test_unit_macs_reads_the_figure_as_multiply_adds(cli):
    # B 2, H 5, L = S = 9, E = E_v = 4: 2 x 5 x 81 x 8 = 6480 MACs = 12960 FLOPs
    rc, out, _ = _run(cli, "--judge", "6480", "--shape", "2,5,9,9,4", "--unit", "macs")
    assert rc == 0 and out.startswith("6480 MACs judged for sdpa on 2x5x9x4\n")
    assert "reported: 6480 MACs (forward)\nverdict: right: 6480 is the exact count\n" in out
    flops = _run(cli, "--judge", "6480", "--shape", "2,5,9,9,4")
    assert flops[0] == 1 and "6480 is not 12960 (right: 12960)" in flops[1]
    # the explanations in MACs: no factor 2 in the formula
    j = judge(1152, "flash", (1, 2, 6, 6, 4), unit="macs")   # right 576; twice: 1152
    assert (j.expected, j.findings, j.per_mac) == (576, ("attention_twice",), 1)
    assert formula(j, j.findings) == (
        "2 x B x H x L x S x (E + E_v)", "2 x 1 x 2 x 6 x 6 x (4 + 4)", 1152)
    assert judge(2880 // 2, "flash", (1, 2, 6, 6, 4), backward=True, unit="macs").right
    rc, out, _ = _run(cli, "--judge", "6480", "--shape", "2,5,9,9,4", "--unit", "macs",
                      "--format", "json")
    assert json.loads(out)["unit"] == "MACs (FLOPs = 2 x MACs)"
    assert json.loads(_run(cli, "--judge", "1", "--shape", "1,1,1,1,1", "--format", "json")[1]
                      )["unit"] == "FLOPs (2 x MACs)"


@pytest.mark.parametrize("argv, message", [
    (["--unit", "macs"], "--unit needs --judge (got --unit without --judge)"),
    (["--judge", "1", "--shape", "2,5,9,9,4", "--unit", "gmacs"],
     "--unit must be one of flops, macs (got 'gmacs')"),
])
def test_bad_unit_one_line_exit_2(cli, argv, message):
    rc, out, err = _run(cli, *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_block_read_as_b_c_h_w_is_explained(cli):
    # q, k, v 2 x 3 x 5 x 4 read as images (B, C, H, W): 5 x 4 = 20 pixels of 3 channels;
    # a product 2 x 3 x 20 x 20 = 2400 MACs, both 4800 MACs = 9600 FLOPs (right: 2400 FLOPs)
    rc, out, _ = _run(cli, "--judge", "9600", "--shape", "2,3,5,5,4")
    assert rc == 1
    assert "verdict: wrong: 9600 is not 2400 (right: 2400); (B, C, H, W) read, an error" in out
    assert ("explanation: 2 x B x L x E x S x (H x E + H_kv x E_v) = 2 x 2 x 5 x 4 x 5 x "
            "(3 x 4 + 3 x 4) = 9600 (reads each 4-d operand (B, H, L, E) as an image block") in out
    # GQA, E 2, E_v 3: scores 1 x 4 x (3 x 2) x (5 x 2) = 240, mix 1 x 2 x (3 x 2) x (5 x 3) = 180
    j = judge(420, "flash", (1, 4, 3, 5, 2, 3), kv_heads=2, unit="macs")
    assert (j.expected, j.findings, j.alternatives) == (
        300, ("image_layout",), ())   # right: 1 x 4 x 15 x (2 + 3)
    assert formula(j, j.findings)[1:] == ("1 x 3 x 2 x 5 x (4 x 2 + 2 x 3)", 420)
    # backward (fused): 3 scores-shaped and 2 mix-shaped products, each read that way
    j = judge(2 * (3 * 2400 + 2 * 2400), "sdpa", (2, 3, 5, 5, 4), backward=True)
    assert j.findings == ("image_layout",)
    assert formula(j, j.findings)[0] == \
        "2 x B x L x E x S x (3 x H x E + 2 x H_kv x E_v)"
