"""exactattn.verify (formats, problem, reference, impls, check, search, report), the policy
model it reads (exactattn.call.policy), verify's spec files (exactattn.call.spec) and the ``verify`` command.

Tolerances: float implementations are judged by verify's rule (the default
ULP tolerance); everything about the exact side is compared exactly.
"""

import json
import math
import struct
from fractions import Fraction as F

import numpy as np
import pytest
import sympy
from hypothesis import given, strategies as st

from exactattn.cli import main
from exactattn.errors import InputError, ShapeError, SpecError
from exactattn.call.policy import PRESETS, Policy, parse_scale, preset
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.call.spec import load_problem, problem_text
from exactattn.verify import Reference, certified_scientific, round_to_format, search, ulp_index, ulps_between, verify
from exactattn.call import Call
from exactattn.verify.impls import FloatCall, FunctionImpl, NumpyImpl, load_impl, make_call
from exactattn.testing import assert_typed_equal as typed


# ----------------------------------------------------------------- rounding into formats

finite64 = st.floats(allow_nan=False, allow_infinity=False, width=64)


@given(finite64)
def test_round_to_float32_and_float16_match_numpy_casts(x):
    # numpy's float64 -> float32/float16 casts round to nearest even, with subnormals
    with np.errstate(over="ignore"):
        typed(round_to_format(F(x), "float32"), float(np.float32(x)))
        typed(round_to_format(F(x), "float16"), float(np.float16(x)))
    typed(round_to_format(F(x), "float64"), x)


@given(st.integers(-2**40, 2**40), st.integers(1, 2**40))
def test_round_to_float64_matches_fraction_float(a, b):
    typed(round_to_format(F(a, b), "float64"), float(F(a, b)))


@given(finite64)
def test_round_to_bfloat16_matches_torch(x):
    torch = pytest.importorskip("torch")
    want = torch.tensor([x], dtype=torch.float64).to(torch.bfloat16).double().item()
    typed(round_to_format(F(x), "bfloat16"), want)


def test_round_ties_go_to_even_and_overflow():
    one = F(1)
    assert round_to_format(one + F(1, 2**24), "float32") == 1.0            # tie, 1 is even
    assert round_to_format(one + F(3, 2**24), "float32") == 1.0 + 2.0**-22  # tie, to even
    assert round_to_format(F(2**-150), "float32") == 0.0                   # half the least subnormal
    assert round_to_format(F(3, 2**150), "float32") == 2.0**-148       # 1.5 units: tie, to even
    assert round_to_format(F(-(2**128)), "float32") == -math.inf
    assert math.copysign(1, round_to_format(F(-1, 2**200), "float16")) == -1.0
    assert round_to_format(F(65504 + 16), "float16") == math.inf           # the tie past max
    assert round_to_format(F(65504 + 15), "float16") == 65504.0


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_ulp_index_steps_by_one_float32(x):
    with np.errstate(over="ignore"):
        up = float(np.nextafter(np.float32(x), np.float32(np.inf)))   # inf after the largest
    assert ulp_index(up, "float32") - ulp_index(x, "float32") == 1
    # the bit pattern of a positive float32 is its index
    if x > 0:
        assert ulp_index(x, "float32") == struct.unpack("<I", struct.pack("<f", x))[0]


def test_ulp_index_errors_and_zero():
    assert ulps_between(-0.0, 0.0, "float16") == 0
    assert ulps_between(-2.0**-24, 2.0**-24, "float16") == 2
    with pytest.raises(InputError, match="must be a float32 value"):
        ulp_index(0.1, "float32")
    with pytest.raises(InputError, match="must not be NaN"):
        ulp_index(math.nan, "float32")
    with pytest.raises(InputError, match="dtype must be one of"):
        round_to_format(F(1), "float8")


# ----------------------------------------------------------------- policies

