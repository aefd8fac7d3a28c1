"""Subtracting the row maximum changes no share and makes the largest power of e exactly 1.

Claim: with m = max_k s_k, softmax(s_1 - m, ..., s_n - m) = softmax(s_1, ..., s_n);
the shifted powers are exp(s_j - m) <= 1, and the largest, exp(0), is exactly 1
(so no power overflows: exp(800) is never formed).

Assumptions: real scores; the maximum may be tied.  A row is written as
t - g_j with t real and gaps g_j >= 0, one gap 0 at position p (every p is
tried), so every ordering of a row of length n is covered.

Derivation: for n = 1..5 and each position p of the maximum, ``maximum``
(sympy's ``Max`` by default) is asked for the row's maximum m; the shares of
the shifted row minus those of the row cancel to 0; the power at p is
exp(t - m), which must be exactly 1; every other exponent s_j - m must be
<= 0 (decided by sympy), and exp is increasing.  Then exactattn's own
``SoftmaxRow`` (which subtracts the maximum on the rationals) is checked on
every row of the chronicle example: its largest gap is 0 (power exactly 1),
every gap is <= 0, and its shares equal the textbook softmax of the scaled
scores.

Reference: Vaswani et al. 2017, sec. 3.2.1; the "safe softmax" of every
framework; the built-in worked example ``chronicle``.
"""

from __future__ import annotations

import sympy

from exactattn import attend
from exactattn.examples import chronicle
from exactattn.proofs._support import Report, decide_zero, exact_softmax, main, rational

CLAIM = ("subtracting the row maximum changes no share and makes the largest power of e "
         "exactly 1")


def run(softmax=exact_softmax, maximum=sympy.Max, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (matrix -> matrix) and ``maximum`` (row -> its maximum)."""
    report = Report(__file__, CLAIM, out)
    t = sympy.Symbol("t", real=True)
    report.say("row: t - g_j with gaps g_j >= 0 and g_p = 0 at the maximum's position p")
    for n in range(1, 6):
        gaps = sympy.symbols(f"g1:{n + 1}", nonnegative=True)
        problems = []
        for p in range(n):
            row = [t if j == p else t - g for j, g in enumerate(gaps)]
            m = maximum(*row)
            shifted = [r - m for r in row]
            same = [decide_zero(a - b)
                    for a, b in zip(softmax([shifted])[0], softmax([row])[0])]
            problems += [f"p = {p + 1}: share {why}" for ok, why in same if not ok]
            top = sympy.exp(shifted[p])
            if top != 1:
                problems.append(f"p = {p + 1}: largest power {top}, not 1")
            above = [e for j, e in enumerate(shifted) if j != p and (e <= 0) is not sympy.true]
            if above:
                problems.append(f"p = {p + 1}: exponent {above[0]} not shown <= 0")
        if n == 3:
            report.say(f"e.g. n = 3, p = 3: max = {m}, shifted row {shifted}, powers "
                       f"{[sympy.exp(e) for e in shifted]}")
        report.check(f"n = {n}", not problems,
                     problems[0] if problems else
                     f"shares unchanged, largest power 1, others <= 1, with the maximum "
                     f"at each of positions 1..{n}")
    ex = chronicle()
    trace = attend(ex.head, ex.x, engine="pencil")
    root = trace.head.divisor
    for i, sm in enumerate(trace.rows):
        gaps = [g for g in sm.gaps if g is not None]
        raw = [rational(r) for r in sm.raw]
        textbook = [sympy.exp(r / root) / sympy.Add(*[sympy.exp(q / root) for q in raw])
                    for r in raw]
        same = all(decide_zero(sm.share(j).closed_form() - textbook[j])[0]
                   for j in range(len(raw)))
        ok = max(gaps) == 0 and all(g <= 0 for g in gaps) and same
        report.check(f"chronicle row {i + 1} (SoftmaxRow)", ok,
                     f"max {sm.max_raw}, gaps {[str(g) for g in sm.gaps]}, largest power "
                     f"exp({max(gaps)}/{root}) = {sympy.exp(rational(max(gaps)) / root)}, "
                     f"shares {'equal' if same else 'differ from'} the textbook softmax")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
