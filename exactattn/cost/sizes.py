"""The one description of a call that the cost module reads: :class:`CallShape`, checked once.

Every route of the cost package (derived, counted, solved) reads one
:class:`CallShape`: the shapes of query, key and value (the sizes of
``call.shape``: B, H_q, H_kv, L, S, E, E_v), the call's
:class:`~exactattn.call.policy.Policy`, an explicit mask, and what runs around
the attention (the projections from ``d_model``, W_O, stacked layers,
decoding).  Which keys a query sees comes from the policy
(``shape.policy.visible_keys``), the one visibility rule of the package.
Sizes are whole numbers, or sympy expressions on the symbolic routes.  No
sympy here: a counted run never loads it.

Three ways in: the operands' shapes as ``scaled_dot_product_attention``
takes them (``CallShape(query, key, value, policy)``), a
:class:`~exactattn.call.inputs.Call` (:meth:`CallShape.of_call`), or the
sizes of one head that the keyword functions (``count``, ``derive_at``,
``derive``, ...) take (:meth:`CallShape.of_sizes`).

>>> s = CallShape.of_sizes(4, 4, 4, causal=True, alignment="bottom_right", keys=6)
>>> s.shape, list(s.policy.visible_keys(0, 4, 6))
({'B': 1, 'H_q': 1, 'H_kv': 1, 'L': 4, 'S': 6, 'E': 4, 'E_v': 4}, [0, 1, 2])
>>> CallShape.of_sizes(4, 4, 4, alignment="top-left")
Traceback (most recent call last):
...
exactattn.errors.InputError: alignment must be one of top_left, bottom_right (got 'top-left'); write 'top_left'
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass, field
from functools import reduce
from itertools import zip_longest
from operator import mul
from typing import Any

from ..call.masks import Mask
from ..call.policy import ALIGNMENTS, Policy
from ..errors import InputError, ShapeError
from ..options import check_whole

#: the largest size (tokens, keys, a width, heads, layers) a cost table prints: its figures
#: stay far below the 4300 digits Python turns into text
MAX_SIZE = 10 ** 12


def size(value: Any, name: str) -> int:
    """``value`` as a positive whole number (bool, float and text refused; numpy and
    sympy integers accepted).

    >>> size(3, "n")
    3
    """
    if not isinstance(value, (bool, float, str)):
        try:
            value = operator.index(value)
        except TypeError:
            pass
    return check_whole(value, name)


def size_or_expr(value: Any, name: str):
    """A size of a :class:`CallShape` and of the symbolic routes: a sympy expression not
    known to be non-positive kept, anything else (a sympy integer too) a positive whole number."""
    sympy = sys.modules.get("sympy")   # not loaded: the value cannot be a sympy object
    if sympy is not None and isinstance(value, sympy.Basic) and not value.is_Integer:
        if value.is_positive is False:
            raise InputError(f"{name} must be positive (got {value})")
        return value
    return size(value, name)


def policy_of(causal: Any, alignment: Any) -> Policy:
    """The call's :class:`~exactattn.call.policy.Policy` (its one check of ``causal`` and
    ``alignment``), with the fix for the retired spelling ``top-left``."""
    try:
        return Policy(causal=causal, alignment=alignment)
    except InputError as e:
        fixed = alignment.strip().replace("-", "_") if isinstance(alignment, str) else None
        if fixed in ALIGNMENTS and fixed != alignment:
            raise InputError(f"{e}; write {fixed!r}") from None
        raise


def _decode_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"decode must be true or false (got {value!r})")
    return value


def broadcast_batch(*shapes: tuple) -> tuple:
    """The broadcast of batch shapes (NumPy's rule: aligned from the right, 1 repeats).

    Raises:
        ShapeError: two dimensions differ and neither is 1.

    >>> broadcast_batch((1,), (3,)), broadcast_batch((2, 1), (4,)), broadcast_batch((), (5,))
    ((3,), (2, 4), (5,))
    """
    out = []
    for dims in zip_longest(*(s[::-1] for s in shapes), fillvalue=1):
        wide = set(dims) - {1}
        if len(wide) > 1:
            raise ShapeError(f"batch shapes must broadcast (got "
                             f"{' and '.join(map(str, shapes))}); each batch dimension must "
                             "be equal or 1")
        out.append(wide.pop() if wide else 1)
    return tuple(out[::-1])


def _shape(value, name: str) -> tuple:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InputError(f"{name} must be a shape such as (2, 4, 16, 8) (got {value!r})")
    dims = tuple(size_or_expr(d, f"each dimension of {name}") for d in value)
    if len(dims) < 2:
        raise InputError(f"{name} must have at least 2 dimensions, (L, E) (got {dims})")
    return dims


@dataclass(frozen=True)
class CallShape:
    """One attention call, by the shapes of its operands (hashable: derivations are cached by it).

    Shapes: ``query`` ``(*batch_q, H_q, L, E)``, ``key`` ``(*batch_kv, H_kv, S,
    E)``, ``value`` ``(*batch_kv, H_kv, S, E_v)``; a 2-dimensional operand is
    one head, no batch (its loops have no head or batch loop), a batch of 1
    is still a loop.  The batch dimensions broadcast (``batch``, of
    ``batch_size`` entries B).  ``policy`` holds causal, alignment and the GQA
    map; ``mask`` an explicit L x S :class:`~exactattn.call.masks.Mask` shared
    by every batch entry and head.  ``d_model`` (optional) adds the
    projections of a layer (tokens of d_model numbers into H_q heads of E and
    H_kv heads of E and E_v), ``out_projection`` its W_O (H_q E_v -> d_model),
    ``layers`` L such layers stacked, ``decode`` the n = L tokens generated one
    at a time with a KV cache.  Sizes are whole numbers, or sympy expressions
    (:meth:`of_sizes` with symbols: what :func:`~exactattn.cost.derivation.derive`
    sums).

    Raises:
        InputError: a dimension that is not a positive whole number, a bad flag.
        ShapeError: widths that do not match, batches that do not broadcast,
            H_q not a multiple of H_kv, a mask of another size.
    """

    query: tuple
    key: tuple
    value: tuple
    policy: Policy = Policy()
    mask: Mask | None = None
    d_model: Any = None
    out_projection: bool = False
    layers: Any = 1
    decode: bool = False
    batch: tuple = field(init=False)

    def __post_init__(self):
        if not isinstance(self.policy, Policy):
            raise InputError(f"policy must be a Policy (got {type(self.policy).__name__}); "
                             "write Policy(causal=True, ...)")
        for name in ("query", "key", "value"):
            object.__setattr__(self, name, _shape(getattr(self, name), name))
        q, k, v = self.query, self.key, self.value
        if k[-1] != q[-1]:
            raise ShapeError(f"key width must equal the query width E = {q[-1]} (got {k[-1]})")
        if v[:-1] != k[:-1]:
            raise ShapeError(f"value must match key in every dimension but the last "
                             f"(got value {v} and key {k})")
        if self.heads != self.kv_heads:
            self.policy.kv_head(0, self.heads, self.kv_heads)   # H_q a multiple of H_kv
        object.__setattr__(self, "batch", broadcast_batch(q[:-3], k[:-3]))
        if self.mask is not None:
            if not isinstance(self.mask, Mask):
                raise InputError(f"mask must be a Mask (got {type(self.mask).__name__})")
            got = (self.mask.n_queries, self.mask.n_keys)
            if got != (self.queries, self.keys):
                raise ShapeError(f"mask must be {self.queries} x {self.keys}, queries x keys "
                                 f"(got {got[0]} x {got[1]})")
        _decode_flag(self.decode)
        if self.d_model is not None:
            object.__setattr__(self, "d_model", size_or_expr(self.d_model, "d_model"))
            if self.kv_heads != self.heads or q[:-3] != k[:-3]:
                raise ShapeError("a call with projections must have as many key/value heads "
                                 f"and the same batch as its queries (got query {q}, key {k})")
        elif self.out_projection or self.decode:
            raise InputError(f"{'out_projection' if self.out_projection else 'decode'} needs "
                             "d_model (got d_model=None)")
        object.__setattr__(self, "layers", size_or_expr(self.layers, "layers"))

    @classmethod
    def of_sizes(cls, n, d_model, d_k, d_v=None, *, causal=False, alignment="top_left",
                 keys=None, heads=None, layers=1, decode=False) -> "CallShape":
        """The call of the keyword functions: n tokens of ``d_model`` numbers, one head
        (d_model -> d_k, d_k, d_v; ``d_v`` defaults to ``d_k``) or ``heads`` heads plus
        W_O (h d_v -> d_model), over ``keys`` keys (default n), ``layers`` layers.

        Sizes are whole numbers or, when n, d_model, d_k or d_v is a sympy
        expression, sympy numbers and expressions (the symbolic routes).

        Raises:
            InputError: a bad flag, alignment or size; keys with decode.
        """
        n, d_model, d_k = (size_or_expr(v, k) for v, k in ((n, "n"), (d_model, "d_model"),
                                                            (d_k, "d_k")))
        d_v = d_k if d_v is None else size_or_expr(d_v, "d_v")
        policy, decode = policy_of(causal, alignment), _decode_flag(decode)
        if keys is not None:
            keys = size_or_expr(keys, "keys")
            if decode:
                raise InputError("keys must be left unset with decode (got "
                                 f"{keys}); decoding sets its own key length t")
        S = n if keys is None else keys
        lead = () if heads is None else (size_or_expr(heads, "heads"),)
        return cls(lead + (n, d_k), lead + (S, d_k), lead + (S, d_v), policy, None, d_model,
                   heads is not None, size_or_expr(layers, "layers"), decode)

    @classmethod
    def of_call(cls, call) -> "CallShape":
        """The shapes, policy and mask of a :class:`~exactattn.call.inputs.Call`
        (B x H_q x L x E query, B x H_kv x S x E key, B x H_kv x S x E_v value).

        Raises:
            InputError: a mask that differs between batch entries or heads (the cost
                module reads one L x S mask).

        >>> from exactattn.call.inputs import Call
        >>> CallShape.of_call(Call.random(3, 2, heads=2, batch=2)).shape
        {'B': 2, 'H_q': 2, 'H_kv': 2, 'L': 3, 'S': 3, 'E': 2, 'E_v': 2}
        """
        sh, mask = call.shape, None
        if call.mask is not None:
            blocks = {tuple(map(tuple, block)) for entry in call.mask.tolist() for block in entry}
            if len(blocks) > 1:
                raise InputError(f"mask must be the same for every batch entry and head to be "
                                 f"costed (got {len(blocks)} different L x S blocks)")
            mask = Mask(call.policy.mask_kind, [list(r) for r in blocks.pop()])
        B, L, S, E = sh["B"], sh["L"], sh["S"], sh["E"]
        return cls((B, sh["H_q"], L, E), (B, sh["H_kv"], S, E), (B, sh["H_kv"], S, sh["E_v"]),
                   call.policy, mask)

    @property
    def heads(self):
        return self.query[-3] if len(self.query) > 2 else 1

    @property
    def kv_heads(self):
        return self.key[-3] if len(self.key) > 2 else 1

    @property
    def queries(self):
        return self.query[-2]

    @property
    def keys(self):
        return self.key[-2]

    @property
    def d_k(self):
        return self.query[-1]

    @property
    def d_v(self):
        return self.value[-1]

    @property
    def batch_size(self):
        """B: how many broadcast batch entries the call computes."""
        return reduce(mul, self.batch, 1)

    @property
    def shape(self) -> dict:
        """The sizes by the names of ``Call.shape``: B, H_q, H_kv, L, S, E, E_v."""
        return {"B": self.batch_size, "H_q": self.heads, "H_kv": self.kv_heads,
                "L": self.queries, "S": self.keys, "E": self.d_k, "E_v": self.d_v}

    @property
    def whole(self) -> bool:
        """Every size is a whole number (no sympy expression): the call can be run."""
        return all(type(d) is int for d in (*self.query, *self.key, *self.value, self.layers,
                                            1 if self.d_model is None else self.d_model))

    def pairs(self) -> int:
        """Visible (query, key) pairs of one head (:meth:`Policy.pairs`)."""
        return self.policy.pairs(self.queries, self.keys, self.mask)
