"""The formula derived from the loops: each stage's loop nest by its bounds, summed by sympy.

:func:`call_nests` describes the pencil engine's ``for`` loops for one call (a
:class:`~exactattn.cost.sizes.CallShape`) by their bounds (an inner bound may
depend on an outer index: the causal mask); :func:`call_formula` lets sympy
sum them, and :func:`derive_call` evaluates the sums at the call's sizes.  A
call of whole numbers is written in the symbols first (``B`` batch entries,
``h`` query heads, ``n`` queries, ``m`` keys, ``d_k``, ``d_v``, ``D``, ``L``
layers), so one formula serves every size; a call with sympy sizes is summed
as written.  Deterministic: the sums are cached by the call.

The keyword functions are front doors that describe their call with
:meth:`CallShape.of_sizes <exactattn.cost.sizes.CallShape.of_sizes>`:
:func:`loop_nests` and :func:`derive` (one head, or h heads with W_O, in the
symbols), :func:`derive_operations` and :func:`derive_at` (at given sizes).
They give ``3 n D d_k`` (projections, at d_v = d_k), ``n^2 d_k`` (scores),
``n^2 d_v`` (mixing) and, with heads, ``n h d_v D`` (the output projection
W_O, stage ``out_projection``).

Symbols: ``n`` tokens (queries), ``D`` = d_model, ``d_k``, ``d_v``; for the
extensions ``m`` keys, ``t`` the position of a decoded token, ``h`` heads,
``L`` layers, and ``B`` (:data:`BATCH`) broadcast batch entries.  All are
positive integers.

>>> derive()["total"]
2*D*d_k*n + D*d_v*n + d_k*n**2 + d_v*n**2
>>> derive_at(32, 4, 4)
{'projections': 1536, 'scores': 4096, 'mix': 4096, 'total': 9728}
>>> from exactattn.call.policy import Policy
>>> s = CallShape((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), Policy(causal=True))
>>> call_formula(s)["scores"], derive_call(s)["scores"]
(B*d_k*h*n**2/2 + B*d_k*h*n/2, 480)
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby

import sympy

from ..errors import InputError
from .sizes import CallShape

#: the stages, in order; ``projections`` only with d_model, ``out_projection`` (W_O) only
#: with heads
STAGES = ("projections", "scores", "mix", "out_projection")


Symbols = namedtuple("Symbols", "n D d_k d_v")
ExtensionSymbols = namedtuple("ExtensionSymbols", "m t h L")


def _positive(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, positive=True, integer=True)


#: n (tokens), D (= d_model), d_k, d_v: positive integer sympy Symbols
SYMBOLS = Symbols(*(_positive(s) for s in ("n", "D", "d_k", "d_v")))
#: m (key length), t (position of a decoded token), h (heads), L (layers)
EXTENSION_SYMBOLS = ExtensionSymbols(*(_positive(s) for s in ("m", "t", "h", "L")))
#: B, the number of broadcast batch entries (the product of the broadcast batch shape)
BATCH = _positive("B")

# loop indices of the nests (0-based, like the engine's range() loops)
_i, _j, _s, _c, _a, _l, _b = (sympy.Symbol(s, integer=True, nonnegative=True)
                              for s in ("i", "j", "s", "c", "a", "l", "b"))


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


def _headed(shape: CallShape) -> bool:
    """The call has a head dimension: its loops run over the query heads."""
    return len(shape.query) > 2 or len(shape.key) > 2


def _regimes(shape: CallShape) -> tuple[str, ...]:
    """Which key-length regimes a causal nest needs: keys >= queries, keys < queries."""
    if not shape.policy.causal or shape.decode:
        return ("ge",)
    diff = sympy.simplify(shape.keys - shape.queries)
    if diff.is_nonnegative:
        return ("ge",)
    if diff.is_negative:
        return ("lt",)
    return ("ge", "lt")


def _score_pieces(shape: CallShape, regime: str) -> list[tuple]:
    """``(first query, last query, last visible key)`` ranges of the score and mix nests.

    The symbolic form of :meth:`Policy.visible_keys <exactattn.call.policy.Policy.visible_keys>`
    (which runs on ints): query i sees keys 0 .. i + shift, shift 0 (top_left)
    or m - n (bottom_right), clipped to 0 .. m - 1; tests compare the two at
    every small size.
    """
    n, M = shape.queries, shape.keys
    if not shape.policy.causal:
        return [(0, n - 1, M - 1)]
    shift = shape.policy.causal_shift(n, M)
    if regime == "ge":
        return [(0, n - 1, _i + shift)]
    # fewer keys than queries (shift <= 0): the queries before -shift see no key, those
    # past m - 1 - shift see all m keys; a range that is empty for every size is dropped
    pieces = [(-shift, M - 1 - shift, _i + shift), (M - shift, n - 1, M - 1)]
    return [p for p in pieces if not sympy.simplify(p[0] - p[1]).is_positive]


def _kept_runs(shape: CallShape) -> tuple | None:
    """``(query, first key, last key)`` of each run of kept keys in a row of ``Policy.keep``,
    where the call's visible keys are not one causal range (an explicit mask, a sliding
    window or a query offset); None where they are."""
    p = shape.policy
    if shape.decode or (shape.mask is None and p.window is None and p.query_offset is None):
        return None
    if not shape.whole:
        raise InputError(f"a mask, window or query offset needs whole-number sizes to be "
                         f"derived (got {shape.shape})")
    runs = []
    for i, row in enumerate(p.keep(shape.queries, shape.keys, shape.mask).tolist()):
        j = 0
        for kept, run in groupby(row):
            k = len(list(run))
            runs += [(i, j, j + k - 1)] if kept else []
            j += k
    return tuple(runs)


def _in_symbols(shape: CallShape) -> CallShape:
    """A whole-number call with its sizes written as the symbols (B, h, n, m, d_k, d_v,
    D, L); m only where the key length differs from the queries'."""
    n, D, d_k, d_v = SYMBOLS
    m, _, h, L = EXTENSION_SYMBOLS
    lead = ((BATCH,) if shape.batch else ()) + ((h,) if _headed(shape) else ())
    S = n if shape.keys == shape.queries else m
    return CallShape(lead + (n, d_k), lead + (S, d_k), lead + (S, d_v), shape.policy, None,
                     None if shape.d_model is None else D, shape.out_projection,
                     1 if shape.layers == 1 else L, shape.decode)


