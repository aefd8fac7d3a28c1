"""What every proof shares: the report, exactattn's own softmax and attention, certified signs.

Not a proof itself (the leading underscore keeps it out of ``exactattn prove``).

* :class:`Report` prints the claim, each step and a verdict, and remembers
  which checks failed.  The output is deterministic: sympy expressions print
  in sympy's canonical order, decimals are certified (correctly rounded).
* :func:`exact_softmax` is the softmax under test by default: it feeds each
  row of symbolic scores through exactattn's own symbolic engine
  (``attend(..., engine="symbolic")``) on a head built so that its raw
  scores are exactly that row.
* :func:`exact_attention` runs a head with symbolic weights and tokens through
  the same engine and returns its :class:`~exactattn.engines.head.Trace`.
* :func:`decide_zero` reduces a residual with ``together``/``cancel`` (never
  ``simplify``, which runs for minutes on a symbolic head); when it does not
  vanish, it evaluates the residual at a rational point (``xreplace``) in
  ``arb`` ball arithmetic, so "does not vanish" is certified by a
  counterexample rather than asserted.

Reference: Vaswani et al. 2017, "Attention is all you need", sec. 3.2.1.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path
from typing import Callable, Sequence, TextIO

import exactattn  # noqa: F401  (sets sympy's ground types before sympy is imported)
import sympy
from exactattn import Head, attend
from exactattn.numbers.digits import certify, tighten
from exactattn.errors import InputError
from exactattn.numbers.reals import sympy_ball

__all__ = ["Report", "certified", "certified_sign", "decide_zero", "exact_attention",
           "exact_softmax", "gap_limit", "main", "rational", "reduce", "sample_point", "show",
           "symbols_matrix", "to_arb"]


class Report:
    """The printed record of one proof: its claim, its steps, its verdict.

    ``check(label, ok, detail)`` prints one step and records a failure;
    ``finish()`` prints ``verdict: PROVED`` or ``verdict: FAILED (...)`` and
    returns True when every check held.
    """

    def __init__(self, source: str, claim: str, out: TextIO | None = None):
        self.name = Path(source).stem
        self.out = out if out is not None else sys.stdout
        self.failed: list[str] = []
        self._print(f"{self.name}: {claim}")

    def _print(self, text: str) -> None:
        print(text, file=self.out)

    def say(self, text: str) -> None:
        """One derivation step (indented)."""
        self._print(f"  {text}")

    def check(self, label: str, ok: bool, detail: str = "") -> bool:
        """Print ``label: detail  [ok|FAILS]`` and record a failure."""
        mark = "ok" if ok else "FAILS"
        self._print(f"  {label}: {detail}  [{mark}]" if detail else f"  {label}  [{mark}]")
        if not ok:
            self.failed.append(label)
        return ok

    def finish(self) -> bool:
        if self.failed:
            self._print(f"  verdict: FAILED ({len(self.failed)} check"
                        f"{'s' if len(self.failed) != 1 else ''} failed: "
                        f"{'; '.join(self.failed)})")
            return False
        self._print("  verdict: PROVED")
        return True


def main(run: Callable[..., bool]) -> int:
    """Exit status of a proof run as a script: 0 proved, 1 failed."""
    return 0 if run() else 1


# exact numbers ------------------------------------------------------------
def rational(q) -> sympy.Expr:
    """A ``Fraction`` (or int) as a sympy ``Rational``; sympy values pass through."""
    if isinstance(q, Fraction):
        return sympy.Rational(q.numerator, q.denominator)
    if isinstance(q, int):
        return sympy.Integer(q)
    return q


def symbols_matrix(prefix: str, rows: int, cols: int, **assumptions) -> list[list[sympy.Symbol]]:
    """``rows x cols`` real symbols named ``{prefix}{i}{j}`` (1-based)."""
    assumptions.setdefault("real", True)
    return [[sympy.Symbol(f"{prefix}{i + 1}{j + 1}", **assumptions) for j in range(cols)]
            for i in range(rows)]


# exactattn's own code under test ---------------------------------------------
def exact_softmax(scores: Sequence[Sequence]) -> list[list]:
    """Row-wise softmax of a matrix of (symbolic) scores, through exactattn's symbolic engine.

    For a row ``(r_1, ..., r_m)`` the head has d_model = 2, d_k = d_v = 1, no
    divisor, tokens ``x_j = (1, r_j)``, ``W_Q = (1, 0)`` and ``W_K = (0, 1)``:
    every query is 1 and key j is ``r_j``, so every raw score row is exactly
    ``(r_1, ..., r_m)`` and the engine's shares of the first query are the
    softmax of the row.
    """
    out = []
    for row in scores:
        head = Head([[1, 0]], [[0, 1]], [[1, 0]], divisor=None)
        trace = attend(head, [[1, r] for r in row], engine="symbolic")
        out.append(list(trace.shares[0]))
    return out


def exact_attention(W_Q, W_K, W_V, x, *, causal: bool = False):
    """exactattn's symbolic engine on a head (slots layout, divisor sqrt(d_k)): the Trace."""
    head = Head(W_Q, W_K, W_V, causal=causal, symbolic=True)
    return attend(head, x, engine="symbolic")


