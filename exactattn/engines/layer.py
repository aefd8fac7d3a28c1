"""An attention layer, exactly: h heads (own or shared key/value heads), concatenated, times W_O.

Multi-head attention (Vaswani et al. 2017, sec. 3.2.2), with grouped-query
key/value heads (Ainslie et al. 2023) and an explicit padding mask::

    head_a  = attention(x W_Q[a] + b_Q[a], x W_K[g] + b_K[g], x W_V[g] + b_V[g])
              with g = policy.kv_head(a, H, H_kv)                  (n x d_v each)
    outputs = concat(head_1 .. head_H) W_O + b_O                   (n x d_model)

Every head runs its counted projections (:func:`~exactattn.reference.kernels.project`)
and reads its shares, outputs and MACs from its :class:`~exactattn.reference.reference.Reference`
(:meth:`~exactattn.reference.reference.Reference.counts`), as the pencil engine does; a
key/value head shared by several query heads (GQA, MQA) is projected once.  The
counted runs of :mod:`exactattn.cost` are runs of :func:`attend_layer` (decoding with
its KV cache).

An output entry is a sum of exact ratios over DIFFERENT softmax normalisers
(one per head): a :class:`LayerValue` (terms, one :class:`ExpRatio` per head,
plus the rational bias ``b_O``), whose ``decimal(places)`` is certified on the
sum of the enclosures.

Counts: ``macs`` per stage (``projections``, ``scores``, ``mix``,
``out_projection``); bias additions (``b_Q``, ``b_K``, ``b_V``, ``b_O``) are
additions, not multiply-adds, and are counted apart in ``bias_adds``.

>>> layer = Layer([[[1, 0]], [[0, 1]]], [[[1, 1]]], [[[1, 0]]], [[1, 0], [0, 1]], b_O=[0, 1])
>>> run = attend_layer(layer, [[0, 0], [1, 0]])
>>> run.output_decimals(4)
[['0.5000', '1.5000'], ['0.7311', '1.5000']]
>>> run.outputs[1][0], run.macs["out_projection"], run.bias_adds
(LayerValue(exp(1)/(1 + exp(1))), 8, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..call.policy import Mask, Policy
from ..numbers.digits import enclosure_sign
from ..errors import InputError, ShapeError
from ..numbers.exact import common_denominator, fmpq_of, to_matrix, to_row
from .head import Head
from ..reference.kernels import project, to_fractions
from ..call.modifiers import check_keep
from ..numbers.real import Real
from ..numbers.softmax import ExpRatio

__all__ = ["Layer", "LayerValue", "attend_layer", "out_project"]


class LayerValue(Real):
    """One layer output entry: ``constant + sum(terms)``, each term an :class:`ExpRatio`
    over its own head's normaliser (terms over different normalisers do not combine).

    Compares and hashes by value (:class:`~exactattn.numbers.real.Real`): equal
    terms and constants are equal; otherwise the sign of the difference comes
    from enclosures, refused (:class:`~exactattn.errors.Undecided`) when they
    cannot separate it from 0 within the precision bound.

    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> half = SoftmaxRow([Fraction(0), Fraction(0)], None).share(0)
    >>> v = LayerValue((half, half), Fraction(1))
    >>> v.rational(), v.decimal(2), v.text(), v == 2, v == LayerValue((half, half), Fraction(1))
    (Fraction(2, 1), '2.00', '1 + 1/2 + 1/2', True, True)
    >>> e = SoftmaxRow([Fraction(1), Fraction(0)], None).share(0)
    >>> LayerValue((e, e)).decimal(4), LayerValue((), Fraction(1, 8)).decimal(2)
    ('1.4621', '0.12')
    """

    __slots__ = ("terms", "constant")

    def __init__(self, terms: tuple, constant: Fraction = Fraction(0)):
        self.terms = tuple(terms)
        self.constant = Fraction(constant)

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when every term is rational, else None."""
        qs = [e.rational() for e in self.terms]
        return None if None in qs else sum(qs, self.constant)

    def ball(self, prec: int):
        from flint import arb
        total = arb(fmpq_of(self.constant))
        for e in self.terms:
            total += e.ball(prec)
        return total

    def text(self) -> str:
        """The exact value as a sum of closed forms, one per head (and the bias)."""
        parts = ([str(self.constant)] if self.constant else []) + \
            [e.text() for e in self.terms if e.rational() != 0]
        return " + ".join(parts) or "0"

    def _order(self, other) -> int:
        if isinstance(other, LayerValue):
            if self.constant == other.constant and self.terms == other.terms:
                return 0
            q, ball = other.rational(), other.ball
        elif isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            q, ball = Fraction(other), None
        else:
            return NotImplemented
        mine = self.rational()
        if mine is not None and q is not None:
            return (mine > q) - (mine < q)
        theirs = ball or (lambda prec: fmpq_of(q))
        return enclosure_sign(lambda prec: self.ball(prec) - theirs(prec),
                              lambda: f"{self.text()} - ({other})")

    def __repr__(self) -> str:
        return f"LayerValue({self.text()})"


