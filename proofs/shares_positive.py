"""Every share is positive: no key that is not masked ever gets zero or negative attention.

Claim: for real scores s_1..s_n, every share exp(s_j) / sum_k exp(s_k) > 0.

Assumptions: real scores (free real symbols), no masked key (a masked key's
share is exactly 0; see ``causal_first_position``).

Derivation: the n x n symbolic score matrices (n = 1..6) go through the
softmax under test (exactattn's symbolic engine by default); sympy's
assumption system decides the sign of every share from the structure alone:
exp of a real is positive, a sum of positives is positive, a ratio of
positives is positive.  An undecided sign counts as a failure (not shown).

Reference: Vaswani et al. 2017, sec. 3.2.1; SPEC section 5.
"""

from __future__ import annotations

from exactattn.proofs._support import Report, exact_softmax, main, symbols_matrix

CLAIM = "every share is positive, for any real scores"


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    report.say("scores: an n x n matrix of independent real symbols s_ij")
    for n in range(1, 7):
        shares = [e for row in softmax(symbols_matrix("s", n, n)) for e in row]
        signs = [e.is_positive for e in shares]
        counts = {v: signs.count(v) for v in (True, False, None) if v in signs}
        words = ", ".join(f"{c} {'positive' if v else 'not positive' if v is False else 'undecided'}"
                          for v, c in counts.items())
        report.check(f"n = {n}", all(v is True for v in signs), f"{len(shares)} shares: {words}")
    report.say("e.g. exp(s11)/(exp(s11) + exp(s12)): exp(real) > 0, sums and ratios of positives > 0")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
