"""The expected spread (largest minus smallest score) of a row of the scale table, in closed form.

Claim: for one query q and n keys with independent standard normal entries,
the row's range max_j s_j - min_j s_j (s_j = q . k_j) has expectation
E|q| E[W_n], where E|q| = sqrt(2) Gamma((d_k+1)/2) / Gamma(d_k/2) is the chi
mean and W_n the range of n independent standard normals:
E[W_2] = 2/sqrt(pi), E[W_3] = 3/sqrt(pi), E[W_4] = 12 atan(sqrt(2)) / pi^(3/2).
Divided by sqrt(d_k), the expected range tends to E[W_n] as d_k grows (2.0588
at n = 4, the scale table's default), while undivided it grows like sqrt(d_k).

Assumptions: the definition ``exactattn scale`` uses (one query, n keys per
row, entries independent N(0, 1), range = largest minus smallest score).
The scores of a row share q, so they are not independent; given q they are
independent N(0, |q|^2), so the range is |q| W_n with W_n independent of |q|.

Derivation: sympy.stats gives Var(q . K | q) = |q|^2 and the chi mean.
E[W_n] = 2 E[max of n] by symmetry, and E[max of n] = n(n-1) int phi^2 Phi^(n-2)
by parts (sympy checks the derivative and that the boundary terms vanish).
n = 2, 3 follow from int phi^2 = 1/(2 sqrt(pi)) and the odd part vanishing.
n = 4 needs J = int exp(-x^2) erf(x/sqrt(2))^2: differentiate J(t) =
int exp(-x^2) erf(t x)^2 under the integral, integrate by parts to a Gaussian
integral, substitute u = sqrt(1 + 2t^2) and integrate 1/(1 + u^2).  Each
closed form must lie inside the scale module's certified enclosure of the
integral (``exactattn.scale.expected_w``); the table's expected ranges at
d_k = 4, 16, 64, 256 must equal E|q| E[W_4] / divisor(d_k) to 4 certified
places; and the limit of E|q| / divisor(d_k) as d_k -> oo (via loggamma) must be 1.

Reference: Vaswani et al. 2017, sec. 3.2.1, footnote 4; the "range" columns
of ``exactattn scale``; the order-statistics integral
E[max] = int x n phi Phi^(n-1).
"""

from __future__ import annotations

import sympy
from sympy.stats import Chi, E, Normal, variance

from exactattn.numbers.digits import working_precision
from exactattn.proofs._support import Report, certified, main, to_arb

CLAIM = ("the expected range of a row of n scores is E|q| E[W_n]; divided by sqrt(d_k) "
         "it tends to E[W_n]")
WIDTHS = (4, 16, 64, 256)


