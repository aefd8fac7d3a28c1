"""Every share is positive: no key that is not masked ever gets zero or negative attention.

Claim: for real scores s_1..s_n, every share exp(s_j) / sum_k exp(s_k) > 0.

Assumptions: real scores (free real symbols), no masked key (a masked key's
share is exactly 0; see ``causal_first_position``).

Derivation: the n x n symbolic score matrices (n = 1..6) go through the
softmax under test (exactattn's symbolic engine by default); sympy's
assumption system decides the sign of every share from the structure alone:
exp of a real is positive, a sum of positives is positive, a ratio of
positives is positive.  An undecided sign counts as a failure (not shown).

Reference: Vaswani et al. 2017, sec. 3.2.1 (softmax of the scaled scores).
"""

from __future__ import annotations

import sympy

from exactattn.proofs._support import (Report, certified_sign, exact_softmax, main,
                                       sample_point, symbols_matrix)

CLAIM = "every share is positive, for any real scores"


def _sign_word(share) -> str:
    """'positive' when sympy's assumptions decide it, else the sign at a rational point."""
    if share.is_positive:
        return "positive"
    value = share.xreplace(sample_point(share))
    sign = certified_sign(value)
    if sign is not None and sign <= 0:
        return "not positive at a rational point"
    return "undecided"


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    report.say("scores: an n x n matrix of independent real symbols s_ij")
    example = softmax(symbols_matrix("s", 2, 2))[0][0]
    num, den = sympy.fraction(example)
    report.say(f"n = 2, share 1 of row 1: {example}")
    report.say(f"numerator {num} positive: {num.is_positive}; "
               f"denominator {den} positive: {den.is_positive}")
    for n in range(1, 7):
        words = [_sign_word(e) for row in softmax(symbols_matrix("s", n, n)) for e in row]
        counts = ", ".join(f"{words.count(w)} {w}" for w in sorted(set(words)))
        report.check(f"n = {n}", set(words) == {"positive"},
                     f"{len(words)} of {len(words)} shares positive" if set(words) == {"positive"}
                     else f"{len(words)} shares: {counts}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
