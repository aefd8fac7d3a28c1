"""Adding the same constant to every score in a row changes no share.

Claim: softmax(s_1 + c, ..., s_n + c) = softmax(s_1, ..., s_n) for every
real c: the factor exp(c) appears in every numerator and in the normaliser.

Assumptions: real scores s_j and a real shift c (free symbols).

Derivation: for n = 1..6 the softmax under test (exactattn's symbolic engine
by default) is applied to a symbolic row and to the same row plus c; each
difference has exp(s_j + c) split into exp(s_j) exp(c), is put over one
denominator and cancelled to 0.  This is why a key bias cancels
(``projection_biases``) and why subtracting the row maximum is safe
(``max_subtraction``).

Reference: Vaswani et al. 2017, sec. 3.2.1 (softmax of the scaled scores).
"""

from __future__ import annotations

import sympy

from exactattn.proofs._support import Report, decide_zero, exact_softmax, main

CLAIM = "adding the same constant to every score in a row changes no share"


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    c = sympy.Symbol("c", real=True)
    report.say("scores: a row of real symbols s_1..s_n; shift: a real symbol c")
    for n in range(1, 7):
        row = list(sympy.symbols(f"s1:{n + 1}", real=True))
        before = softmax([row])[0]
        after = softmax([[s + c for s in row]])[0]
        verdicts = [decide_zero(a - b) for a, b in zip(after, before)]
        bad = [why for ok, why in verdicts if not ok]
        report.check(f"n = {n}", not bad,
                     "share(s + c) - share(s): "
                     + (bad[0] if bad else f"residual 0 for shares 1..{n}"))
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
