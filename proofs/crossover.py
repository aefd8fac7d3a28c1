"""The pairs pass the projections exactly when n > 3D/2: n = 7 at D = 4, 6145 at D = 4096.

Claim: at d_v = d_k, 2 n^2 d_k > 3 n D d_k exactly when n > 3D/2; the first
whole n is 7 at D = 4, where n = 6 gives 288 pair MACs and 288 projection
MACs, and 6145 at D = 4096.

Assumptions: one head, no mask, no W_O; n, D, d_k positive integers; MACs as
in ``cost_formula``.

Derivation: the stages come from the cost module's derivation
(``exactattn.cost.derive``, summed from the loop bounds, not retyped); the
proof factors pairs - projections (scores + mixing minus projections), drops
the factors sympy knows to be positive, and solves the remaining inequality
for n with ``reduce_inequalities``.  The first whole n and the equal point
are read off at D = 4 and D = 4096 by substituting (``xreplace``), and the
cost module's own ``crossover`` must agree.

Reference: Vaswani et al. 2017, Table 1 (self-attention is cheaper than a
recurrent layer while n < d); the crossover line under ``exactattn cost``.
"""

from __future__ import annotations

import sympy
from sympy.solvers.inequalities import reduce_inequalities

from exactattn import cost
from exactattn.proofs._support import Report, main

CLAIM = "the pairs pass the projections exactly when n > 3D/2 (n = 7 at D = 4, 6145 at D = 4096)"
CLAIMED = "n > 3*D/2"
#: D -> (first n past the crossover, n where the two are equal, their MACs there)
EXPECTED = {4: (7, 6, 288), 4096: (6145, 6144, None)}


def run(derive=cost.derive, crossover=cost.crossover, *, out=None) -> bool:
    """Prove the claim for ``derive`` (the cost module's derivation); ``crossover`` must agree."""
    report = Report(__file__, CLAIM, out)
    n, D, d_k, d_v = cost.SYMBOLS
    stages = derive(d_v=d_k)
    pairs = sympy.expand(stages["scores"] + stages["mix"])
    linear = sympy.expand(stages["projections"])
    difference = sympy.factor(pairs - linear)
    report.say(f"pairs {pairs}, projections {linear}: pairs - projections = {difference}")
    coeff, factors = sympy.factor_list(pairs - linear)
    positive = [f ** k for f, k in factors if f.is_positive]
    rest = [f ** k for f, k in factors if not f.is_positive]
    core = sympy.Mul(*rest)
    if coeff < 0:
        core = -core
    report.say(f"positive factors {positive} dropped: pairs > projections iff {core} > 0")
    solved = reduce_inequalities(core > 0, n) if core.has(n) else sympy.false
    claimed = sympy.parse_expr(CLAIMED, local_dict={"n": n, "D": D})
    report.check("solved", solved == claimed, f"{core} > 0 iff {solved}")
    for width, (first, equal, macs) in EXPECTED.items():
        threshold = solved.rhs.xreplace({D: width}) if solved != sympy.false else None
        got_first = int(sympy.floor(threshold)) + 1 if threshold is not None else None
        at = {n: equal, D: width, d_k: width}
        p, q = int(pairs.xreplace(at)), int(linear.xreplace(at))
        module = crossover(width)
        ok = (got_first == first and p == q and (macs is None or p == macs)
              and module.first == first and module.equal_at == equal)
        report.check(f"D = {width}", ok,
                     f"first n = {got_first}; at n = {equal}: pairs {p}, projections {q} "
                     f"(d_k = D); cost.crossover: first {module.first}, "
                     f"equal at {module.equal_at}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
