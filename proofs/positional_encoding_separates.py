"""Adding the sinusoidal positional encoding separates the chronicle example's rows 2 and 4.

Claim: tokens 2 and 4 of the chronicle example carry the same numbers, so
without positions their rows are identical; after adding the sinusoidal
encoding PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (pos = 0, 1, 2, 3) their raw
scores, shares and outputs differ.

Assumptions: the chronicle head (divisor 2); the encoding is added to x
before the projections, exactly (sin(1), cos(1/100), ... stay symbolic).

Derivation: the encoding under test is added to x and exactattn's symbolic
engine computes the head.  Two softmax rows are equal exactly when their
scores differ by a constant (``shift_invariance``), so the proof looks at the
gaps s[i][j] - s[i][1] of rows 2 and 4: one gap that differs (certified
nonzero in ball arithmetic) separates the share rows; the share and output
differences are certified nonzero too, and the shares printed to 4
certified places.

Reference: Vaswani et al. 2017, sec. 3.5 (positional encoding); the built-in
example ``chronicle`` (``exactattn scores``: "rows 2 and 4 are identical").
"""

from __future__ import annotations

import sympy

from exactattn.examples import chronicle
from exactattn.proofs._support import (Report, certified, certified_sign, exact_attention,
                                       main, rational)

CLAIM = "adding a sinusoidal positional encoding separates the chronicle example's rows 2 and 4"


def sinusoidal(pos: int, d_model: int) -> list:
    """PE(pos) of Vaswani et al. sec. 3.5, exact: sin/cos of pos / 10000^(2i/d_model)."""
    out = []
    for m in range(d_model):
        angle = sympy.Integer(pos) / sympy.Integer(10000) ** sympy.Rational(2 * (m // 2), d_model)
        out.append(sympy.sin(angle) if m % 2 == 0 else sympy.cos(angle))
    return out


def run(encoding=sinusoidal, *, out=None) -> bool:
    """Prove the claim for ``encoding(pos, d_model) -> list of d_model exact numbers``."""
    report = Report(__file__, CLAIM, out)
    ex = chronicle()
    head = ex.head
    weights = [[[rational(e) for e in r] for r in m] for m in (head.W_Q, head.W_K, head.W_V)]
    x = [[rational(e) for e in row] for row in ex.x]
    plain = exact_attention(*weights, x)
    report.check("without positions", plain.raw_scores[1] == plain.raw_scores[3],
                 f"raw rows 2 and 4 both {plain.raw_scores[1]}: identical rows")
    pe = [encoding(pos, head.d_model) for pos in range(len(x))]
    report.say(f"PE(1) = {pe[1]}")
    report.say(f"PE(3) = {pe[3]}")
    tr = exact_attention(*weights, [[a + b for a, b in zip(r, p)] for r, p in zip(x, pe)])
    gaps = [sympy.expand((tr.raw_scores[1][j] - tr.raw_scores[1][0])
                         - (tr.raw_scores[3][j] - tr.raw_scores[3][0])) for j in range(len(x))]
    signs = [certified_sign(g) for g in gaps]
    j = next((k for k, s in enumerate(signs) if s), None)
    report.check("score gaps", j is not None,
                 f"(s[2][{j + 1}] - s[2][1]) - (s[4][{j + 1}] - s[4][1]) = {certified(gaps[j])}"
                 " (certified nonzero)" if j is not None else "no gap of rows 2 and 4 differs")
    share_diff = [certified_sign(tr.shares[1][k] - tr.shares[3][k]) for k in range(len(x))]
    out_diff = [certified_sign(tr.outputs[1][c] - tr.outputs[3][c]) for c in range(head.d_v)]
    report.check("shares", any(share_diff),
                 f"row 2 {[certified(e) for e in tr.shares[1]]}, "
                 f"row 4 {[certified(e) for e in tr.shares[3]]}")
    report.check("outputs", any(out_diff),
                 f"token 2 {[certified(e) for e in tr.outputs[1]]}, "
                 f"token 4 {[certified(e) for e in tr.outputs[3]]}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
