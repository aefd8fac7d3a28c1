"""Cost of attention: multiply-adds counted where they happen, the formula derived
from the loops, the crossover solved.

Three independent routes to one number, which must agree:

* **counted**: :func:`count` runs the head with the pencil engine's loops
  (:mod:`exactattn.head`), whose counters go up by one inside the innermost
  loop at every multiply-add that really runs;
* **derived**: :func:`derive` describes each stage's loop nest by its bounds
  (:func:`loop_nests`, mirroring the engine's ``for`` loops) and lets sympy sum
  them, giving ``3 n D d_k`` (projections, at d_v = d_k), ``n^2 d_k`` (scores),
  ``n^2 d_v`` (mixing);
* **solved**: :func:`crossover` solves where the pairs (scores + mixing) pass the
  projections: ``2 n^2 d_k > 3 n D d_k``, i.e. ``n > 3D/2`` (n = 7 at D = 4, and
  at n = 6 the two are equal, 288 and 288).

Conventions (stated, never implied)
-----------------------------------
* A multiply-add (MAC) is one multiplication plus one addition into a running
  sum.  Everything here is reported in MACs; FLOPs = 2 x MACs.
* A dot product of length k takes k multiplications but only k - 1 additions,
  so 2 x MACs exceeds the exact operation count by one per dot product.  We
  report MACs (k per dot product); :func:`derive_operations` gives the exact
  multiplications and additions from the same loop nests.
* A causal mask leaves exactly n(n+1)/2 query-key pairs (the diagonal is
  visible), not n^2/2: the engine skips masked pairs and counts the rest.
* The softmax's exponentials, additions and divisions are counted separately
  (``softmax_ops``), never folded into MACs.  The exact engine takes one
  exponential per distinct score gap in a row.

Symbols: ``n`` tokens (queries), ``D`` = d_model, ``d_k``, ``d_v``; for the
extensions ``m`` keys, ``t`` the position of a decoded token, ``h`` heads,
``L`` layers.  All are positive integers.

Reference: Vaswani et al. 2017, sec. 3.2.1 and Table 1 (self-attention is
O(n^2 d) per layer); the worked example (SPEC sections 2-4).

>>> derive()["total"]
2*D*d_k*n + D*d_v*n + d_k*n**2 + d_v*n**2
>>> n, D, d_k, d_v = SYMBOLS
>>> derive(d_v=d_k)["projections"], derive(d_v=d_k)["scores"]
(3*D*d_k*n, d_k*n**2)
>>> count(4, 4, 4, 4)
{'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
>>> crossover(4).first, crossover(4).equal_at
(7, 6)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

import sympy

from .digits import certify, round_fraction
from .errors import InputError
from .head import (Head, _ints, _mix_ints, _project_ints, _score_ints, _softmax_rows,
                   _visible)
from .softmax import ExpRatio

__all__ = [
    "ALIGNMENTS",
    "CONVENTIONS",
    "CONVENTION_NOTES",
    "Convention",
    "Crossover",
    "DoublingRatio",
    "EXTENSION_SYMBOLS",
    "LoopNest",
    "Run",
    "STAGES",
    "SYMBOLS",
    "conventions_sections",
    "cost_sections",
    "count",
    "count_head",
    "count_tokens",
    "crossover",
    "decode_steps",
    "derive",
    "derive_at",
    "derive_operations",
    "doubling_ratio",
    "loop_nests",
    "run",
]

ALIGNMENTS = ("top-left", "bottom-right")
STAGES = ("projections", "scores", "mix", "output")


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
_ORDER = {s: k for k, s in enumerate(
    (SYMBOLS.n, EXTENSION_SYMBOLS.m, EXTENSION_SYMBOLS.t, EXTENSION_SYMBOLS.h,
     EXTENSION_SYMBOLS.L, SYMBOLS.D, SYMBOLS.d_k, SYMBOLS.d_v))}


# ---------------------------------------------------------------------------
# argument checks


def _size(value: Any, name: str) -> int:
    """A positive whole number (bool, float and text refused)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise InputError(f"{name} must be a positive whole number (got {value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise InputError(f"{name} must be a positive whole number (got {value!r})") from None
    if v < 1:
        raise InputError(f"{name} must be a positive whole number (got {value!r})")
    return v


def _expr_or_size(value: Any, name: str):
    """A positive whole number or a sympy expression (for the symbolic routes)."""
    if isinstance(value, sympy.Basic) and not value.is_Integer:
        if value.is_positive is False:
            raise InputError(f"{name} must be positive (got {value})")
        return value
    return sympy.Integer(_size(value, name))


@dataclass(frozen=True)
class _Setup:
    causal: bool = False
    alignment: str = "top-left"
    keys: Any = None
    heads: Any = None
    layers: Any = 1
    decode: bool = False

    @classmethod
    def make(cls, causal=False, alignment="top-left", keys=None, heads=None, layers=1,
             decode=False, symbolic=True) -> "_Setup":
        if not isinstance(causal, bool):
            raise InputError(f"causal must be True or False (got {causal!r})")
        if not isinstance(decode, bool):
            raise InputError(f"decode must be True or False (got {decode!r})")
        if alignment not in ALIGNMENTS:
            raise InputError(
                f"alignment must be 'top-left' or 'bottom-right' (got {alignment!r})")
        conv = _expr_or_size if symbolic else _size
        if keys is not None:
            keys = conv(keys, "keys")
            if decode:
                raise InputError("keys must be left unset with decode (got "
                                 f"{keys}); decoding sets its own key length t")
        if heads is not None:
            heads = conv(heads, "heads")
        layers = conv(layers, "layers")
        return cls(causal, alignment, keys, heads, layers, decode)


# ---------------------------------------------------------------------------
# loop nests and the symbolic derivation


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


def _regimes(setup: _Setup) -> tuple[str, ...]:
    """Which key-length regimes a causal nest needs: keys >= queries, keys < queries."""
    if not setup.causal or setup.keys is None or setup.decode:
        return ("ge",)
    diff = sympy.simplify(setup.keys - SYMBOLS.n)
    if diff.is_nonnegative:
        return ("ge",)
    if diff.is_negative:
        return ("lt",)
    return ("ge", "lt")


def _nests(setup: _Setup, regime: str) -> dict[str, tuple[LoopNest, ...]]:
    n, D, d_k, d_v = SYMBOLS
    t = EXTENSION_SYMBOLS.t
    M = n if setup.keys is None else setup.keys
    H = 1 if setup.heads is None else setup.heads
    outer: list = []
    if setup.layers != 1:
        outer.append((_l, 0, setup.layers - 1))
    per_head = outer + ([(_a, 0, H - 1)] if setup.heads is not None else [])

    def nest(name, stage, loops, code):
        return LoopNest(name, stage, tuple(per_head if stage != "output" else outer) +
                        tuple(loops), code)

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
        rows = [[]]
    else:
        proj = (nest("queries", "projections",
                     [(_i, 0, n - 1), (_s, 0, d_k - 1), (_c, 0, D - 1)], "queries = x W_Q"),
                nest("keys", "projections",
                     [(_i, 0, M - 1), (_s, 0, d_k - 1), (_c, 0, D - 1)], "keys = x W_K"),
                nest("values", "projections",
                     [(_i, 0, M - 1), (_s, 0, d_v - 1), (_c, 0, D - 1)], "values = x W_V"))
        if not setup.causal:
            pieces = [(0, n - 1, M - 1)]
        elif setup.alignment == "top-left":
            pieces = [(0, n - 1, _i)] if regime == "ge" else \
                [(0, M - 1, _i), (M, n - 1, M - 1)]
        else:
            pieces = [(0, n - 1, _i + M - n)] if regime == "ge" else \
                [(n - M, n - 1, _i + M - n)]
        scores = tuple(nest("scores", "scores", [(_i, lo, hi), (_j, 0, jh), (_c, 0, d_k - 1)],
                            "raw[i][j] = queries[i] . keys[j], visible j only")
                       for lo, hi, jh in pieces)
        mix = tuple(nest("mix", "mix", [(_i, lo, hi), (_c, 0, d_v - 1), (_j, 0, jh)],
                         "outputs[i][c] = sum_j shares[i][j] values[j][c], visible j only")
                    for lo, hi, jh in pieces)
        rows = [[(_i, 0, n - 1)]]
    out: dict[str, tuple[LoopNest, ...]] = {"projections": proj, "scores": scores, "mix": mix}
    if setup.heads is not None:
        out["output"] = (nest("output", "output",
                              rows[0] + [(_s, 0, D - 1), (_c, 0, H * d_v - 1)],
                              "concat(heads) W_O: h d_v numbers into D"),)
    return out


def loop_nests(causal: bool = False, *, alignment: str = "top-left", keys=None, heads=None,
               layers=1, decode: bool = False,
               keys_at_least_queries: bool | None = None) -> dict[str, tuple[LoopNest, ...]]:
    """Each stage's loop nests, by their bounds, as the pencil engine runs them.

    Returns ``{stage: (LoopNest, ...)}`` for ``projections`` (queries, keys,
    values), ``scores``, ``mix`` and, with ``heads``, ``output`` (W_O).  A
    stage has several nests where the query range splits (a causal mask with
    fewer keys than queries).

    Args:
        causal: skip the masked pairs: query i sees key j <= i (top-left) or
            j <= i + m - n (bottom-right, the last query sees every key).
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
    setup = _Setup.make(causal, alignment, keys, heads, layers, decode)
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
def _derive_cached(setup: _Setup, what: str) -> tuple:
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


def derive(causal: bool = False, *, d_v=None, alignment: str = "top-left", keys=None,
           heads=None, layers=1, decode: bool = False) -> dict:
    """MACs of each stage, summed by sympy from the loop nests (:func:`loop_nests`).

    Returns ``{'projections', 'scores', 'mix', ['output',] 'total'}`` as
    expanded polynomials in :data:`SYMBOLS` (and ``m``, ``t``, ``h``, ``L``
    when those extensions are used):  no mask gives ``n D (2 d_k + d_v)``,
    ``n^2 d_k``, ``n^2 d_v``; a causal mask ``n(n+1)/2`` pairs.  With
    ``decode=True`` the figures are those of generating token ``t`` with a KV
    cache; summed over t = 1..n they equal the causal prefill.  A causal mask
    with a key length m whose order against n is unknown gives a
    ``Piecewise`` (m >= n, m < n).  Deterministic (cached, same expressions).

    Args:
        d_v: substitute for the symbol d_v, e.g. ``SYMBOLS.d_k`` for the
            seed's d_v = d_k, which gives ``3*D*d_k*n`` and ``2*d_k*n**2``.
        causal, alignment, keys, heads, layers, decode: as in :func:`loop_nests`.

    Units: MACs (FLOPs = 2 x MACs).

    Raises:
        InputError: bad sizes or options.

    Reference: Vaswani et al. 2017, sec. 3.2.1; SPEC section 4.

    >>> n, D, d_k, d_v = SYMBOLS
    >>> derive(d_v=d_k)
    {'projections': 3*D*d_k*n, 'scores': d_k*n**2, 'mix': d_k*n**2, 'total': 3*D*d_k*n + 2*d_k*n**2}
    >>> derive(causal=True)["scores"]
    d_k*n**2/2 + d_k*n/2
    >>> derive(heads=EXTENSION_SYMBOLS.h, d_v=d_k)["output"]
    D*d_k*h*n
    """
    setup = _Setup.make(causal, alignment, keys, heads, layers, decode)
    result = dict(_derive_cached(setup, "macs"))
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
    s = _Setup.make(causal, **setup)
    mults = dict(_derive_cached(s, "macs"))
    adds = dict(_derive_cached(s, "additions"))
    out = {k: (mults[k], adds[k]) for k in mults}
    if d_v is not None:
        out = {k: tuple(sympy.expand(e.subs(SYMBOLS.d_v, d_v)) for e in v)
               for k, v in out.items()}
    return out


def _values(n, d_model, d_k, d_v, setup: _Setup) -> dict:
    n_, D, dk, dv = SYMBOLS
    m, t, h, L = EXTENSION_SYMBOLS
    vals = {n_: n, D: d_model, dk: d_k, dv: d_v, L: setup.layers,
            m: n if setup.keys is None else setup.keys}
    if setup.heads is not None:
        vals[h] = setup.heads
    return vals


def _as_int(e) -> int:
    e = sympy.nsimplify(e)
    if not e.is_Integer:
        raise InputError(f"derived figure must be a whole number (got {e})")
    return int(e)


def derive_at(n, d_model, d_k, d_v=None, *, causal: bool = False,
              alignment: str = "top-left", keys=None, heads=None, layers=1,
              decode: bool = False) -> dict[str, int]:
    """The derived MACs (:func:`derive`) at given sizes, as ``int`` per stage.

    With ``decode=True``: the whole generation of n tokens, the per-token
    figures summed by sympy over t = 1..n.  ``d_v`` defaults to ``d_k``.

    >>> derive_at(32, 4, 4)
    {'projections': 1536, 'scores': 4096, 'mix': 4096, 'total': 9728}
    >>> derive_at(32, 4, 4, causal=True)["scores"]
    2112
    """
    d_v = d_k if d_v is None else d_v
    sizes = [_size(v, name) for v, name in
             ((n, "n"), (d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v"))]
    setup = _Setup.make(causal, alignment, keys, heads, layers, decode, symbolic=False)
    exprs = derive(causal, alignment=alignment, keys=None if keys is None else
                   EXTENSION_SYMBOLS.m, heads=None if heads is None else EXTENSION_SYMBOLS.h,
                   layers=EXTENSION_SYMBOLS.L if setup.layers != 1 else 1, decode=decode)
    if decode:
        t = EXTENSION_SYMBOLS.t
        exprs = {k: sympy.summation(v, (t, 1, SYMBOLS.n)) for k, v in exprs.items()}
    vals = _values(*sizes, setup)
    return {k: _as_int(v.subs(vals)) for k, v in exprs.items()}


# ---------------------------------------------------------------------------
# counting by running the head


def count_head(d_model: int, d_k: int, d_v: int, index: int = 0) -> Head:
    """The head that :func:`count` runs: the chronicle head at 4/4/4, else a fixed pattern.

    Head ``index`` > 0 (multi-head runs) uses a shifted pattern.  The weights
    are small exact rationals; the MAC counts do not depend on them.

    >>> count_head(4, 4, 4).W_Q[1]
    [Fraction(3, 1), Fraction(0, 1), Fraction(0, 1), Fraction(0, 1)]
    >>> count_head(2, 1, 1).W_Q
    [[Fraction(-1, 1), Fraction(3, 2)]]
    """
    d_model, d_k, d_v = (_size(v, k) for v, k in
                         ((d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    if (d_model, d_k, d_v, index) == (4, 4, 4, 0):
        from .examples import chronicle
        return chronicle().head

    def pattern(rows, cols, shift):
        return [[Fraction((s * 3 + m * 5 + shift) % 7 - 3, 2) for m in range(cols)]
                for s in range(rows)]
    return Head(pattern(d_k, d_model, 3 * index + 1), pattern(d_k, d_model, 3 * index + 2),
                pattern(d_v, d_model, 3 * index + 3), layout="slots")


def count_tokens(n: int, d_model: int) -> list[list[Fraction]]:
    """The n token rows :func:`count` runs: the chronicle's four repeated at width 4.

    >>> count_tokens(5, 4)[4] == count_tokens(5, 4)[0]
    True
    >>> count_tokens(2, 3)
    [[Fraction(-1, 1), Fraction(0, 1), Fraction(1, 1)], [Fraction(0, 1), Fraction(1, 1), Fraction(-1, 1)]]
    """
    n, d_model = _size(n, "n"), _size(d_model, "d_model")
    if d_model == 4:
        from .examples import chronicle
        x = chronicle().x
        return [list(x[i % 4]) for i in range(n)]
    return [[Fraction((i + m) % 3 - 1) for m in range(d_model)] for i in range(n)]


def _output_weights(d_model: int, width: int) -> list[list[Fraction]]:
    """W_O in the slots layout: D rows of h d_v numbers."""
    return [[Fraction((d + 2 * c) % 5 - 2, 2) for c in range(width)] for d in range(d_model)]


@dataclass
class _Layer:
    heads: list  # (WQ, WK, WV as (ints, den)), d_v, divisor_squared
    W_O: tuple | None  # (ints, den)


def _layer(d_model, d_k, d_v, heads, index_base) -> _Layer:
    count = 1 if heads is None else heads
    hs = []
    for a in range(count):
        head = count_head(d_model, d_k, d_v, index_base + a)
        hs.append(([_ints(w) for w in (head.W_Q, head.W_K, head.W_V)], head.d_v,
                   head.divisor_squared))
    W_O = None if heads is None else _ints(_output_weights(d_model, heads * d_v))
    return _Layer(hs, W_O)


def _zero_macs(with_output: bool) -> dict:
    return dict.fromkeys(STAGES if with_output else STAGES[:3], 0)


def _output_projection(W_O, head_outputs: list, macs: dict) -> list[list[tuple]]:
    """outputs[i][d] = sum_(a, c) W_O[d][a d_v + c] o_a[i][c]: one MAC per term.

    Each head's outputs share that head's softmax normaliser, so its terms
    combine exactly into one :class:`ExpRatio` per head; a value is the sum of
    the h ratios (a tuple).
    """
    w_ints, den = W_O
    count = 0
    result = []
    for i in range(len(head_outputs[0])):
        row = []
        for w in w_ints:
            col = 0
            terms = []
            for out in head_outputs:
                acc: dict = {}
                for e in out[i]:
                    wc = w[col]
                    col += 1
                    for g, coef in e.numerators.items():
                        acc[g] = acc.get(g, 0) + wc * coef
                    count += 1
                terms.append(ExpRatio({g: Fraction(v) / den for g, v in acc.items()},
                                      out[i][0].row))
            row.append(tuple(terms))
        result.append(row)
    macs["output"] += count
    return result


def _score_and_mix(q, k, v, visible, score_den: int, value_den: int, d2, d_v: int,
                   empty_row: str, macs: dict, ops: dict) -> list[list]:
    """Counted scores, exact softmax rows and counted mixing for one head (integer rows)."""
    raw, ms = _score_ints(q, k, visible)
    macs["scores"] += ms
    _, rows = _softmax_rows(raw, score_den, d2, empty_row)
    out, mm = _mix_ints(rows, raw, v, value_den, d_v)
    macs["mix"] += mm
    for r in rows:
        ops["exp"] += r.exps
        ops["add"] += r.adds
        ops["div"] += r.divs
    return out


def _attend_layer(layer: _Layer, xq, xkv, dx: int, visible, empty_row: str, macs: dict,
                  ops: dict) -> list[list[tuple]]:
    """One layer over integer rows (over ``dx``): counted projections, scores, mixing, W_O."""
    head_outputs = []
    for (wq, wk, wv), d_v, d2 in layer.heads:
        q, mq = _project_ints(wq[0], xq)
        k, mk = _project_ints(wk[0], xkv)
        v, mv = _project_ints(wv[0], xkv)
        macs["projections"] += mq + mk + mv
        head_outputs.append(_score_and_mix(q, k, v, visible, wq[1] * wk[1] * dx * dx,
                                           wv[1] * dx, d2, d_v, empty_row, macs, ops))
    if layer.W_O is None:
        return [[(e,) for e in row] for row in head_outputs[0]]
    return _output_projection(layer.W_O, head_outputs, macs)


def _decimal(terms: tuple, places: int) -> str:
    """A sum of exact ratios, correctly rounded to ``places`` places."""
    qs = [e.rational() for e in terms]
    if all(q is not None for q in qs):
        return round_fraction(sum(qs, Fraction(0)), places)

    def ball(prec):
        from flint import arb
        total = arb(0)
        for e in terms:
            total += e.ball(prec)
        return total
    return certify(ball, places)


_LAYER_PLACES = 4


def _next_layer_rows(outputs: list[list[tuple]]) -> list[list[int]]:
    """Layer outputs rounded to 4 certified places, as integers over 10**4."""
    scale = 10 ** _LAYER_PLACES
    return [[int(Fraction(_decimal(terms, _LAYER_PLACES)) * scale) for terms in row]
            for row in outputs]


@dataclass
class Run:
    """A counted run: ``macs`` per stage (with ``total``), ``softmax_ops``, the
    exact ``outputs`` of the last layer (each a tuple of :class:`ExpRatio` whose
    sum is the value: one per head with W_O), and per-token ``steps`` when decoding."""

    macs: dict
    softmax_ops: dict
    outputs: list
    steps: list = field(default_factory=list)

    def output_decimal(self, i: int, c: int, places: int = 4) -> str:
        """Output column c of token i, correctly rounded."""
        return _decimal(self.outputs[i][c], places)


def run(n, d_model, d_k, d_v=None, *, causal: bool = False, alignment: str = "top-left",
        keys=None, heads=None, layers=1, decode: bool = False, x=None) -> Run:
    """Run the head(s) with the pencil engine's counting loops; see :func:`count`.

    ``x`` (optional) replaces :func:`count_tokens`: at least max(n, keys) rows
    of d_model exact numbers.  Returns a :class:`Run`.

    >>> r = run(2, 4, 4, causal=True)
    >>> r.macs["scores"], r.output_decimal(0, 0)
    (12, '0.0000')
    """
    d_v = d_k if d_v is None else d_v
    n, d_model, d_k, d_v = (_size(v, k) for v, k in
                            ((n, "n"), (d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    setup = _Setup.make(causal, alignment, keys, heads, layers, decode, symbolic=False)
    if setup.layers > 1 and setup.heads is None and d_v != d_model:
        raise InputError(f"d_v must equal d_model = {d_model} to stack layers of one head "
                         f"without W_O (got {d_v}); pass heads=1 to add W_O")
    if setup.layers > 1 and setup.keys is not None:
        raise InputError(f"layers must be 1 when keys is set (got {setup.layers}); "
                         "stacked layers attend over their own tokens")
    m = n if setup.keys is None else setup.keys
    if x is None:
        tokens = count_tokens(max(n, m), d_model)
    else:
        from .exact import to_matrix
        tokens = to_matrix(x, name="x", shape=(None, d_model))
        if len(tokens) < max(n, m):
            raise InputError(f"x must have at least {max(n, m)} token rows (got {len(tokens)})")
    layers_ = [_layer(d_model, d_k, d_v, setup.heads, 7 * ell) for ell in range(setup.layers)]
    macs = _zero_macs(setup.heads is not None)
    ops = {"exp": 0, "add": 0, "div": 0}
    xi, dx = _ints(tokens)
    if decode:
        steps = []
        caches = [None] * len(layers_)
        last = []
        for t in range(n):
            step_macs = _zero_macs(setup.heads is not None)
            row, d = [xi[t]], dx
            for ell, layer in enumerate(layers_):
                row_out = _decode_step(layer, caches, ell, row, d, step_macs, ops)
                if ell + 1 < len(layers_):
                    row, d = _next_layer_rows(row_out), 10 ** _LAYER_PLACES
            last.append(row_out[0])
            step_macs["total"] = sum(step_macs.values())
            steps.append(step_macs)
            for k in macs:
                macs[k] += step_macs[k]
        macs["total"] = sum(macs.values())
        return Run(macs, ops, last, steps)
    if setup.keys is None:
        xq = xkv = xi[:n]
    elif alignment == "top-left":
        xq, xkv = xi[:n], xi[:m]
    else:
        xq, xkv = xi[max(m - n, 0):max(m - n, 0) + n], xi[:m]
        if len(xq) < n:  # fewer keys than queries: the first queries come before the keys
            xq = xi[:n]
    visible = _visible(causal, n, m, alignment)
    outputs, d = None, dx
    for ell, layer in enumerate(layers_):
        outputs = _attend_layer(layer, xq, xkv, d, visible, "zero", macs, ops)
        if ell + 1 < len(layers_):
            xq = xkv = _next_layer_rows(outputs)
            d = 10 ** _LAYER_PLACES
    macs["total"] = sum(macs.values())
    return Run(macs, ops, outputs)


def _decode_step(layer: _Layer, caches: list, ell: int, row: list[list[int]], dx: int,
                 macs: dict, ops: dict) -> list[list[tuple]]:
    """Generate one token at layer ``ell``: project it, append to the KV cache, attend."""
    if caches[ell] is None:
        caches[ell] = [([], []) for _ in layer.heads]
    head_outputs = []
    for (wq, wk, wv), cache, (d_v, d2) in zip(
            (h[0] for h in layer.heads), caches[ell], ((h[1], h[2]) for h in layer.heads)):
        q, mq = _project_ints(wq[0], row)
        k, mk = _project_ints(wk[0], row)
        v, mv = _project_ints(wv[0], row)
        macs["projections"] += mq + mk + mv
        cache[0].extend(k)
        cache[1].extend(v)
        t = len(cache[0])
        head_outputs.append(_score_and_mix(q, cache[0], cache[1], lambda i: range(t),
                                           wq[1] * wk[1] * dx * dx, wv[1] * dx, d2, d_v,
                                           "zero", macs, ops))
    if layer.W_O is None:
        return [[(e,) for e in head_outputs[0][0]]]
    return _output_projection(layer.W_O, head_outputs, macs)


def count(n, d_model, d_k, d_v=None, *, causal: bool = False, alignment: str = "top-left",
          keys=None, heads=None, layers=1, decode: bool = False) -> dict[str, int]:
    """MACs counted by running the head: ``{'projections', 'scores', 'mix', ['output',] 'total'}``.

    Runs :func:`count_head` on :func:`count_tokens` through the pencil
    engine's loops (:mod:`exactattn.head`), which add one at every
    multiply-add that runs; nothing is computed from a formula.  ``d_v``
    defaults to ``d_k``.

    Shapes: n tokens of d_model numbers; each head d_model -> d_k, d_k, d_v.

    Args:
        causal: skip masked pairs (n(n+1)/2 of them remain when keys = n).
        alignment: ``top-left`` (query i sees keys j <= i) or ``bottom-right``
            (j <= i + m - n) when the key length differs.
        keys: key length m (default n); queries are the first n tokens
            (top-left) or the last n of the m (bottom-right).
        heads: h heads plus W_O (h d_v -> d_model); None: one head, no W_O.
        layers: L layers; layer l+1 reads layer l's outputs rounded to 4
            certified places (exp ratios are transcendental, so exact values
            cannot be carried further at pencil speed; the counts do not
            depend on the values).
        decode: generate the n tokens one at a time with a KV cache; the
            totals of the whole generation (per token: :func:`decode_steps`).

    Units: MACs (FLOPs = 2 x MACs).

    Raises:
        InputError: a size that is not a positive whole number, a bad option.

    Reference: SPEC section 2 ("projections 192, scores 64, mixing 64, total 320").

    >>> count(4, 4, 4)
    {'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
    >>> count(4, 4, 4, causal=True)["scores"]
    40
    >>> count(0, 4, 4)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: n must be a positive whole number (got 0)
    """
    return run(n, d_model, d_k, d_v, causal=causal, alignment=alignment, keys=keys,
               heads=heads, layers=layers, decode=decode).macs


def decode_steps(n, d_model, d_k, d_v=None, *, heads=None, layers=1) -> list[dict[str, int]]:
    """Counted MACs of generating each token t = 1..n with a KV cache.

    >>> [s["total"] for s in decode_steps(3, 4, 4)]
    [56, 64, 72]
    """
    return run(n, d_model, d_k, d_v, heads=heads, layers=layers, decode=True).steps


# ---------------------------------------------------------------------------
# crossover and doubling ratio


@dataclass(frozen=True)
class Crossover:
    """Where the pairs (scores + mixing) pass the linear stages (projections, W_O).

    ``condition`` is the solved inequality (e.g. ``n > 3*D/2``), ``threshold``
    its right side at the given sizes, ``first`` the first whole n (or t when
    decoding) with more pair MACs than linear ones, ``equal_at`` the n where
    the two are equal (None if no whole n), ``pairs``/``linear`` the two
    expressions in the variable.
    """

    variable: sympy.Symbol
    condition: Any
    threshold: Any
    first: Any
    equal_at: int | None
    pairs: Any
    linear: Any
    linear_name: str = "the projections"

    def at(self, value: int) -> tuple[int, int]:
        """(pair MACs, linear MACs) at ``value`` of the variable."""
        return (int(self.pairs.subs(self.variable, value)),
                int(self.linear.subs(self.variable, value)))

    def __str__(self) -> str:
        v = self.variable
        text = (f"the pairs pass {self.linear_name} from {v} = {self.first} "
                f"({sympy.sstr(self.condition)}")
        text += ")" if self.threshold == self.condition.rhs else f" = {self.threshold})"
        if self.equal_at is not None:
            a, b = self.at(self.equal_at)
            text += f"; at {v} = {self.equal_at} the two are equal: {a} and {b}"
        return text


def _split(exprs: dict):
    pairs = exprs["scores"] + exprs["mix"]
    linear = exprs["projections"] + exprs.get("output", 0)
    return sympy.expand(pairs), sympy.expand(linear)


def crossover(D=None, d_k=None, *, d_v=None, causal: bool = False,
              alignment: str = "top-left", heads=None, layers=1,
              decode: bool = False) -> Crossover:
    """Solve symbolically where pair MACs pass the projections: the first n with pairs > linear.

    No mask, one head, d_v = d_k: ``2 n^2 d_k > 3 n D d_k``, i.e. ``n > 3D/2``:
    n = 7 at D = 4 (n = 6 gives 288 and 288), n = 6145 at D = 4096.  A causal
    mask: ``n(n+1) d_k > 3 n D d_k``, i.e. ``n > 3D - 1``.  Heads with W_O:
    ``n > 2D`` (when d_v = d_k).  Decoding: the first token t whose own pairs
    pass its own projections.  Layers cancel.

    Args:
        D: d_model (int or sympy expression; default the symbol D).
        d_k: key width (default: equal to D when D is given, as in the example
            head; else the symbol d_k).  It cancels from the condition when
            d_v = d_k; it sets the figures at equality (288 and 288 at D = 4).
        d_v: value width (default equal to d_k).

    Raises:
        InputError: bad sizes; no crossover (pairs never pass).

    >>> str(crossover(4))
    'the pairs pass the projections from n = 7 (n > 3*D/2 = 6); at n = 6 the two are equal: 288 and 288'
    >>> crossover(4096).first
    6145
    >>> crossover(4, causal=True).first
    12
    >>> crossover().condition
    n > 3*D/2
    """
    n_, D_, dk_, dv_ = SYMBOLS
    setup = _Setup.make(causal, alignment, None, heads, layers, decode)
    var = EXTENSION_SYMBOLS.t if decode else n_
    if d_v is not None and d_k is not None and d_v == d_k:
        d_v = None  # keep the symbol d_k so the condition reads n > 3*D/2
    exprs = dict(_derive_cached(setup, "macs"))
    subs = {dv_: dk_ if d_v is None else _expr_or_size(d_v, "d_v")}
    exprs = {k: sympy.expand(v.subs(subs)) for k, v in exprs.items()}
    pairs, linear = _split(exprs)
    root = sympy.solve(sympy.cancel((pairs - linear) / var), var)
    if len(root) != 1:
        raise InputError(f"the pairs must pass the projections at one point (got {root})")
    general = sympy.factor(root[0])
    condition = sympy.StrictGreaterThan(var, general)
    vals = {}
    if D is not None:
        vals[D_] = _expr_or_size(D, "D")
        if d_k is None:
            d_k = vals[D_]
    if d_k is not None:
        vals[dk_] = _expr_or_size(d_k, "d_k")
    vals.update({s: v for s, v in ((EXTENSION_SYMBOLS.h, heads), (EXTENSION_SYMBOLS.L, layers))
                 if isinstance(v, int)})
    threshold = sympy.nsimplify(general.subs(vals))
    pairs, linear = pairs.subs(vals), linear.subs(vals)
    if threshold.is_number:
        first = int(sympy.floor(threshold)) + 1
        equal_at = int(threshold) if threshold.is_Integer and threshold > 0 else None
        if first >= 1:
            p, q = (pairs.subs(var, first), linear.subs(var, first))
            if not p > q:
                raise InputError(f"the pairs must pass the projections above {threshold} "
                                 f"(got {p} <= {q} at {var} = {first})")
    else:
        first, equal_at = sympy.floor(threshold) + 1, None
    return Crossover(var, condition, threshold, first, equal_at, pairs, linear,
                     "the projections" if heads is None else "the projections and W_O")


@dataclass(frozen=True)
class DoublingRatio:
    """cost(2n)/cost(n) as a closed form in n (and D, d_k, d_v), with its limit."""

    expr: Any
    limit: Any
    D: Any

    def at(self, n: int, D=None) -> Fraction:
        """The exact ratio at n tokens (and width D if the form still has the symbol)."""
        e = self.expr.subs(SYMBOLS.n, _size(n, "n"))
        if D is not None:
            e = e.subs(SYMBOLS.D, _size(D, "D"))
        e = sympy.nsimplify(e)
        if not e.is_Rational:
            raise InputError(f"D must be given to evaluate {self.expr} (got {e})")
        return Fraction(int(e.p), int(e.q))

    def n_for(self, ratio) -> Any:
        """The n where the ratio reaches ``ratio`` (sympy), e.g. 3.5 at n = 9D/2."""
        r = sympy.Rational(str(ratio))
        sol = sympy.solve(sympy.Eq(self.expr, r), SYMBOLS.n)
        return sol[0] if sol else None


def doubling_ratio(D=None, *, d_k=None, d_v=None, causal: bool = False, heads=None,
                   layers=1) -> DoublingRatio:
    """cost(2n) / cost(n) in closed form, and its limit as n grows (4: the n^2 term wins).

    At d_v = d_k the key width cancels: ``(8n + 6D)/(2n + 3D)``.  At D = 4 it
    is 2.80, 3.14, 3.45 from 4 to 8, 8 to 16, 16 to 32 tokens; a 4096-wide
    model going from 1000 to 2000 tokens costs 2.28 times as much, not "close
    to four times": the ratio is 3.5 only at n = 9D/2 (18432 tokens).

    >>> r = doubling_ratio()
    >>> r.expr, r.limit
    (2*(3*D + 4*n)/(3*D + 2*n), 4)
    >>> [round_fraction(r.at(k, 4), 2) for k in (4, 8, 16)]
    ['2.80', '3.14', '3.45']
    >>> round_fraction(r.at(1000, 4096), 2), r.n_for("3.5")
    ('2.28', 9*D/2)
    """
    n_, D_, dk_, dv_ = SYMBOLS
    setup = _Setup.make(causal, "top-left", None, heads, layers, False)
    if d_v is not None and d_k is not None and d_v == d_k:
        d_v = None
    total = dict(_derive_cached(setup, "macs"))["total"]
    total = total.subs(dv_, dk_ if d_v is None else _expr_or_size(d_v, "d_v"))
    subs = {}
    if d_k is not None:
        subs[dk_] = _expr_or_size(d_k, "d_k")
    if isinstance(heads, int):
        subs[EXTENSION_SYMBOLS.h] = heads
    if isinstance(layers, int):
        subs[EXTENSION_SYMBOLS.L] = layers
    total = total.subs(subs)
    if D is not None:
        total = total.subs(D_, _expr_or_size(D, "D"))
    expr = sympy.factor(sympy.cancel(total.subs(n_, 2 * n_) / total))
    return DoublingRatio(expr, sympy.limit(expr, n_, sympy.oo), D)


# ---------------------------------------------------------------------------
# conventions


@dataclass(frozen=True)
class Convention:
    """A way of counting attention's query-key pairs, and who uses it."""
    key: str
    name: str
    used_by: str
    pairs: Any  # sympy expression in n


_n = SYMBOLS.n
CONVENTIONS = (
    Convention("full", "full n^2 rectangle",
               "PaLM (app. B), the Megatron paper (Narayanan et al. 2021), FlashAttention "
               "(non-causal), torch's registered SDPA FLOP formula", _n ** 2),
    Convention("half", "n^2/2 for causal",
               "Kaplan et al. 2020, FlashAttention (causal), Megatron-LM's code", _n ** 2 / 2),
    Convention("exact", "exact causal n(n+1)/2", "exactattn: counted, masked pairs skipped",
               _n * (_n + 1) / 2),
)

CONVENTION_NOTES = (
    "a multiply-add (MAC) is one multiplication plus one addition; FLOPs = 2 x MACs",
    "a length-k dot product takes k multiplications and k - 1 additions; exactattn reports "
    "MACs (k per dot product), so 2 x MACs counts one operation more per dot product "
    "than were done",
    "a causal mask leaves n(n+1)/2 query-key pairs (the diagonal is visible), "
    "not n^2/2: n/2 pairs more",
    "the softmax's exponentials, additions and divisions are counted separately, "
    "not in the MACs; the exact engine takes one exponential per distinct gap in a row",
)


# ---------------------------------------------------------------------------
# tables


def _factor_key(f):
    base = f.as_base_exp()[0]
    if base.is_Symbol:
        return (0, _ORDER.get(base, 99), str(base))
    return (1, 0, sympy.sstr(f))


def _term_key(t):
    syms = sorted((_ORDER.get(s, 99) for s in t.free_symbols)) or [100]
    return (syms, sympy.sstr(t))


def _spell(e, values: dict | None = None) -> str:
    """A polynomial written with ' x ' (symbols, or their values), e.g. '3 x n x D x d_k'.

    A sum starts with its first positive term and subtracts the negative ones:
    ``n x d_k x (2 x m - n + 1)``, never ``(-1 x n + 2 x m + 1)``.
    """
    if e.is_Add:
        terms = sorted(e.args, key=_term_key)
        first = next((k for k, t in enumerate(terms) if not t.could_extract_minus_sign()), 0)
        terms.insert(0, terms.pop(first))
        text = ""
        for k, t in enumerate(terms):
            negative = t.could_extract_minus_sign()
            body = _spell(-t if negative else t, values)
            text += ("-" if negative else "") + body if k == 0 else \
                (" - " if negative else " + ") + body
        return text
    coeff, factors = e.as_coeff_mul()
    coeff = sympy.Rational(coeff)
    if coeff < 0:
        return "-" + _spell(-e, values)
    parts = [] if coeff.p == 1 and factors else [str(coeff.p)]
    for f in sorted(factors, key=_factor_key):
        base, exp = f.as_base_exp()
        if base.is_Symbol:
            atom = str(values[base]) if values and base in values else str(base)
        else:
            atom = "(" + _spell(base, values) + ")"
        parts.extend([atom] * int(exp))
    text = " x ".join(parts)
    return text + (f" / {coeff.q}" if coeff.q != 1 else "")


def _branch(e, values: dict):
    """The Piecewise branch that holds at ``values`` (or ``e`` itself)."""
    if isinstance(e, sympy.Piecewise):
        for expr, cond in e.args:
            if cond == sympy.true or bool(cond.subs(values)):
                return expr
    return e


def _ratio_text(q: Fraction) -> str:
    return round_fraction(q, 2)


def _setup_text(d_model, d_k, d_v, setup: _Setup) -> str:
    parts = [f"D = d_model = {d_model}, d_k = {d_k}, d_v = {d_v}"]
    parts.append("one head, no W_O" if setup.heads is None else
                 f"{setup.heads} heads with W_O ({setup.heads} x {d_v} -> {d_model})")
    if setup.layers != 1:
        parts.append(f"{setup.layers} layers")
    if setup.keys is not None:
        parts.append(f"{setup.keys} keys")
    if setup.decode:
        parts.append("decoding one token at a time with a KV cache (causal by construction: "
                     "token t attends to the t tokens so far"
                     + ("; that is the causal mask asked for" if setup.causal else "") + ")")
    elif setup.causal:
        parts.append(f"causal mask ({setup.alignment})")
    else:
        parts.append("no mask")
    return "; ".join(parts)


def cost_sections(rows=(4, 8, 16, 32), d_model=4, d_k=4, d_v=None, *, causal: bool = False,
                  alignment: str = "top-left", keys=None, heads=None, layers=1,
                  decode: bool = False, count_limit: int = 10_000_000) -> list:
    """The ``cost`` table: the same head at several row lengths, counted (or derived).

    Columns: tokens; projection MACs; (W_O MACs); pair MACs; total; ratio to
    the row above; the pairs' share of the total; whether the row was counted
    by running the head or, when its derived total exceeds ``count_limit``,
    only derived.  Notes: the check at the last counted row, the crossover,
    the doubling ratio.

    >>> s = cost_sections()[0]
    >>> [r[:6] for r in s.rows]  # doctest: +NORMALIZE_WHITESPACE
    [['4', '192', '128', '320', '-', '40.0%'], ['8', '384', '512', '896', '2.80', '57.1%'],
     ['16', '768', '2048', '2816', '3.14', '72.7%'], ['32', '1536', '8192', '9728', '3.45', '84.2%']]
    """
    from .tables import Section
    if isinstance(rows, (str, bytes)) or not rows:
        raise InputError(f"rows must be a non-empty list of token counts (got {rows!r})")
    rows = [_size(r, "each row") for r in rows]
    d_v = d_k if d_v is None else d_v
    d_model, d_k, d_v = (_size(v, k) for v, k in
                         ((d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    limit = _size(count_limit, "count_limit")
    setup = _Setup.make(causal, alignment, keys, heads, layers, decode, symbolic=False)
    opts = dict(causal=causal, alignment=alignment, keys=keys, heads=heads, layers=layers,
                decode=decode)
    cols = ["tokens", "projection MACs"] + (["W_O MACs"] if heads is not None else []) + \
        ["pair MACs", "total", "ratio to row above", "pair share", "source"]
    out_rows, data_rows = [], []
    prev = None
    last_counted = None
    for n in rows:
        derived = derive_at(n, d_model, d_k, d_v, **opts)
        if derived["total"] <= limit:
            figures = count(n, d_model, d_k, d_v, **opts)
            source = "counted"
            last_counted = (n, figures, derived)
        else:
            figures = derived
            source = f"derived (not run: over {limit} MACs)"
        pairs = figures["scores"] + figures["mix"]
        total = figures["total"]
        ratio = "-" if prev is None else _ratio_text(Fraction(total, prev))
        share = round_fraction(Fraction(100 * pairs, total), 1) + "%"
        cells = [str(n), str(figures["projections"])]
        if heads is not None:
            cells.append(str(figures["output"]))
        out_rows.append(cells + [str(pairs), str(total), ratio, share, source])
        data_rows.append(dict(figures, tokens=n, pairs=pairs, source=source.split()[0],
                              derived=derived))
        prev = total
    notes = [_setup_text(d_model, d_k, d_v, setup) + "; multiply-adds (FLOPs = 2 x MACs); "
             f"rows of at most {limit} MACs (the count limit) are run and counted, larger "
             "ones only derived"]
    notes += _check_notes(last_counted, d_model, d_k, d_v, setup, opts)
    cross = None
    if setup.keys is None:
        cross = crossover(d_model, d_k, d_v=d_v, causal=causal, alignment=alignment,
                          heads=heads, layers=layers, decode=decode)
        notes.append("crossover: " + str(cross))
        if not decode:
            ratio = doubling_ratio(d_k=d_k, d_v=d_v, causal=causal, heads=heads,
                                   layers=layers)
            notes.append(
                f"doubling: cost(2n)/cost(n) = {sympy.sstr(ratio.expr)} -> {ratio.limit} "
                f"as n grows; from {rows[-1]} to {2 * rows[-1]} tokens at D = {d_model}: "
                f"{_ratio_text(ratio.at(rows[-1], d_model))}; from 1000 to 2000 tokens "
                f"at D = 4096: {_ratio_text(ratio.at(1000, 4096))}, not close to "
                f"{ratio.limit}")
    data = {"d_model": d_model, "d_k": d_k, "d_v": d_v, "causal": causal,
            "alignment": alignment, "keys": setup.keys, "heads": setup.heads,
            "layers": setup.layers, "decode": decode, "count_limit": limit,
            "rows": data_rows,
            "crossover": None if cross is None else
            {"first": cross.first, "equal_at": cross.equal_at,
             "condition": sympy.sstr(cross.condition)}}
    title = "Cost at several row lengths (multiply-adds counted in the loops)"
    if decode:
        title = "Cost of generating n tokens with a KV cache (summed per token)"
    return [Section("cost", title, cols, out_rows, notes, data)]


def _check_notes(last, d_model, d_k, d_v, setup: _Setup, opts) -> list[str]:
    if last is None:
        return ["check: no row was small enough to run (raise --count-limit); "
                "every figure above is derived, none counted"]
    n, counted, derived = last
    sym = derive(setup.causal, d_v=SYMBOLS.d_k if d_v == d_k else None,
                 alignment=setup.alignment,
                 keys=None if setup.keys is None else EXTENSION_SYMBOLS.m,
                 heads=None if setup.heads is None else EXTENSION_SYMBOLS.h,
                 layers=1 if setup.layers == 1 else EXTENSION_SYMBOLS.L, decode=setup.decode)
    if setup.decode:
        t = EXTENSION_SYMBOLS.t
        sym = {k: sympy.expand(sympy.summation(v, (t, 1, SYMBOLS.n))) for k, v in sym.items()}
    vals = _values(n, d_model, d_k, d_v, setup)
    sym = {k: _branch(v, vals) for k, v in sym.items()}
    pairs, linear = _split(sym)
    lines = [f"check at n = {n}:"]
    figs = []
    for e in (linear, pairs):
        f = sympy.factor(e)
        v = int(e.subs(vals))
        figs.append(v)
        lines.append(f"  {_spell(f)} = {_spell(f, vals)} = {v}")
    same = sum(figs) == counted["total"] == derived["total"]
    lines.append(f"  sum = {sum(figs)}")
    lines.append(f"  counted by the head = {counted['total']}")
    lines.append(f"  same: {'true' if same else 'false'}")
    if setup.decode:
        prefill = count(n, d_model, d_k, d_v, causal=True, heads=setup.heads,
                        layers=setup.layers)
        sym_step = derive(False, decode=True,
                          heads=None if setup.heads is None else EXTENSION_SYMBOLS.h,
                          layers=1 if setup.layers == 1 else EXTENSION_SYMBOLS.L)
        step_total = sympy.factor(sym_step["total"].subs(
            {SYMBOLS.D: d_model, SYMBOLS.d_k: d_k, SYMBOLS.d_v: d_v,
             EXTENSION_SYMBOLS.h: setup.heads or 1, EXTENSION_SYMBOLS.L: setup.layers}))
        lines.append(f"  token t costs {_spell(step_total)} MACs; summed over the "
                     f"generation = causal prefill count ({prefill['total']}): "
                     f"{'true' if prefill['total'] == counted['total'] else 'false'}")
    return lines


def conventions_sections(n=32, d_model=4, d_k=4, d_v=None, *, causal: bool = False,
                         heads=None, layers=1, count_limit: int = 10_000_000) -> list:
    """Conventions side by side for the same head at n tokens: pairs, MACs, FLOPs, operations.

    Two tables: ``cost/conventions`` (the query-key pairs and pair MACs each
    convention gives, against the exact causal count n(n+1)/2) and
    ``cost/operations`` (MACs, FLOPs = 2 x MACs, and the exact
    multiplications and additions, k - 1 per length-k sum).  The exact rows
    are counted by running the head when the derived total of the unmasked
    head is at most ``count_limit`` MACs; above it they are derived from the
    loop nests and marked ``derived`` (the softmax operations, which depend on
    the numbers, are then not given).

    Units: pairs, MACs, FLOPs.

    Raises:
        InputError: a size or ``count_limit`` that is not a positive whole number.

    Reference: Vaswani et al. 2017, sec. 3.2.1; SPEC section 4.

    >>> s = conventions_sections(32)
    >>> [r[2] for r in s[0].rows]
    ['1024', '528', '1024', '512', '528']
    >>> conventions_sections(32, count_limit=1000)[0].rows[1][:4]
    ['exact, causal (derived)', 'exactattn', '528', '4224']
    """
    from .tables import Section
    d_v = d_k if d_v is None else d_v
    n, d_model, d_k, d_v = (_size(v, k) for v, k in
                            ((n, "n"), (d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    limit = _size(count_limit, "count_limit")
    opts = dict(heads=heads, layers=layers)
    plain = derive_at(n, d_model, d_k, d_v, **opts)
    masked = derive_at(n, d_model, d_k, d_v, causal=True, **opts)
    counted_run = max(plain["total"], masked["total"]) <= limit
    softmax_ops = None
    if counted_run:
        runs = {c: run(n, d_model, d_k, d_v, causal=c, **opts) for c in (False, True)}
        plain, masked = runs[False].macs, runs[True].macs
        softmax_ops = runs[causal].softmax_ops
    how = "counted" if counted_run else "derived"
    per_pair = (d_k + d_v) * (1 if heads is None else heads) * layers
    exact_causal = Fraction(n * (n + 1), 2)
    rows, data = [], []

    def add(name, used_by, pairs, macs, versus):
        rows.append([name, used_by, _frac(pairs), _frac(macs), _frac(2 * macs), versus])
        data.append({"convention": name, "pairs": _frac(pairs), "pair_macs": _frac(macs),
                     "pair_flops": _frac(2 * macs)})

    add(f"exact, no mask ({how})", "exactattn", Fraction(n * n),
        Fraction(plain["scores"] + plain["mix"]), "exact for an unmasked head")
    add(f"exact, causal ({how})", "exactattn", exact_causal,
        Fraction(masked["scores"] + masked["mix"]), "exact for a causal head")
    for conv in CONVENTIONS:
        pairs = Fraction(str(conv.pairs.subs(SYMBOLS.n, n)))
        diff = pairs - exact_causal
        rel = _ratio_text(pairs / exact_causal)
        versus = ("same as the count" if diff == 0 else
                  f"{'+' if diff > 0 else ''}{_frac(diff)} pairs "
                  f"({'+' if diff > 0 else ''}{_frac(diff * per_pair)} MACs, x{rel}) "
                  "against the causal count")
        add(conv.name, conv.used_by, pairs, pairs * per_pair, versus)
    pairs_sec = Section(
        "cost/conventions", f"Attention pairs under each convention at n = {n}",
        ["convention", "used by", "pairs", "pair MACs", "pair FLOPs (2 x MACs)",
         "against the exact causal count"], rows,
        [f"D = d_model = {d_model}, d_k = {d_k}, d_v = {d_v}"
         f"{'' if heads is None else f', h = {heads} heads'}"
         f"{'' if layers == 1 else f', L = {layers} layers'}; pair MACs = pairs x "
         f"(d_k + d_v){'' if heads is None else ' x h'}{'' if layers == 1 else ' x L'}",
         f"exact rows {how} ("
         + (f"the head was run: at most {limit} MACs, the count limit)" if counted_run else
            f"not run: {plain['total']} MACs are over the count limit of {limit})"),
         f"n^2/2 undercounts the causal pairs by n/2 = {_frac(Fraction(n, 2))}; "
         f"the full rectangle overcounts them by n(n-1)/2 = {n * (n - 1) // 2}"],
        {"n": n, "conventions": data})
    ops = derive_operations(causal, heads=None if heads is None else EXTENSION_SYMBOLS.h,
                            layers=1 if layers == 1 else EXTENSION_SYMBOLS.L)
    vals = _values(n, d_model, d_k, d_v, _Setup.make(causal, heads=heads, layers=layers,
                                                     symbolic=False))
    counted = masked if causal else plain
    orows, odata = [], {}
    totals = [0, 0, 0, 0, 0]
    for stage, (mul, add_) in ops.items():
        if stage == "total":
            continue
        macs = counted[stage]
        mul_v, add_v = int(mul.subs(vals)), int(add_.subs(vals))
        cells = [macs, mul_v, add_v, 2 * macs, mul_v + add_v]
        totals = [a + b for a, b in zip(totals, cells)]
        orows.append([stage] + [str(c) for c in cells] + [str(2 * macs - mul_v - add_v)])
        odata[stage] = dict(zip(("macs", "multiplications", "additions", "flops",
                                 "operations"), cells))
    orows.append(["total"] + [str(c) for c in totals] + [str(totals[3] - totals[4])])
    ops_sec = Section(
        "cost/operations",
        f"MACs, FLOPs and exact operations at n = {n} ({'causal' if causal else 'no mask'})",
        ["stage", f"MACs ({how})", "multiplications", "additions (k - 1 per sum)",
         "FLOPs = 2 x MACs", "exact operations", "FLOPs - exact"], orows,
        list(CONVENTION_NOTES) + [
            "multiplications and additions are derived from the loop nests; MACs are "
            + ("counted" if counted_run else
               f"derived too: the head was not run, its {plain['total']} MACs are over the "
               f"count limit of {limit}"),
            ("softmax, counted separately: " + ", ".join(
                f"{softmax_ops[k]} {name}" for k, name in
                (("exp", "exponentials"), ("add", "additions"), ("div", "divisions"))))
            if counted_run else
            "softmax: not counted (they depend on the numbers, and the head was not run); "
            "raise the count limit to count them"],
        {"n": n, "source": how, "count_limit": limit, "stages": odata,
         "softmax_ops": softmax_ops})
    pairs_sec.data["source"] = how
    return [pairs_sec, ops_sec]


def _frac(q) -> str:
    q = Fraction(q)
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
