"""The inputs of one attention call, held exactly: query, key, value and an explicit mask.

Shapes follow PyTorch's ``scaled_dot_product_attention``: query B x H_q x L x E,
key B x H_kv x S x E, value B x H_kv x S x E_v; a caller may pass L x E or
H x L x E and is handed arrays of that rank back.  The mask is an explicit
:class:`~exactattn.call.policy.Mask` per (batch, query head); the causal rule is not
a mask, it is ``Policy(causal=True)``.  A dropout keep-mask
(``dropout_keep``, B x H_q x L x S booleans, True = kept) is data of the call
too; ``Policy.dropout`` gives its p.

Non-finite numbers: ``inf``, ``-inf`` and ``nan`` may stand in a key or a
value (padding often holds them) and are kept as Python floats; they are
legal only where no query sees them.  :meth:`Call.check_nonfinite` is the
one check, run by :class:`~exactattn.verify.Reference`; a non-finite entry a query sees is a one-line error naming it
(``key[1][0] must be finite where a query sees it (got inf); ...``).

>>> c = Call([["1/2"]], [[1], [2]], [[3], [4]])
>>> c.shape
{'B': 1, 'H_q': 1, 'H_kv': 1, 'L': 1, 'S': 2, 'E': 1, 'E_v': 1}
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .masks import is_minus_inf
from .modifiers import dropout_factors
from .policy import MASK_KINDS, Mask, Policy
from ..errors import InputError, ShapeError, shorten, too_long_to_write
from ..numbers.exact import binary64, fmpq_mat_of, is_symbolic, to_exact, to_matrix
from ..options import check_choice, check_whole
from ..numbers.formats import float_format, round_to_format
from .limits import check_inputs, lifted

__all__ = ["Call"]


def _dims(shape) -> str:
    return shorten(" x ".join(map(str, shape)))


def _as_array(data, name: str) -> np.ndarray:
    if hasattr(data, "detach"):  # a torch tensor: read its values exactly as floats
        data = data.detach().cpu().double().numpy()
    if isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.array(data, dtype=object)
        except (ValueError, TypeError):
            raise ShapeError(f"{name} must be a rectangular list of numbers with 2, 3 or 4 "
                             "dimensions (got a ragged or too deeply nested list)") from None
    if arr.ndim <= 4 and arr.dtype == object and \
            any(isinstance(x, (list, tuple, dict)) for x in arr.flat):
        raise ShapeError(f"{name} must be rectangular: rows of equal length holding numbers "
                         "(got a ragged list)")
    if arr.ndim not in (2, 3, 4):
        deep = " or more" if arr.ndim >= 32 else ""    # numpy stops at its most dimensions
        raise ShapeError(f"{name} must have 2, 3 or 4 dimensions (L x E, H x L x E or "
                         f"B x H x L x E) (got {arr.ndim}{deep})")
    if 0 in arr.shape:
        raise ShapeError(f"{name} must have at least one entry in every dimension "
                         f"(got {_dims(arr.shape)})")
    return arr


def rectangular(data, name: str) -> np.ndarray:
    """``numpy.asarray(data)``; a ragged list refused in one line naming ``name``, as
    :class:`Call` refuses it (``query must be rectangular: ...``)."""
    try:
        return np.asarray(data)
    except ValueError:
        return _as_array(data, name)


def _number_text(x: Fraction) -> str:
    """An exact number for a message, cut to 40 characters (past Python's 4300-digit limit for
    writing an integer, its size instead)."""
    if too_long_to_write(x):
        return f"a number of about {int(x.numerator.bit_length() * 0.30103)} digits"
    return shorten(str(x))


def object_array(flat: list, shape) -> np.ndarray:
    """A numpy object array of ``shape`` holding the values of ``flat`` as they are.

    >>> object_array([Fraction(1, 2), None], (1, 2))
    array([[Fraction(1, 2), None]], dtype=object)
    """
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def reshaped(a: np.ndarray, want: tuple, rank: int, what: str, *, tail: bool = True,
             like: str = "") -> np.ndarray:
    """``a``, an array of a call's shape (its last ``rank`` dimensions), reshaped to ``want``.

    Raises:
        ShapeError: another number of entries or (with ``tail``) other last two
            dimensions: ``"<what> must be L x E_v<like> (got ...)"``.

    >>> reshaped(np.zeros((2, 3)), (1, 1, 2, 3), 2, "f's output").shape
    (1, 1, 2, 3)
    """
    if a.size != math.prod(want) or (tail and a.shape[-2:] != want[-2:]):
        raise ShapeError(f"{what} must be {' x '.join(map(str, want[len(want) - rank:]))}{like} "
                         f"(got {' x '.join(map(str, a.shape)) or 'a single value'})")
    return a.reshape(want)


def rounded_entries(a: np.ndarray, dtype: str, what: str,
                    fix: str = "") -> tuple[np.ndarray, int]:
    """An object array's exact entries rounded to ``dtype`` (the exact values of the floats),
    and how many moved; None, booleans and non-finite entries stay as they are.

    Raises:
        InputError: an entry overflows the dtype (the message names ``what``, then ``fix``).

    >>> rounded_entries(object_array([Fraction(1, 3), None], (2,)), "bfloat16", "inputs")
    (array([Fraction(171, 512), None], dtype=object), 1)
    """
    fmt = float_format(dtype)
    moved = 0

    def rnd(x):
        nonlocal moved
        if x is None or isinstance(x, (bool, float)):   # float: inf or nan, kept
            return x
        f = round_to_format(x, fmt)
        if math.isinf(f):
            raise InputError(f"{what} must fit in {fmt.name} (got {_number_text(x)}, "
                             f"which overflows){fix}")
        fx = Fraction(f)
        moved += fx != x
        return fx
    return object_array([rnd(x) for x in a.reshape(-1)], a.shape), moved


def float_ints(a) -> tuple[np.ndarray, int]:
    """A float array as exact integers over one power of two: ``(ints, den)``.

    Every finite binary float is ``m 2^e``; the numerators are ``m 2^(e - e_min)``
    over ``den = 2^-e_min`` (1 when every entry is an integer).  int64 where
    every numerator fits below 2^62, else Python ints.

    Raises:
        InputError: an entry is NaN or infinite.

    >>> float_ints(np.array([[0.75, -2.0], [0.0, 0.125]], dtype=np.float32))
    (array([[ 6, -16],
           [ 0,   1]]), 8)
    """
    a = np.asarray(a, dtype=np.float64)       # float16/32 -> float64 is exact
    if not np.isfinite(a).all():
        raise InputError(f"inputs must be finite floats (got {shorten(str(a[~np.isfinite(a)][0]))}"
                         "); a NaN or infinite input has no exact value")
    (m, e), nz = np.frexp(a), a != 0
    mant = np.ldexp(m, 53).astype(np.int64)            # exact: 53 significant bits at most
    tz = np.maximum(np.frexp((mant & -mant).astype(np.float64))[1] - 1, 0)  # trailing zero bits
    low = e - 53 + tz                                  # a = (mant >> tz) 2^low, exactly
    k = max(0, -int(low[nz].min(initial=0)))           # den = 2^k
    if int(e[nz].max(initial=-k)) + k <= 61:           # every numerator below 2^61: int64
        return np.ldexp(a, k).astype(np.int64), 1 << k
    ints = map(int.__lshift__, (mant >> tz).ravel().tolist(), np.where(nz, low + k, 0).ravel().tolist())
    return np.array(list(ints), dtype=object).reshape(a.shape), 1 << k


def _entries_of(ints: np.ndarray, den: int) -> np.ndarray:
    """Numerators over ``den`` as an object array of ``Fraction`` entries (lowest terms)."""
    return object_array([Fraction(int(n), den) for n in ints.reshape(-1).tolist()], ints.shape)


def _numerators_of(entries: np.ndarray) -> tuple[np.ndarray, int]:
    """An object array's exact entries as integers over their least common denominator
    (``inf``/``nan`` read as 0)."""
    from ..numbers.bulk import int_array
    flat = [Fraction(0) if isinstance(x, float) else x for x in entries.reshape(-1).tolist()]
    den = math.lcm(*(x.denominator for x in flat))
    return int_array([x.numerator * (den // x.denominator) for x in flat], entries.shape), den


_NONFINITE = {sign + word for sign in ("", "+", "-") for word in ("inf", "infinity", "nan")}


def _exact_array(arr: np.ndarray, name: str, floats: str | None, nonfinite: bool) -> list:
    """An array's entries read exactly, B x H x n x E, as a held tensor ``[entries, numerators]``
    (finite binary floats read as ``(ints, den)``, their entries built on first use); with
    ``nonfinite``, ``inf`` and ``nan`` (floats, or text such as ``-Infinity``) kept as Python floats."""
    shape = (1,) * (4 - arr.ndim) + arr.shape
    if arr.dtype.kind == "f" and floats == "exact" and np.isfinite(arr).all():
        return [None, float_ints(arr.reshape(shape))]
    flat = []
    for v in (v.item() if isinstance(v, np.generic) else v for v in arr.reshape(-1)):
        if type(v) is Fraction:    # already exact: kept as it is
            flat.append(v)
        elif nonfinite and (isinstance(v, float) and not math.isfinite(v) or
                            isinstance(v, str) and v.strip().lower() in _NONFINITE):
            flat.append(float(v))
        else:
            flat.append(to_exact(v, name=name, floats=floats))
    return [object_array(flat, shape), None]


def _blocks(data, shape: tuple, name: str, bools: bool = False) -> np.ndarray:
    """A mask or a dropout keep-mask (``bools``: True/False entries only) broadcast to
    ``shape`` (B x H_q x L x S), a read-only view; a tensor's entries read exactly.

    Raises:
        InputError: ``bools`` and an entry that is not a boolean.
        ShapeError: ``name`` cannot broadcast to ``shape``.
    """
    if hasattr(data, "detach"):     # booleans or floats (bfloat16 too), each exactly
        data = data.detach().cpu().tolist()
    raw = np.array(data, dtype=object)
    bad = [x for x in raw.reshape(-1) if not isinstance(x, (bool, np.bool_))] if bools else []
    if bad:
        raise InputError(f"{name} must hold true/false entries (True = kept) (got "
                         f"{shorten(bad[0], quote=True)})")
    try:
        return np.broadcast_to(raw.astype(bool) if bools else raw, shape)
    except ValueError:
        raise ShapeError(f"{name} must be L x S = {shape[2]} x {shape[3]} or broadcast to "
                         f"{_dims(shape)} (got {_dims(raw.shape)})") from None


def _mask_blocks(mask, kind: str, shape: tuple, floats: str | None) -> tuple[np.ndarray, tuple]:
    """The mask broadcast to B x H_q x L x S and read block by block with :class:`Mask`,
    and the shape it was given in."""
    raw, out = _blocks(mask, shape, "mask"), np.empty(shape, dtype=object)
    for b, h in np.ndindex(shape[:2]):
        m = Mask(kind, raw[b, h].tolist(), floats=floats)
        out[b, h] = object_array([e for r in m.rows for e in r], shape[2:])
    return out, tuple(mask.shape) if hasattr(mask, "shape") else np.shape(mask)


#: the policy keywords the bulk judge takes (the others change the logits themselves)
BULK_POLICY_KEYS = ("alignment", "empty_row", "gqa", "window", "query_offset", "sink", "head")


def sdpa_floats(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False, **policy):
    """SDPA's arguments as :func:`exactattn.reference.bound.enclose_outputs` takes them:
    ``(query, key, value, policy, keep, offsets, rank)``, float64 arrays B x H x n x E (exact
    copies) and the rank the caller used,
    or None when only :meth:`Call.from_sdpa` reads them (entries that are not floats or not
    finite, a mask of NaN or ``+inf``, a keyword past :data:`BULK_POLICY_KEYS`, shapes it
    refuses): that reading is the one that names a bad input.
    """
    if any(k not in BULK_POLICY_KEYS for k in policy) or type(is_causal) is not bool or \
            type(enable_gqa) is not bool or type(dropout_p) not in (int, float) or dropout_p != 0:
        return None
    try:        # ragged lists, a bfloat16 mask, a mask that does not broadcast: the exact path
        arrays = [a.detach().cpu().double().numpy() if hasattr(a, "detach") else np.asarray(a)
                  for a in (query, key, value)]
        if any(a.dtype.kind != "f" or a.dtype.itemsize > 8 or a.ndim not in (2, 3, 4) or
               a.ndim != arrays[0].ndim or 0 in a.shape or not np.isfinite(a).all()
               for a in arrays):
            return None
        q, k, v = (a.astype(np.float64).reshape((1,) * (4 - a.ndim) + a.shape) for a in arrays)
        if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or v.shape[:3] != k.shape[:3] \
                or q.shape[1] % k.shape[1] or (not enable_gqa and q.shape[1] != k.shape[1]):
            return None
        m = None if attn_mask is None else attn_mask.detach().cpu().numpy() \
            if hasattr(attn_mask, "detach") else np.asarray(attn_mask)
        if m is not None:
            np.broadcast_to(m, q.shape[:3] + (k.shape[2],))      # a ValueError if it does not
            if m.dtype != bool and (m.dtype.kind != "f" or np.isnan(m).any() or (m == np.inf).any()):
                return None
    except (ValueError, TypeError):
        return None
    keep, offsets = (None, None) if m is None else (m, None) if m.dtype == bool else \
        (None, m.astype(np.float64))
    pol = _sdpa_policy(is_causal, scale, "bool_keep" if offsets is None else "additive", policy)
    return q, k, v, pol, keep, offsets, np.ndim(query)


def call_floats(call: "Call"):
    """A call's inputs as :func:`sdpa_floats` gives them, when every entry is a float64 value
    (a call rounded to a binary format; :func:`~exactattn.numbers.exact.binary64` decides):
    ``(query, key, value, policy, keep, offsets, rank)``;
    None when one is not (or not finite), or with a dropout keep-mask."""
    def floats(a, hide=False):        # hide: -inf (a hidden key) stays -inf
        hidden = hide and np.vectorize(lambda x: x == -math.inf, otypes=[bool])(a)
        out = binary64(np.where(hidden, 0, a) if hide else a)
        return None if out is None else np.where(hidden, -math.inf, out)
    q, k, v = (floats(a) for a in (call.query, call.key, call.value))
    if q is None or k is None or v is None or call.dropout_keep is not None:
        return None
    kind, keep, offsets = call.mask_kind, None, None
    if kind == "additive":
        offsets = floats(call.mask, hide=True)
        if offsets is None:
            return None
    elif kind is not None:
        keep = call.mask.astype(bool) ^ (kind == "bool_drop")
    return q, k, v, call.policy, keep, offsets, call.rank


#: the keywords :meth:`Call.from_sdpa` takes besides SDPA's own: the :class:`Policy` fields
#: SDPA has no argument for, and the dropout keep-mask
SDPA_POLICY_KEYS = ("alignment", "empty_row", "gqa", "window", "query_offset", "softcap", "sink",
                    "alibi", "rope", "dropout", "head", "dropout_keep")


def _sdpa_array(data, name: str) -> np.ndarray:
    """An array argument as numpy: floats widened exactly to float64 (bfloat16 included),
    booleans and other entries as they are; a ragged list refused, named."""
    arr = rectangular(data, name)
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise InputError(f"{name} must be float64 or narrower (got {arr.dtype.name}); "
                         "float64 cannot hold its entries exactly")
    if arr.dtype.kind == "f" or arr.dtype.name == "bfloat16":
        return arr.astype(np.float64)
    return arr


def _sdpa_policy(is_causal, scale, mask_kind: str, policy: dict) -> Policy:
    """The :class:`Policy` of SDPA's arguments: ``scale`` a float as its exact value, text and
    exact numbers as :func:`~exactattn.call.policy.parse_scale` reads them."""
    if isinstance(scale, (bool, np.bool_)):
        raise InputError(f"scale must be None or a positive number (got {scale!r})")
    if isinstance(scale, (float, np.floating)):
        if not (math.isfinite(scale) and scale > 0):
            raise InputError(f"scale must be a positive finite number (got {float(scale)!r})")
        scale = Fraction(float(scale))
    return Policy(causal=bool(is_causal), mask_kind=mask_kind,
                  **({} if scale is None else {"scale": scale}), **policy)


class Call:
    """One attention call, held exactly: query, key, value, its :class:`Policy`, an explicit mask
    and a dropout keep-mask.  The one input of every evaluator and check.

    Args:
        query, key, value: nested lists, numpy arrays or tensors of rank 2
            (L x E), 3 (H x L x E) or 4 (B x H x L x E), read exactly by
            :func:`exactattn.numbers.exact.to_exact` (binary floats are refused unless
            ``floats`` says how to read them).  Keys and values may hold
            ``inf``, ``-inf`` or ``nan`` (floats or text) where no query sees
            them (:meth:`check_nonfinite`, run by the reference).
        mask: None, or L x S (broadcastable to B x H_q x L x S) entries read as
            a :class:`~exactattn.call.policy.Mask` of ``policy.mask_kind``.
        policy: the :class:`Policy` (default ``Policy()``); ``mask_kind``, when
            given, replaces its mask kind.
        dropout_keep: None or booleans (True = kept) broadcastable like the
            mask: the keep-mask of ``policy.dropout``.
        name: how reports name the call.

    Held as: ``query`` B x H_q x L x E, ``key`` B x H_kv x S x E, ``value``
    B x H_kv x S x E_v, each as numpy object arrays of ``Fraction`` or as integer
    numerators over one denominator (:meth:`numerators`: binary floats are read
    that way), the other form built on first use; ``mask`` None
    or B x H_q x L x S (``bool`` for boolean kinds; ``Fraction``, or None for
    ``-inf``, in an additive mask): the expanded blocks the exact reference
    reads; ``mask_shape`` None or the shape the mask was given in (``(L, S)``,
    ``(B, 1, L, S)``, any shape that broadcasts), the shape a float
    implementation is handed it in (:meth:`mask_given`); ``dropout_keep``
    None or B x H_q x L x S ``bool``.  ``rank`` is the number of dimensions
    the caller used; a float implementation is handed query, key and value
    of that rank.

    Raises:
        ShapeError: mismatched sizes, a bad rank, GQA heads that do not divide.
        InputError, FloatInputError: bad entries.

    >>> c = Call([["1/2"]], [[1], [2]], [[3], [4]], policy=Policy(causal=True))
    >>> c.shape["S"], c.policy.causal, c.query[0, 0, 0, 0]
    (2, True, Fraction(1, 2))
    """

    __slots__ = ("_held", "mask", "policy", "rank", "name", "dropout_keep", "mask_shape")

    def __init__(self, query, key, value, mask=None, *, policy: Policy | None = None,
                 mask_kind: str | None = None, floats: str | None = None, name: str = "call",
                 dropout_keep=None):
        if policy is not None and not isinstance(policy, Policy):
            raise InputError(f"policy must be a Policy or None (got {shorten(repr(policy))}); "
                             "e.g. Policy(scale='none', causal=True)")
        policy = policy or Policy()
        if mask_kind is not None:
            policy = policy.replace(mask_kind=mask_kind)
        arrays = [_as_array(a, n) for a, n in ((query, "query"), (key, "key"), (value, "value"))]
        rank = arrays[0].ndim
        count = sum(a.size for a in arrays)
        if mask is not None:   # the mask is read once per batch and query head: B H_q L S
            count += math.prod(arrays[0].shape[:-1]) * arrays[1].shape[-2]
        check_inputs(count, "query, key, value and mask",
                     "a call is checked number by number: use fewer tokens, heads or a "
                     "narrower head")
        held = [_exact_array(a, n, floats, n != "query") for a, n in zip(arrays, _TENSORS)]
        self._build(held, mask, policy, rank, name, dropout_keep, floats)

    def _build(self, held: list, mask, policy: Policy, rank: int, name: str, dropout_keep,
               floats: str | None = None) -> None:
        """Check the held tensors' shapes against each other, read the masks, hold them all."""
        held = dict(zip(_TENSORS, held))
        B, Hq, L, E = _held_shape(held["query"])
        (Bk, Hkv, S, Ek), (*kv, _) = _held_shape(held["key"]), _held_shape(held["value"])
        if Bk != B or Ek != E:
            raise ShapeError(f"key must be {B} x H_kv x S x {E} like the query "
                             f"(got {_dims((Bk, Hkv, S, Ek))})")
        if tuple(kv) != (Bk, Hkv, S):
            raise ShapeError(f"value must have the key's batch, heads and length "
                             f"{_dims((Bk, Hkv, S))} (got {_dims(kv)})")
        policy.kv_head(0, Hq, Hkv)       # H_q must be a multiple of H_kv
        m, given = (None, None) if mask is None else \
            _mask_blocks(mask, policy.mask_kind, (B, Hq, L, S), floats)
        keep = None if dropout_keep is None else \
            _blocks(dropout_keep, (B, Hq, L, S), "dropout_keep", True).copy()
        self._set(held, m, policy, rank, name, keep, given)

    def _set(self, held, mask, policy, rank, name, dropout_keep, mask_shape):
        L, S = _held_shape(held["query"])[2], _held_shape(held["key"])[2]
        rope = policy.rope and policy.rope.for_call(policy, L, S)
        policy = policy if rope is policy.rope else policy.replace(rope=rope)  # dynamic: L bound
        self._held, self.mask = held, mask
        self.policy, self.rank, self.name = policy, rank, name
        self.dropout_keep, self.mask_shape = dropout_keep, mask_shape

    def _with(self, **changes) -> "Call":
        """A copy with some held (already exact) parts replaced: query, key and value as
        object arrays of their entries."""
        out = object.__new__(Call)
        held = {t: [changes.pop(t), None] if t in changes else self._held[t] for t in _TENSORS}
        out._set(held, *(changes.get(f, getattr(self, f)) for f in self.__slots__[1:]))
        return out

    def _form(self, name: str, i: int):
        """Held tensor ``name`` as its entries (``i`` 0) or numerators (1), built once."""
        held = self._held[name]
        if held[i] is None:
            held[i] = _numerators_of(held[0]) if i else _entries_of(*held[1])
        return held[i]

    query = property(lambda self: self._form("query", 0))
    key = property(lambda self: self._form("key", 0))
    value = property(lambda self: self._form("value", 0))

    def numerators(self, name: str) -> tuple[np.ndarray, int]:
        """``query``, ``key`` or ``value`` as integers over one common denominator:
        ``(ints, den)``, ints an array of the held shape (int64 where every entry fits, else
        Python ints), built once; ``inf``/``nan`` entries read as 0 (where no query sees them:
        :meth:`check_nonfinite`).

        >>> Call([["1/2", "1/3"]], [[1, 0]], [[1]]).numerators("query")
        (array([[[[3, 2]]]]), 6)
        """
        return self._form(name, 1)

    def head(self, b: int = 0, h: int = 0) -> "Call":
        """Batch b, query head h alone, as the row blocks read it: a one-head call (L x E)
        holding slices of :meth:`numerators` (the key/value head by the policy's GQA map), the
        head's policy (:meth:`Policy.for_head`), its mask and dropout keep-mask.

        Raises:
            InputError: b or h past the batch or the query heads; an additive mask (row blocks
                take boolean masks only); dropout without its keep-mask, or a keep-mask without
                dropout; an ``inf`` or ``nan`` a query sees.

        >>> Call([[[1]], [[2]]], [[[3], [4]]], [[[5], [6]]], policy=Policy(gqa="tile")).head(0, 1)
        Call('call', 1 x 1 queries, 2 keys, scale=1/sqrt(d_k) causal=off alignment=top_left empty_row=zero mask=bool_keep gqa=tile)
        """
        B, H = self.shape["B"], self.shape["H_q"]     # negative b, h count from the end
        if not (isinstance(b, int) and isinstance(h, int) and -B <= b < B and -H <= h < H):
            raise InputError(f"head must be a batch below {B} and a query head below {H} "
                             f"(got {b!r}, {h!r})")
        b, h = b % B, h % H
        policy = self.policy.for_head(h)
        g = policy.kv_head(h, self.shape["H_q"], self.shape["H_kv"])
        dropout_factors(policy.dropout, None if self.dropout_keep is None else [True])  # both or neither
        if self.mask_kind == "additive":
            raise InputError("mask must be boolean for row blocks (got an additive mask); "
                             "check additive masks with exactattn verify")
        self.check_nonfinite()         # inf and NaN only where no query looks: read as 0
        mask, keep = (None if a is None else a[b:b + 1, h:h + 1]
                      for a in (self.mask, self.dropout_keep))
        held = [[None, (ints[b:b + 1, i:i + 1], den)]
                for (ints, den), i in zip(map(self.numerators, _TENSORS), (h, g, g))]
        out = object.__new__(Call)
        out._build(held, mask, policy, 2, self.name, keep)
        return out

    def __repr__(self) -> str:
        lead = _held_shape(self._held["query"])[4 - self.rank:]
        return (f"Call({self.name!r}, {_dims(lead)} queries, "
                f"{self.shape['S']} keys, {self.policy.describe()})")

    @classmethod
    def from_sdpa(cls, query, key, value, *, attn_mask=None, dropout_p=0.0,
                  is_causal: bool = False, scale=None, enable_gqa: bool = False,
                  name: str = "call",
                  **policy) -> "Call":
        """The call ``torch.nn.functional.scaled_dot_product_attention(query, key, value,
        attn_mask=..., is_causal=..., scale=..., enable_gqa=...)`` makes, read exactly.

        The one reading of SDPA's arguments into a call.  Arrays (numpy, torch
        tensors of any float dtype, bfloat16 included, or anything
        ``numpy.asarray`` reads, such as jax arrays) are the exact inputs: a
        float's entries are read as their exact binary values, never rounded.
        Shapes as SDPA: query L x E, H_q x L x E or B x H_q x L x E; key and
        value ... x S x E and ... x S x E_v.

        * ``attn_mask``: booleans (True = attend) or numbers added to the scaled
          scores (``-inf`` hides), broadcastable to B x H_q x L x S.
        * ``dropout_p``: 0 only: SDPA's dropout draws its keep-mask at random, so
          the exact answer needs the mask the kernel used: pass ``dropout``
          (exact, ``"1/10"``) and ``dropout_keep`` instead.
        * ``is_causal``: query i sees keys ``j <= i`` (top-left, as SDPA).
        * ``scale``: None for ``1/sqrt(E)`` (exactly); a float is the exact
          value of that float, the scale the kernel was handed; text such as
          ``"1/sqrt(48)"`` or a ``Fraction`` as :func:`~exactattn.call.policy.parse_scale` reads it.
        * ``enable_gqa``: H_q a multiple of H_kv, query head h reads key/value
          head ``h // (H_q / H_kv)``; without it the head counts must be equal.
        * ``policy``: what SDPA has no argument for, by the :class:`Policy`
          field names (:data:`SDPA_POLICY_KEYS`: ``alignment``, ``empty_row``,
          ``gqa``, ``window``, ``query_offset``, ``softcap``, ``sink``,
          ``alibi``, ``rope``, ``dropout``, ``head``) and ``dropout_keep``
          (the keep-mask of ``dropout``).

        Raises:
            InputError: a keyword that is not one of these (named); bad entries, a bad
                scale or policy value.
            ShapeError: a bad rank, sizes that do not match, head counts that
                differ without ``enable_gqa``.

        >>> c = Call.from_sdpa(np.zeros((2, 1), np.float32), np.zeros((2, 1)),
        ...                    np.array([[1.0], [0.5]], np.float16), is_causal=True)
        >>> c.policy.causal, c.value[0, 0, 1, 0], c.rank
        (True, Fraction(1, 2), 2)
        """
        unknown = [k for k in policy if k not in SDPA_POLICY_KEYS]
        if unknown:
            raise InputError(f"unknown keyword {shorten(unknown[0], quote=True)}: the keywords "
                             f"besides SDPA's are {', '.join(SDPA_POLICY_KEYS)}")
        for flag, given in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
            if not isinstance(given, (bool, np.bool_)):
                raise InputError(f"{flag} must be True or False (got {shorten(given, quote=True)})")
        if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(
                dropout_p, (int, float, np.integer, np.floating)) or dropout_p != 0:
            raise InputError(f"dropout_p must be 0 (got {shorten(dropout_p, quote=True)}): SDPA "
                             "draws its keep-mask at random; pass dropout=p (exact, e.g. "
                             "\"1/10\") and the kernel's keep-mask as dropout_keep=")
        keep = policy.pop("dropout_keep", None)
        if attn_mask is not None and not hasattr(attn_mask, "detach"):
            attn_mask = _sdpa_array(attn_mask, "attn_mask")
        kind = None if attn_mask is None else \
            "bool_keep" if str(attn_mask.dtype) in ("bool", "torch.bool") else "additive"
        pol = _sdpa_policy(is_causal, scale, kind or "bool_keep", policy)
        q, k, v = (a if hasattr(a, "detach") else _sdpa_array(a, n)
                   for a, n in ((query, "query"), (key, "key"), (value, "value")))
        call = cls(q, k, v, attn_mask, policy=pol, floats="exact", name=name,
                   dropout_keep=keep)
        sh = call.shape
        if not enable_gqa and sh["H_q"] != sh["H_kv"]:
            raise ShapeError(f"key and value must have the query's {sh['H_q']} heads without "
                             f"enable_gqa (got {sh['H_kv']}); pass enable_gqa=True for grouped "
                             "query heads")
        return call

    @classmethod
    def from_floats(cls, query, key, value, *, policy: Policy | None = None,
                    name: str = "floats") -> "Call":
        """Binary float arrays (a float kernel's own arguments) read as the dyadic rationals
        they are (:func:`float_ints`), in any number: the entries are held as numerators over
        a power of two, read as ``Fraction`` only where a caller asks for them.

        Shapes as :class:`Call`'s: query L x E (H x L x E, B x H x L x E), key ... x S x E,
        value ... x S x E_v.

        Raises:
            InputError: a NaN or infinite query entry (in a key or a value: where a query sees
                it, :meth:`check_nonfinite`).
            ShapeError: sizes that do not match, a bad rank.

        >>> c = Call.from_floats(np.array([[0.5]]), np.array([[1.0], [2.0]]), np.ones((2, 3)))
        >>> c.shape["S"], c.numerators("query"), c.query[0, 0, 0, 0]
        (2, (array([[[[1]]]]), 2), Fraction(1, 2))
        """
        with lifted():      # any number: the row blocks read them as integers
            return cls(query, key, value, floats="exact", policy=policy, name=name)

    @classmethod
    def of_head(cls, head, x, *, floats: str | None = None, dropout_keep=None,
                name: str = "head") -> "Call":
        """The call a :class:`~exactattn.engines.head.Head` makes on the token rows ``x``.

        ``x`` is n x d_model (read by :func:`head_tokens`); query, key and value are the
        projections ``x W_Q^T + b_Q``, ``x W_K^T + b_K``, ``x W_V^T + b_V`` (slots layout),
        computed exactly (python-flint ``fmpq_mat``), n x d_k, n x d_k and n x d_v, under
        ``head.policy``; ``dropout_keep`` n x n booleans with ``policy.dropout``.

        Raises:
            ShapeError: no tokens, a token of the wrong width.
            InputError: symbols in the head or the tokens (a call holds numbers).

        >>> from exactattn import Head
        >>> c = Call.of_head(Head([[1, 0]], [[0, 1]], [[1, 1]], b_V=[1]), [[1, "1/2"], [0, 2]])
        >>> c.query[0, 0, :, 0].tolist(), c.value[0, 0, :, 0].tolist(), c.policy.divisor_squared
        ([Fraction(1, 1), Fraction(0, 1)], [Fraction(5, 2), Fraction(3, 1)], Fraction(1, 1))
        """
        from ..numbers.bulk import mat_ints
        xs = head_tokens(head, x, floats)
        if head.symbolic or any(is_symbolic(e) for r in xs for e in r):
            raise InputError("head and tokens must hold numbers for a call (got symbols); "
                             "substitute numbers first")
        X, n = fmpq_mat_of(xs), len(xs)

        def project(W, b):        # exact already: numerators over one denominator
            m = X * fmpq_mat_of(W).transpose()
            m = m if b is None else m + fmpq_mat_of([b] * n)
            ints, den = mat_ints(m)
            return [None, (ints.reshape(1, 1, n, -1), den)]
        call = object.__new__(cls)
        call._build([project(W, b) for W, b in ((head.W_Q, head.b_Q), (head.W_K, head.b_K),
                                                (head.W_V, head.b_V))],
                    None, head.policy, 2, name, dropout_keep)
        return call

    @classmethod
    def random(cls, n: int = 8, d_k: int = 4, *, seed: int = 0, n_keys: int | None = None,
               d_v: int | None = None, heads: int = 1, kv_heads: int | None = None,
               batch: int = 1, policy: Policy | None = None) -> "Call":
        """Standard-normal query, key and value (numpy ``default_rng(seed)``), read as exact floats.

        Shapes: query batch x heads x n x d_k, key/value batch x kv_heads x
        n_keys x d_k (d_v); rank 4 when batch or heads exceed 1, else n x d_k.
        Round with :meth:`rounded` (``verify`` does) to a dtype.

        Raises:
            InputError: a size below 1, a negative seed.

        >>> c = Call.random(3, 2, seed=1)
        >>> c.shape["L"], c.query[0, 0, 0, 0] == Fraction(np.random.default_rng(1).standard_normal())
        (3, True)
        """
        q, k, v = random_floats(n, d_k, seed=seed, dtype="float64", n_keys=n_keys, d_v=d_v,
                                heads=heads, kv_heads=kv_heads, batch=batch, limit=True)
        return cls(q, k, v, floats="exact", policy=policy,
                   name=f"random n={n} d_k={d_k} seed={seed}")

    @classmethod
    def from_scores(cls, scores, values=None, mask=None, *, mask_kind: str | None = None,
                    name: str = "scores", policy: Policy | None = None) -> "Call":
        """A problem whose raw scores ``query @ key^T`` are the given L x S matrix.

        query = the scores (``-inf`` entries replaced by 0), key = the S x S
        identity, so ``query @ key^T`` is the scores exactly; ``-inf`` entries
        become hidden keys (an additive mask, or folded into a boolean one).
        ``values`` default to the identity, so the outputs are the shares; a
        single number is a one-column value row.  Check it with
        ``Policy(scale="none")``: the scores are taken as already scaled.

        >>> from exactattn import Reference
        >>> c = Call.from_scores([["-inf", "0"]], ["9", "1"], policy=Policy(scale="none"))
        >>> Reference(c).output(0, 0, 0, 0).exact()
        Fraction(1, 1)
        """
        mask_kind = mask_kind or (policy or Policy()).mask_kind
        rows = [list(r) for r in scores]
        S = len(rows[0]) if rows else 0
        hidden = [[x is not None and is_minus_inf(x) for x in r] for r in rows]
        q = [[0 if h else x for x, h in zip(r, hr)] for r, hr in zip(rows, hidden)]
        k = [[int(i == j) for j in range(S)] for i in range(S)]
        if values is None:
            values = k
        v = [list(x) if isinstance(x, (list, tuple)) else [x] for x in values]
        if any(map(any, hidden)):     # hidden keys: folded into the mask, as its kind hides
            if mask is None:
                mask_kind, mask = "additive", [[0] * S for _ in rows]
            hide = "-inf" if mask_kind == "additive" else mask_kind != "bool_keep"
            mask = [[hide if h else m for m, h in zip(mr, hr)] for mr, hr in zip(mask, hidden)]
        return cls(q, k, v, mask, mask_kind=mask_kind, name=name, policy=policy)

    @property
    def shape(self) -> dict:
        (B, Hq, L, E), (_, Hkv, S, _), (*_, Ev) = map(_held_shape, self._held.values())
        return {"B": B, "H_q": Hq, "H_kv": Hkv, "L": L, "S": S, "E": E, "E_v": Ev}

    @property
    def mask_kind(self) -> str | None:
        """How the explicit mask is read (the policy's ``mask_kind``), or None without a mask."""
        return None if self.mask is None else self.policy.mask_kind

    def with_policy(self, policy: Policy) -> "Call":
        """The same inputs under ``policy``; a call with a mask keeps reading it as it was read
        (its ``mask_kind``: change that with :meth:`with_mask_kind`).

        >>> c = Call([[1]], [[1]], [[1]], [["-inf"]], mask_kind="additive")
        >>> c.with_policy(Policy(causal=True)).policy.mask_kind
        'additive'
        """
        if self.mask is not None and policy.mask_kind != self.policy.mask_kind:
            policy = policy.replace(mask_kind=self.policy.mask_kind)
        return self._with(policy=policy)

    def block_mask(self, b: int, h: int) -> Mask | None:
        """The explicit mask of batch b, query head h (a :class:`~exactattn.call.policy.Mask`), or None."""
        if self.mask is None:
            return None
        return Mask(self.mask_kind, self.mask[b, h].tolist())

    def mask_given(self) -> np.ndarray | None:
        """The mask in the shape the caller gave it (``mask_shape``): the held B x H_q x L x S
        blocks cut back along every axis it was broadcast over; None without a mask.

        The one place that knows both shapes: the exact reference reads the
        expanded blocks, a float implementation gets this.

        >>> c = Call([[[[1]], [[2]]]], [[[[1], [2]]]], [[[[3], [4]]]], [[[[True, False]]]])
        >>> c.mask.shape, c.mask_shape, c.mask_given().tolist()
        ((1, 2, 1, 2), (1, 1, 1, 2), [[[[True, False]]]])
        """
        if self.mask is None:
            return None
        shape = self.mask_shape
        lead = (1,) * (4 - len(shape)) + shape
        return self.mask[tuple(slice(0, 1) if g == 1 else slice(None) for g in lead)].reshape(shape)

    def with_mask_kind(self, kind: str) -> "Call":
        """The same problem with its mask read as ``kind`` (the entries as they were written).

        ``bool_keep`` and ``bool_drop`` swap the meaning of True; a boolean mask
        cannot be read as ``additive`` nor numbers as booleans.

        Raises:
            InputError: the entries do not fit ``kind`` (the message names the entry).

        >>> p = Call([[1]], [[1], [2]], [[3], [4]], [[True, False]])
        >>> p.with_mask_kind("bool_drop").block_mask(0, 0).keeps(0, 0)
        False
        """
        check_choice(kind, "mask_kind", MASK_KINDS)
        if self.mask is None or kind == self.mask_kind:
            return self
        for b, h in np.ndindex(self.mask.shape[:2]):
            Mask(kind, self.mask[b, h].tolist())   # refuses entries of the other sort
        return self._with(policy=self.policy.replace(mask_kind=kind))

    def rounded(self, dtype: str) -> tuple["Call", int]:
        """The same problem with every entry rounded to ``dtype``, and how many entries moved.

        The result holds the exact values of those floats, so the exact
        reference is computed from exactly what the implementation is handed.

        Raises:
            InputError: an entry overflows the dtype.
        """
        out = {}
        if self.mask_kind == "additive":
            out["mask"] = rounded_entries(self.mask, dtype, "mask entries",
                                          "; use '-inf' to hide a key")
        out.update((t, rounded_entries(getattr(self, t), dtype, "inputs")) for t in _TENSORS)
        return self._with(**{k: a for k, (a, _) in out.items()}), sum(m for _, m in out.values())

    def with_value(self, value: np.ndarray) -> "Call":
        """The same problem with other values: ``value`` held exactly, B x H_kv x S x E_v (any
        E_v), ``Fraction`` entries (a probe's, :mod:`exactattn.verify.probes`).

        Raises:
            ShapeError: the batch, heads or length differ from the key's.
        """
        if value.ndim != 4 or value.shape[:3] != self.key.shape[:3]:
            raise ShapeError(f"value must have the key's batch, heads and length "
                             f"{_dims(self.key.shape[:3])} (got {_dims(value.shape)})")
        return self._with(value=value)

    def nonfinite(self) -> list[tuple[int, tuple]]:
        """Every ``inf``/``nan`` entry: ``(1 for key or 2 for value, (b, g, j, c))``."""
        out = []
        for a, arr in ((1, self._held["key"][0]), (2, self._held["value"][0])):
            if arr is not None:          # held as numerators only: finite
                flags = np.frompyfunc(lambda x: isinstance(x, float), 1, 1)(arr).astype(bool)
                out += [(a, tuple(int(x) for x in idx)) for idx in zip(*np.nonzero(flags))]
        return out

    def check_nonfinite(self) -> None:
        """Refuse an ``inf``/``nan`` key or value entry that some query sees: the one check.

        Key j of batch b and key/value head g may hold non-finite numbers
        when every query of every query head reading g (the policy's GQA map)
        has key j hidden (``Policy.keep`` with the mask); the exact answer
        never reads it (:func:`keys_read`: under ``empty_row=uniform`` an
        empty row reads every value).

        Raises:
            InputError: a non-finite entry a query sees, named in the caller's rank.

        >>> Call([[0]], [[0], [0]], [[1], ["inf"]], [[True, False]]).check_nonfinite()
        >>> Call([[0]], [[0], [0]], [[1], ["inf"]]).check_nonfinite()
        Traceback (most recent call last):
        ...
        exactattn.errors.InputError: value[1][0] must be finite where a query sees it (got inf); inf and NaN may stand only at keys the mask or the policy hides from every query
        """
        bad = self.nonfinite()
        policy = self.policy
        if not bad:
            return
        sh = self.shape
        seen: dict = {}
        for a, (b, g, j, c) in bad:
            if (b, g) not in seen:
                heads = policy.query_heads(g, sh["H_q"], sh["H_kv"])
                reads = [keys_read(policy, policy.keep(sh["L"], sh["S"], self.block_mask(b, h)))
                         for h in heads]
                seen[(b, g)] = np.logical_or.reduce([k.any(axis=0) for k in reads])
            if seen[(b, g)][j]:
                x = (self.key if a == 1 else self.value)[b, g, j, c]
                where = _TENSORS[a] + "".join(f"[{k}]" for k in (b, g, j, c)[4 - self.rank:])
                raise InputError(f"{where} must be finite where a query sees it (got {x}); inf "
                                 "and NaN may stand only at keys the mask or the policy hides "
                                 "from every query")

    def finite(self) -> "Call":
        """The problem with every ``inf``/``nan`` entry replaced by 0 (after :meth:`check_nonfinite`)."""
        bad = self.nonfinite()
        if not bad:
            return self
        key, value = self.key.copy(), self.value.copy()
        for a, idx in bad:
            (key if a == 1 else value)[idx] = Fraction(0)
        return self._with(key=key, value=value)

    def floats(self, name: str) -> np.ndarray:
        """``query``/``key``/``value`` as float64 (exact when the entries are floats), in the caller's rank."""
        arr = getattr(self, name)
        return arr.astype(np.float64).reshape(arr.shape[4 - self.rank:])

    def key_of(self) -> tuple:
        """The problem's contents as a hashable tuple (equal problems, equal keys)."""
        mask = None if self.mask is None else tuple(self.mask.reshape(-1))
        return (self.query.shape, self.key.shape, self.value.shape,
                tuple(self.query.reshape(-1)), tuple(self.key.reshape(-1)),
                tuple(self.value.reshape(-1)), self.mask_kind, mask, self.mask_shape,
                None if self.dropout_keep is None else tuple(self.dropout_keep.reshape(-1)))