def _expected_ranges(report: Report) -> dict:
    """E[W_n] for n = 2, 3, 4, derived step by step."""
    x = sympy.Symbol("x", real=True)
    t, u, a, c = sympy.symbols("t u a c", positive=True)
    pi = sympy.pi
    phi = sympy.exp(-x ** 2 / 2) / sympy.sqrt(2 * pi)
    Phi = (1 + sympy.erf(x / sympy.sqrt(2))) / 2
    ok = True
    for n in (2, 3, 4):
        boundary = -n * phi * Phi ** (n - 1)
        residual = sympy.expand(sympy.diff(boundary, x)
                                - n * x * phi * Phi ** (n - 1)
                                + n * (n - 1) * phi ** 2 * Phi ** (n - 2))
        ends = (sympy.limit(boundary, x, sympy.oo), sympy.limit(boundary, x, -sympy.oo))
        ok &= residual == 0 and ends == (0, 0)
    report.check("by parts", ok, "E[max of n] = int x n phi Phi^(n-1) = n(n-1) int phi^2 Phi^(n-2) "
                 "for n = 2, 3, 4 (derivative residual 0, boundary terms 0)")
    gauss = sympy.integrate(sympy.exp(-c * x ** 2), (x, -sympy.oo, sympy.oo))
    phi2 = sympy.expand(gauss.xreplace({c: 1}) / (2 * pi))
    odd = phi ** 2 * sympy.erf(x / sympy.sqrt(2))
    report.say(f"int exp(-c x^2) = {gauss}; int phi^2 = {phi2}; "
               "phi^2 erf(x/sqrt 2) is odd: f(-x) + f(x) = "
               f"{sympy.expand(odd.xreplace({x: -x}) + odd)}")
    # J = int exp(-x^2) erf(x/sqrt 2)^2 = J(1/sqrt 2), J(t) = int exp(-x^2) erf(t x)^2, J(0) = 0
    d_integrand = sympy.diff(sympy.exp(-x ** 2) * sympy.erf(t * x) ** 2, t)
    front, rest = d_integrand.as_independent(x)
    shape_ok = sympy.expand(rest - x * sympy.exp(-(1 + t ** 2) * x ** 2) * sympy.erf(t * x),
                            power_exp=True) == 0
    # by parts: int x exp(-a x^2) erf(t x) = int exp(-a x^2)/(2a) d/dx erf(t x)
    anti = -sympy.exp(-a * x ** 2) / (2 * a) * sympy.erf(t * x)
    rhs = sympy.exp(-a * x ** 2) / (2 * a) * sympy.diff(sympy.erf(t * x), x)
    parts = sympy.expand(sympy.diff(anti, x) - x * sympy.exp(-a * x ** 2) * sympy.erf(t * x) + rhs)
    ends = (sympy.limit(anti, x, sympy.oo), sympy.limit(anti, x, -sympy.oo))
    coef, gaussian = sympy.powsimp(rhs).as_independent(x)
    shape_ok &= sympy.expand(gaussian - sympy.exp(-(a + t ** 2) * x ** 2), power_exp=True) == 0
    k_t = coef * gauss.xreplace({c: a + t ** 2})
    dj = sympy.simplify(front * k_t.xreplace({a: 1 + t ** 2}))
    report.check("d/dt J(t)", shape_ok and parts == 0 and ends == (0, 0),
                 f"J'(t) = int {d_integrand}; by parts int x exp(-a x^2) erf(t x) = "
                 f"{k_t} (a = 1 + t^2), so J'(t) = {dj}")
    t_of_u = sympy.sqrt((u ** 2 - 1) / 2)
    du = sympy.cancel(sympy.together(dj.xreplace({t: t_of_u}) * sympy.diff(t_of_u, u)))
    J = sympy.integrate(du, (u, 1, sympy.sqrt(2)))
    report.say(f"u = sqrt(1 + 2t^2): J'(t) dt = {du} du, u from 1 to sqrt(2); J(0) = 0 "
               f"(erf(0) = {sympy.erf(0)}), so J = {J}")
    half = sympy.Rational(1, 2)
    means = {2: 2 * phi2,
             3: 6 * half * phi2,
             4: sympy.expand(12 * (phi2 / 4 + J / (2 * pi) / 4))}
    return {n: sympy.expand(2 * m) for n, m in means.items()}


def run(divisor=sympy.sqrt, *, out=None) -> bool:
    """Prove the claim for ``divisor(d_k)``, the number the scores are divided by."""
    from exactattn.scale import expected_range, expected_w
    report = Report(__file__, CLAIM, out)
    qs = sympy.symbols("q1 q2", real=True)
    ks = [Normal(f"K{m + 1}", 0, 1) for m in range(2)]
    given_q = variance(qs[0] * ks[0] + qs[1] * ks[1])
    report.say(f"given q (d_k = 2): Var(q . K) = {given_q} = |q|^2, so s_j = |q| Z_j, "
               "Z_j independent N(0, 1)")
    d = sympy.Symbol("d_k", integer=True, positive=True)
    chi = E(Chi("r", d))
    report.say(f"E|q| = {chi} (chi mean); at d_k = 4: {sympy.gammasimp(chi.xreplace({d: 4}))}")
    closed = _expected_ranges(report)
    for n, value in closed.items():
        with working_precision(128):
            inside = expected_w(n, 128).contains(to_arb(value))
        report.check(f"E[W_{n}]", bool(inside),
                     f"{value} = {certified(value, 6)}; "
                     f"{'inside' if inside else 'outside'} the scale module's enclosure")
    w4 = closed[4]
    z = sympy.Symbol("z", positive=True)
    log_ratio = sympy.expand_log(sympy.log(sympy.sqrt(2)) + sympy.loggamma(z + sympy.Rational(1, 2))
                                 - sympy.loggamma(z) - sympy.log(divisor(2 * z)), force=True)
    limit = sympy.exp(sympy.limit(log_ratio, z, sympy.oo))
    report.check("d_k -> oo", limit == 1,
                 f"E|q| / {divisor(d)} -> {limit}, so the divided range -> E[W_n] "
                 f"({certified(w4)} at n = 4)")
    rows = []
    ok = True
    for width in WIDTHS:
        mean = sympy.gammasimp(chi.xreplace({d: width}))
        undivided = certified(mean * w4)
        divided = certified(mean * w4 / divisor(width))
        table = (expected_range(4, width, divided=False), expected_range(4, width, divided=True))
        ok &= (undivided, divided) == table
        rows.append(f"{width}: {undivided} / {divided}")
    report.check("n = 4 (undivided / divided)", ok, "; ".join(rows)
                 + ("; the scale table agrees" if ok else "; the scale table differs"))
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