def out_project(W_O: tuple[list[list[int]], int], head_outputs: list) -> tuple[list[list[tuple]], int]:
    """``outputs[i][d] = sum_(a, c) W_O[d][a d_v + c] o_a[i][c]``: one MAC per term.

    ``W_O`` is (integers, denominator) in the slots layout (d_model rows of
    H d_v).  Each head's outputs share that head's softmax normaliser, so its
    terms combine exactly into one :class:`ExpRatio` per head; an entry is the
    tuple of the H ratios.  A head's outputs on one row are held as integers
    over one denominator, one column per exponential term, so a MAC is a run
    of integer multiply-adds over the row's terms.  Returns ``(entries, MACs)``.
    """
    w_ints, den = W_O
    count = 0
    n = len(head_outputs[0])
    result: list[list[list]] = [[[] for _ in w_ints] for _ in range(n)]
    col = 0
    for out in head_outputs:
        d_v = len(out[0])
        for i, values in enumerate(out):
            gaps = list(dict.fromkeys(g for e in values for g in e.numerators))
            ints, vden = common_denominator([[e.numerators.get(g, 0) for g in gaps]
                                             for e in values])
            for d, w in enumerate(w_ints):
                acc = [0] * len(gaps)
                for wc, coefficients in zip(w[col:col + d_v], ints):
                    for k, a in enumerate(coefficients):
                        acc[k] += wc * a
                    count += 1
                result[i][d].append(ExpRatio({g: Fraction(a, den * vden)
                                              for g, a in zip(gaps, acc)}, values[0].row))
        col += d_v
    return [[tuple(terms) for terms in row] for row in result], count


def project_biased(W: Sequence[Sequence], b: Sequence | None, x: list[list[int]], x_den: int,
                   m: tuple | None = None) -> tuple[list[list[int]], int, int, int] | None:
    """``x W^T + b`` on integers: the counted loop :func:`~exactattn.reference.kernels.project`, then
    the bias added once per entry, after the loop.

    Shapes: W d_out x d_model (slots layout), b d_out (or None), x n x d_model
    integers over ``x_den``.  Returns ``(out, den, MACs, bias additions)``
    (out n x d_out integers over den), or None when W or b is not rational.
    A bias addition is one addition, not a multiply-add: it is counted apart.
    ``m``: W's rows and b (its last row) as (ints, den), when the caller converted them once.

    >>> project_biased([[1, 2]], [Fraction(1, 2)], [[1, 1]], 1)
    ([[7]], 2, 2, 1)
    """
    m = m or common_denominator(list(W) if b is None else list(W) + [list(b)])
    if m is None:
        return None
    ints, den = m
    out, macs = project(ints if b is None else ints[:-1], x)
    if b is not None:           # the bias: one addition per entry, after the loop
        out = [[v + a * x_den for v, a in zip(row, ints[-1])] for row in out]
    return out, den * x_den, macs, 0 if b is None else len(out) * len(ints[-1])


