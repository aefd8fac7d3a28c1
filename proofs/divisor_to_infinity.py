"""As the divisor grows without bound, every share tends to 1/n.

Claim: for any real scores s_1..s_n, lim_{tau -> oo} exp(s_j/tau) / sum_k exp(s_k/tau) = 1/n.

Assumptions: real scores, written as t - g_j with t the row maximum and
gaps g_j >= 0 (the maximum at each position p in turn, ties allowed), so
every real row of length n is covered; the divisor tau > 0.

Derivation: the softmax under test (exactattn's symbolic engine by default)
is applied to the row divided by tau, for n = 1..5 and every position p of
the maximum.  Each power exp((t - g_j)/tau) becomes E u_j with E = exp(t/tau)
and u_j = exp(-g_j/tau); E cancels; sympy finds lim u_j = 1, and the share,
a rational function of the u_j with a nonzero denominator at u = 1, takes its
value there.  Then each row of the chronicle example's raw scores, divided by
tau instead of its divisor, goes to (1/4, 1/4, 1/4, 1/4) by ``sympy.limit``.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the divisor sqrt(d_k) is a
temperature); the "-> infinity (limit)" row of ``exactattn sweep divisor``.
"""

from __future__ import annotations

import sympy

from exactattn import attend
from exactattn.examples import chronicle
from exactattn.proofs._support import Report, exact_softmax, gap_limit, main, rational

CLAIM = "as the divisor grows without bound every share tends to 1/n"


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    tau = sympy.Symbol("tau", positive=True)
    t = sympy.Symbol("t", real=True)
    report.say("row: (t - g_1, ..., t - g_n)/tau, g_j >= 0, g_p = 0 at the maximum's position p")
    for n in range(1, 6):
        gaps = sympy.symbols(f"g1:{n + 1}", nonnegative=True)
        bad = []
        for p in range(n):
            row = [(t if j == p else t - g) / tau for j, g in enumerate(gaps)]
            shares = softmax([row])[0]
            limits = [gap_limit(e, tau, sympy.oo, t, gaps) for e in shares]
            got = [v for v, _ in limits]
            if got != [sympy.Rational(1, n)] * n:
                bad.append(f"p = {p + 1}: limits {got}")
        if n == 3:
            report.say(f"e.g. n = 3, p = 3: share 1 = {limits[0][1] or shares[0]} with "
                       f"u_j = exp(-g_j/tau) "
                       f"-> {sympy.limit(sympy.exp(-gaps[0] / tau), tau, sympy.oo)}")
        report.check(f"n = {n}", not bad,
                     bad[0] if bad else
                     f"every share -> 1/{n}, with the maximum at each of positions 1..{n}")
    ex = chronicle()
    trace = attend(ex.head, ex.x, engine="pencil")
    rows = [[rational(r) / tau for r in row] for row in trace.raw_scores]
    for i, shares in enumerate(softmax(rows)):
        got = [sympy.limit(e, tau, sympy.oo) for e in shares]
        report.check(f"chronicle row {i + 1}", got == [sympy.Rational(1, 4)] * 4,
                     f"raw {[str(r) for r in trace.raw_scores[i]]} / tau -> shares {got}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
