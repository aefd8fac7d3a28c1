"""Counted runs: the head run through the pencil engine's loops, every multiply-add counted.

A counted run with projections is a run of the exact layer,
:func:`exactattn.engines.layer.attend_layer` (decoding: one token at a time over its KV
cache): :func:`~exactattn.reference.kernels.project`, then the counts of each head's
:class:`~exactattn.reference.reference.Reference` (scores over the visible keys, the
softmax rows and the mix), then W_O; without projections, the same counts on small whole
numbers.
The counts are read where the work is: the projections' counters go up inside the
innermost loops, and the scores and the mix are counted per visible pair and per kept
key of each exact row; nothing comes from the closed formula.  No sympy here.

:func:`count_call` runs one call (a :class:`~exactattn.cost.sizes.CallShape`):
every broadcast batch entry and query head, with the projections, W_O and
layers when the call has ``d_model``.  :func:`run`, :func:`count` and
:func:`decode_steps` are its front doors for one head (or h heads with W_O)
at given sizes.

>>> count(4, 4, 4)
{'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
>>> [s["total"] for s in decode_steps(3, 4, 4)]
[56, 64, 72]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from itertools import product

from ..call.policy import Policy
from ..errors import InputError
from ..numbers.exact import to_matrix
from ..engines.head import Head
from ..engines.layer import Layer, attend_layer, head_reference
from .sizes import CallShape, size

#: a stacked layer reads the previous layer's outputs rounded to this many certified places
LAYER_PLACES = 4

#: one query over t cached keys sees all t: the KV cache is a bottom_right causal call
_DECODING = Policy(causal=True, alignment="bottom_right")


def count_head(d_model: int, d_k: int, d_v: int, index: int = 0) -> Head:
    """The head that :func:`count` runs: the chronicle head at 4/4/4, else a fixed pattern.

    Head ``index`` > 0 (multi-head runs) uses a shifted pattern.  The weights
    are small exact rationals; the MAC counts do not depend on them.

    >>> count_head(4, 4, 4).W_Q[1]
    [Fraction(3, 1), Fraction(0, 1), Fraction(0, 1), Fraction(0, 1)]
    >>> count_head(2, 1, 1).W_Q
    [[Fraction(-1, 1), Fraction(3, 2)]]
    """
    d_model, d_k, d_v = (size(v, k) for v, k in
                         ((d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    if (d_model, d_k, d_v, index) == (4, 4, 4, 0):
        from ..examples import chronicle
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
    n, d_model = size(n, "n"), size(d_model, "d_model")
    if d_model == 4:
        from ..examples import chronicle
        x = chronicle().x
        return [list(x[i % 4]) for i in range(n)]
    return [[Fraction((i + m) % 3 - 1) for m in range(d_model)] for i in range(n)]


def _layer(shape: CallShape, index_base: int, policy: Policy) -> Layer:
    """One layer of :func:`count_head` heads, numbered from ``index_base``, with W_O when
    the call has it."""
    heads = [count_head(shape.d_model, shape.d_k, shape.d_v, index_base + a)
             for a in range(shape.heads)]
    W_O = [[Fraction((d + 2 * c) % 5 - 2, 2) for c in range(shape.heads * shape.d_v)]
           for d in range(shape.d_model)] if shape.out_projection else None   # slots
    return Layer(*([getattr(h, w) for h in heads] for w in ("W_Q", "W_K", "W_V")), W_O,
                 policy=policy)


def _zero_macs(shape: CallShape) -> dict:
    """The call's stages, at 0: projections with d_model, W_O with out_projection."""
    return dict.fromkeys(("projections",) * (shape.d_model is not None) + ("scores", "mix")
                         + ("out_projection",) * shape.out_projection, 0)


def _add(*pairs) -> None:
    """Each ``(total, step)`` pair's step counts added to its total (a counted step's or
    layer's MACs to the run's, or its softmax operations)."""
    for total, step in pairs:
        total.update({k: total[k] + step[k] for k in total})