def padding_mask(keep: Sequence[bool]) -> Mask:
    """The bool_keep mask of a padded batch row: every query sees the keys ``keep`` marks.

    >>> padding_mask([True, True, False]).rows
    ((True, True, False), (True, True, False), (True, True, False))
    """
    return Mask("bool_keep", [list(keep)] * len(keep))


def _stack(mats, name: str) -> list:
    if hasattr(mats, "ndim") and mats.ndim == 2:
        raise ShapeError(f"{name} must be a list of matrices, one per head (got one "
                         f"{mats.shape[0]} x {mats.shape[1]} matrix); wrap it in a list")
    mats = list(mats)
    if not mats:
        raise ShapeError(f"{name} must hold at least one head (got none)")
    return mats


class Layer:
    """H query heads over H_kv key/value heads, and W_O (+ b_O).

    Shapes: ``W_Q`` a list of H matrices, ``W_K``/``W_V`` lists of H_kv
    matrices (H a multiple of H_kv; MQA is H_kv = 1), each in ``layout``
    (see :class:`~exactattn.engines.head.Head`); ``b_Q`` (H rows), ``b_K``/``b_V``
    (H_kv rows), optional.  ``W_O``: d_model x H d_v in the slots layout (None: the heads alone)
    (``nn.Linear.weight``), H d_v x d_model in the rows layout; ``b_O``:
    d_model numbers.

    Args:
        policy: scale, causal rule, empty rows and the GQA map
            (:meth:`~exactattn.call.policy.Policy.kv_head`); default ``Policy()``.
            Its modifiers apply to every head; query head a runs under
            ``policy.replace(head=policy.head + a)`` (its own ALiBi slope; the
            same numbering as ``verify``'s problem heads).
        sinks: one attention-sink logit per query head (exact numbers), or
            None (``policy.sink``, if any, for every head).
        floats: how binary floats are read (``"exact"``: their binary value).

    ``layer.heads[a]`` is query head a as a :class:`~exactattn.engines.head.Head`
    (with the key/value head it reads), for the single-head tables.
    """

    def __init__(self, W_Q, W_K, W_V, W_O, *, b_Q=None, b_K=None, b_V=None, b_O=None,
                 layout: str = "slots", policy: Policy | None = None, sinks=None,
                 floats: str | None = None):
        policy = Policy() if policy is None else policy
        W_Q, W_K, W_V = (_stack(m, name) for m, name in ((W_Q, "W_Q"), (W_K, "W_K"),
                                                          (W_V, "W_V")))
        H, H_kv = len(W_Q), len(W_K)
        if len(W_V) != H_kv:
            raise ShapeError(f"W_V must hold one matrix per key/value head, {H_kv} (got {len(W_V)})")

        def per_head(b, count, name, what="bias per head"):
            if b is None:
                return [None] * count
            b = list(b)
            if len(b) != count:
                raise ShapeError(f"{name} must hold one {what}, {count} (got {len(b)})")
            return b
        b_Q, b_K, b_V = per_head(b_Q, H, "b_Q"), per_head(b_K, H_kv, "b_K"), per_head(b_V, H_kv, "b_V")
        sink = per_head(sinks, H, "sinks", "sink logit per query head")
        self.kv_of = [policy.kv_head(a, H, H_kv) for a in range(H)]
        self.heads = []
        for a, g in enumerate(self.kv_of):
            head = Head(W_Q[a], W_K[g], W_V[g], b_Q=b_Q[a], b_K=b_K[g], b_V=b_V[g],
                        layout=layout, floats=floats)
            own = policy.replace(head=policy.head + a, **({} if sinks is None else {"sink": sink[a]}))
            self.heads.append(head.with_policy(own))   # the default scale: 1/sqrt(d_k)
        self.policy = policy
        self.n_kv_heads = H_kv
        #: (W, b, W and b as (ints, den)), converted once: W_Q per query head, W_K and W_V per
        #: key/value head
        ws = [[(w, b, common_denominator(list(w) + ([] if b is None else [list(b)]))) for w, b in
               ((h.W_Q, h.b_Q), (h.W_K, h.b_K), (h.W_V, h.b_V))] for h in self.heads]
        self._weights = [w[0] for w in ws], {g: w[1:] for g, w in zip(self.kv_of, ws)}
        d_model, width = self.heads[0].d_model, sum(h.d_v for h in self.heads)
        shape = (d_model, width) if layout == "slots" else (width, d_model)
        w = None if W_O is None else to_matrix(     # None: the heads alone (one head's tables)
            W_O, name="W_O", shape=shape, floats=floats,
            hint=f" in the {layout} layout (H d_v = {width}, d_model = {d_model})")
        self.W_O = w if w is None or layout == "slots" else [list(c) for c in zip(*w)]
        self.b_O = None if b_O is None else to_row(b_O, name="b_O", width=d_model, floats=floats)
        self.d_model = d_model

    def __repr__(self) -> str:
        h = self.heads[0]
        return (f"Layer(heads={len(self.heads)}, kv_heads={self.n_kv_heads}, "
                f"d_model={self.d_model}, d_k={h.d_k}, d_v={h.d_v}, {self.policy.describe()})")


