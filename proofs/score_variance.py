"""For standard normal entries q . k has mean 0 and variance d_k; divided by sqrt(d_k), variance 1.

Claim: if the entries of q and k are independent standard normals, the raw
score q . k = sum_{m=1}^{d_k} q_m k_m has mean 0 and variance d_k, so the
scaled score q . k / sqrt(d_k) has variance 1 at every width; the spread the
scale table measures as a standard deviation over all scores is therefore
sqrt(d_k) before dividing and 1 after.

Assumptions: q_1..q_dk, k_1..k_dk independent N(0, 1); the scores' mean is
the exact mean 0 (as in the scale table, ``exactattn scale``).

Derivation (sympy.stats): one term q_m k_m has mean 0 and variance 1, and
two different terms have covariance 0; summing with ``Sum`` over m (and over
the pairs m != l) gives mean 0 and variance d_k for symbolic d_k.  The
explicit sum at d_k = 2 is computed by sympy.stats directly.  The
variance of the score divided by ``divisor(d_k)`` must be 1.

Reference: Vaswani et al. 2017, sec. 3.2.1, footnote 4 ("assume that the
components of q and k are independent random variables with mean 0 and
variance 1. Then their dot product has mean 0 and variance d_k").
"""

from __future__ import annotations

import sympy
from sympy.stats import E, Normal, covariance, variance

from exactattn.proofs._support import Report, main

CLAIM = "q . k has mean 0 and variance d_k; divided by sqrt(d_k) its variance is 1"


def run(divisor=sympy.sqrt, *, out=None) -> bool:
    """Prove the claim for ``divisor(d_k)``, the number the scores are divided by."""
    report = Report(__file__, CLAIM, out)
    q1, k1, q2, k2 = (Normal(name, 0, 1) for name in ("q_1", "k_1", "q_2", "k_2"))
    mean1, var1, cov = E(q1 * k1), variance(q1 * k1), covariance(q1 * k1, q2 * k2)
    report.check("one term", (mean1, var1, cov) == (0, 1, 0),
                 f"E[q_m k_m] = {mean1}, Var(q_m k_m) = {var1}, "
                 f"Cov(q_m k_m, q_l k_l) = {cov} for m != l")
    d = sympy.Symbol("d_k", integer=True, positive=True)
    m, l = sympy.symbols("m l", integer=True, positive=True)
    mean = sympy.summation(mean1, (m, 1, d))
    var = sympy.expand(sympy.summation(var1, (m, 1, d)) + cov * d * (d - 1))
    report.check("general d_k", mean == 0 and var == d,
                 f"E[q . k] = sum_m {mean1} = {mean}; Var(q . k) = sum_m {var1} "
                 f"+ sum_(m != l) {cov} = {var}")
    scaled = sympy.simplify(var / divisor(d) ** 2)
    report.check("divided", scaled == 1,
                 f"Var(q . k / {divisor(d)}) = {var}/({divisor(d)})^2 = {scaled}")
    for width in (2,):
        qs = [Normal(f"q{i + 1}", 0, 1) for i in range(width)]
        ks = [Normal(f"k{i + 1}", 0, 1) for i in range(width)]
        score = sympy.Add(*[a * b for a, b in zip(qs, ks)])
        got = (E(score), variance(score), sympy.simplify(variance(score / divisor(width))))
        report.check(f"d_k = {width}, explicit", got == (0, width, 1),
                     f"E = {got[0]}, Var = {got[1]}, Var divided = {got[2]}")
    sd, sd_div = sympy.sqrt(var), sympy.sqrt(scaled)
    report.say(f"standard deviation over all scores (about the exact mean 0): {sd} undivided, "
               f"{sd_div} divided; at d_k = 4, 16, 64, 256: "
               f"{[sd.xreplace({d: w}) for w in (4, 16, 64, 256)]} and "
               f"{[sd_div.xreplace({d: w}) for w in (4, 16, 64, 256)]}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