_TENSORS = ("query", "key", "value")
#: float dtypes random inputs are drawn in (numpy rounds to them exactly, ties to even)
FLOAT_DTYPES = ("float64", "float32", "float16")


def random_floats(n: int, d_k: int, *, seed: int = 0, dtype: str = "float32",
                  n_keys: int | None = None, d_v: int | None = None, heads: int = 1,
                  kv_heads: int | None = None, batch: int = 1, limit: bool = False) -> tuple:
    """Standard-normal query, key and value rounded to ``dtype`` (ties to even): verify's random
    inputs, the draws of :meth:`Call.random` (numpy ``default_rng(seed)``: query batch x heads
    x n x d_k, key batch x kv_heads x n_keys x d_k, value ... x n_keys x d_v, in that order;
    n x d_k, n_keys x d_k and n_keys x d_v when batch and both head counts are 1), as numpy
    arrays of the dtype.  With ``limit``, at most as many numbers as a call checks.

    Raises:
        InputError: a size below 1, a negative seed, an unknown dtype; past the limit.
    """
    sizes = dict(n=n, d_k=d_k, n_keys=n if n_keys is None else n_keys,
                 d_v=d_k if d_v is None else d_v, heads=heads,
                 kv_heads=heads if kv_heads is None else kv_heads, batch=batch)
    for k, v in sizes.items():
        check_whole(v, k)
    check_whole(seed, "seed", low=0)
    check_choice(dtype, "dtype", FLOAT_DTYPES)
    B, H, Hkv, S, Ev = batch, heads, sizes["kv_heads"], sizes["n_keys"], sizes["d_v"]
    if limit:
        check_inputs(B * H * n * d_k + B * Hkv * S * (d_k + Ev), "the random query, key and "
                     "value", "use fewer tokens, heads or a narrower head")
    rng = np.random.default_rng(seed)
    drawn = [rng.standard_normal(shape).astype(dtype)
             for shape in ((B, H, n, d_k), (B, Hkv, S, d_k), (B, Hkv, S, Ev))]
    return tuple(a[0, 0] if B == H == Hkv == 1 else a for a in drawn)


