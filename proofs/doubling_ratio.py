"""Doubling the row length multiplies the cost by (8n + 6D)/(2n + 3D), which climbs towards 4.

Claim: at d_v = d_k, cost(2n)/cost(n) = (8n + 6D)/(2n + 3D) = 2 (4n + 3D)/(2n + 3D);
its limit as n grows is 4; at D = 4 it is 2.80, 3.14, 3.45 from 4 to 8, 8 to
16 and 16 to 32 tokens; a 4096-wide model going from 1000 to 2000 tokens
costs 2.28 times as much, not "close to four times".

Assumptions: one head, no mask, no W_O; MACs as in ``cost_formula``.

Derivation: the total comes from the cost module's derivation
(``exactattn.cost.derive``), not retyped; sympy substitutes 2n for n,
cancels the ratio (d_k cancels), takes the limit n -> oo, and evaluates the
ratio exactly at the listed sizes (``xreplace``), rounded to 2 places; the
cost module's own ``doubling_ratio`` must give the same closed form.

Reference: the "ratio to row above" column of ``exactattn cost`` (2.80, 3.14,
3.45 at D = d_k = 4, the ``chronicle`` head); Vaswani et al. 2017, Table 1.
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from exactattn import cost
from exactattn.numbers.digits import round_fraction
from exactattn.proofs._support import Report, main

CLAIM = "cost(2n)/cost(n) = (8n + 6D)/(2n + 3D), climbing towards 4"
CLAIMED = "(8*n + 6*D)/(2*n + 3*D)"
#: (n, D) -> the ratio cost(2n)/cost(n) to 2 places
EXPECTED = {(4, 4): "2.80", (8, 4): "3.14", (16, 4): "3.45", (1000, 4096): "2.28"}


def run(derive=cost.derive, doubling_ratio=cost.doubling_ratio, *, out=None) -> bool:
    """Prove the claim for ``derive``; the cost module's ``doubling_ratio`` must agree."""
    report = Report(__file__, CLAIM, out)
    n, D, d_k, d_v = cost.SYMBOLS
    total = derive(d_v=d_k)["total"]
    ratio = sympy.factor(sympy.cancel(total.xreplace({n: 2 * n}) / total))
    claimed = sympy.parse_expr(CLAIMED, local_dict={"n": n, "D": D})
    residual = sympy.cancel(ratio - claimed)
    report.check("closed form", residual == 0,
                 f"cost(2n)/cost(n) = ({total.xreplace({n: 2 * n})})/({total}) = {ratio}; "
                 f"minus the claimed {claimed}: residual {residual}")
    limit = sympy.limit(ratio, n, sympy.oo)
    report.check("limit", limit == 4, f"as n -> oo: {limit}")
    for (size, width), want in EXPECTED.items():
        value = ratio.xreplace({n: size, D: width})
        got = (round_fraction(Fraction(int(value.p), int(value.q)), 2) if value.is_Rational
               else str(value))
        report.check(f"n = {size} -> {2 * size}, D = {width}", got == want,
                     f"{value} = {got}")
    module = doubling_ratio()
    report.check("cost.doubling_ratio", sympy.cancel(module.expr - ratio) == 0 and
                 module.limit == limit, f"{module.expr}, limit {module.limit}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
