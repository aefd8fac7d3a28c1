"""With a causal mask the first position's output is exactly its own value; rows sum to 1.

Claim: under a causal (``top_left``) mask query i sees keys 1..i only: the masked
shares are exactly 0, each row's visible shares sum to exactly 1, and the
first query, which sees only itself, gets share 1 on itself, so its output is
exactly its own value v_1.

Assumptions: one head with symbolic projection matrices and tokens (slots
layout, d_model = d_k = d_v = 2, divisor sqrt(2), four tokens), causal mask
"key j visible to query i iff j <= i"; then the chronicle example with the
same mask.

Derivation: the attention under test (exactattn's symbolic engine by
default) runs the causal head; masked shares must be exactly 0, each row's
sum minus 1 must cancel, and output 1 minus value 1 must cancel (a residual
that does not vanish is certified nonzero at a rational point).  Then the
chronicle head with causal=True: output 1 must equal value 1 =
(0, 1, 0, 1/2) exactly, and every row must sum to 1.

Reference: Vaswani et al. 2017, sec. 3.2.3 (masking out "all values in the
input of the softmax which correspond to illegal connections"); the
``causal`` flag of ``exactattn.Head`` (``top_left`` alignment).
"""

from __future__ import annotations

import sympy

from exactattn.examples import chronicle
from exactattn.proofs._support import (Report, decide_zero, exact_attention, main, rational,
                                       symbols_matrix)

CLAIM = ("with a causal mask the first position's output is exactly its own value "
         "and every row still sums to 1")


def _check_head(report: Report, label: str, tr, n: int) -> None:
    masked = [(i, j) for i in range(n) for j in range(i + 1, n)]
    leaks = [(i + 1, j + 1) for i, j in masked if tr.shares[i][j] != 0]
    report.check(f"{label}: masked shares", not leaks,
                 f"{len(masked)} pairs above the diagonal, "
                 + (f"nonzero at {leaks}" if leaks else "each exactly 0"))
    sums = [decide_zero(sympy.Add(*tr.shares[i]) - 1) for i in range(n)]
    bad = [f"row {i + 1}: {why}" for i, (ok, why) in enumerate(sums) if not ok]
    report.check(f"{label}: row sums", not bad,
                 bad[0] if bad else f"row sum - 1: residual 0 in each of the {n} rows")
    firsts = [decide_zero(o - v) for o, v in zip(tr.outputs[0], tr.values[0])]
    bad = [f"column {c + 1}: {why}" for c, (ok, why) in enumerate(firsts) if not ok]
    report.check(f"{label}: output 1 = value 1", not bad,
                 bad[0] if bad else f"output 1 = {list(tr.outputs[0])}, residual 0")


def run(attention=exact_attention, *, out=None) -> bool:
    """Prove the claim for ``attention(W_Q, W_K, W_V, x, causal=True)``."""
    report = Report(__file__, CLAIM, out)
    W_Q, W_K, W_V = (symbols_matrix(p, 2, 2) for p in ("q", "k", "v"))
    x = symbols_matrix("x", 4, 2)
    report.say("head: symbolic 2 x 2 W_Q, W_K, W_V; tokens x_i = (x_i1, x_i2), i = 1..4; causal")
    tr = attention(W_Q, W_K, W_V, x, causal=True)
    report.say(f"share (1,1) = {tr.shares[0][0]}: the first query sees only itself")
    _check_head(report, "symbolic head", tr, len(x))
    ex = chronicle()
    weights = [[[rational(e) for e in r] for r in m]
               for m in (ex.head.W_Q, ex.head.W_K, ex.head.W_V)]
    tr = attention(*weights, [[rational(e) for e in r] for r in ex.x], causal=True)
    _check_head(report, "chronicle", tr, len(ex.x))
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