def _stacked(layers_: list, xq, xkv, macs: dict, ops: dict, caches: list | None = None,
             mask=None) -> list:
    """The rows ``xq`` (over ``xkv``) through every layer (:func:`attend_layer`): layer l+1
    reads layer l's outputs rounded to :data:`LAYER_PLACES` certified places; ``caches``:
    a KV cache per layer."""
    for ell, layer in enumerate(layers_):
        r = attend_layer(layer, xq, keys=xkv, mask=mask,
                         cache=None if caches is None else caches[ell])
        _add((macs, r.macs), (ops, {op: sum(getattr(x, op + "s") for head in r.head_rows
                                            for x in head) for op in ops}))
        if ell + 1 < len(layers_):
            xq = xkv = [[Fraction(v.decimal(LAYER_PLACES)) for v in row] for row in r.outputs]
    return r.outputs


@dataclass
class Run:
    """A counted run: ``macs`` per stage (with ``total``), ``softmax_ops`` (the exact
    engine's exponentials, additions and divisions: one per distinct gap), the
    exact ``outputs`` of the last layer (each a :class:`~exactattn.engines.layer.LayerValue`,
    one term per head with W_O; empty for a call without projections), and per-token
    ``steps`` when decoding."""

    macs: dict
    softmax_ops: dict
    outputs: list
    steps: list = field(default_factory=list)


def _tokens(x, rows: int, d_model: int) -> list[list]:
    if x is None:
        return count_tokens(rows, d_model)
    tokens = to_matrix(x, name="x", shape=(None, d_model))
    if len(tokens) < rows:
        raise InputError(f"x must have at least {rows} token rows (got {len(tokens)})")
    return tokens


#: the whole numbers -3 .. 3 of :func:`_operand`, as exact numbers (read as they are)
_SMALL = [Fraction(k - 3) for k in range(7)]


def _operand(shape: tuple, index: tuple, head: int, seed: int) -> list[list[Fraction]]:
    """Small whole numbers for rows of one (batch entry, head) of an operand: broadcast entry
    ``index`` reads the operand's own batch entry (a batch dimension of 1 for every entry)."""
    own = tuple(0 if d == 1 else i for i, d in zip(index[len(index) + 3 - len(shape):], shape[:-3]))
    base = seed + 7 * sum((k + 1) * i for k, i in enumerate(own)) + 13 * head
    return [[_SMALL[(3 * r + 5 * c + base) % 7] for c in range(shape[-1])]
            for r in range(shape[-2])]


def _count_attention(shape: CallShape, macs: dict, ops: dict) -> None:
    """Scores and mix of every (broadcast batch entry, query head) on the rows it reads: the
    counts of its :class:`~exactattn.reference.reference.Reference`."""
    plain = Policy(empty_row=shape.policy.empty_row,
                   divisor_squared=shape.policy.divisor_squared_for(shape.d_k))
    seen = shape.policy.keep(shape.queries, shape.keys, shape.mask)
    for b, a in product(product(*map(range, shape.batch)), range(shape.heads)):
        g = shape.policy.kv_head(a, shape.heads, shape.kv_heads)
        ref = head_reference(_operand(shape.query, b, a, 0), _operand(shape.key, b, g, 1),
                             _operand(shape.value, b, g, 2), seen, plain)
        _add(*zip((macs, ops), ref.counts()))


