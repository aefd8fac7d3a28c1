"""Every row of shares sums to exactly 1, for any scores and any row length n.

Claim: for real scores s_1..s_n, sum_j exp(s_j) / sum_k exp(s_k) = 1.

Assumptions: the scores are arbitrary real numbers (free real symbols here,
not samples); no key is masked (the causal case is ``causal_first_position``).

Derivation: for n = 1..6 an n x n matrix of independent symbols goes through
the softmax under test (exactattn's symbolic engine by default), and each
row's sum minus 1 is put over one denominator and cancelled.  For general n,
sympy's ``Sum`` over an indexed symbol: the normaliser does not depend on the
summation index, so ``factor_sum`` takes it out, and the numerator left is the
normaliser itself with its bound index renamed (j -> k), so the ratio is 1.

Reference: Vaswani et al. 2017, sec. 3.2.1 (softmax of the scaled scores); the
"sum" column ("exactly 1") of ``exactattn scores``.
"""

from __future__ import annotations

import sympy
from sympy.simplify.simplify import factor_sum

from exactattn.proofs._support import Report, decide_zero, exact_softmax, main, symbols_matrix

CLAIM = "every row of shares sums to exactly 1, for any scores and any row length n"


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    report.say("scores: an n x n matrix of independent real symbols s_ij")
    for n in range(1, 7):
        shares = softmax(symbols_matrix("s", n, n))
        verdicts = [decide_zero(sympy.Add(*row) - 1) for row in shares]
        bad = [f"row {i + 1}: {why}" for i, (ok, why) in enumerate(verdicts) if not ok]
        report.check(f"n = {n}", not bad,
                     f"row sum - 1: {bad[0] if bad else f'residual 0 in rows 1..{n}'}")
    n = sympy.Symbol("n", integer=True, positive=True)
    j, k = sympy.symbols("j k", integer=True)
    s = sympy.IndexedBase("s", real=True)
    normaliser = sympy.Sum(sympy.exp(s[k]), (k, 1, n))
    total = sympy.Sum(sympy.exp(s[j]) / normaliser, (j, 1, n))
    report.say(f"general n: sum of the row = {total}")
    pulled = factor_sum(total)
    report.say(f"normaliser is free of j, factor_sum: {pulled}")
    renamed = pulled.xreplace({j: k})
    report.check("general n", renamed == 1, f"rename the bound index j -> k: {renamed}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
