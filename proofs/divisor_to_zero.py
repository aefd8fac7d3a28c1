"""As the divisor shrinks to 0+, the shares concentrate on the maximum; tied maxima split equally.

Claim: if m of the n scores share the largest value, then as tau -> 0+ each of
those m shares tends to 1/m and every other share tends to 0.

Assumptions: real scores, written as t at the m positions of the maximum
and t - g_j with g_j > 0 elsewhere; every set of maximum positions is tried,
so every real row of length n is covered; the divisor tau > 0.

Derivation: the softmax under test (exactattn's symbolic engine by default)
is applied to the row divided by tau, for n = 1..5 and every nonempty set of
maximum positions (31 sets at n = 5).  Each power exp((t - g_j)/tau) becomes
E u_j with E = exp(t/tau) and u_j = exp(-g_j/tau); E cancels; sympy finds
lim u_j = 0 (g_j > 0), and the share, a rational function of the u_j whose
denominator is m at u = 0, takes its value there.  Then the chronicle
example's raw scores divided by tau: row 2 goes to (1, 0, 0, 0) and row 3,
whose maximum 2 is tied between keys 2 and 4, to (0, 1/2, 0, 1/2), by
``sympy.limit``.

Reference: Vaswani et al. 2017, sec. 3.2.1 (footnote 4: large dot products
push the softmax into regions of tiny gradients); the "-> 0 (limit)" row of
``exactattn sweep divisor``.
"""

from __future__ import annotations

import itertools

import sympy

from exactattn import attend
from exactattn.examples import chronicle
from exactattn.proofs._support import Report, exact_softmax, gap_limit, main, rational

CLAIM = ("as the divisor shrinks to 0+ the shares concentrate on the maximum "
         "(ties split equally)")


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    tau = sympy.Symbol("tau", positive=True)
    t = sympy.Symbol("t", real=True)
    report.say("row: score t at the maximum positions P, t - g_j (g_j > 0) elsewhere, / tau")
    for n in range(1, 6):
        gaps = sympy.symbols(f"g1:{n + 1}", positive=True)
        bad, sets = [], 0
        for m in range(1, n + 1):
            for P in itertools.combinations(range(n), m):
                sets += 1
                row = [(t if j in P else t - gaps[j]) / tau for j in range(n)]
                limits = [gap_limit(e, tau, 0, t, gaps) for e in softmax([row])[0]]
                want = [sympy.Rational(1, m) if j in P else 0 for j in range(n)]
                if [v for v, _ in limits] != want:
                    bad.append(f"P = {[j + 1 for j in P]}: limits {[v for v, _ in limits]}")
                if n == 3 and P == (0, 2):
                    report.say(f"e.g. n = 3, P = [1, 3]: shares {[str(r) for _, r in limits]} "
                               f"with u_2 = exp(-g2/tau) -> "
                               f"{sympy.limit(sympy.exp(-gaps[1] / tau), tau, 0, '+')}")
        report.check(f"n = {n}", not bad,
                     bad[0] if bad else
                     f"1/m on the m maxima, 0 elsewhere, for all {sets} sets of maximum positions")
    ex = chronicle()
    trace = attend(ex.head, ex.x, engine="pencil")
    rows = [[rational(r) / tau for r in row] for row in trace.raw_scores]
    for i, shares in enumerate(softmax(rows)):
        raw = [rational(r) for r in trace.raw_scores[i]]
        top = [j for j, r in enumerate(raw) if r == max(raw)]
        want = [sympy.Rational(1, len(top)) if j in top else 0 for j in range(len(raw))]
        got = [sympy.limit(e, tau, 0, "+") for e in shares]
        report.check(f"chronicle row {i + 1}", got == want,
                     f"raw {[str(r) for r in raw]} / tau -> shares {got}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