def _prepared(shape: CallShape) -> tuple:
    """``(the call to sum, its regimes, its runs of kept keys)``: a whole-number call in
    the symbols, in the one regime its sizes decide."""
    return _in_symbols(shape) if shape.whole else shape, _regimes(shape), _kept_runs(shape)


def _nests(shape: CallShape, regime: str, runs) -> dict[str, tuple[LoopNest, ...]]:
    n, M, D, d_k, d_v = shape.queries, shape.keys, shape.d_model, shape.d_k, shape.d_v
    t = EXTENSION_SYMBOLS.t
    outer: list = []
    prefix = ""
    if shape.batch:
        outer.append((_b, 0, shape.batch_size - 1))
        prefix = "for every broadcast batch entry: "
    if shape.layers != 1:
        outer.append((_l, 0, shape.layers - 1))
    per_head = outer + ([(_a, 0, shape.heads - 1)] if _headed(shape) else [])

    def nest(name, stage, loops, code):
        return LoopNest(name, stage, tuple(per_head if stage != "out_projection" else outer)
                        + tuple(loops), prefix + code)

    decode = shape.decode
    rows = [] if decode else [(_i, 0, n - 1)]          # decoding: the one new token
    kv_rows = [] if decode else [(_i, 0, M - 1)]
    out: dict[str, tuple[LoopNest, ...]] = {}
    if D is not None:
        out["projections"] = tuple(
            nest(name, "projections", r + [(_s, 0, width - 1), (_c, 0, D - 1)], code)
            for name, r, width, code in (
                ("queries", rows, d_k,
                 "q_t = W_Q x_t (the new token only)" if decode else "queries = x W_Q"),
                ("keys", kv_rows, d_k,
                 "k_t = W_K x_t, appended to the cache" if decode else "keys = x W_K"),
                ("values", kv_rows, d_v,
                 "v_t = W_V x_t, appended to the cache" if decode else "values = x W_V")))
    if decode:
        out["scores"] = (nest("scores", "scores", [(_j, 0, t - 1), (_c, 0, d_k - 1)],
                              "q_t . k_j for the t cached keys"),)
        out["mix"] = (nest("mix", "mix", [(_c, 0, d_v - 1), (_j, 0, t - 1)],
                           "sum_j shares[j] v_j[c] over the t cached values"),)
    elif runs is not None:
        for stage, width in (("scores", d_k), ("mix", d_v)):
            out[stage] = tuple(nest(stage, stage, [(_j, j0, j1), (_c, 0, width - 1)],
                                    f"query {i}: keys {j0}..{j1} (kept by the mask)")
                               for i, j0, j1 in runs)
    else:
        pieces = _score_pieces(shape, regime)
        out["scores"] = tuple(
            nest("scores", "scores", [(_i, lo, hi), (_j, 0, jh), (_c, 0, d_k - 1)],
                 "raw[i][j] = queries[i] . keys[j], visible j only") for lo, hi, jh in pieces)
        out["mix"] = tuple(
            nest("mix", "mix", [(_i, lo, hi), (_c, 0, d_v - 1), (_j, 0, jh)],
                 "outputs[i][c] = sum_j shares[i][j] values[j][c], visible j only")
            for lo, hi, jh in pieces)
    if shape.out_projection:
        out["out_projection"] = (nest("out_projection", "out_projection",
                                      rows + [(_s, 0, D - 1), (_c, 0, shape.heads * d_v - 1)],
                                      "concat(heads) W_O: h d_v numbers into D"),)
    return out


