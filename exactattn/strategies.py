"""Hypothesis strategies for attention: exact numbers, matrices, token rows, heads, masks, whole inputs.

The one module of exactattn that imports Hypothesis (``import exactattn``
does not load it).  Strategies are plural nouns and take keyword-only
options, as in ``hypothesis.strategies``; every option is checked when the
strategy is built and a bad one raises :class:`~exactattn.errors.InputError`
naming the option and repeating its value.  Every draw is exact
(``Fraction``; divisors may be irrational, ``sqrt(q)``) and shrinks towards
the smallest sizes, zero weights, no mask, the default divisor and the
``slots`` layout, so a failing property is reported on a tiny input.

Defaults keep inputs small (n <= 5 tokens, widths <= 4, numbers in
[-3, 3] with denominators <= 4): exact attention is a pencil-scale
computation, and the minimal failing example is what a reader studies.  At
these sizes one example of :func:`exactattn.properties.check_all` takes
milliseconds, well inside Hypothesis's default 200 ms deadline.

The inputs drawn by :func:`attention_inputs` feed the checks of
:mod:`exactattn.properties` (``@given(eas.attention_inputs())`` then
``check_all(my_attention, inp)``; see docs/properties.md).

Reference: the Hypothesis strategies API (``hypothesis.strategies``);
Vaswani et al. 2017, sec. 3.2.1 for the quantities drawn.

>>> rationals(min_value=1, max_value=0)
Traceback (most recent call last):
...
exactattn.errors.InputError: max_value must be at least min_value = 1 (got 0)
>>> heads(max_d_k=0)
Traceback (most recent call last):
...
exactattn.errors.InputError: max_d_k must be a positive whole number (got 0)
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import hypothesis.strategies as st
from hypothesis.strategies import SearchStrategy

from .call.policy import ALIGNMENTS, DEFAULT_SCALE, MASK_KINDS, Mask, Policy
from .errors import InputError
from .options import check_whole
from .numbers.exact import to_exact
from .engines.head import LAYOUTS, Head
from .call.inputs import Call

__all__ = ["attention_inputs", "block_splits", "divisors", "head_inputs",
           "heads", "masks", "matrices", "rationals", "scales", "token_rows"]

_NON_SQUARES = (2, 3, 5, 6, 7, 8, 10, 11, 12)


# --------------------------------------------------------------------------- argument checks
def _sizes(min_name: str, min_value: Any, max_name: str, max_value: Any) -> tuple[int, int]:
    lo, hi = check_whole(min_value, min_name), check_whole(max_value, max_name)
    if hi < lo:
        raise InputError(f"{max_name} must be at least {min_name} = {lo} (got {hi!r})")
    return lo, hi


def _strategy(name: str, value: Any, default) -> SearchStrategy:
    """``value`` checked to be a strategy; None gives ``default()``."""
    if value is None:
        return default()
    if not isinstance(value, SearchStrategy):
        raise InputError(f"{name} must be a Hypothesis strategy or None (got {value!r})")
    return value


def _flag(name: str, value: Any, allow_none: bool = False) -> bool | None:
    if not isinstance(value, bool) and not (value is None and allow_none):
        raise InputError(f"{name} must be True{', False or None' if allow_none else ' or False'} "
                         f"(got {value!r})")
    return value


def _one_of(*options: tuple) -> SearchStrategy:
    """One of the ``(strategy, on)`` options that are on, drawn in order (shrinking to the first)."""
    return st.one_of(*(strategy for strategy, on in options if on))


def _choices(name: str, value: Any, allowed: tuple, hint: str = "") -> tuple:
    try:
        chosen = () if isinstance(value, str) else tuple(value)
    except TypeError:
        chosen = ()
    if not chosen or any(c not in allowed for c in chosen):
        shown = ", ".join(repr(a) for a in allowed)
        raise InputError(f"{name} must be a non-empty collection of {shown} (got {value!r}){hint}")
    return chosen


_CAUSAL_HINT = ("; the causal rule is Policy(causal=True), drawn by attention_inputs(causal=..., "
                "alignments=...)")


# --------------------------------------------------------------------------- numbers and matrices
def rationals(*, min_value: Any = -3, max_value: Any = 3,
              max_denominator: int | None = 4) -> SearchStrategy[Fraction]:
    """Exact rational numbers ``Fraction(p, q)`` with ``min_value <= p/q <= max_value`` and ``q <= max_denominator``.

    Like ``hypothesis.strategies.fractions`` (whose options it takes), with
    bounds read exactly (``"1/2"``, ``Fraction``, ``int``; a binary float is
    refused) and small defaults; ``None`` leaves a bound or the denominator
    open.  The denominator is drawn first, so draws shrink to integers, then 0.

    Raises:
        InputError: a bound that is not an exact number, ``max_value <
            min_value``, ``max_denominator`` not a positive whole number.

    >>> from hypothesis import find
    >>> find(rationals(min_value="-1/2", max_value="1/2"), lambda q: q != 0)
    Fraction(1, 2)
    >>> find(rationals(), lambda q: q.denominator == 3)
    Fraction(1, 3)
    >>> rationals(max_denominator=0)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: max_denominator must be a positive whole number (got 0)
    """
    lo = None if min_value is None else to_exact(min_value, name="min_value")
    hi = None if max_value is None else to_exact(max_value, name="max_value")
    if lo is not None and hi is not None and hi < lo:
        raise InputError(f"max_value must be at least min_value = {lo} (got {max_value!r})")
    if max_denominator is not None:
        check_whole(max_denominator, "max_denominator")

    def numerators(d: int) -> tuple[int | None, int | None]:
        return (None if lo is None else math.ceil(lo * d), None if hi is None else math.floor(hi * d))

    def fits(d: int) -> bool:
        a, b = numerators(d)
        return a is None or b is None or a <= b
    fallback = 1
    if lo is not None and hi is not None:
        fallback = next((d for d in range(1, min(max_denominator or 10**4, 10**4) + 1) if fits(d)),
                        None)
        if fallback is None:
            raise InputError(f"max_value must leave a fraction with denominator at most "
                             f"{max_denominator} above min_value = {lo} (got {max_value!r})")
    denominators = st.integers(1, max_denominator)
    per_denominator: dict[int, SearchStrategy[int]] = {}

    def sample(draw) -> Fraction:  # denominator first, so shrinking reaches integers, then 0
        d = draw(denominators)
        if not fits(d):
            d = fallback
        if d not in per_denominator:
            per_denominator[d] = st.integers(*numerators(d))
        return Fraction(draw(per_denominator[d]), d)

    strategy = st.composite(sample)()
    strategy._exactattn_sample = sample  # lets matrices draw entries without a nested strategy
    return strategy


@lru_cache(maxsize=None)
def _default_rationals() -> SearchStrategy[Fraction]:
    return rationals()


def _draw_matrix(draw, rows: int, columns: int, elements: SearchStrategy) -> list[list]:
    """A rows x columns matrix; entries of :func:`rationals` are drawn directly (five times faster)."""
    sample = getattr(elements, "_exactattn_sample", None)
    if sample is not None:
        return [[sample(draw) for _ in range(columns)] for _ in range(rows)]
    return draw(st.lists(st.lists(elements, min_size=columns, max_size=columns),
                         min_size=rows, max_size=rows))


def matrices(*, rows: int, columns: int,
             elements: SearchStrategy | None = None) -> SearchStrategy[list[list]]:
    """``rows`` x ``columns`` matrices (lists of rows) of exact numbers, shrinking to zeros.

    >>> matrices(rows=0, columns=2)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: rows must be a positive whole number (got 0)
    """
    check_whole(rows, "rows")
    check_whole(columns, "columns")
    elements = _strategy("elements", elements, _default_rationals)
    return st.composite(lambda draw: _draw_matrix(draw, rows, columns, elements))()


def token_rows(*, d_model: int, min_n: int = 1, max_n: int = 5,
               elements: SearchStrategy | None = None) -> SearchStrategy[list[list]]:
    """Token rows ``x``: between ``min_n`` and ``max_n`` tokens of ``d_model`` numbers each (n x d_model).

    >>> token_rows(d_model=2, min_n=3, max_n=2)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: max_n must be at least min_n = 3 (got 2)
    """
    check_whole(d_model, "d_model")
    lo, hi = _sizes("min_n", min_n, "max_n", max_n)
    elements = _strategy("elements", elements, _default_rationals)
    return st.composite(lambda draw: _draw_matrix(draw, draw(st.integers(lo, hi)), d_model,
                                                  elements))()


# --------------------------------------------------------------------------- divisors and scales
def divisors(*, allow_default: bool = True, allow_none: bool = True,
             allow_irrational: bool = True) -> SearchStrategy:
    """Divisors a :class:`~exactattn.engines.head.Head` accepts: positive rationals, ``"sqrt(q)"``, None.

    Draws ``"default"`` (leave it out: sqrt(d_k)) first, then a
    positive rational ``a/b`` (a <= 8, b <= 4), then ``"sqrt(q)"`` for a
    non-square q (an irrational divisor, kept exact), then None (no
    scaling).  Shrinks towards the default, then 1.

    Raises:
        InputError: an option that is not True or False.

    >>> divisors(allow_none="yes")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: allow_none must be True or False (got 'yes')
    """
    return _one_of((st.just(DEFAULT_SCALE), _flag("allow_default", allow_default)),
                   (st.builds(Fraction, st.integers(1, 8), st.integers(1, 4)), True),
                   (st.sampled_from(_NON_SQUARES).map(lambda q: f"sqrt({q})"),
                    _flag("allow_irrational", allow_irrational)),
                   (st.none(), _flag("allow_none", allow_none)))


def scales(*, allow_default: bool = True, allow_irrational: bool = True) -> SearchStrategy:
    """Scales as :class:`~exactattn.call.policy.Policy` stores them: ``"default"`` or the divisor squared ``D``.

    Draws ``"default"`` (1/sqrt(d_k)) first, then ``D = (b/a)**2`` for a
    rational scale ``a/b`` (a, b <= 4), then a non-square ``D = q`` (the
    irrational scale ``1/sqrt(q)``).

    Raises:
        InputError: an option that is not True or False.

    >>> scales(allow_irrational=1)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: allow_irrational must be True or False (got 1)
    """
    return _one_of((st.just(DEFAULT_SCALE), _flag("allow_default", allow_default)),
                   (st.builds(lambda a, b: Fraction(b, a) ** 2, st.integers(1, 4),
                              st.integers(1, 4)), True),
                   (st.sampled_from(_NON_SQUARES).map(Fraction),
                    _flag("allow_irrational", allow_irrational)))


# the defaults of options that share a strategy's name
_all_divisors, _all_scales = divisors, scales


# --------------------------------------------------------------------------- heads
def heads(*, min_d_model: int = 1, max_d_model: int = 4, min_d_k: int = 1, max_d_k: int = 4,
          min_d_v: int = 1, max_d_v: int = 4, layouts=LAYOUTS, causal: bool | None = None,
          divisors: SearchStrategy | None = None,
          elements: SearchStrategy | None = None) -> SearchStrategy[Head]:
    """Attention heads: ``W_Q``, ``W_K`` (d_k x d_model in slots), ``W_V`` (d_v x d_model), a divisor, a causal flag.

    Sizes are drawn between their bounds, the layout from ``layouts`` (the
    weights are drawn in that layout's shape), ``causal`` is drawn when
    None, and the divisor from ``divisors`` (default :func:`divisors`).
    Shrinks towards width 1, zero weights, the slots layout, no causal mask
    and the default divisor sqrt(d_k).

    Raises:
        InputError: a size that is not a positive whole number or a ``max_*``
            below its ``min_*``; an unknown layout; ``causal`` not
            True/False/None; ``divisors``/``elements`` not strategies.

    >>> heads(layouts=("columns",))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: layouts must be a non-empty collection of 'slots', 'rows' (got ('columns',))
    """
    dm = _sizes("min_d_model", min_d_model, "max_d_model", max_d_model)
    dk = _sizes("min_d_k", min_d_k, "max_d_k", max_d_k)
    dv = _sizes("min_d_v", min_d_v, "max_d_v", max_d_v)
    layouts = _choices("layouts", layouts, LAYOUTS)
    causal = _flag("causal", causal, allow_none=True)
    divisor_st = _strategy("divisors", divisors, _all_divisors)
    elements = _strategy("elements", elements, _default_rationals)

    @st.composite
    def draw_head(draw):
        d_model, d_k, d_v = (draw(st.integers(*r)) for r in (dm, dk, dv))
        layout = draw(st.sampled_from(layouts))
        def weights(out: int) -> list[list]:
            shape = (out, d_model) if layout == "slots" else (d_model, out)
            return _draw_matrix(draw, *shape, elements)
        W_Q, W_K, W_V = weights(d_k), weights(d_k), weights(d_v)
        is_causal = draw(st.booleans()) if causal is None else causal
        divisor = draw(divisor_st)
        kwargs = {} if divisor == DEFAULT_SCALE else {"divisor": divisor}
        return Head(W_Q, W_K, W_V, layout=layout, causal=is_causal, **kwargs)
    return draw_head()


def head_inputs(*, min_n: int = 1, max_n: int = 5, heads: SearchStrategy | None = None,
                elements: SearchStrategy | None = None) -> SearchStrategy[tuple]:
    """Pairs ``(head, x)``: a head from ``heads`` (default :func:`heads`) and ``min_n..max_n`` token rows of its width.

    >>> head_inputs(heads="chronicle")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: heads must be a Hypothesis strategy or None (got 'chronicle')
    """
    lo, hi = _sizes("min_n", min_n, "max_n", max_n)
    head_st = _strategy("heads", heads, _all_heads)
    elements = _strategy("elements", elements, _default_rationals)

    @st.composite
    def draw_pair(draw):
        head = draw(head_st)
        return head, _draw_matrix(draw, draw(st.integers(lo, hi)), head.d_model, elements)
    return draw_pair()


_all_heads = heads


# --------------------------------------------------------------------------- masks and inputs
@lru_cache(maxsize=None)
def _default_offsets() -> SearchStrategy[Fraction]:
    return rationals(min_value=-2, max_value=2)


def masks(*, n_queries: int, n_keys: int, kinds=MASK_KINDS, allow_empty_rows: bool = False,
          offsets: SearchStrategy | None = None) -> SearchStrategy[Mask]:
    """Explicit masks (:class:`~exactattn.call.policy.Mask`) for ``n_queries`` x ``n_keys`` scores, of the ``kinds`` named.

    Boolean masks (``bool_keep``, ``bool_drop``) and additive ones (entries
    from ``offsets``, default :func:`rationals` in [-2, 2], or minus
    infinity) shrink towards hiding nothing.  Unless ``allow_empty_rows``,
    every query sees at least one key (a row that hides every key is given
    back key ``i mod n_keys``).  The causal rule is not a mask: it is
    ``Policy(causal=True)`` (:func:`attention_inputs` draws it).

    Raises:
        InputError: bad sizes, kinds, flags or strategies.

    >>> masks(n_queries=2, n_keys=2, kinds=("causal_top_left",))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: kinds must be a non-empty collection of 'bool_keep', 'bool_drop', 'additive' (got ('causal_top_left',)); the causal rule is Policy(causal=True), drawn by attention_inputs(causal=..., alignments=...)
    """
    check_whole(n_queries, "n_queries")
    check_whole(n_keys, "n_keys")
    kind_st = st.sampled_from(_choices("kinds", kinds, MASK_KINDS, _CAUSAL_HINT))
    allow_empty_rows = _flag("allow_empty_rows", allow_empty_rows)
    offsets = _strategy("offsets", offsets, _default_offsets)
    return st.composite(lambda draw: _draw_mask(draw, draw(kind_st), n_queries, n_keys,
                                                allow_empty_rows, offsets,
                                                lambda i: range(n_keys)))()


@lru_cache(maxsize=None)
def _hidden_or(offsets: SearchStrategy) -> SearchStrategy:
    """An additive mask's entry: an offset, or None (hidden); one strategy per ``offsets``."""
    return st.one_of(offsets, st.none())


def _draw_mask(draw, kind: str, n_queries: int, n_keys: int, allow_empty_rows: bool,
               offsets: SearchStrategy, visible) -> Mask:
    """A mask of ``kind``; unless ``allow_empty_rows`` row i keeps a key of ``visible(i)``."""
    entry = _hidden_or(offsets) if kind == "additive" else st.booleans()   # True = hidden:
    # shrinking hides nothing
    rows = [[draw(entry) for _ in range(n_keys)] for _ in range(n_queries)]
    hidden = (lambda e: e is None) if kind == "additive" else (lambda e: e)
    for i, row in enumerate(rows):
        seen = list(visible(i))
        if not allow_empty_rows and seen and all(hidden(row[j]) for j in seen):
            row[seen[i % len(seen)]] = Fraction(0) if kind == "additive" else False
    if kind == "bool_keep":
        rows = [[not e for e in row] for row in rows]
    return Mask(kind, rows)


def attention_inputs(*, min_n: int = 1, max_n: int = 5, min_d_k: int = 1, max_d_k: int = 4,
                     min_d_v: int = 1, max_d_v: int = 4, mask_kinds=(None, *MASK_KINDS),
                     causal: bool | None = None, alignments=ALIGNMENTS,
                     self_attention: bool = False, allow_empty_rows: bool = False,
                     scales: SearchStrategy | None = None,
                     elements: SearchStrategy | None = None) -> SearchStrategy[Call]:
    """Whole inputs to an attention function: one-head :class:`~exactattn.call.Call` objects
    (queries, keys, values, an explicit mask and a policy).

    Draws the mask kind from ``mask_kinds`` (None = no explicit mask), the
    causal rule (drawn when ``causal`` is None) and, when causal, its
    alignment from ``alignments``; the numbers of queries and keys in
    ``[min_n, max_n]`` (equal when ``self_attention``; under ``bottom_right``
    at least as many keys as queries unless ``allow_empty_rows``), d_k and
    d_v, the three matrices from ``elements`` and the scale from ``scales``
    (default :func:`scales`).  Shrinks towards no mask, no causal rule, one
    query, one key, width 1, zero entries and the default scale.

    Raises:
        InputError: bad sizes, mask kinds, alignments, flags or strategies.

    >>> attention_inputs(mask_kinds=("diagonal",))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: mask_kinds must be a non-empty collection of None, 'bool_keep', 'bool_drop', 'additive' (got ('diagonal',)); the causal rule is Policy(causal=True), drawn by attention_inputs(causal=..., alignments=...)
    """
    n_range = _sizes("min_n", min_n, "max_n", max_n)
    dk = _sizes("min_d_k", min_d_k, "max_d_k", max_d_k)
    dv = _sizes("min_d_v", min_d_v, "max_d_v", max_d_v)
    kind_st = st.sampled_from(_choices("mask_kinds", mask_kinds, (None, *MASK_KINDS),
                                       _CAUSAL_HINT))
    causal = _flag("causal", causal, allow_none=True)
    causal_st = st.booleans() if causal is None else st.just(causal)
    alignment_st = st.sampled_from(_choices("alignments", alignments, ALIGNMENTS))
    self_attention = _flag("self_attention", self_attention)
    allow_empty_rows = _flag("allow_empty_rows", allow_empty_rows)
    scale_st = _strategy("scales", scales, _all_scales)
    elements = _strategy("elements", elements, _default_rationals)

    @st.composite
    def draw_input(draw):
        kind = draw(kind_st)
        policy = Policy(causal=True, alignment=draw(alignment_st)) if draw(causal_st) \
            else Policy()
        n_q = draw(st.integers(*n_range))
        if self_attention:
            n_k = n_q
        elif policy.causal and policy.alignment == "bottom_right" and not allow_empty_rows:
            n_k = draw(st.integers(n_q, n_range[1]))
        else:
            n_k = draw(st.integers(*n_range))
        d_k, d_v = draw(st.integers(*dk)), draw(st.integers(*dv))
        queries, keys, values = (_draw_matrix(draw, *shape, elements) for shape in
                                 ((n_q, d_k), (n_k, d_k), (n_k, d_v)))
        policy = policy.replace(divisor_squared=draw(scale_st))
        if kind is None:
            return Call(queries, keys, values, policy=policy)
        mask = _draw_mask(draw, kind, n_q, n_k, allow_empty_rows, _default_offsets(),
                          lambda i: policy.visible_keys(i, n_q, n_k))
        return Call(queries, keys, values, mask.rows, policy=policy, mask_kind=kind)
    return draw_input()


def block_splits(*, n: int) -> SearchStrategy[list[int]]:
    """Ways of cutting a row of ``n`` keys into consecutive blocks, as lists of block lengths adding to n.

    Shrinks towards one block (no cut).

    >>> block_splits(n=0)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: n must be a positive whole number (got 0)
    """
    check_whole(n, "n")

    def lengths(cuts: list[bool]) -> list[int]:     # a cut after key i: a block ends at i + 1
        edges = [0, *(i + 1 for i, cut in enumerate(cuts) if cut), n]
        return [b - a for a, b in zip(edges, edges[1:])]
    return st.lists(st.booleans(), min_size=n - 1, max_size=n - 1).map(lengths)
