"""exactattn.verify, exactattn.impls, exactattn.policies and the ``verify`` command.

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
from exactattn.impls import Call, FunctionImpl, NumpyImpl, load_impl, make_call
from exactattn.policies import PRESETS, Policy, kv_head, parse_scale, preset, visible
from exactattn.softmax import SoftmaxRow
from exactattn.verify import (BiasedRow, Problem, Reference, certified_scientific,
                              load_spec, random_problem, round_to_format, search, spec_text,
                              ulp_index, ulps_between, verify)


def typed(got, want):
    assert type(got) is type(want), (got, want)
    assert got == want


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
    assert [visible(bottom, i, 0, 3, 1) for i in range(3)] == [False, False, True]
    assert [kv_head(Policy(gqa="tile"), h, 6, 3) for h in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [kv_head(Policy(), h, 6, 3) for h in range(6)] == [0, 0, 1, 1, 2, 2]


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
    typed(parse_scale("none"), F(1))
    assert Policy(scale="1/sqrt(48)").scale_text() == "1/sqrt(48)"
    assert Policy(scale="0.125").scale_text() == "1/8"


# ----------------------------------------------------------------- the exact reference

def test_reference_matches_the_pencil_engine_on_the_chronicle():
    from exactattn import attend
    from exactattn.examples import chronicle
    ex = chronicle()
    trace = attend(ex.head, ex.x)
    p = Problem.from_arrays(trace.queries, trace.keys, trace.values)
    ref = Reference(p)                         # default scale 1/sqrt(4): the chronicle's divisor 2
    for i in range(4):
        assert ref.row(0, 0, i).counts == trace.rows[i].counts
        for c in range(4):
            assert ref.output(0, 0, i, c).numerators == trace.output(i, c).numerators
    assert [ref.share(0, 0, 1, j).decimal(4) for j in range(4)] == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert ref.macs == {"scores": 64, "mix": 64}


def test_biased_row_irrational_scale_matches_sympy():
    # exponent s/sqrt(2) + m: not a rational multiple of 1/sqrt(2)
    p = Problem.from_arrays([[1, 0]], [[1, 0], [0, 1], [1, 1]], [[1], [2], [4]],
                            [["1/3", "-inf", 0]], mask_kind="additive")
    ref = Reference(p, Policy())            # d_k = 2: scale 1/sqrt(2)
    row = ref.row(0, 0, 0)
    assert isinstance(row, BiasedRow)
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
    p = Problem.from_arrays([[0]], [[0]] * 4, v)
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
    rep = verify(impl, random_problem(12, 4, seed=3), Policy(causal=True), dtype)
    assert rep.passed is True
    s = rep.summary()
    assert s["count"] == 12 * 4 and s["hard"] == 0 and s["over"] == 0
    assert type(s["max_ulps"]) is int and type(s["mean_ulps"]) is float
    assert rep.reference.macs == {"scores": 78 * 4, "mix": 78 * 4}     # n(n+1)/2 pairs


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_torch_passes_every_dtype(dtype):
    pytest.importorskip("torch")
    p = random_problem(10, 4, seed=1, n_keys=7, heads=4, kv_heads=2)
    for pol in (Policy(), preset("flash", causal=True), Policy(gqa="tile"),
                Policy(scale="1/sqrt(3)", causal=True)):
        rep = verify("torch", p, pol, dtype)
        assert rep.passed, (pol, rep.summary())
        # standard-normal float64 inputs: none moves in float64, nearly all in the others
        assert (rep.moved_inputs == 0) is (dtype == "float64")


def test_gqa_map_mismatch_is_caught():
    p = random_problem(3, 2, seed=2, heads=4, kv_heads=2)

    def interleave_only(query, key, value, enable_gqa=False):
        rep = np.repeat(np.arange(key.shape[-3]), query.shape[-3] // key.shape[-3])
        call = Call(query, key[..., rep, :, :], value[..., rep, :, :], "float64")
        return NumpyImpl()(call)
    assert verify(FunctionImpl(interleave_only), p, Policy(), "float64").passed
    assert not verify(FunctionImpl(interleave_only), p, Policy(gqa="tile"), "float64").passed
    assert verify("numpy", p, Policy(gqa="tile"), "float64").passed


def test_bool_drop_is_inverted_for_the_implementation():
    mask = [[False, True, False]] * 2
    p = Problem.from_arrays([[1], [2]], [[1], [2], [3]], [[1], [2], [4]], mask, mask_kind="bool_drop")
    call = make_call(p, Policy(mask_kind="bool_drop"), "float64")
    assert call.attn_mask.tolist() == [[True, False, True]] * 2
    ref = Reference(p, Policy(mask_kind="bool_drop"))
    assert ref.visible(0, 0).tolist() == [[True, False, True]] * 2
    assert verify("numpy", p, Policy(mask_kind="bool_drop"), "float32").passed


def test_hard_failures_and_off_format_outputs():
    p = random_problem(2, 2, seed=0)

    def nan_first(query, key, value):
        out = np.full((2, 2), 0.5)
        out[0, 0] = np.nan
        out[1, 1] = np.inf
        return out
    rep = verify(FunctionImpl(nan_first), p, Policy(), "float64")
    assert [e.status for e in rep.entries][::3] == ["hard", "hard"]
    assert rep.summary()["hard"] == 2 and rep.passed is False

    def float64_answer(query, key, value):
        return NumpyImpl()(Call(query.astype(np.float64), key, value, "float64"))
    rep = verify(FunctionImpl(float64_answer), p, Policy(), "float32")
    assert rep.passed and rep.notes and "were not float32 values" in rep.notes[0]


def test_verify_errors():
    p = random_problem(2, 2)
    with pytest.raises(InputError, match="dtype must be one of float64, float32, float16 for numpy"):
        verify("numpy", p, Policy(), "bfloat16")
    with pytest.raises(ShapeError, match="output must be 2 x 2"):
        verify(FunctionImpl(lambda query, key, value: np.zeros(3)), p, Policy(), "float64")
    with pytest.raises(InputError, match="must take attn_mask"):
        verify(FunctionImpl(lambda query, key, value: query),
               Problem.from_arrays([[1]], [[1]], [[1]], [[True]]), Policy(), "float64")
    with pytest.raises(InputError, match="impl must be numpy"):
        load_impl("cuda")
    with pytest.raises(ShapeError, match="query heads must be a multiple"):
        Problem.from_arrays([[[1]]] * 3, [[[1]]] * 2, [[[1]]] * 2)
    with pytest.raises(InputError, match="binary float"):
        Problem.from_arrays([[0.1]], [[1]], [[1]])
    with pytest.raises(InputError, match="inputs must fit in float16"):
        verify("numpy", Problem.from_arrays([[70000]], [[1]], [[1]]), Policy(), "float16")


def test_spec_round_trip(tmp_path):
    p = Problem.from_arrays([["1/2", "-3"]], [[1, 0], [0, 1]], [[5], [7]], [["0", "-inf"]],
                            mask_kind="additive", name="rt")
    pol = Policy(scale="1/sqrt(3)", causal=True, alignment="bottom_right", mask_kind="additive")
    path = tmp_path / "rt.json"
    path.write_text(spec_text(p, pol, "bfloat16"))
    q, qpol, dtype = load_spec(path)
    assert (q.query == p.query).all() and (q.key == p.key).all() and (q.value == p.value).all()
    assert q.mask.tolist() == p.mask.tolist() and qpol == pol and dtype == "bfloat16"
    (tmp_path / "bad.json").write_text('{"query": [[1]], "key": [[1]]}')
    with pytest.raises(SpecError, match="value is missing"):
        load_spec(tmp_path / "bad.json")
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "none.json")


# ----------------------------------------------------------------- search

def test_search_finds_and_shrinks_a_hard_failure():
    res = search("numpy-naive", "float16", examples=60, seed=1, max_size=3)
    assert res.score == float(2**63)                   # exp overflows float16 at 11.1
    sh = res.problem.shape
    assert sh["L"] == 1 and sh["S"] <= 2 and sh["E"] <= 2 and sh["E_v"] == 1   # shrunk
    assert any(e.status == "hard" for e in res.report.entries)
    doc = json.loads(spec_text(res.problem, Policy(), "float16"))
    assert doc["dtype"] == "float16" and len(doc["query"]) == 1


def test_search_largest_ulps_reproduces():
    res = search("numpy", "float32", examples=30, seed=0, max_size=3)
    assert res.score >= 1 and res.report.passed
    again = verify("numpy", res.problem, Policy(), "float32")
    assert again.summary()["max_ulps"] == res.score


# ----------------------------------------------------------------- cost cross-check

def test_flop_counter_next_to_exact_macs():
    pytest.importorskip("torch")
    from exactattn.verify import flop_counts
    p = random_problem(16, 4, seed=0, heads=2)
    pol = Policy(causal=True)
    fl = flop_counts(p, pol, "float32")
    rect = 2 * 2 * 16 * 16 * (4 + 4)                 # FLOPs of the full rectangle, both matmuls
    assert fl == {"fused": 0, "math": rect}
    macs = Reference(p.rounded("float32")[0], pol).macs
    assert macs == {"scores": 2 * 136 * 4, "mix": 2 * 136 * 4}   # 136 = 16*17/2 pairs a head


# ----------------------------------------------------------------- the command

def test_cli_numpy_report(capsys):
    assert main(["verify", "--impl", "numpy", "--n", "5", "--d-k", "3", "--worst", "2"]) == 0
    out = capsys.readouterr().out
    assert "numpy in float32: the 2 worst outputs" in out and "result: PASS" in out
    assert "exact in float32" in out and "Cost of the call" in out


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
    assert main(["verify", "--impl", "numpy", "--search", "15", "--max-size", "2"]) == 0
    out = capsys.readouterr().out
    spec = out[out.index("{\n"):]
    doc = json.loads(spec)
    assert set(doc) >= {"query", "key", "value", "policy", "dtype"}
