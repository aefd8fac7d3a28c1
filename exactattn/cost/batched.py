"""Batched calls: ``B x H x L x E`` shapes, broadcast batches and GQA groups, derived and counted.

An attention call as a library takes it (``torch.nn.functional.
scaled_dot_product_attention``): query ``(*batch_q, H_q, L, E)``, key
``(*batch_kv, H_kv, S, E)``, value ``(*batch_kv, H_kv, S, E_v)``.  The batch
dimensions broadcast (a dimension of 1 is repeated, NumPy's rule); query head
h reads key/value head :meth:`Policy.kv_head <exactattn.call.policy.Policy.kv_head>`
(GQA groups of H_q / H_kv); which keys a query sees is
:meth:`Policy.visible_keys <exactattn.call.policy.Policy.visible_keys>` narrowed by an
explicit :class:`~exactattn.call.masks.Mask` (:meth:`Policy.keep
<exactattn.call.policy.Policy.keep>`), the same for every batch entry and head.

Two routes, which must agree:

* **derived** (:func:`call_formula`, :func:`derive_call`): the loop nests of
  :func:`~exactattn.cost.derivation.loop_nests` (the causal bounds from the
  one visibility rule) inside a loop over the broadcast batch ``B`` and the
  ``h`` query heads, summed by sympy; an explicit mask gives one nest per run
  of kept keys in a row of ``Policy.keep``;
* **counted** (:func:`count_call`): every (batch entry, query head) runs the
  pencil engine's counted step (:func:`exactattn.head.score_and_mix`) on the
  rows that the broadcast and the GQA map pick.

Units: MACs (FLOPs = 2 x MACs).  Reference: Vaswani et al. 2017, sec. 3.2.2
(heads); Ainslie et al. 2023 (GQA); the NumPy broadcasting rule.

>>> s = CallShape((1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
...               Policy(causal=True, alignment="bottom_right"))
>>> derive_call(s)
{'scores': 272, 'mix': 544, 'total': 816}
>>> count_call(s).macs == derive_call(s)
True
>>> derive_call(CallShape((1, 1, 2, 4), (3, 1, 5, 4), (3, 1, 5, 4)))["scores"]
120
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from operator import mul

import numpy as np
import sympy

from ..call.policy import Policy
from ..errors import InputError, ShapeError
from ..call.masks import Mask
from .derivation import EXTENSION_SYMBOLS, SYMBOLS, LoopNest, loop_nests
from .sizes import size

__all__ = ["BATCH", "CallRun", "CallShape", "broadcast_batch", "call_formula", "call_nests",
           "count_call", "derive_call"]

#: B, the number of broadcast batch entries (the product of the broadcast batch shape)
BATCH = sympy.Symbol("B", positive=True, integer=True)
_b = sympy.Symbol("b", integer=True, nonnegative=True)


def broadcast_batch(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of batch shapes (``numpy.broadcast_shapes``: aligned from the right, 1 repeats).

    Raises:
        ShapeError: two dimensions differ and neither is 1.

    >>> broadcast_batch((1,), (3,)), broadcast_batch((2, 1), (4,)), broadcast_batch((), (5,))
    ((3,), (2, 4), (5,))
    """
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"batch shapes must broadcast (got {' and '.join(map(str, shapes))}); "
                         "each batch dimension must be equal or 1") from None


def _own_index(index: tuple[int, ...], own: tuple[int, ...]) -> tuple[int, ...]:
    """The entry of a tensor with batch shape ``own`` that broadcast entry ``index`` reads."""
    tail = index[len(index) - len(own):] if own else ()
    return tuple(0 if d == 1 else i for i, d in zip(tail, own))


