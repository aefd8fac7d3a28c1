"""The formula derived from the loops: each stage's loop nest by its bounds, summed by sympy.

:func:`loop_nests` describes the pencil engine's ``for`` loops by their bounds
(an inner bound may depend on an outer index: the causal mask); :func:`derive`
lets sympy sum them, giving ``3 n D d_k`` (projections, at d_v = d_k),
``n^2 d_k`` (scores), ``n^2 d_v`` (mixing) and, with heads, ``n h d_v D``
(the output projection W_O, stage ``out_projection``).  Deterministic: the
expressions are cached by their :class:`~exactattn.cost.sizes.Setup`.

Symbols: ``n`` tokens (queries), ``D`` = d_model, ``d_k``, ``d_v``; for the
extensions ``m`` keys, ``t`` the position of a decoded token, ``h`` heads,
``L`` layers.  All are positive integers.

>>> derive()["total"]
2*D*d_k*n + D*d_v*n + d_k*n**2 + d_v*n**2
>>> derive_at(32, 4, 4)
{'projections': 1536, 'scores': 4096, 'mix': 4096, 'total': 9728}
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import sympy

from ..errors import InputError
from .sizes import Setup, size

__all__ = ["EXTENSION_SYMBOLS", "LoopNest", "STAGES", "SYMBOLS", "branch", "derive",
           "derive_at", "derive_operations", "derive_setup", "loop_nests", "split",
           "symbol_values"]

#: the stages, in order; ``out_projection`` (W_O) only with heads
STAGES = ("projections", "scores", "mix", "out_projection")


class Symbols(NamedTuple):
    n: sympy.Symbol
    D: sympy.Symbol
    d_k: sympy.Symbol
    d_v: sympy.Symbol


class ExtensionSymbols(NamedTuple):
    m: sympy.Symbol
    t: sympy.Symbol
    h: sympy.Symbol
    L: sympy.Symbol


def _positive(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, positive=True, integer=True)


#: n (tokens), D (= d_model), d_k, d_v: positive integer sympy Symbols
SYMBOLS = Symbols(*(_positive(s) for s in ("n", "D", "d_k", "d_v")))
#: m (key length), t (position of a decoded token), h (heads), L (layers)
EXTENSION_SYMBOLS = ExtensionSymbols(*(_positive(s) for s in ("m", "t", "h", "L")))

# loop indices of the nests (0-based, like the engine's range() loops)
_i, _j, _s, _c, _a, _l = (sympy.Symbol(s, integer=True, nonnegative=True)
                          for s in ("i", "j", "s", "c", "a", "l"))


@dataclass(frozen=True)
class LoopNest:
    """One loop nest of the engine, described by its bounds.

    ``loops`` lists ``(index, lower, upper)`` from the outermost loop inwards,
    bounds inclusive (``range(n)`` is ``(i, 0, n - 1)``); an inner bound may
    depend on an outer index (the causal mask: ``j`` from 0 to ``i``).  The
    innermost loop body is one multiply-add.

    >>> i, j, c = (sympy.Symbol(s, integer=True, nonnegative=True) for s in "ijc")
    >>> n, D, d_k, d_v = SYMBOLS
    >>> nest = LoopNest("scores", "scores", ((i, 0, n - 1), (j, 0, i), (c, 0, d_k - 1)))
    >>> nest.macs()
    d_k*n**2/2 + d_k*n/2
    >>> nest.additions()
    d_k*n**2/2 + d_k*n/2 - n**2/2 - n/2
    """

    name: str
    stage: str
    loops: tuple
    code: str = ""

    def macs(self):
        """sum over every loop of 1: the multiply-adds of the nest (expanded)."""
        return sympy.expand(sympy.summation(sympy.Integer(1), *reversed(self.loops)))

    def additions(self):
        """Exact additions: k - 1 per run of the innermost (length-k) sum."""
        idx, lo, hi = self.loops[-1]
        inner = hi - lo + 1
        if len(self.loops) == 1:
            return sympy.expand(inner - 1)
        return sympy.expand(sympy.summation(inner - 1, *reversed(self.loops[:-1])))

    def __str__(self) -> str:
        return " ".join(f"for {i} in {sympy.sstr(lo)}..{sympy.sstr(hi)}:"
                        for i, lo, hi in self.loops) + " 1 MAC"


def _regimes(setup: Setup) -> tuple[str, ...]:
    """Which key-length regimes a causal nest needs: keys >= queries, keys < queries."""
    if not setup.causal or setup.keys is None or setup.decode:
        return ("ge",)
    diff = sympy.simplify(setup.keys - SYMBOLS.n)
    if diff.is_nonnegative:
        return ("ge",)
    if diff.is_negative:
        return ("lt",)
    return ("ge", "lt")


def _score_pieces(setup: Setup, regime: str, M) -> list[tuple]:
    """``(first query, last query, last visible key)`` ranges of the score and mix nests.

    The symbolic form of :meth:`Policy.visible_keys <exactattn.call.policy.Policy.visible_keys>`
    (which runs on ints): query i sees keys 0 .. i + shift, shift 0 (top_left)
    or m - n (bottom_right), clipped to 0 .. m - 1; tests compare the two at
    every small size.
    """
    n = SYMBOLS.n
    if not setup.causal:
        return [(0, n - 1, M - 1)]
    shift = setup.policy.causal_shift(n, M)
    if regime == "ge":
        return [(0, n - 1, _i + shift)]
    # fewer keys than queries (shift <= 0): the queries before -shift see no key, those
    # past m - 1 - shift see all m keys; a range that is empty for every size is dropped
    pieces = [(-shift, M - 1 - shift, _i + shift), (M - shift, n - 1, M - 1)]
    return [p for p in pieces if not sympy.simplify(p[0] - p[1]).is_positive]


def _nests(setup: Setup, regime: str) -> dict[str, tuple[LoopNest, ...]]:
    n, D, d_k, d_v = SYMBOLS
    t = EXTENSION_SYMBOLS.t
    M = n if setup.keys is None else setup.keys
    H = 1 if setup.heads is None else setup.heads
    outer: list = []
    if setup.layers != 1:
        outer.append((_l, 0, setup.layers - 1))
    per_head = outer + ([(_a, 0, H - 1)] if setup.heads is not None else [])

    def nest(name, stage, loops, code):
        return LoopNest(name, stage, tuple(per_head if stage != "out_projection" else outer)
                        + tuple(loops), code)

    if setup.decode:
        proj = (nest("queries", "projections", [(_s, 0, d_k - 1), (_c, 0, D - 1)],
                     "q_t = W_Q x_t (the new token only)"),
                nest("keys", "projections", [(_s, 0, d_k - 1), (_c, 0, D - 1)],
                     "k_t = W_K x_t, appended to the cache"),
                nest("values", "projections", [(_s, 0, d_v - 1), (_c, 0, D - 1)],
                     "v_t = W_V x_t, appended to the cache"))
        scores = (nest("scores", "scores", [(_j, 0, t - 1), (_c, 0, d_k - 1)],
                       "q_t . k_j for the t cached keys"),)
        mix = (nest("mix", "mix", [(_c, 0, d_v - 1), (_j, 0, t - 1)],
                    "sum_j shares[j] v_j[c] over the t cached values"),)
        rows = []
    else:
        proj = (nest("queries", "projections",
                     [(_i, 0, n - 1), (_s, 0, d_k - 1), (_c, 0, D - 1)], "queries = x W_Q"),
                nest("keys", "projections",
                     [(_i, 0, M - 1), (_s, 0, d_k - 1), (_c, 0, D - 1)], "keys = x W_K"),
                nest("values", "projections",
                     [(_i, 0, M - 1), (_s, 0, d_v - 1), (_c, 0, D - 1)], "values = x W_V"))
        pieces = _score_pieces(setup, regime, M)
        scores = tuple(nest("scores", "scores", [(_i, lo, hi), (_j, 0, jh), (_c, 0, d_k - 1)],
                            "raw[i][j] = queries[i] . keys[j], visible j only")
                       for lo, hi, jh in pieces)
        mix = tuple(nest("mix", "mix", [(_i, lo, hi), (_c, 0, d_v - 1), (_j, 0, jh)],
                         "outputs[i][c] = sum_j shares[i][j] values[j][c], visible j only")
                    for lo, hi, jh in pieces)
        rows = [(_i, 0, n - 1)]
    out: dict[str, tuple[LoopNest, ...]] = {"projections": proj, "scores": scores, "mix": mix}
    if setup.heads is not None:
        out["out_projection"] = (nest("out_projection", "out_projection",
                                      rows + [(_s, 0, D - 1), (_c, 0, H * d_v - 1)],
                                      "concat(heads) W_O: h d_v numbers into D"),)
    return out


def loop_nests(causal: bool = False, *, alignment: str = "top_left", keys=None, heads=None,
               layers=1, decode: bool = False,
               keys_at_least_queries: bool | None = None) -> dict[str, tuple[LoopNest, ...]]:
    """Each stage's loop nests, by their bounds, as the pencil engine runs them.

    Returns ``{stage: (LoopNest, ...)}`` for ``projections`` (queries, keys,
    values), ``scores``, ``mix`` and, with ``heads``, ``out_projection``
    (W_O).  A stage has several nests where the query range splits (a causal
    mask with fewer keys than queries).

    Args:
        causal: skip the masked pairs: query i sees key j <= i (top_left) or
            j <= i + m - n (bottom_right, the last query sees every key).
        keys: the key length m (int or sympy expression; default n).
        heads: h heads of (d_k, d_v) each plus the output projection W_O
            (h d_v -> D); None for one head without W_O.
        layers: L identical layers stacked.
        decode: the nests of generating token t with a KV cache (one new
            query, key and value; t cached keys).
        keys_at_least_queries: which regime to describe when a causal mask has
            a symbolic key length whose order against n is unknown.

    Raises:
        InputError: bad sizes or options, or an undecided regime.

    >>> [str(x) for x in loop_nests()["scores"]]
    ['for i in 0..n - 1: for j in 0..n - 1: for c in 0..d_k - 1: 1 MAC']
    >>> [str(x) for x in loop_nests(causal=True)["mix"]]
    ['for i in 0..n - 1: for c in 0..d_v - 1: for j in 0..i: 1 MAC']
    """
    setup = Setup.make(causal, alignment, keys, heads, layers, decode)
    regimes = _regimes(setup)
    if len(regimes) == 2:
        if keys_at_least_queries is None:
            raise InputError(f"keys_at_least_queries must be True or False when the key "
                             f"length {setup.keys} may be above or below n (got None)")
        regimes = ("ge",) if keys_at_least_queries else ("lt",)
    return _nests(setup, regimes[0])


def _sum_stage(nests, what: str):
    return sympy.expand(sympy.Add(*[getattr(x, what)() for x in nests]))


@lru_cache(maxsize=None)
def _derive_cached(setup: Setup, what: str) -> tuple:
    regimes = _regimes(setup)
    per_regime = []
    for regime in regimes:
        stages = _nests(setup, regime)
        per_regime.append({k: _sum_stage(v, what) for k, v in stages.items()})
    keys = list(per_regime[0])
    if len(regimes) == 1:
        result = per_regime[0]
    else:
        cond = sympy.Ge(setup.keys, SYMBOLS.n)
        result = {k: (per_regime[0][k] if per_regime[0][k] == per_regime[1][k] else
                      sympy.Piecewise((per_regime[0][k], cond), (per_regime[1][k], True)))
                  for k in keys}
    total = sympy.Add(*result.values())
    result["total"] = sympy.expand(total) if not total.has(sympy.Piecewise) else \
        sympy.piecewise_fold(total)
    return tuple(result.items())


def derive_setup(setup: Setup, what: str = "macs") -> dict:
    """:func:`derive` for a checked :class:`Setup` (``what``: ``macs`` or ``additions``)."""
    return dict(_derive_cached(setup, what))


def derive(causal: bool = False, *, d_v=None, alignment: str = "top_left", keys=None,
           heads=None, layers=1, decode: bool = False) -> dict:
    """MACs of each stage, summed by sympy from the loop nests (:func:`loop_nests`).

    Returns ``{'projections', 'scores', 'mix', ['out_projection',] 'total'}``
    as expanded polynomials in :data:`SYMBOLS` (and ``m``, ``t``, ``h``, ``L``
    when those extensions are used):  no mask gives ``n D (2 d_k + d_v)``,
    ``n^2 d_k``, ``n^2 d_v``; a causal mask ``n(n+1)/2`` pairs.  With
    ``decode=True`` the figures are those of generating token ``t`` with a KV
    cache; summed over t = 1..n they equal the causal prefill.  A causal mask
    with a key length m whose order against n is unknown gives a
    ``Piecewise`` (m >= n, m < n).  Deterministic (cached, same expressions).

    Args:
        d_v: substitute for the symbol d_v, e.g. ``SYMBOLS.d_k`` for the
            example's d_v = d_k, which gives ``3*D*d_k*n`` and ``2*d_k*n**2``.
        causal, alignment, keys, heads, layers, decode: as in :func:`loop_nests`.

    Units: MACs (FLOPs = 2 x MACs).

    Raises:
        InputError: bad sizes or options.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> n, D, d_k, d_v = SYMBOLS
    >>> derive(d_v=d_k)
    {'projections': 3*D*d_k*n, 'scores': d_k*n**2, 'mix': d_k*n**2, 'total': 3*D*d_k*n + 2*d_k*n**2}
    >>> derive(causal=True)["scores"]
    d_k*n**2/2 + d_k*n/2
    >>> derive(heads=EXTENSION_SYMBOLS.h, d_v=d_k)["out_projection"]
    D*d_k*h*n
    """
    setup = Setup.make(causal, alignment, keys, heads, layers, decode)
    result = derive_setup(setup)
    if d_v is not None:
        result = {k: sympy.expand(v.subs(SYMBOLS.d_v, d_v)) for k, v in result.items()}
    return result


def derive_operations(causal: bool = False, *, d_v=None, **setup) -> dict:
    """Exact multiplications and additions per stage, from the same loop nests.

    Returns ``{stage: (multiplications, additions)}``: a length-k sum takes k
    multiplications and k - 1 additions, so FLOPs = 2 x MACs counts one
    operation too many per dot product.

    >>> n, D, d_k, d_v = SYMBOLS
    >>> derive_operations()["scores"]
    (d_k*n**2, d_k*n**2 - n**2)
    """
    s = Setup.make(causal, **setup)
    mults, adds = derive_setup(s, "macs"), derive_setup(s, "additions")
    out = {k: (mults[k], adds[k]) for k in mults}
    if d_v is not None:
        out = {k: tuple(sympy.expand(e.subs(SYMBOLS.d_v, d_v)) for e in v)
               for k, v in out.items()}
    return out


def symbol_values(n: int, d_model: int, d_k: int, d_v: int, setup: Setup) -> dict:
    """The symbols at given sizes: ``{n: n, D: d_model, ..., m, L[, h]}``."""
    n_, D, dk, dv = SYMBOLS
    m, t, h, L = EXTENSION_SYMBOLS
    vals = {n_: n, D: d_model, dk: d_k, dv: d_v, L: setup.layers,
            m: n if setup.keys is None else setup.keys}
    if setup.heads is not None:
        vals[h] = setup.heads
    return vals


def branch(e, values: dict):
    """The ``Piecewise`` branch of ``e`` that holds at ``values`` (or ``e`` itself)."""
    if isinstance(e, sympy.Piecewise):
        for expr, cond in e.args:
            if cond == sympy.true or bool(cond.subs(values)):
                return expr
    return e


def split(exprs: dict) -> tuple:
    """``(pairs, linear)``: scores + mixing, and projections + W_O (expanded)."""
    pairs = exprs["scores"] + exprs["mix"]
    linear = exprs["projections"] + exprs.get("out_projection", 0)
    return sympy.expand(pairs), sympy.expand(linear)


def general_setup(setup: Setup) -> Setup:
    """``setup`` with its sizes made symbols (m, h, L), as the check and the solver read it."""
    return Setup(setup.policy, None if setup.keys is None else EXTENSION_SYMBOLS.m,
                 None if setup.heads is None else EXTENSION_SYMBOLS.h,
                 1 if setup.layers == 1 else EXTENSION_SYMBOLS.L, setup.decode)


def whole_generation(exprs: dict) -> dict:
    """Per-token figures of decoding summed over t = 1..n (the whole generation)."""
    t = EXTENSION_SYMBOLS.t
    return {k: sympy.summation(v, (t, 1, SYMBOLS.n)) for k, v in exprs.items()}


def _as_int(e) -> int:
    e = sympy.nsimplify(e)
    if not e.is_Integer:
        raise InputError(f"derived figure must be a whole number (got {e})")
    return int(e)


def derive_at(n, d_model, d_k, d_v=None, *, causal: bool = False,
              alignment: str = "top_left", keys=None, heads=None, layers=1,
              decode: bool = False) -> dict[str, int]:
    """The derived MACs (:func:`derive`) at given sizes, as ``int`` per stage.

    With ``decode=True``: the whole generation of n tokens, the per-token
    figures summed by sympy over t = 1..n.  ``d_v`` defaults to ``d_k``.

    >>> derive_at(32, 4, 4, causal=True)["scores"]
    2112
    """
    d_v = d_k if d_v is None else d_v
    sizes = [size(v, name) for v, name in
             ((n, "n"), (d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v"))]
    setup = Setup.make(causal, alignment, keys, heads, layers, decode, symbolic=False)
    exprs = derive_setup(general_setup(setup))
    if decode:
        exprs = whole_generation(exprs)
    vals = symbol_values(*sizes, setup)
    return {k: _as_int(v.subs(vals)) for k, v in exprs.items()}