def count_call(shape: CallShape, x=None) -> Run:
    """Run the call through the pencil engine's counted loops; returns a :class:`Run`.

    Every broadcast batch entry and query head is counted by its
    :meth:`Reference.counts <exactattn.reference.reference.Reference.counts>`.  Without
    ``d_model``, on small whole numbers for the rows of query, key and value that the entry reads (a
    batch dimension of 1 is read for every entry) and of the key/value head
    :meth:`Policy.kv_head` maps the query head to.  With ``d_model``, on the
    tokens of :func:`count_tokens` (``x``, optional, replaces them: at least
    max(L, S) rows of d_model exact numbers) through the projections of the
    heads of :func:`count_head`, W_O and every layer (runs of
    :func:`~exactattn.engines.layer.attend_layer`), or one token at a time
    with its KV cache when decoding.  Nothing is computed from a formula.

    Raises:
        InputError: a size that is not a whole number; stacked layers with another key
            length, or of heads without W_O whose d_v is not d_model.

    >>> count_call(CallShape((3, 1, 2, 4), (1, 1, 5, 4), (1, 1, 5, 4))).macs
    {'scores': 120, 'mix': 120, 'total': 240}
    """
    if not shape.whole:
        raise InputError(f"every size must be a whole number to run the call "
                         f"(got {shape.shape})")
    macs, ops = _zero_macs(shape), dict.fromkeys(("exp", "add", "div"), 0)
    outputs, steps = [], []
    n, m, d_model, d_v = shape.queries, shape.keys, shape.d_model, shape.d_v
    if d_model is None:
        _count_attention(shape, macs, ops)
    elif shape.layers > 1 and not shape.out_projection and d_v != d_model:
        raise InputError(f"d_v must equal d_model = {d_model} to stack layers of one head "
                         f"without W_O (got {d_v}); pass heads=1 to add W_O")
    elif shape.layers > 1 and m != n:
        raise InputError(f"layers must be 1 when keys is set (got {shape.layers}); "
                         "stacked layers attend over their own tokens")
    else:
        tokens = _tokens(x, max(n, m), d_model)
        # decoding: one query over the t cached keys sees all t
        layers_ = [_layer(shape, 7 * ell, _DECODING if shape.decode else shape.policy)
                   for ell in range(shape.layers)]
        for _ in range(shape.batch_size):     # every batch entry runs the same tokens
            if shape.decode:
                outputs, steps = _decode(layers_, tokens, shape, macs, ops)
            else:     # every token through every layer at once; the queries sit among the
                # tokens at the call's own diagonal offset (Policy.causal_shift: 0 for
                # top_left, m - n for bottom_right); fewer keys than queries puts the
                # first queries before the keys
                start = max(shape.policy.causal_shift(n, m), 0)
                outputs = _stacked(layers_, tokens[start:start + n], tokens[:m], macs, ops,
                                   mask=shape.mask)
    macs["total"] = sum(macs.values())
    return Run(macs, ops, outputs, steps)


def run(n, d_model, d_k, d_v=None, *, x=None, **options) -> Run:
    """Run the head(s) with the pencil engine's counting loops (:func:`count_call`); see
    :func:`count`.

    ``x`` (optional) replaces :func:`count_tokens`: at least max(n, keys) rows
    of d_model exact numbers.  Returns a :class:`Run`.

    >>> r = run(2, 4, 4, causal=True)
    >>> r.macs["scores"], r.outputs[0][0].decimal(4)
    (12, '0.0000')
    """
    return count_call(CallShape.of_sizes(n, d_model, d_k, d_v, **options), x)


def _decode(layers_: list, tokens, shape: CallShape, macs: dict, ops: dict) -> tuple:
    """Generate the tokens one at a time, each layer keeping a KV cache
    (:func:`attend_layer`'s ``cache``); adds to ``macs``, returns ``(outputs, steps)``."""
    caches = [[[] for _ in range(layer.n_kv_heads)] for layer in layers_]
    steps, last = [], []
    for token in tokens[:shape.queries]:
        step_macs = _zero_macs(shape)
        last.append(_stacked(layers_, [token], [token], step_macs, ops, caches)[0])
        step_macs["total"] = sum(step_macs.values())
        steps.append(step_macs)
        _add((macs, step_macs))
    return last, steps