def test_presets_and_visible():
    assert set(PRESETS) == {"torch", "flash", "jax", "xformers"}
    assert preset("torch") == Policy()
    assert preset("flash").alignment == "bottom_right"
    assert preset("jax").empty_row == "uniform"
    assert preset("xformers").mask_kind == "additive"
    bottom = Policy(causal=True, alignment="bottom_right")
    assert [0 in bottom.visible_keys(i, 3, 1) for i in range(3)] == [False, False, True]
    assert [Policy(gqa="tile").kv_head(h, 6, 3) for h in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [Policy().kv_head(h, 6, 3) for h in range(6)] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("kwargs, message", [
    ({"empty_row": "inf"}, "empty_row must be one of zero, uniform, nan (got 'inf')"),
    ({"mask_kind": "float"}, "mask_kind must be one of bool_keep, bool_drop, additive"),
    ({"gqa": "spread"}, "gqa must be one of interleave, tile (got 'spread')"),
    ({"causal": 1}, "causal must be true or false (got 1)"),
    ({"scale": "0"}, "scale must be 'default', a positive number"),
    ({"scale": "1/sqrt(-2)"}, "scale must be 'default', a positive number"),
])
def test_policy_errors(kwargs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Policy(**kwargs)


def test_parse_scale_forms():
    typed(parse_scale("1/sqrt(48)"), F(48))
    typed(parse_scale("0.125"), F(64))
    assert parse_scale("none") is None                      # no scaling: not Fraction(1)
    assert Policy(scale="1/sqrt(48)").scale_text() == "1/sqrt(48)"
    assert Policy(scale="0.125").scale_text() == "1/8"


# ----------------------------------------------------------------- the exact reference

def test_reference_matches_the_pencil_engine_on_the_chronicle():
    from exactattn import attend
    from exactattn.examples import chronicle
    ex = chronicle()
    trace = attend(ex.head, ex.x)
    p = Call(trace.queries, trace.keys, trace.values)
    ref = Reference(p)                         # default scale 1/sqrt(4): the chronicle's divisor 2
    for i in range(4):
        assert ref.row(0, 0, i).counts == trace.rows[i].counts
        for c in range(4):
            assert ref.output(0, 0, i, c).numerators == trace.output(i, c).numerators
    assert [ref.share(0, 0, 1, j).decimal(4) for j in range(4)] == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert ref.macs == {"scores": 64, "mix": 64}


def test_biased_row_irrational_scale_matches_sympy():
    # exponent s/sqrt(2) + m: not a rational multiple of 1/sqrt(2)
    p = Call([[1, 0]], [[1, 0], [0, 1], [1, 1]], [[1], [2], [4]],
                            [["1/3", "-inf", 0]], mask_kind="additive")
    ref = Reference(p.with_policy(Policy()))            # d_k = 2: scale 1/sqrt(2)
    row = ref.row(0, 0, 0)
    assert type(row) is SoftmaxRow and row.general is True     # the mask makes the logits exact values
    r2 = sympy.sqrt(2)
    e0, e2 = sympy.exp(1 / r2 + sympy.Rational(1, 3)), sympy.exp(1 / r2)
    want = (1 * e0 + 4 * e2) / (e0 + e2)
    got = ref.output(0, 0, 0, 0)
    assert abs(sympy.N(got.closed_form() - want, 60)) < sympy.Float("1e-55")
    assert abs(F(got.decimal(20)) - F(str(sympy.N(want, 40)))) <= F(1, 2 * 10**20)
    typed(ref.share(0, 0, 0, 1).exact(), F(0))
    rounded, balls, mags = ref.rounded_outputs("float64")
    assert rounded[0, 0, 0, 0] == float(sympy.N(want, 40))


def test_rational_outputs_on_a_tie_round_exactly():
    # all scores equal: output = mean of the values, which can sit exactly on a float16 tie
    v = [[F(2049)], [F(2048)], [F(2050)], [F(2049)]]           # mean 2049: a float16 tie
    p = Call([[0]], [[0]] * 4, v)
    rounded, _, _ = Reference(p).rounded_outputs("float16")
    assert rounded[0, 0, 0, 0] == 2048.0                         # ties to even
    assert round_to_format(F(2049), "float16") == 2048.0


def test_certified_scientific_is_correctly_rounded():
    import mpmath
    row = SoftmaxRow([F(1), F(0), F(-30)], F(3))
    with mpmath.workdps(60):
        den = sum(mpmath.exp(mpmath.mpf(s) / mpmath.sqrt(3)) for s in (1, 0, -30))
        for j, s in enumerate((1, 0, -30)):
            w = mpmath.exp(mpmath.mpf(s) / mpmath.sqrt(3)) / den
            got = certified_scientific(row.share(j), 15)
            mant, exp = got.split("e")
            assert len(mant.replace(".", "")) == 15
            value = F(mant) * F(10) ** int(exp)
            half_unit = F(1, 2) * F(10) ** (int(exp) - 14)
            assert abs(value - F(mpmath.nstr(w, 50))) < half_unit
    assert certified_scientific(SoftmaxRow([F(0), F(0)], None).share(0), 3) == "5.00e-01"


# ----------------------------------------------------------------- verify

@pytest.mark.parametrize("impl, dtype", [("numpy", "float64"), ("numpy", "float32"),
                                         ("numpy-naive", "float32")])
def test_numpy_passes_on_random_inputs(impl, dtype):
    rep = verify(impl, (Call.random(12, 4, seed=3)).with_policy(Policy(causal=True)), dtype)
    assert rep.passed is True
    s = rep.summary()
    assert s["count"] == 12 * 4 and s["hard"] == 0 and s["over"] == 0
    assert type(s["max_ulps"]) is int and type(s["mean_ulps"]) is float
    assert rep.reference.macs == {"scores": 78 * 4, "mix": 78 * 4}     # n(n+1)/2 pairs


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_torch_passes_every_dtype(dtype):
    pytest.importorskip("torch")
    p = Call.random(10, 4, seed=1, n_keys=7, heads=4, kv_heads=2)
    for pol in (Policy(), preset("flash", causal=True), Policy(gqa="tile"),
                Policy(scale="1/sqrt(3)", causal=True)):
        rep = verify("torch", p.with_policy(pol), dtype)
        assert rep.passed, (pol, rep.summary())
        # standard-normal float64 inputs: none moves in float64, nearly all in the others
        assert (rep.moved_inputs == 0) is (dtype == "float64")


def test_gqa_map_mismatch_is_caught():
    p = Call.random(3, 2, seed=2, heads=4, kv_heads=2)

    def interleave_only(query, key, value, enable_gqa=False):
        rep = np.repeat(np.arange(key.shape[-3]), query.shape[-3] // key.shape[-3])
        call = FloatCall(query, key[..., rep, :, :], value[..., rep, :, :], "float64")
        return NumpyImpl()(call)
    assert verify(FunctionImpl(interleave_only), p.with_policy(Policy()), "float64").passed
    assert not verify(FunctionImpl(interleave_only), p.with_policy(Policy(gqa="tile")), "float64").passed
    assert verify("numpy", p.with_policy(Policy(gqa="tile")), "float64").passed


def test_bool_drop_is_inverted_for_the_implementation():
    mask = [[False, True, False]] * 2
    p = Call([[1], [2]], [[1], [2], [3]], [[1], [2], [4]], mask, mask_kind="bool_drop")
    call = make_call(p.with_policy(Policy(mask_kind="bool_drop")), "float64")
    assert call.attn_mask.tolist() == [[True, False, True]] * 2
    ref = Reference(p.with_policy(Policy(mask_kind="bool_drop")))
    assert ref.visible(0, 0).tolist() == [[True, False, True]] * 2
    assert verify("numpy", p.with_policy(Policy(mask_kind="bool_drop")), "float32").passed


def test_hard_failures_and_off_format_outputs():
    p = Call.random(2, 2, seed=0)

    def nan_first(query, key, value):
        out = np.full((2, 2), 0.5)
        out[0, 0] = np.nan
        out[1, 1] = np.inf
        return out
    rep = verify(FunctionImpl(nan_first), p.with_policy(Policy()), "float64")
    assert [e.status for e in rep.entries][::3] == ["hard", "hard"]
    assert rep.summary()["hard"] == 2 and rep.passed is False

    def float64_answer(query, key, value):
        return NumpyImpl()(FloatCall(query.astype(np.float64), key, value, "float64"))
    rep = verify(FunctionImpl(float64_answer), p.with_policy(Policy()), "float32")
    assert rep.passed and rep.notes[0].startswith("outputs that were not float32 values: ")


def test_verify_errors():
    p = Call.random(2, 2)
    with pytest.raises(InputError, match="dtype must be one of float64, float32, float16 for numpy"):
        verify("numpy", p.with_policy(Policy()), "bfloat16")
    short = verify(FunctionImpl(lambda query, key, value: np.zeros(3)), p.with_policy(Policy()),
                   "float64")                   # the kernel's failure, not a bad input
    assert not short.passed and short.found.hard == short.found.count == 4
    assert "output must be 2 x 2" in short.raised
    with pytest.raises(InputError, match="must take attn_mask"):
        verify(FunctionImpl(lambda query, key, value: query),
               (Call([[1]], [[1]], [[1]], [[True]])).with_policy(Policy()), "float64")
    with pytest.raises(InputError, match="impl must be numpy"):
        load_impl("cuda")
    with pytest.raises(ShapeError, match="query heads must be a multiple"):
        Call([[[1]]] * 3, [[[1]]] * 2, [[[1]]] * 2)
    with pytest.raises(InputError, match="binary float"):
        Call([[0.1]], [[1]], [[1]])
    with pytest.raises(InputError, match="inputs must fit in float16"):
        verify("numpy", (Call([[70000]], [[1]], [[1]])).with_policy(Policy()), "float16")


def test_spec_round_trip(tmp_path):
    p = Call([["1/2", "-3"]], [[1, 0], [0, 1]], [[5], [7]], [["0", "-inf"]],
                            mask_kind="additive", name="rt")
    pol = Policy(scale="1/sqrt(3)", causal=True, alignment="bottom_right", mask_kind="additive")
    path = tmp_path / "rt.json"
    path.write_text(problem_text(p.with_policy(pol), "bfloat16"))
    q, qpol, dtype = load_problem(path)
    assert (q.query == p.query).all() and (q.key == p.key).all() and (q.value == p.value).all()
    assert q.mask.tolist() == p.mask.tolist() and qpol == pol and dtype == "bfloat16"
    (tmp_path / "bad.json").write_text('{"query": [[1]], "key": [[1]]}')
    with pytest.raises(SpecError, match="value is missing"):
        load_problem(tmp_path / "bad.json")
    with pytest.raises(SpecError, match="must exist"):
        load_problem(tmp_path / "none.json")


# ----------------------------------------------------------------- search

def test_search_finds_and_shrinks_a_hard_failure():
    res = search("numpy-naive", "float16", examples=60, seed=1, max_size=3)
    assert res.score == float(2**63)                   # exp overflows float16 at 11.1
    sh = res.call.shape
    assert sh["L"] == 1 and sh["S"] <= 2 and sh["E"] <= 2 and sh["E_v"] == 1   # shrunk
    assert any(e.status == "hard" for e in res.report.entries)
    doc = json.loads(problem_text(res.call.with_policy(Policy()), "float16"))
    assert doc["dtype"] == "float16" and len(doc["query"]) == 1


def test_search_largest_ulps_reproduces():
    # no masks: numpy's float reference gives NaN on a row that sees no key (a hard failure)
    res = search("numpy", "float32", examples=30, seed=0, max_size=3, masks=False)
    assert res.score >= 1 and res.report.passed
    again = verify("numpy", res.call.with_policy(Policy()), "float32")
    assert again.summary()["max_ulps"] == res.score


# ----------------------------------------------------------------- cost cross-check

def test_flop_counter_next_to_exact_macs():
    pytest.importorskip("torch")
    from exactattn.verify import flop_counts
    p = Call.random(16, 4, seed=0, heads=2)
    pol = Policy(causal=True)
    fl = flop_counts(p.with_policy(pol), "float32")
    rect = 2 * 2 * 16 * 16 * (4 + 4)                 # FLOPs of the full rectangle, both matmuls
    assert fl == {"fused": 0, "math": rect}
    macs = Reference(p.rounded("float32")[0].with_policy(pol)).macs
    assert macs == {"scores": 2 * 136 * 4, "mix": 2 * 136 * 4}   # 136 = 16*17/2 pairs a head


# ----------------------------------------------------------------- the command

def test_cli_numpy_report(capsys):
    assert main(["verify", "--impl", "numpy", "--n", "5", "--d-k", "3", "--worst", "2"]) == 0
    out = capsys.readouterr().out
    assert "numpy in float32: the 2 worst outputs" in out and "result: PASS" in out
    assert "exact in float32" in out and "Cost of the call" in out


def test_cli_result_is_the_last_line_of_the_text(tmp_path, capsys):
    """``exactattn verify ... | tail -1`` is the verdict: the cost table comes before the
    summary, the summary's notes before its ``result:`` line."""
    assert main(["verify", "--n", "2", "--d-k", "1", "--dtype", "all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.index("Cost of the call") < lines.index("Summary per dtype")
    assert lines[-2:] == ["bfloat16 skipped: numpy does not run it; numpy has no bfloat16, use "
                          "--impl torch for it", "result: PASS"]
    spec = tmp_path / "of.json"
    spec.write_text(json.dumps({"query": [["1"]], "key": [["100"], ["99"]],
                                "value": [["1"], ["0"]], "policy": {"scale": "none"}}))
    assert main(["verify", "--impl", "numpy-naive", "--spec", str(spec)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "result: FAIL"


def test_cli_failure_exit_1_and_bad_input_exit_2(tmp_path, capsys):
    spec = tmp_path / "of.json"
    spec.write_text(json.dumps({"query": [["1"]], "key": [["100"], ["99"]],
                                "value": [["1"], ["0"]], "policy": {"scale": "none"}}))
    assert main(["verify", "--impl", "numpy-naive", "--spec", str(spec)]) == 1
    assert "hard" in capsys.readouterr().out
    assert main(["verify", "--impl", "numpy", "--spec", str(spec)]) == 0
    capsys.readouterr()
    assert main(["verify", "--impl", "nope"]) == 2
    assert capsys.readouterr().err.startswith("exactattn: error: impl must be")
    with pytest.raises(SystemExit) as e:
        main(["verify", "--dtype", "float8"])
    assert e.value.code == 2


def test_cli_search_prints_a_spec(capsys):
    pytest.importorskip("torch")
    assert main(["verify", "--impl", "torch", "--search", "15", "--max-size", "2"]) == 0
    out = capsys.readouterr().out
    spec = out[out.index("{\n"):]
    doc = json.loads(spec)
    assert set(doc) >= {"query", "key", "value", "policy", "dtype"}


# ----------------------------------------------------------------- one error line, or a report
def run_cli(capsys, *argv):
    rc = main(["verify", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, out, err, start="exactattn: error: "):
    assert rc == 2 and out == "" and err.startswith(start) and err.count("\n") == 1, (rc, err)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_largest_max_ulps_with_the_identity_probe(capsys, dtype):
    """--max-ulps up to 2^64 (what the flag takes) with the identity probe's allowance added:
    Python ints past 2^62, not an int64 overflow (a review find)."""
    rc, out, err = run_cli(capsys, "--n", "6", "--d-k", "4", "--dtype", dtype,
                           "--max-ulps", str(2 ** 64))
    assert (rc, err, out.splitlines()[-1]) == (0, "", "result: PASS")


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed must be a non-negative whole number (got '-1')"),
    (["--digits", "0"], "--digits must be a whole number from 1 to 50 (got '0')"),
    (["--digits", "51"], "--digits must be a whole number from 1 to 50 (got '51')"),
    (["--impl", ":fn"], "impl must be module:function with a module name"),
    (["--impl", ".foo:bar"], "impl must be module:function with a module name"),
    (["--impl", "foo:"], "impl must be module:function with a module name"),
    (["--impl", "no_such_kernel_mod:attention"],
     "impl module 'no_such_kernel_mod' must be importable"),
    (["--dtype", "bfloat16"], "dtype must be one of float64, float32, float16 for numpy "
                              "(got 'bfloat16'); numpy has no bfloat16"),
])
def test_cli_bad_options_are_one_line(capsys, argv, message):
    try:                                       # argparse's own errors exit; ours return 2
        rc, out, err = run_cli(capsys, "--n", "2", "--d-k", "2", *argv)
    except SystemExit as e:
        rc, (out, err) = e.code, capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("exactattn: error: ") and message in err, err


def test_an_impl_that_raises_is_a_hard_failure(tmp_path, monkeypatch, capsys):
    (tmp_path / "mykern_raises.py").write_text(
        "def attention(query, key, value, **kw):\n    return 1 / 0\n")
    monkeypatch.chdir(tmp_path)               # found in the current directory, as python -m does
    rc, out, err = run_cli(capsys, "--impl", "mykern_raises:attention", "--n", "2", "--d-k", "2")
    assert rc == 1 and err == ""
    assert out.count("hard failure: mykern_raises:attention raised ZeroDivisionError: "
                     "division by zero; every output counts as failed\n") == 1
    assert "result: FAIL" in out and "Traceback" not in out
    rc, out, err = run_cli(capsys, "--impl", "mykern_raises:attention", "--search", "5")
    assert rc == 1 and err == ""
    assert "largest error hard failure" in out
    doc = json.loads(out[out.index("{\n"):])
    assert doc["query"] == [["0"]] and doc["key"] == [["0"]] and doc["value"] == [["0"]]


def test_an_impl_that_raises_from_python():
    def broken(query, key, value):
        raise ValueError("shapes\nmismatch")
    rep = verify(FunctionImpl(broken), (Call.random(2, 2)).with_policy(Policy()), "float64")
    typed(rep.raised, "ValueError: shapes mismatch")
    assert [e.status for e in rep.entries] == ["hard"] * 4 and rep.passed is False


def test_a_kernel_module_in_the_current_directory_is_found(tmp_path, monkeypatch, capsys):
    (tmp_path / "mykern_here.py").write_text(
        "from exactattn.verify.impls import FloatCall, NumpyImpl\n"
        "def attention(query, key, value):\n"
        "    return NumpyImpl()(FloatCall(query, key, value, 'float32'))\n")
    monkeypatch.chdir(tmp_path)
    import sys
    assert str(tmp_path) not in sys.path
    rc, out, err = run_cli(capsys, "--impl", "mykern_here:attention", "--n", "3", "--d-k", "2")
    assert rc == 0 and err == "" and "result: PASS" in out
    assert str(tmp_path) not in sys.path          # only while the module is imported


def test_reruns_are_byte_identical_and_timings_are_asked_for(capsys):
    argv = ("--n", "4", "--d-k", "2")
    first, second = run_cli(capsys, *argv), run_cli(capsys, *argv)
    assert first == second and first[0] == 0
    assert "seconds" not in first[1]
    rc, out, _ = run_cli(capsys, *argv, "--timings")
    assert rc == 0 and "seconds impl/exact" in out


def test_an_exact_match_has_relative_error_0(capsys, tmp_path):
    p = Call([[0], [0]], [[0], [0]], [[1], [3]])      # every output is 2
    rep = verify("numpy", p.with_policy(Policy()), "float32")
    assert [(e.rel, e.terms_ulps, e.ulps) for e in rep.entries] == [(0.0, 0.0, 0)] * 2
    typed(rep.summary()["max_rel"], 0.0)
    spec = tmp_path / "eq.json"
    spec.write_text(json.dumps({"query": [[0], [0]], "key": [[0], [0]], "value": [[1], [3]]}))
    rc, out, _ = run_cli(capsys, "--spec", str(spec))
    assert rc == 0 and "e-29" not in out and "e-30" not in out
    row = next(line for line in out.splitlines() if line.startswith("0,0,0,0"))
    assert row.split()[-3:] == ["0", "ok", "75"]      # status, then its own tolerance
    # scores 1000.5 apart: the output is 3 - 2/(1 + e^1000.5), not 3; its relative error
    # (about 1e-435) is below what a float holds, so it prints 0 too, not the ball's 1e-29
    p = Call([["1000.5"]], [[1], [2]], [[1], [3]])
    rep = verify("numpy", p.with_policy(Policy(scale="none")), "float32")
    typed(rep.entries[0].rel, 0.0)


def test_dtype_all_with_numpy_skips_bfloat16_and_says_why(capsys):
    rc, out, err = run_cli(capsys, "--n", "3", "--d-k", "2", "--dtype", "all")
    assert rc == 0 and err == ""
    assert "bfloat16 skipped: numpy does not run it; numpy has no bfloat16, use --impl torch " \
           "for it" in out
    assert [line.split()[0] for line in out.splitlines()
            if line.startswith("float")] == ["float64", "float32", "float16"]


# ----------------------------------------------------------------- flags against a spec file

MASKED = {"name": "masked", "policy": {"scale": "none", "causal": True},
          "query": [[["1"], ["2"]], [["0"], ["1"]]], "key": [[["1"], ["2"], ["3"]]],
          "value": [[["1"], ["2"], ["4"]]],
          "mask": {"kind": "bool_keep", "values": [[True, False, True], [True, True, False]]}}


@pytest.fixture
def masked_spec(tmp_path):
    path = tmp_path / "masked.json"
    path.write_text(json.dumps(MASKED))
    return str(path)


def test_mask_kind_flag_rereads_the_spec_mask(capsys, masked_spec):
    rc0, base, _ = run_cli(capsys, "--spec", masked_spec)
    rc, out, err = run_cli(capsys, "--spec", masked_spec, "--mask-kind", "bool_drop")
    assert rc0 == 0 and rc in (0, 1) and err == "" and out != base
    assert "mask=bool_drop" in out
    p, pol, _ = load_problem(masked_spec)
    drop = Reference(p.with_mask_kind("bool_drop").with_policy(pol.replace(mask_kind="bool_drop")))
    assert drop.visible(0, 0).tolist() == [[False, False, False], [False, False, False]]
    assert drop.visible(0, 1).tolist() == [[False, False, False], [False, False, False]]


def test_like_xformers_on_a_boolean_mask_is_refused(capsys, masked_spec):
    one_line_error(*run_cli(capsys, "--spec", masked_spec, "--like", "xformers"),
                   "exactattn: error: --like xformers reads the mask as additive, but mask[0][0] "
                   "must be a number or '-inf' for an additive mask (got True)")


def test_like_xformers_changes_an_additive_spec(capsys, tmp_path):
    spec = tmp_path / "add.json"
    spec.write_text(json.dumps({"query": [[1]], "key": [[1], [2]], "value": [[1], [3]],
                                "mask": {"kind": "additive", "values": [["1/2", "-inf"]]}}))
    rc0, base, _ = run_cli(capsys, "--spec", str(spec))
    rc, out, err = run_cli(capsys, "--spec", str(spec), "--like", "xformers")
    assert rc0 == rc == 0 and err == "" and "mask=additive" in base
    one_line_error(*run_cli(capsys, "--spec", str(spec), "--like", "flash"),
                   "exactattn: error: --like flash reads the mask as bool_keep, but mask[0][0] "
                   "must be True or False in a bool_keep mask (got Fraction(1, 2))")
    rc, out, err = run_cli(capsys, "--spec", str(spec), "--like", "flash", "--mask-kind",
                           "additive", "--causal")
    assert rc == 0 and "alignment=bottom_right" in out and out != base


# every verify option, against a base that lets it apply: changes the report or is refused
OPTIONS = {
    "--impl": ("spec", ["numpy-naive"]), "--arrays": ("random", ["torch"]),
    "--dtype": ("spec", ["float64"]), "--like": ("spec", ["jax"]),
    "--scale": ("spec", ["1/2"]), "--causal": ("random", []), "--no-causal": ("spec", []),
    "--alignment": ("spec", ["bottom_right"]), "--empty-row": ("spec", ["nan"]),
    "--mask-kind": ("spec", ["bool_drop"]), "--gqa": ("spec", ["tile"]),
    "--spec": ("random", None), "--n": ("random", ["3"]), "--n-keys": ("random", ["3"]),
    "--d-k": ("random", ["3"]), "--heads": ("random", ["2"]), "--kv-heads": ("random", ["1"]),
    "--seed": ("random", ["1"]), "--max-ulps": ("random", ["0"]),
    "--accumulation": ("float16", ["float16"]), "--worst": ("random", ["1"]),
    "--digits": ("random", ["3"]), "--timings": ("random", []), "--flops": ("random", []),
    "--probes": ("random", ["ones"]), "--invariance": ("random", ["batch"]),
    "--format": ("random", ["markdown"]), "--search": ("random", ["3"]),
    "--search-measure": ("random", ["terms"]), "--max-size": ("random", ["2"]),
    "--max-batch": ("random", ["1"]), "--max-heads": ("random", ["1"]),   # refused without --search
    "--backward": ("random", []), "--memory": ("random", ["1GiB"]),
    "--sink": ("random", ["0"]), "--alibi": ("random", ["4"]), "--softcap": ("random", ["1"]),
    "--window": ("random", ["0,0"]), "--head": ("random", ["1", "--alibi", "4"]), "--query-offset": ("random", ["1"]),
    "--dropout": ("random", ["1/2"]), "--rope": ("random", ["10000"]), "--lse": ("random", []),
    "--rope-scaling": ("random", ['{"rope_type": "linear", "factor": 2}']),   # refused without --rope
    "--width": ("random", ["20"]),
    "--split-merge": ("random", []), "--splits": ("random", ["1"]),   # --splits, --merge: refused
    "--merge": ("random", ["splitkern:merge"]),                       # without --split-merge
    # refused with the default --impl numpy (tests/checks/test_verify_flex.py runs them)
    "--device": ("random", ["cuda"]), "--backend": ("random", ["math"]),
    "--score-mod": ("random", ["m:f"]), "--mask-mod": ("random", ["m:f"]),
}


def test_every_option_changes_the_report_or_is_refused(capsys, masked_spec):
    from exactattn.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {s for a in sub.choices["verify"]._actions if a.dest not in ("help", "no_progress")
             for s in a.option_strings}
    assert flags == set(OPTIONS)
    for flag, (base, value) in OPTIONS.items():
        start = ["--spec", masked_spec] if base == "spec" else ["--n", "2", "--d-k", "2"] + (
            ["--dtype", "float16"] if base == "float16" else [])    # accumulation coarser: dtype's
        value = [masked_spec] if value is None else value
        rc0, out0, _ = run_cli(capsys, *start)
        try:
            rc, out, err = run_cli(capsys, *start, flag, *value)
        except SystemExit as e:                   # an argparse refusal
            rc, out, err = e.code, *capsys.readouterr()
        assert rc0 in (0, 1)
        assert (rc == 2 and out == "" and err.count("\n") == 1) or \
            (rc in (0, 1) and out != out0), (flag, rc, err)


@pytest.mark.parametrize("argv, start", [
    (["--n", "3"], "exactattn: error: --n must come without --spec (got both)"),
    (["--seed", "2"], "exactattn: error: --seed must come without --spec (got both)"),
    (["--gqa", "tile", "--like", "torch"], None),
    (["--mask-kind", "additive"], "exactattn: error: --mask-kind additive reads the mask as "
                                  "additive, but mask[0][0] must be a number"),
    (["--no-causal", "--alignment", "bottom_right"],
     "exactattn: error: --alignment must come with causal attention"),
    (["--search", "3"], "exactattn: error: --spec must come without --search (got both)"),
    (["--max-size", "3"], "exactattn: error: --max-size must come with --search N"),
])
def test_flags_that_cannot_apply_are_refused(capsys, masked_spec, argv, start):
    rc, out, err = run_cli(capsys, "--spec", masked_spec, *argv)
    if start is None:
        assert rc in (0, 1) and "gqa=tile" in out
    else:
        one_line_error(rc, out, err, start)


def test_random_input_flags_that_cannot_apply_are_refused(capsys):
    for argv, start in (
            (["--gqa", "tile"], "exactattn: error: --gqa must come with more query heads"),
            (["--mask-kind", "bool_drop"], "exactattn: error: --mask-kind must come with a spec"),
            (["--kv-heads", "1"], "exactattn: error: --kv-heads must come with --heads"),
            (["--heads", "3", "--kv-heads", "2"], "exactattn: error: --heads must be a multiple"),
            (["--arrays", "torch"], "exactattn: error: --arrays must come with a module:function"),
            (["--search", "3", "--n", "4"], "exactattn: error: --n must come without --search")):
        one_line_error(*run_cli(capsys, "--n", "2", "--d-k", "2", *argv), start)


def test_spec_toml_floats_through_the_command(capsys, tmp_path):
    spec = tmp_path / "t.toml"
    spec.write_text('query = [[1_000.5]]\nkey = [[1], [2]]\nvalue = [[1], [3]]\n'
                    '[policy]\nscale = "none"\n')
    rc, out, err = run_cli(capsys, "--spec", str(spec))
    assert rc == 0 and err == "" and "inputs rounded to float32: 0 of 5" in out


@pytest.mark.parametrize("content, start", [
    ('{"query": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply to read"),
    ('{"query": [[1]], "query": [[2]], "key": [[1]], "value": [[1]]}',
     "key 'query' must appear once (got it twice)"),
])
def test_spec_text_the_command_refuses_in_one_line(capsys, tmp_path, content, start):
    spec = tmp_path / "bad.json"
    spec.write_text(content)
    one_line_error(*run_cli(capsys, "--spec", str(spec)), f"exactattn: error: {spec}: {start}")


def test_spec_with_a_bom_and_dev_zero(capsys, tmp_path):
    spec = tmp_path / "bom.json"
    spec.write_bytes(b"\xef\xbb\xbf" + b'{"query": [[1]], "key": [[1]], "value": [[1]]}')
    rc, out, err = run_cli(capsys, "--spec", str(spec))
    assert rc == 0 and err == ""
    one_line_error(*run_cli(capsys, "--spec", "/dev/zero"),
                   "exactattn: error: spec file '/dev/zero' must be at most 64 MiB (got more)")


# ----------------------------------------------------------------- the call model underneath

def test_with_mask_kind_rereads_and_refuses():
    p = Call([[1]], [[1], [2]], [[3], [4]], [[True, False]])
    drop = p.with_mask_kind("bool_drop")
    assert (drop.mask_kind, p.mask_kind) == ("bool_drop", "bool_keep")
    assert drop.block_mask(0, 0).rows == ((True, False),)
    assert Reference(drop).visible(0, 0).tolist() == [[False, True]]
    assert p.with_mask_kind("bool_keep") is p
    with pytest.raises(InputError, match=r"mask\[0\]\[0\] must be a number or '-inf'"):
        p.with_mask_kind("additive")


def test_scale_none_is_no_scaling_for_the_implementation():
    p = Call([[1]], [[1]], [[1]])
    typed(make_call(p.with_policy(Policy(scale="none")), "float64").scale, 1.0)
    assert make_call(p.with_policy(Policy()), "float64").scale is None
    typed(make_call(p.with_policy(Policy(scale="1/4")), "float64").scale, 0.25)
    assert Reference(p.with_policy(Policy(scale="none"))).divisor_squared is None


def test_call_masks_come_from_the_policy():
    q, k = np.zeros((2, 1)), np.zeros((3, 1))
    call = FloatCall(q, k, k, "float64", Policy(causal=True, alignment="bottom_right"))
    assert call.visibility()[1].tolist() == Policy(causal=True, alignment="bottom_right") \
        .keep(2, 3).tolist() == [[True, True, False], [True, True, True]]


def test_verify_memory_reads_every_option_it_takes_or_refuses_it(cli, tmp_path, monkeypatch):
    """``verify --memory`` judges with the accumulation asked, as the in-memory run does (a
    kernel 20 ULPs off fails both under float64 accumulation; before, --memory passed it with
    float32's bound), and refuses --lse and a dtype list it would have ignored."""
    (tmp_path / "off20.py").write_text(
        "import numpy as np\n"
        "def attn(q, k, v, **kw):\n"
        "    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))\n"
        "    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])\n"
        "    p = np.exp(s - s.max(-1, keepdims=True))\n"
        "    o = (p / p.sum(-1, keepdims=True) @ v).astype(np.float32)\n"
        "    for _ in range(20):\n"
        "        o = np.nextafter(o, np.float32(np.inf))\n"
        "    return o\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ("verify", "--impl", "off20:attn", "--n", "16", "--accumulation")
    assert cli(*base, "float64", "--probes", "none")[0] == 1
    assert cli(*base, "float64", "--memory", "1GiB")[0] == 1
    assert cli(*base, "float32", "--memory", "1GiB")[0] == 0
    for extra, err in ((["--lse"], "exactattn: error: --memory must come without --lse (got both); "
                                   "row blocks check one head of random inputs\n"),
                       (["--dtype", "float16,float32"],
                        "exactattn: error: --dtype must be one dtype with --memory (got "
                        "float16,float32); row blocks check one dtype per run\n")):
        assert cli("verify", "--n", "6", "--memory", "1GiB", *extra) == (2, "", err)


@pytest.mark.parametrize("dtypes", [(), ("float8",)])
def test_dtype_all_refuses_an_impl_object_that_runs_no_dtype(tmp_path, monkeypatch, capsys, dtypes):
    # an Impl handed over by module:function sets its own dtypes: --dtype all can leave none
    (tmp_path / "noimpl.py").write_text(
        "from exactattn.verify.impls import NumpyImpl\n"
        f"class Empty(NumpyImpl):\n    dtypes = {dtypes!r}\nempty = Empty()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["verify", "--impl", "noimpl:empty", "--dtype", "all", "--n", "4", "--no-progress"])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err == "exactattn: error: --dtype all must leave a dtype numpy runs (got none)\n"
