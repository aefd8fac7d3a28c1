"""Values no float64 holds (a rope base of 1e400, a query offset past 2^53): refused by
``Policy``/``Rope`` and by every command with one line, exit 2 (they raised OverflowError or
ZeroDivisionError inside ``verify``'s float adapter)."""

from __future__ import annotations

import sys
from fractions import Fraction as F

import pytest

from exactattn.call.modifiers import Rope
from exactattn.call.policy import Policy
from exactattn.call.spec_fields import read_modifiers
from exactattn.errors import InputError, SpecError

RULE = ("must be from 2^-1022 to about 1.8e308, a float64's range (got {}); no float kernel "
        "holds this base: use one such as 10000")


@pytest.mark.parametrize("text", ["1e400", "1e-400", "1e-320"])
def test_a_rope_base_past_a_float64_is_one_line_from_verify(cli, text):
    assert cli("verify", "--n", "4", "--rope", text) == (
        2, "", f"exactattn: error: --rope THETA {RULE.format(repr(text))}\n")
    assert cli("scores", "--rope", f"{text}:interleaved")[::2] == (
        2, f"exactattn: error: --rope THETA {RULE.format(repr(text))}\n")


def test_a_rope_base_past_a_float64_is_refused_by_the_api_and_a_spec():
    with pytest.raises(InputError) as e:
        Policy(rope=Rope(F(10 ** 400)))
    assert str(e.value) == "rope theta " + RULE.format("1" + "0" * 39 + "\u2026")
    with pytest.raises(SpecError) as e:
        read_modifiers({"rope": {"theta": "1e-400"}})
    assert str(e.value) == "spec: policy.rope.theta " + RULE.format("'1e-400'")
    for theta in (F(1, 2 ** 1022), F(sys.float_info.max), F(1, 3), 500000):   # the ends held
        assert Rope(theta).theta == theta
    for theta in (F(1, 2 ** 1022) * F(2 ** 60 - 1, 2 ** 60), F(sys.float_info.max) + 1):
        with pytest.raises(InputError, match="a float64's range"):
            Rope(theta)


def test_a_query_offset_past_2_to_the_53_is_refused():
    assert Policy(query_offset=2 ** 53).query_offset == 2 ** 53
    assert Policy(query_offset=-2 ** 53).query_offset == -2 ** 53
    for offset, echo in [(2 ** 53 + 1, "9007199254740993"), (-2 ** 53 - 1, "-9007199254740993"),
                         (10 ** 400, "1" + "0" * 39 + "\u2026")]:
        with pytest.raises(InputError) as e:
            Policy(query_offset=offset)
        assert str(e.value) == (f"query_offset must be from -2^53 to 2^53 (got {echo}); a float64 "
                                "holds no position past 2^53: give a smaller one")


@pytest.mark.parametrize("flag", ["--rope=10000", "--alibi=8", "--causal"])
def test_a_query_offset_past_2_to_the_53_is_one_line_from_verify(cli, flag):
    assert cli("verify", "--n", "4", flag, "--query-offset", "99999999999999999999") == (
        2, "", "exactattn: error: query_offset must be from -2^53 to 2^53 (got "
               "99999999999999999999); a float64 holds no position past 2^53: give a smaller one\n")


def test_a_known_output_judged_with_a_wide_ball_has_its_error():
    """The ones probe's known output 1 (a Fraction) beside a ball too wide to settle the
    error: the error is taken from the 1 itself (it raised AttributeError: no .ball)."""
    from flint import arb

    from exactattn.numbers.formats import float_format
    from exactattn.verify.compare import errors
    assert errors(0.75, arb(1, 0.5), 1.0, float_format("float32"), lambda: F(1)) == \
        (0.25, 2 ** 21)