def count(n, d_model, d_k, d_v=None, **options) -> dict[str, int]:
    """MACs counted by running the head: ``{'projections', 'scores', 'mix',
    ['out_projection',] 'total'}``.

    Runs :func:`count_head` on :func:`count_tokens` through the pencil
    engine's loops (:mod:`exactattn.reference.kernels`, :mod:`exactattn.engines.head`), which
    add one at every multiply-add that runs; nothing is computed from a
    formula.  ``d_v`` defaults to ``d_k``.

    Shapes: n tokens of d_model numbers; each head d_model -> d_k, d_k, d_v.

    Args:
        causal: skip masked pairs (n(n+1)/2 of them remain when keys = n).
        alignment: ``top_left`` (query i sees keys j <= i) or ``bottom_right``
            (j <= i + m - n) when the key length differs.
        keys: key length m (default n); queries are the first n tokens
            (top_left) or the last n of the m (bottom_right).
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

    Reference: the built-in worked example ``chronicle`` (projections 192,
    scores 64, mixing 64, total 320).

    >>> count(4, 4, 4, causal=True)["scores"]
    40
    >>> count(0, 4, 4)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: n must be a positive whole number (got 0)
    """
    return run(n, d_model, d_k, d_v, **options).macs


def decode_steps(n, d_model, d_k, d_v=None, *, heads=None, layers=1) -> list[dict[str, int]]:
    """Counted MACs of generating each token t = 1..n with a KV cache, one dict per token."""
    return run(n, d_model, d_k, d_v, heads=heads, layers=layers, decode=True).steps


# Seconds per unit of work on the project's 2-core machine (measured; rough upper bounds for
# the tokens of count_tokens, which repeat, so scores take at most 4 distinct values per row
# until a causal second layer reads rounded outputs).
_PER_MAC = 0.25e-6            # a multiply-add in the kernels
_PER_PAIR = 1e-6              # grouping a visible pair for the mix loop
_PER_DISTINCT_PAIR = 8e-6     # a pair of a score row no other row repeats (causal, decoding)
_PER_LATE_PAIR = 10e-6        # ... whose scores are all distinct (a causal second layer)
_PER_LATE_MIX = 3e-6          # a mix MAC there (one exponential term per key)
_PER_TERM = 1e-6              # a W_O multiply-add, per exponential term of its row
_PER_ROUNDED = 80e-6          # an output rounded (certified) for the next layer
_PER_ROUNDED_TERM = 2e-6      # ... per exponential term of its row


def estimate_seconds(figures: dict, shape: CallShape) -> float:
    """About how long :func:`run` takes for a head whose derived MACs are ``figures``.

    Known before anything runs, from the derived figures (``derive_at``) and
    the options: the kernels' MACs; every visible pair (scores / d_k), more
    when score rows do not repeat (causal, decoding) and more again when their
    scores are all distinct (the layers after the first, under a causal
    mask); each W_O multiply-add and each output rounded for the next layer,
    once per exponential term of its row (at most 4 until a causal second
    layer makes them up to one per key).  A rough upper bound, in seconds on
    the project's 2-core machine.

    >>> shape = CallShape.of_sizes(4, 4, 4)
    >>> round(estimate_seconds({"total": 320, "scores": 64, "mix": 64}, shape), 6)
    9.6e-05
    """
    n, layers = shape.queries, shape.layers
    distinct = shape.policy.causal or shape.decode
    late = distinct and layers > 1
    terms = shape.keys if late else 4
    pairs = figures["scores"] // shape.d_k
    rounded = (layers - 1) * n * shape.d_model
    seconds = _PER_MAC * figures["total"] + _PER_PAIR * pairs
    if distinct:
        seconds += _PER_DISTINCT_PAIR * pairs
    if late:
        share = (layers - 1) / layers
        seconds += share * (_PER_LATE_PAIR * pairs + _PER_LATE_MIX * figures["mix"])
    seconds += _PER_TERM * figures.get("out_projection", 0) * terms
    return seconds + rounded * (_PER_ROUNDED + _PER_ROUNDED_TERM * terms)