def _shape(value, name: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InputError(f"{name} must be a shape such as (2, 4, 16, 8) (got {value!r})")
    dims = tuple(size(d, f"each dimension of {name}") for d in value)
    if len(dims) < 2:
        raise InputError(f"{name} must have at least 2 dimensions, (L, E) (got {dims})")
    return dims


@dataclass(frozen=True)
class CallShape:
    """One attention call by the shapes of its operands.

    Shapes: ``query`` ``(*batch_q, H_q, L, E)``, ``key`` ``(*batch_kv, H_kv, S,
    E)``, ``value`` ``(*batch_kv, H_kv, S, E_v)`` (a 2-dimensional operand is
    one head, no batch).  ``policy`` holds causal, alignment and the GQA map;
    ``mask`` an explicit L x S :class:`~exactattn.call.masks.Mask` shared by every
    batch entry and head.  ``d_model`` (optional) adds the projections of a
    layer (tokens of d_model numbers into H_q heads of E and H_kv heads of E
    and E_v), and ``out_projection`` its W_O (H_q E_v -> d_model).

    Raises:
        InputError: a dimension that is not a positive whole number.
        ShapeError: widths that do not match, batches that do not broadcast,
            H_q not a multiple of H_kv, a mask of another size.
    """

    query: tuple
    key: tuple
    value: tuple
    policy: Policy = Policy()
    mask: Mask | None = None
    d_model: int | None = None
    out_projection: bool = False
    batch: tuple = field(init=False)

    def __post_init__(self):
        if not isinstance(self.policy, Policy):
            raise InputError(f"policy must be a Policy (got {type(self.policy).__name__}); "
                             "write Policy(causal=True, ...)")
        q, k, v = (_shape(s, n) for s, n in ((self.query, "query"), (self.key, "key"),
                                              (self.value, "value")))
        object.__setattr__(self, "query", q)
        object.__setattr__(self, "key", k)
        object.__setattr__(self, "value", v)
        if k[-1] != q[-1]:
            raise ShapeError(f"key width must equal the query width E = {q[-1]} (got {k[-1]})")
        if v[:-1] != k[:-1]:
            raise ShapeError(f"value must match key in every dimension but the last "
                             f"(got value {v} and key {k})")
        self.policy.kv_head(0, self.heads, self.kv_heads)   # H_q a multiple of H_kv
        object.__setattr__(self, "batch", broadcast_batch(q[:-3], k[:-3]))
        if self.mask is not None:
            if not isinstance(self.mask, Mask):
                raise InputError(f"mask must be a Mask (got {type(self.mask).__name__})")
            got = (self.mask.n_queries, self.mask.n_keys)
            if got != (self.queries, self.keys):
                raise ShapeError(f"mask must be {self.queries} x {self.keys}, queries x keys "
                                 f"(got {got[0]} x {got[1]})")
        if self.d_model is not None:
            object.__setattr__(self, "d_model", size(self.d_model, "d_model"))
            if self.kv_heads != self.heads or q[:-3] != k[:-3]:
                raise ShapeError("a call with projections must have as many key/value heads "
                                 f"and the same batch as its queries (got query {q}, key {k})")
        elif self.out_projection:
            raise InputError("out_projection needs d_model (got d_model=None)")

    @property
    def heads(self) -> int:
        return self.query[-3] if len(self.query) > 2 else 1

    @property
    def kv_heads(self) -> int:
        return self.key[-3] if len(self.key) > 2 else 1

    @property
    def queries(self) -> int:
        return self.query[-2]

    @property
    def keys(self) -> int:
        return self.key[-2]

    @property
    def d_k(self) -> int:
        return self.query[-1]

    @property
    def d_v(self) -> int:
        return self.value[-1]

    @property
    def batch_size(self) -> int:
        """B: how many broadcast batch entries the call computes."""
        return reduce(mul, self.batch, 1)

    def pairs(self) -> int:
        """Visible (query, key) pairs of one head (:meth:`Policy.pairs`)."""
        return self.policy.pairs(self.queries, self.keys, self.mask)

    def values(self) -> dict:
        """The symbols of :func:`call_formula` at this call's sizes."""
        n, D, d_k, d_v = SYMBOLS
        m, h = EXTENSION_SYMBOLS.m, EXTENSION_SYMBOLS.h
        vals = {BATCH: self.batch_size, h: self.heads, n: self.queries, m: self.keys,
                d_k: self.d_k, d_v: self.d_v}
        if self.d_model is not None:
            vals[D] = self.d_model
        return vals


def _with_batch(nest: LoopNest) -> LoopNest:
    return LoopNest(nest.name, nest.stage, ((_b, 0, BATCH - 1),) + nest.loops,
                    "for every broadcast batch entry: " + nest.code)


def _mask_nests(shape: CallShape, stage: str, width) -> tuple[LoopNest, ...]:
    """One nest per run of kept keys in each row of ``Policy.keep`` (the explicit mask)."""
    h = EXTENSION_SYMBOLS.h
    a, j, c = (sympy.Symbol(s, integer=True, nonnegative=True) for s in "ajc")
    keep = shape.policy.keep(shape.queries, shape.keys, shape.mask)
    nests = []
    for i, row in enumerate(keep.tolist()):
        j0 = None
        for jj, kept in enumerate(row + [False]):
            if kept and j0 is None:
                j0 = jj
            elif not kept and j0 is not None:
                nests.append(LoopNest(stage, stage, ((_b, 0, BATCH - 1), (a, 0, h - 1),
                                                     (j, j0, jj - 1), (c, 0, width - 1)),
                                      f"query {i}: keys {j0}..{jj - 1} (kept by the mask)"))
                j0 = None
    return tuple(nests)


def call_nests(shape: CallShape) -> dict[str, tuple[LoopNest, ...]]:
    """Each stage's loop nests with a loop over the ``B`` broadcast batch entries outermost.

    Symbols: ``B`` (:data:`BATCH`), ``h`` query heads, ``n`` queries, ``m``
    keys (when it differs from n), ``d_k``, ``d_v``, and ``D`` with
    projections.  A GQA call loops over the h query heads: the key/value head
    is a lookup (:meth:`Policy.kv_head`), not a loop.  An explicit mask, a
    sliding window or a query offset gives the nests of each row's runs of
    visible keys (:meth:`Policy.keep`) at their numeric bounds.
    """
    n, D, d_k, d_v = SYMBOLS
    h = EXTENSION_SYMBOLS.h
    keys = None if shape.keys == shape.queries else EXTENSION_SYMBOLS.m
    base = loop_nests(shape.policy.causal, alignment=shape.policy.alignment, keys=keys,
                      heads=h, keys_at_least_queries=shape.keys >= shape.queries)
    stages = ["scores", "mix"]
    if shape.d_model is not None:
        stages.insert(0, "projections")
        if shape.out_projection:
            stages.append("out_projection")
    out = {}
    for stage in stages:
        if stage in ("scores", "mix") and (shape.mask is not None or
                                           shape.policy.window is not None or
                                           shape.policy.query_offset is not None):
            out[stage] = _mask_nests(shape, stage, d_k if stage == "scores" else d_v)
        else:
            out[stage] = tuple(_with_batch(x) for x in base[stage])
    return out


def call_formula(shape: CallShape) -> dict:
    """MACs per stage (and ``total``) as sympy expressions, summed from :func:`call_nests`.

    >>> s = CallShape((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), Policy(causal=True))
    >>> call_formula(s)["scores"]
    B*d_k*h*n**2/2 + B*d_k*h*n/2
    """
    out = {stage: sympy.expand(sympy.Add(*[x.macs() for x in nests]))
           for stage, nests in call_nests(shape).items()}
    out["total"] = sympy.expand(sympy.Add(*out.values()))
    return out


def derive_call(shape: CallShape) -> dict[str, int]:
    """The derived MACs of each stage (and ``total``) at the call's sizes, as ints.

    >>> derive_call(CallShape((1, 4, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)))
    {'scores': 512, 'mix': 512, 'total': 1024}
    """
    vals = shape.values()
    return {k: int(v.subs(vals)) for k, v in call_formula(shape).items()}


@dataclass(frozen=True)
class CallRun:
    """A counted batched call: ``macs`` per stage (and ``total``) and the exact engine's
    ``softmax_ops`` (exponentials, additions, divisions: one per distinct gap)."""

    macs: dict
    softmax_ops: dict


def _operand(shape: tuple, index: tuple, head: int, seed: int) -> list[list[int]]:
    """Small whole numbers for rows of one (batch entry, head) of an operand."""
    base = seed + 7 * sum((k + 1) * i for k, i in enumerate(index)) + 13 * head
    return [[(3 * r + 5 * c + base) % 7 - 3 for c in range(shape[-1])]
            for r in range(shape[-2])]


def count_call(shape: CallShape) -> CallRun:
    """Run the call: every broadcast batch entry and query head through the counted step.

    The query rows are those of the query's own batch entry (a dimension of 1
    is read for every entry), the key and value rows those of the key/value
    head :meth:`Policy.kv_head` maps the query head to.  With ``d_model``, each
    batch entry runs :func:`~exactattn.cost.counting.run` (projections, the
    heads, W_O).  Nothing is computed from a formula.

    >>> count_call(CallShape((3, 1, 2, 4), (1, 1, 5, 4), (1, 1, 5, 4))).macs
    {'scores': 120, 'mix': 120, 'total': 240}
    """
    from itertools import product

    from ..head import score_and_mix
    if shape.d_model is not None:
        return _count_layer(shape)
    L, S = shape.queries, shape.keys
    keep = shape.policy.keep(L, S, shape.mask)
    rows = [[j for j, kept in enumerate(r) if kept] for r in keep.tolist()]
    d2 = shape.policy.divisor_squared_for(shape.d_k)
    macs = {"scores": 0, "mix": 0}
    ops = {"exp": 0, "add": 0, "div": 0}
    for index in product(*(range(d) for d in shape.batch)):
        qi, ki = _own_index(index, shape.query[:-3]), _own_index(index, shape.key[:-3])
        for a in range(shape.heads):
            g = shape.policy.kv_head(a, shape.heads, shape.kv_heads)
            q = _operand(shape.query, qi, a, 0)
            k, v = _operand(shape.key, ki, g, 1), _operand(shape.value, ki, g, 2)
            _, _, srows, _, ms, mm = score_and_mix(q, k, v, rows.__getitem__, 1, 1, d2,
                                                   shape.policy.empty_row)
            macs["scores"] += ms
            macs["mix"] += mm
            for r in srows:
                ops["exp"] += r.exps
                ops["add"] += r.adds
                ops["div"] += r.divs
    macs["total"] = macs["scores"] + macs["mix"]
    return CallRun(macs, ops)


def _count_layer(shape: CallShape) -> CallRun:
    from itertools import product

    from .counting import run
    macs: dict = {}
    ops = {"exp": 0, "add": 0, "div": 0}
    keys = None if shape.keys == shape.queries else shape.keys
    for _ in product(*(range(d) for d in shape.batch)):
        r = run(shape.queries, shape.d_model, shape.d_k, shape.d_v,
                causal=shape.policy.causal, alignment=shape.policy.alignment, keys=keys,
                heads=shape.heads)
        for stage, value in r.macs.items():
            if stage in ("out_projection", "total"):
                continue
            macs[stage] = macs.get(stage, 0) + value
        if shape.out_projection:
            macs["out_projection"] = macs.get("out_projection", 0) + r.macs["out_projection"]
        for k in ops:
            ops[k] += r.softmax_ops[k]
    macs["total"] = sum(macs.values())
    return CallRun(macs, ops)
