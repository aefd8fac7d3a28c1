"""One head costs 3 n D d_k + 2 n^2 d_k multiply-adds: derived from the loops, equal to the count.

Claim: with n tokens, D = d_model and d_v = d_k, the projections cost
3 n D d_k MACs (linear in n), the scores and the mixing n^2 d_k each
(quadratic), in total 3 n D d_k + 2 n^2 d_k; with a causal mask the scores
visit exactly n(n+1)/2 query-key pairs, not n^2/2.

Assumptions: one head, no W_O; a multiply-add (MAC) is one multiplication
plus one addition into a running sum (FLOPs = 2 x MACs); the softmax's
exponentials and divisions are not MACs.

Derivation: the cost module (``exactattn.cost.derive``) sums each stage's
loop nest by its bounds with sympy; this proof does not retype that
formula.  It checks (1) the derived total at d_v = d_k against the claimed
expression (the residual must expand to 0), (2) the derived figures at
several sizes, substituted with ``xreplace``, against the counters the
pencil engine increments inside its loops (``exactattn.cost.count``), and
(3) the causal scores: derived scores / d_k must equal n(n+1)/2, and match the
count.

Reference: Vaswani et al. 2017, sec. 3.2.1 and Table 1 (O(n^2 d) per
self-attention layer); the built-in worked example ``chronicle`` (320 MACs at
n = D = d_k = 4: 192 + 64 + 64, the last table of ``exactattn scores``).
"""

from __future__ import annotations

import sympy

from exactattn import cost
from exactattn.proofs._support import Report, main

CLAIM = "one head costs 3 n D d_k + 2 n^2 d_k multiply-adds, as derived from the loop bounds"
CLAIMED_TOTAL = "3*n*D*d_k + 2*n**2*d_k"
#: (n, D, d_k, d_v) where derivation and counters are compared
SIZES = ((1, 1, 1, 1), (4, 4, 4, 4), (6, 4, 4, 4), (7, 4, 4, 4), (5, 3, 2, 3))


def _compare(derived: dict, counted: dict) -> str:
    text = lambda d: ", ".join(f"{k} {v}" for k, v in d.items())  # noqa: E731
    if derived == counted:
        return f"derived = counted: {text(derived)}"
    return f"derived {text(derived)}; counted {text(counted)}"


def run(derive=cost.derive, count=cost.count, *, out=None) -> bool:
    """Prove the claim for ``derive`` (the cost module's derivation) against ``count``."""
    report = Report(__file__, CLAIM, out)
    n, D, d_k, d_v = cost.SYMBOLS
    for stage, nests in cost.loop_nests().items():
        report.say(f"{stage} loops: " + "; ".join(str(x) for x in nests))
    general = derive()
    report.say("derived: " + ", ".join(f"{k} {v}" for k, v in general.items()))
    at_dk = {k: sympy.expand(v.xreplace({d_v: d_k})) for k, v in general.items()}
    claimed = sympy.parse_expr(CLAIMED_TOTAL, local_dict={"n": n, "D": D, "d_k": d_k})
    residual = sympy.expand(at_dk["total"] - claimed)
    report.check("d_v = d_k", residual == 0,
                 f"total {at_dk['total']} = {sympy.factor(at_dk['total'])}; "
                 f"minus the claimed {claimed}: residual {residual}")
    for size in SIZES:
        point = dict(zip((n, D, d_k, d_v), (sympy.Integer(v) for v in size)))
        derived = {k: int(v.xreplace(point)) for k, v in general.items()}
        counted = count(*size)
        report.check(f"n, D, d_k, d_v = {', '.join(map(str, size))}", derived == counted,
                     _compare(derived, counted))
    causal = derive(causal=True)
    pairs = sympy.factor(causal["scores"] / d_k)
    residual = sympy.expand(pairs - n * (n + 1) / 2)
    size = SIZES[-1]
    point = dict(zip((n, D, d_k, d_v), (sympy.Integer(v) for v in size)))
    derived = {k: int(v.xreplace(point)) for k, v in causal.items()}
    counted = count(*size, causal=True)
    report.check("causal", residual == 0 and derived == counted,
                 f"scores {causal['scores']}: {pairs} pairs (residual against n(n+1)/2: "
                 f"{residual}); at {', '.join(map(str, size))}: {_compare(derived, counted)}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
