"""The gradient proofs in proofs/ (exactattn prove) and the property checks behind them.

Each proof holds and prints its golden report (tests/golden/proofs/NAME.txt, shared
with tests/package/test_proofs.py), and fails on a deliberately broken backward: one that
leaves out D_i, a wrong Jacobian, a backward that reads the unnormalised exponentials.
The Python checks (exactattn.properties.gradients) fail the same way on broken inputs.
"""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from exactattn.call.modifiers import Rope
from exactattn.call.policy import Policy
from exactattn.cli import main
from exactattn.commands import prove
from exactattn.errors import InputError
from exactattn.gradients import gradients
from exactattn import Call, Reference
from exactattn.properties import check_all, reference
from exactattn.properties.gradients import (Check, check_finite_difference,
                                            check_gradient_shift_invariance, check_gradients,
                                            check_jacobian, check_key_bias,
                                            check_rows_sum_to_zero, softmax_backward,
                                            softmax_jacobian)

GOLDEN = Path(__file__).parents[1] / "golden" / "proofs"
NAMES = ["finite_difference", "grad_rows_sum_to_zero", "gradient_shift_invariance",
         "key_bias_gradient", "softmax_jacobian"]
F = Fraction


def no_d(shares, d_shares):
    """The backward that forgets D_i: dS = P * dP."""
    return [p * d for p, d in zip(shares, d_shares)]


def gradient_without_d(g, wrt, prec):
    """dQ_ic = scale sum_j P_ij dP_ij K_jc (no D_i); every other entry exact."""
    from flint import arb
    from exactattn.numbers.reals import atom_ball
    from exactattn.numbers.exact import fmpq_of
    if wrt[0] != "Q":
        return (g.dsink if wrt[0] == "sink" else
                g.value({"K": "dK", "V": "dV", "m": "dS"}[wrt[0]], *wrt[1:])).ball(prec)
    b = g.balls(prec)
    i, c = wrt[1:]
    s = arb(fmpq_of(g.scale_rational))
    if g.irrational_scale is not None:
        s *= atom_ball(g.irrational_scale)
    return s * sum((b["P"][i, j] * b["dP"][i, j] * arb(fmpq_of(g.keys[j][c]))
                    for j in range(g.S)), arb(0))


BROKEN = {
    "grad_rows_sum_to_zero": ({"backward": no_d}, "n = 1: sum_j dS_j: residual"),
    "softmax_jacobian": ({"jacobian": lambda p: [[a * (int(j == k) - a) for k in range(len(p))]
                                                 for j, a in enumerate(p)]},
                         "n = 2: J = d p / d s: residual"),
    "key_bias_gradient": ({"backward": no_d}, "n = 1: sum_j dS_j q: residual"),
    "gradient_shift_invariance": (
        {"backward": lambda s, d: softmax_backward([sympy.exp(x) for x in s], d)},
        "n = 1: dS(s + c) - dS(s): residual"),
    "finite_difference": ({"gradient": gradient_without_d},
                          "plain: dL/dQ[1][0]: gradient -0.8297, finite difference -0.3337: "
                          "further apart than 2^-32 * 0.3750 + 2^-80 (certified)"),
}


def run_proof(name, **variant):
    stream = io.StringIO()
    ok = prove.load_proof(name).run(out=stream, **variant)
    return ok, stream.getvalue()


def test_the_gradient_proofs_are_registered_like_every_proof():
    assert set(NAMES) <= set(prove.proof_names())
    for name in NAMES:
        module = prove.load_proof(name)
        for part in ("Claim:", "Assumptions:", "Derivation", "Reference:"):
            assert part in module.__doc__, (name, part)
        assert isinstance(module.CLAIM, str) and module.CLAIM