@dataclass
class LayerRun:
    """One run of a layer: per-head traces of the counted step, and the exact outputs.

    ``head_shares[a][i]`` is the :class:`~exactattn.numbers.softmax.SoftmaxRow` of head
    a, query i; ``head_outputs[a]`` n x d_v :class:`ExpRatio`; ``outputs`` n x
    d_model :class:`LayerValue`; ``macs`` per stage; ``bias_adds`` (not MACs).
    """

    layer: Layer
    head_rows: list
    head_outputs: list
    outputs: list
    macs: dict
    bias_adds: int

    def share(self, a: int, i: int, j: int) -> ExpRatio:
        """Head a's exact share of key j for query i."""
        return self.head_rows[a][i].share(j)

    def output_decimals(self, places: int) -> list[list[str]]:
        """Every output entry, correctly rounded to ``places`` places (n x d_model)."""
        return [[v.decimal(places) for v in row] for row in self.outputs]


def _cached(cache: list, new: list) -> list:
    """The key and value projections ``new`` ((ints, den, MACs, adds) each) appended to the
    KV cache ``cache`` (empty, or [keys, den] and [values, den]); returns the cache's
    (ints, den) pairs, every row over one denominator."""
    cache += [] if cache else [[[], 1], [[], 1]]
    for entry, (ints, den, _, _) in zip(cache, new):
        common = math.lcm(entry[1], den)
        if common != entry[1]:
            entry[0] = [[a * (common // entry[1]) for a in r] for r in entry[0]]
        entry[0] += [[a * (common // den) for a in r] for r in ints]
        entry[1] = common
    return [tuple(entry) for entry in cache]


def head_reference(query, key, value, seen, policy: Policy, keep=None):
    """The :class:`~exactattn.reference.reference.Reference` of one head's exact rows (no
    input limit: exact already), ``seen`` its L x S visible pairs (None: the policy's rule),
    ``keep`` its dropout keep-mask: what a layer's head and a counted run read."""
    from ..call.inputs import Call
    from ..call.limits import lifted
    from ..reference.reference import Reference
    with lifted():
        return Reference(Call(query, key, value, seen, policy=policy, mask_kind="bool_keep",
                              dropout_keep=keep))


def attend_layer(layer: Layer, x, *, keys=None, cache: list | None = None,
                 mask: Mask | None = None, floats: str | None = None,
                 dropout_keep=None) -> LayerRun:
    """Run every head of ``layer`` over the token rows ``x``, then W_O (+ b_O), exactly.

    Shapes: ``x`` n x d_model, the queries' tokens; ``keys`` (optional, default ``x``)
    m x d_model, the tokens the keys and values are projected from; ``mask`` (optional)
    an explicit n x m :class:`~exactattn.call.policy.Mask` without additive offsets
    (e.g. :func:`padding_mask`), applied on top of the policy's causal rule;
    ``dropout_keep`` (with ``policy.dropout``) H x n x m dropout keep-masks, one per
    query head.  ``cache`` (decoding): a KV cache, one list per key/value head
    (empty at first): the new keys and values are projected once, appended, and the
    queries attend over every cached key (m counts them).  Without W_O the outputs
    are the heads' outputs, concatenated (one term each).

    Raises:
        ShapeError: tokens of the wrong width, a mask or keep-masks of the wrong size.
        InputError: an additive mask with offsets; entries that are not rational;
            dropout without keep-masks.
    """
    xs = to_matrix(x, name="x", shape=(None, layer.d_model), floats=floats)
    xk = xs if keys is None else to_matrix(keys, name="keys", shape=(None, layer.d_model),
                                           floats=floats)
    n, m = len(xs), len(xk) + (len(cache[0][0][0]) if cache and cache[0] else 0)
    if mask is not None:
        if mask.n_queries != n or mask.n_keys != m:
            raise ShapeError(f"mask must be {n} x {m} (got {mask.n_queries} x {mask.n_keys})")
        if mask.has_offsets:
            raise InputError("mask must hide keys only in a layer (got an additive mask "
                             "with offsets); pass a bool_keep mask")
    H = len(layer.heads)
    if hasattr(dropout_keep, "__len__") and len(dropout_keep) != H:
        raise ShapeError(f"dropout_keep must hold one keep-mask per query head, {H} (got "
                         f"{len(dropout_keep)})")
    keeps = [check_keep(None if dropout_keep is None else dropout_keep[a], h.policy, n, m, "dropout_keep")
             for a, h in enumerate(layer.heads)]
    xq, xk = common_denominator(xs), common_denominator(xk)
    qs = [xq and project_biased(w, b, *xq, m) for w, b, m in layer._weights[0]]
    kv = {g: [xk and project_biased(w, b, *xk, m) for w, b, m in ws]
          for g, ws in layer._weights[1].items()}
    projected = qs + [p for v in kv.values() for p in v]
    if None in projected:
        raise InputError("weights must be rational numbers for an exact layer")
    macs = {"projections": sum(p[2] for p in projected), "scores": 0, "mix": 0,
            "out_projection": 0}
    adds = sum(p[3] for p in projected)
    if cache is not None:
        kv = {g: _cached(cache[g], new) for g, new in kv.items()}
    seen = None if mask is None else layer.policy.keep(n, m, mask)     # with the mask
    rows, head_outputs = [], []
    for a, head in enumerate(layer.heads):     # sinks, ALiBi, soft-cap, RoPE, dropout
        (q, dq, _, _), (k, dk, *_), (v, dv, *_) = qs[a], *kv[layer.kv_of[a]]
        ref = head_reference(*(to_fractions(t, d) for t, d in ((q, dq), (k, dk), (v, dv))),
                             seen, head.policy, keeps[a])
        for stage, count in ref.counts()[0].items():
            macs[stage] = macs.get(stage, 0) + count
        rows.append([ref.row(0, 0, i) for i in range(n)])
        head_outputs.append(ref.outputs())
    if layer.W_O is None:       # the heads alone: their outputs, concatenated
        return LayerRun(layer, rows, head_outputs, [[LayerValue((e,)) for e in sum(r, [])]
                                                    for r in zip(*head_outputs)], macs, adds)
    entries, macs["out_projection"] = out_project(common_denominator(layer.W_O), head_outputs)
    b_O = layer.b_O or [Fraction(0)] * layer.d_model
    adds += 0 if layer.b_O is None else n * layer.d_model
    outputs = [[LayerValue(terms, b) for terms, b in zip(row, b_O)] for row in entries]
    return LayerRun(layer, rows, head_outputs, outputs, macs, adds)