def call_nests(shape: CallShape, *, keys_at_least_queries: bool | None = None
               ) -> dict[str, tuple[LoopNest, ...]]:
    """Each stage's loop nests, by their bounds, as the pencil engine runs the call.

    Returns ``{stage: (LoopNest, ...)}`` for ``projections`` (queries, keys,
    values; with ``d_model``), ``scores``, ``mix`` and, with
    ``out_projection``, W_O.  Outermost a loop over the ``B`` broadcast batch
    entries (when the call has batch dimensions), then the ``L`` layers, then
    the ``h`` *query* heads (a GQA call's key/value head is a lookup,
    :meth:`Policy.kv_head`, not a loop).  A stage has several nests where the
    query range splits (a causal mask with fewer keys than queries); an
    explicit mask, a sliding window or a query offset gives one nest per run
    of each row's visible keys (:meth:`Policy.keep`) at its numeric bounds.

    Args:
        shape: the call; a whole-number call is written in the symbols.
        keys_at_least_queries: which regime to describe when a causal mask has
            a symbolic key length whose order against n is unknown.

    Raises:
        InputError: an undecided regime.

    >>> [str(x) for x in call_nests(CallShape((2, 4, 8), (2, 6, 8), (2, 6, 8)))["scores"]]
    ['for a in 0..h - 1: for i in 0..n - 1: for j in 0..m - 1: for c in 0..d_k - 1: 1 MAC']
    """
    shape, regimes, runs = _prepared(shape)
    if len(regimes) == 2:
        if keys_at_least_queries is None:
            raise InputError(f"keys_at_least_queries must be True or False when the key "
                             f"length {shape.keys} may be above or below n (got None)")
        regimes = ("ge",) if keys_at_least_queries else ("lt",)
    return _nests(shape, regimes[0], runs)


@lru_cache(maxsize=None)
def _formula(shape: CallShape, regimes: tuple, runs, what: str) -> tuple:
    per_regime = [{k: sympy.expand(sympy.Add(*[getattr(x, what)() for x in v]))
                   for k, v in _nests(shape, regime, runs).items()}
                  for regime in regimes]
    if len(regimes) == 1:
        result = per_regime[0]
    else:
        cond = sympy.Ge(shape.keys, shape.queries)
        result = {k: (v if v == per_regime[1][k] else
                      sympy.Piecewise((v, cond), (per_regime[1][k], True)))
                  for k, v in per_regime[0].items()}
    total = sympy.Add(*result.values())
    result["total"] = sympy.expand(total) if not total.has(sympy.Piecewise) else \
        sympy.piecewise_fold(total)
    return tuple(result.items())


def call_formula(shape: CallShape, what: str = "macs") -> dict:
    """MACs per stage (and ``total``) as sympy expressions, summed from :func:`call_nests`
    (``what``: ``macs``, or ``additions``: k - 1 per length-k sum).

    A causal mask with a key length m whose order against n is unknown gives
    a ``Piecewise`` (m >= n, m < n).  Deterministic (cached, same expressions).

    >>> from exactattn.call.policy import Policy
    >>> s = CallShape((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), Policy(causal=True))
    >>> call_formula(s)["scores"]
    B*d_k*h*n**2/2 + B*d_k*h*n/2
    """
    return dict(_formula(*_prepared(shape), what))


def symbol_values(shape: CallShape) -> dict:
    """The symbols of :func:`call_formula` at a call's sizes: ``{B, h, n, m, d_k, d_v, L[, D]}``."""
    n, D, d_k, d_v = SYMBOLS
    m, _, h, L = EXTENSION_SYMBOLS
    vals = {BATCH: shape.batch_size, h: shape.heads, n: shape.queries, m: shape.keys,
            d_k: shape.d_k, d_v: shape.d_v, L: shape.layers}
    if shape.d_model is not None:
        vals[D] = shape.d_model
    return vals