def _held_shape(held: list) -> tuple:
    return (held[1][0] if held[0] is None else held[0]).shape


def head_tokens(head, x, floats: str | None = None) -> list[list]:
    """A head's token rows ``x`` read exactly (sympy symbols kept): n x ``head.d_model``.

    Raises:
        ShapeError: no tokens, ragged rows, a token of the wrong width (named by its place).
        FloatInputError: a binary float with ``floats`` unset.
    """
    if hasattr(x, "tolist") and not isinstance(x, (list, tuple)):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        if not x:
            raise ShapeError("x must have at least one token (got none)")
        for i, r in enumerate(x):  # name the first token of the wrong width
            if isinstance(r, (list, tuple)) and len(r) != head.d_model:
                raise ShapeError(
                    f"token {i + 1} must have d_model = {head.d_model} numbers (got {len(r)})")
    return to_matrix(x, name="x", shape=(None, head.d_model), floats=floats, symbolic=True)


def empty_rows(policy: Policy, keep: np.ndarray) -> np.ndarray:
    """Which rows are empty: they see no key and the policy has no sink (the one predicate).

    ``keep`` is ... x L x S booleans (``Policy.keep``, True = the query sees
    the key); the result is ... x L.  An empty row gets the policy's
    ``empty_row`` answer (zero, uniform or NaN); a row with a sink is never
    empty (every key hidden: the sink takes the whole share, output 0), as in
    :class:`~exactattn.numbers.softmax.SoftmaxRow`.

    >>> keep = np.array([[True, False], [False, False]])
    >>> empty_rows(Policy(), keep).tolist(), empty_rows(Policy(sink="0"), keep).tolist()
    ([False, True], [False, False])
    """
    keep = np.asarray(keep, dtype=bool)
    if policy.sink is not None:
        return np.zeros(keep.shape[:-1], dtype=bool)
    return ~keep.any(axis=-1)


def keys_read(policy: Policy, keep: np.ndarray) -> np.ndarray:
    """The keys each row's output reads (... x L x S booleans): the visible ones, and every key
    of an :func:`empty_rows` row under ``empty_row=uniform`` (1/S each).

    >>> keys_read(Policy(empty_row="uniform"), np.array([[True, False], [False, False]])).tolist()
    [[True, False], [True, True]]
    """
    keep = np.asarray(keep, dtype=bool)
    if policy.empty_row != "uniform":
        return keep
    return keep | empty_rows(policy, keep)[..., None]