@pytest.mark.parametrize("name", NAMES)
def test_gradient_proof_holds_and_matches_golden(name):
    ok, text = run_proof(name)
    assert ok is True and text.endswith("  verdict: PROVED\n") and "[FAILS]" not in text
    assert text == (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
def test_gradient_proof_fails_on_a_broken_backward(name):
    variant, evidence = BROKEN[name]
    ok, text = run_proof(name, **variant)
    assert ok is False and "  verdict: FAILED (" in text
    assert evidence in text, text


def test_the_cli_lists_and_runs_them(capsys):
    assert main(["prove", "-q", "grad_rows_sum_to_zero", "softmax_jacobian"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("2 proved, 0 failed\n")
    assert "PROVED  softmax_jacobian       the softmax Jacobian diag(p) - p p^T is symmetric" in out


# --------------------------------------------------------------------------- the Python checks
def test_rules_for_any_numbers():
    assert softmax_backward([F(1, 4), F(3, 4)], [F(2), F(-2)]) == [F(3, 4), F(-3, 4)]
    J = softmax_jacobian([F(1, 4), F(3, 4)])
    assert J == [[F(3, 16), F(-3, 16)], [F(-3, 16), F(3, 16)]] and type(J[0][0]) is Fraction


def test_checks_hold_on_a_call_and_report_exactly():
    call = Call([[1, 0], [0, 2]], [[1, 1], [2, 0]], [[1], [3]], policy=Policy())
    g = Reference(call).gradients([[1], [-1]]).blocks[(0, 0)]
    checks = check_gradients(g, finite_differences=[("Q", 0, 1), ("K", 1, 0)])
    assert [type(c) for c in checks] == [Check] * 6 and all(c.holds for c in checks)
    assert checks[0].lines == ["2 rows: sum_j dS_ij = 0 exactly"]
    assert checks[2].lines == ["2 columns: sum_j dK_jc = 0 exactly"]
    # the one check_all: the function checks, then these on the call's exact gradients
    ran = check_all(reference, call, d_out=[[1], [-1]], finite_differences=[("Q", 0, 1)])
    assert ran[-5:] == [c.name for c in checks[:5]] and "matches reference" in ran


def test_a_check_fails_on_a_broken_gradient():
    g = gradients([[1], [2]], [[1], [0]], [[1], [3]], [[2], [1]], Policy(scale="none"))
    c = check_finite_difference(g, ("Q", 1, 0), gradient=gradient_without_d)
    assert c.holds is False
    assert c.lines == ["dL/dQ[1][0]: gradient 0.8808, finite difference -0.2100: further apart "
                       "than 2^-32 * 0.5000 + 2^-80 (certified)"]
    assert check_finite_difference(g, ("Q", 1, 0)).holds is True


def test_checks_refuse_what_they_cannot_state():
    g = gradients([[1]], [[1]], [[1]], [[1]], Policy(empty_row="nan"),
                  None)
    with pytest.raises(InputError, match="wrt must start with one of Q, K, V, m, sink"):
        check_finite_difference(g, ("X", 0, 0))
    from exactattn.call.policy import Mask
    h = gradients([[1]], [[1], [2]], [[1], [0]], [[1]], Policy(),
                  Mask("bool_keep", [[True, False]]))
    with pytest.raises(InputError, match="wrt must be an offset of a pair the query sees"):
        check_finite_difference(h, ("m", 0, 1))
    assert check_rows_sum_to_zero(h).holds and check_jacobian(h).holds
    assert check_key_bias(h).holds and check_gradient_shift_invariance(h).holds


@pytest.mark.parametrize("policy, d_lse, why", [
    (Policy(softcap="1"), None, "soft-cap"),
    (Policy(rope=Rope(theta=10)), None, "RoPE"),
    (Policy(), ["1", "-2"], "a d_lse")])
def test_checks_refuse_a_loss_they_do_not_rebuild(policy, d_lse, why):
    """Over soft-cap, RoPE or a d_lse the moved call was rebuilt without them, so the finite
    difference printed the plain call's value as certified: each check refuses instead."""
    g = gradients([["1/2", "-1"], ["1", "1/3"]], [["1", "0"], ["-1/2", "1"]],
                  [["1", "2"], ["-1", "1/2"]], [["1", "-1"], ["1/2", "1"]], policy,
                  d_lse=d_lse)
    message = f"need exact gradients of the loss sum dO\\*O \\(got {why}\\)"
    for check in (lambda: check_finite_difference(g, ("Q", 0, 0)), lambda: check_gradients(g),
                  lambda: check_gradient_shift_invariance(g)):
        with pytest.raises(InputError, match=message):
            check()