# limits in the divisor ------------------------------------------------------------
def gap_limit(share, tau: sympy.Symbol, toward, t: sympy.Symbol, gaps: Sequence[sympy.Symbol]):
    """The limit of a share of the row ``(t - g_1, ..., t - g_n) / tau`` as tau -> ``toward``.

    ``toward`` is ``0`` (from above) or ``sympy.oo``.  Every power in the share
    is ``exp((c t - sum_j c_j g_j) / tau)``; it is rewritten as
    ``E**c * prod_j u_j**c_j`` with ``E = exp(t/tau)`` and ``u_j = exp(-g_j/tau)``,
    the share is cancelled (a softmax is homogeneous in E, so E drops out),
    each ``u_j`` is replaced by its own limit (computed by ``sympy.limit``:
    0 as tau -> 0+ for g_j > 0, 1 as tau -> oo), which is allowed because the
    denominator is nonzero there (the share is continuous at that point).
    Anything else falls back to ``sympy.limit`` on the whole share.

    Returns ``(limit, rational function of E and u)``.
    """
    E = sympy.Symbol("E", positive=True)
    us = [sympy.Symbol(f"u{j + 1}", positive=True) for j in range(len(gaps))]
    direction = "+" if toward == 0 else "-"
    mapping = {}
    for a in share.atoms(sympy.exp):
        lin = sympy.expand(a.args[0] * tau)
        linear = lin.is_polynomial(t, *gaps) and sympy.Poly(lin, t, *gaps).total_degree() <= 1
        if lin.has(tau) or not linear or lin.xreplace({v: 0 for v in (t, *gaps)}) != 0:
            return sympy.limit(share, tau, toward, direction), None
        mapping[a] = E ** lin.coeff(t) * sympy.Mul(*[u ** -lin.coeff(g) for g, u in zip(gaps, us)])
    R = sympy.cancel(share.xreplace(mapping))
    if R.has(tau) or R.has(E):
        return sympy.limit(share, tau, toward, direction), None
    at = {u: sympy.limit(sympy.exp(-g / tau), tau, toward, direction) for g, u in zip(gaps, us)}
    num, den = sympy.fraction(R)
    den_at = den.xreplace(at)
    if den_at == 0 or not den_at.is_finite:
        return sympy.limit(share, tau, toward, direction), R
    return sympy.cancel(num.xreplace(at) / den_at), R


# deciding residuals ------------------------------------------------------------
def reduce(expr) -> sympy.Expr:
    """Split ``exp(a + b)`` into ``exp(a) exp(b)``, put over one denominator, cancel."""
    expr = sympy.sympify(expr)
    expr = sympy.expand(expr, power_exp=True, mul=False, multinomial=False,
                        power_base=False, log=False, basic=False)
    return sympy.cancel(sympy.together(expr))


def sample_point(expr) -> dict:
    """A deterministic rational point for the free symbols of ``expr`` (respecting signs).

    The k-th symbol in name order gets ``(2k + 3)/(k + 4)``, negated for odd k
    unless the symbol is assumed nonnegative.
    """
    point = {}
    for k, s in enumerate(sorted(expr.free_symbols, key=lambda s: s.name)):
        v = sympy.Rational(2 * k + 3, k + 4)
        point[s] = -v if k % 2 and not s.is_nonnegative else v
    return point


def to_arb(expr):
    """A sympy constant expression as a python-flint ``arb`` ball (at the current precision).

    :func:`exactattn.numbers.reals.sympy_ball` (rationals, pi, E, +, *, powers, exp,
    log, sin, cos, tanh, atan, erf, gamma); anything else raises ``TypeError``.
    """
    try:
        return sympy_ball(expr)
    except InputError:
        raise TypeError(f"to_arb cannot evaluate {expr}") from None


def certified(expr, places: int = 4) -> str:
    """The correctly rounded decimal of a constant sympy expression."""
    expr = sympy.sympify(expr)
    if expr.is_Rational:
        from exactattn.numbers.digits import round_fraction
        return round_fraction(Fraction(int(expr.p), int(expr.q)), places)
    return certify(lambda prec: to_arb(expr), places)


def show(expr, places: int = 4) -> str:
    """``expr = <certified decimal>``, or just ``expr`` when it is not a finite constant."""
    expr = sympy.sympify(expr)
    if expr.free_symbols or expr.is_Rational or not expr.is_finite:
        return str(expr)
    try:
        return f"{expr} = {certified(expr, places)}"
    except TypeError:
        return str(expr)


def certified_sign(expr, max_prec: int = 4096) -> int | None:
    """+1, -1 or 0 for a constant expression, decided in ball arithmetic; None if undecided."""
    expr = sympy.sympify(expr)
    if expr.is_Rational:
        return int(sympy.sign(expr))
    def step(prec: int):
        ball = to_arb(expr)
        return 1 if ball > 0 else -1 if ball < 0 else None
    return tighten(step, 64, max_prec=max_prec)


def decide_zero(expr, *, max_prec: int = 256) -> tuple[bool, str]:
    """Whether ``expr`` vanishes identically, with a short reason.

    First ``expr`` is evaluated at :func:`sample_point` in ball arithmetic: a
    certified nonzero value there is a counterexample (printed to 4 certified
    places) and settles it without any symbolic work.  Otherwise :func:`reduce`
    must give exactly 0 for the residual to count as vanishing.
    """
    expr = sympy.sympify(expr)
    value = expr.xreplace(sample_point(expr))
    if certified_sign(value, max_prec):
        return False, f"residual {certified(value)} at a rational point (certified nonzero)"
    if reduce(expr) == 0:
        return True, "residual 0"
    return False, "residual not shown to vanish"