def whole_generation(exprs: dict) -> dict:
    """Per-token figures of decoding summed over t = 1..n (the whole generation)."""
    t = EXTENSION_SYMBOLS.t
    return {k: sympy.summation(v, (t, 1, SYMBOLS.n)) for k, v in exprs.items()}


def _as_int(e) -> int:
    e = sympy.nsimplify(e)
    if not e.is_Integer:
        raise InputError(f"derived figure must be a whole number (got {e})")
    return int(e)


def derive_call(shape: CallShape) -> dict[str, int]:
    """The derived MACs of each stage (and ``total``) at the call's sizes, as ints.

    Decoding: the whole generation of n = L tokens, the per-token figures
    summed by sympy over t = 1..n.

    Raises:
        InputError: a size that is not a whole number.

    >>> derive_call(CallShape((1, 4, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)))
    {'scores': 512, 'mix': 512, 'total': 1024}
    """
    if not shape.whole:
        raise InputError(f"every size must be a whole number to evaluate the formula "
                         f"(got {shape.shape})")
    exprs = call_formula(shape)
    if shape.decode:
        exprs = whole_generation(exprs)
    vals = symbol_values(shape)
    return {k: _as_int(v.subs(vals)) for k, v in exprs.items()}


# --------------------------------------------------------------------------- keyword doors
def loop_nests(causal: bool = False, *, keys_at_least_queries: bool | None = None,
               **options) -> dict[str, tuple[LoopNest, ...]]:
    """Each stage's loop nests (:func:`call_nests`) for one head of the symbols n, D, d_k, d_v.

    Returns ``{stage: (LoopNest, ...)}`` for ``projections`` (queries, keys,
    values), ``scores``, ``mix`` and, with ``heads``, ``out_projection``
    (W_O).  A stage has several nests where the query range splits (a causal
    mask with fewer keys than queries).

    Args:
        causal: skip the masked pairs: query i sees key j <= i (top_left) or
            j <= i + m - n (bottom_right, the last query sees every key);
            ``alignment`` picks which.
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
    shape = CallShape.of_sizes(*SYMBOLS, causal=causal, **options)
    return call_nests(shape, keys_at_least_queries=keys_at_least_queries)


def _in_d_v(exprs: dict, d_v) -> dict:
    """``exprs`` with the symbol d_v replaced by ``d_v`` (None: kept)."""
    return exprs if d_v is None else {k: sympy.expand(v.subs(SYMBOLS.d_v, d_v))
                                      for k, v in exprs.items()}


def derive(causal: bool = False, *, d_v=None, **options) -> dict:
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
    return _in_d_v(call_formula(CallShape.of_sizes(*SYMBOLS, causal=causal, **options)), d_v)


def derive_operations(causal: bool = False, *, d_v=None, **options) -> dict:
    """Exact multiplications and additions per stage, from the same loop nests.

    Returns ``{stage: (multiplications, additions)}``: a length-k sum takes k
    multiplications and k - 1 additions, so FLOPs = 2 x MACs counts one
    operation too many per dot product.  ``options`` as in :func:`loop_nests`.

    >>> n, D, d_k, d_v = SYMBOLS
    >>> derive_operations()["scores"]
    (d_k*n**2, d_k*n**2 - n**2)
    """
    shape = CallShape.of_sizes(*SYMBOLS, causal=causal, **options)
    mults, adds = (_in_d_v(call_formula(shape, what), d_v) for what in ("macs", "additions"))
    return {k: (mults[k], adds[k]) for k in mults}


def derive_at(n, d_model, d_k, d_v=None, **options) -> dict[str, int]:
    """The derived MACs (:func:`derive_call`) at given sizes, as ``int`` per stage.

    With ``decode=True``: the whole generation of n tokens, the per-token
    figures summed by sympy over t = 1..n.  ``d_v`` defaults to ``d_k``; ``options``
    (causal, alignment, keys, heads, layers, decode) as in :func:`loop_nests`.

    >>> derive_at(32, 4, 4, causal=True)["scores"]
    2112
    """
    return derive_call(CallShape.of_sizes(n, d_model, d_k, d_v, **options))


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
    linear = exprs.get("projections", 0) + exprs.get("out_projection", 0)
    return sympy.expand(pairs), sympy.expand(linear)
