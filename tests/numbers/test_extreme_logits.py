"""Extreme logits: saturated soft-caps compared exactly, 3,000-digit entries, cached atom balls.

Each printed or compared value is checked against an independent mpmath computation at a
precision past the gaps involved (tanh(30000) is within e^-60000 of 1: 26,000 digits).
"""

import json
from fractions import Fraction as F

import mpmath
import pytest

from exactattn.numbers import reals
from exactattn.numbers.reals import softcap
from exactattn.numbers.softmax import SoftmaxRow

ARGS = (30000, 30001, 30002)          # cap 1: logits within e^-60000 of the cap


def _mp_output(args, values, cap=1, dps=27000):
    with mpmath.workdps(dps):
        w = [mpmath.exp(cap * mpmath.tanh(mpmath.mpf(a) / cap)) for a in args]
        num = sum(mpmath.mpf(v.numerator) / v.denominator * x for v, x in zip(values, w))
        return num / sum(w)


def _row(args=ARGS, cap=F(1)):
    return SoftmaxRow.of_logits([softcap(F(a), cap) for a in args])


def test_saturated_shares_compare_exactly():
    row = _row()
    third = F(1, 3)
    with mpmath.workdps(27000):
        want = [_mp_output(ARGS, [F(int(j == k)) for j in range(3)]) for k in range(3)]
        assert want[0] < mpmath.mpf(1) / 3 < want[2]          # the oracle sees the e^-60000 gaps
    assert row.share(0) < row.share(1) < row.share(2)
    assert row.share(2) > third and row.share(0) < third
    assert row.largest() == [2]


@pytest.mark.parametrize("values", [(0, 0, F(3, 2)), (F(3, 2), 0, 0), (0, 1, 0)])
def test_saturated_output_on_a_rounding_boundary(values):
    """1/2 +- e^-60000 rounds to 1 or 0 at 0 places: decided, and as mpmath says."""
    values = [F(v) for v in values]
    got = _row().combine(values).decimal(0)
    with mpmath.workdps(27000):
        x = _mp_output(ARGS, values)
        want = str(int(mpmath.nint(x)))
    assert got == want


def test_two_saturated_keys_round_half_from_the_larger():
    row = _row((30000, 30001))
    assert row.share(0) < F(1, 2) < row.share(1)
    assert row.combine([F(0), F(1)]).decimal(0) == "1"
    assert row.combine([F(1), F(0)]).decimal(0) == "0"


def test_tanh_sums_near_an_integer_have_a_sign():
    a, b = softcap(F(30000), F(1)), softcap(F(30001), F(1))
    assert a + b < 2 and a + b > F(1)
    assert (a + b - 2).sign() == -1


def _spec(tmp_path, name, tokens, w):
    path = tmp_path / name
    path.write_text(json.dumps({"divisor": "none", "tokens": tokens,
                                "W_Q": w, "W_K": w, "W_V": w}))
    return str(path)


def test_cli_saturated_softcap_digits(cli, tmp_path):
    path = _spec(tmp_path, "sat.json", [{"x": [100]}, {"x": [101]}], [[1]])
    rc, out, err = cli("scores", "--spec", path, "--softcap", "1/10")
    assert rc == 0, err
    with mpmath.workdps(100):
        for i, q in enumerate((100, 101)):
            want = _mp_output([q * 100 * 10, q * 101 * 10], [F(100), F(101)], cap=F(1, 10), dps=100)
            assert mpmath.nstr(want, 7, min_fixed=-1, max_fixed=10) == "100.5"
    assert "100.5000" in out


@pytest.mark.parametrize("command", ["square", "scores", "walkthrough"])
def test_cli_three_thousand_digit_entry_with_softcap(cli, tmp_path, command):
    eye = [[1, 0], [0, 1]]
    path = _spec(tmp_path, "huge.json", [{"x": ["1e3000", 0]}, {"x": [0, 1]}], eye)
    rc, out, err = cli(command, "--spec", path, "--softcap", "1/2")
    assert rc == 0, err
    assert "Traceback" not in out + err
    if command == "scores":
        with mpmath.workdps(50):
            s = mpmath.e ** mpmath.mpf(0.5) / (mpmath.e ** mpmath.mpf(0.5) + 1)
        assert mpmath.nstr(s, 4) == "0.6225" and "0.6225" in out


def test_tanh_atom_order_needs_no_huge_int_strings():
    import sys
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)          # Python's default (a test run may raise it)
    try:
        _huge_tanh_pair()
    finally:
        sys.set_int_max_str_digits(old)


def _huge_tanh_pair():
    big = F(10) ** 6000         # past the 4,300-digit int-to-string limit
    a, b = reals.Tanh(big), reals.Tanh(big + 1)
    x = reals.Surd(0, ((a, 1), (b, -1)))
    assert x.sign() == -1 and hash(x) == hash(reals.Surd(0, ((a, 1), (b, -1))))


def test_atom_balls_are_cached_per_precision(monkeypatch):
    calls = []
    real = reals.Trig.ball
    monkeypatch.setattr(reals.Trig, "ball", lambda self: calls.append(self) or real(self))
    reals._atom_ball_at.cache_clear()
    from exactattn.numbers.digits import working_precision
    atom = reals.Trig("cos", F(10) ** 300)
    for _ in range(50):
        with working_precision(256):
            reals.atom_ball(atom)
    assert len(calls) == 1


def test_rotary_rows_with_a_huge_entry_reuse_their_balls(cli, tmp_path):
    """22 rotary tokens, one entry 10^3000: every row's exponentials computed once per
    precision (was 20 s: the row cache kept one precision while certify cycled through ten)."""
    import random
    import time
    rng = random.Random(1)
    tokens = [{"x": [rng.randint(-3, 3) for _ in range(4)]} for _ in range(22)]
    tokens[5]["x"][2] = "1e3000"
    eye = [[int(i == j) for j in range(4)] for i in range(4)]
    path = _spec(tmp_path, "rope.json", tokens, eye)
    t = time.process_time()          # CPU time: the limit holds on a loaded machine too
    rc, out, err = cli("scores", "--spec", path, "--rope", "10000:half")
    assert rc == 0, err
    assert time.process_time() - t < 8


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("coefficient, zero", [(1, "+0"), (-3, "-0")])
def test_an_exponentially_small_output_rounds_to_the_zero_of_its_sign(dtype, coefficient, zero):
    """exp(-2 * 10^600) / (1 + exp(-2 * 10^600)) is enclosed by a ball around 0 at every
    precision; its float is the zero of its exact sign (it once tightened until the precision
    overflowed)."""
    import math
    from exactattn.numbers.formats import round_value
    from exactattn.numbers.ratio import ExpRatio
    gap = F(-2 * 10**600)
    row = SoftmaxRow([F(0), gap], None)
    value = ExpRatio({gap: F(coefficient)}, row)
    with mpmath.workdps(30):      # the oracle: e^-(2 10^600) is below every float's half-ULP
        assert mpmath.exp(mpmath.mpf(int(gap))) < mpmath.mpf(2) ** -1100
    got, ball = round_value(value, dtype)
    assert type(got) is float and got == 0.0
    assert math.copysign(1, got) == (1 if zero == "+0" else -1)
    assert ball.contains(0)
