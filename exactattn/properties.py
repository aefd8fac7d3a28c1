"""Property checks for attention: exactattn's own exactly, anyone's float code within a stated tolerance.

Each ``check_*`` function takes an attention function and one input, runs the
function as often as the property needs, and returns quietly when the
property holds or raises :class:`PropertyFailure` (an ``AssertionError``)
with a readable report: the property, the function, the input and the rows
that broke it.  :mod:`exactattn.strategies` draws the inputs, so the same
generators property-test exactattn and a user's own kernel.

The attention-function interface
--------------------------------
::

    fn(queries, keys, values, *, mask=None, scale=None) -> outputs

``queries`` is n_q x d_k, ``keys`` n_k x d_k, ``values`` n_k x d_v and the
result n_q x d_v, with ``outputs[i] = sum_j softmax_j(scale * queries[i] .
keys[j] + mask[i][j]) values[j]`` (Vaswani et al. 2017, sec. 3.2.1).
``scale=None`` means the default 1/sqrt(d_k), as in PyTorch's
``scaled_dot_product_attention``.  How the arguments arrive is set by
wrapping ``fn`` in an :class:`Implementation`; a bare callable is a float
function with the defaults:

* float functions (the default) get numpy ``float64`` arrays (``dtype=`` for
  ``float32``/``float16``; ``convert=torch.from_numpy`` hands a PyTorch
  function tensors), ``scale`` as a float, and the mask as a boolean array
  with True = attend (``mask_as="bool_keep"``, SDPA's ``attn_mask``),
  True = ignore (``"bool_drop"``) or an additive float array with ``-inf``
  (``"additive"``).  Causal masks arrive materialised in that form.  The
  result may be anything ``numpy.asarray`` reads, or a tensor.
* exact functions (``exact=True``) get lists of ``Fraction``, ``scale`` as a
  ``Fraction`` or a sympy ``1/sqrt(q)``, the :class:`Mask` itself, and must
  return ``Fraction`` or :class:`~exactattn.softmax.ExpRatio` entries.
  :func:`reference` (the softmax of :mod:`exactattn.softmax`) and
  :func:`attend_as_function` (:func:`exactattn.attend`'s pencil engine) are
  the two exact functions shipped; every check on them is exact.

Shares are read from any such function by passing the identity matrix as the
values (``outputs = shares @ I``), so a function that returns only its
outputs can still be checked row by row.

How float results are compared
------------------------------
A float result ``got`` passes against an exact value ``want`` when
``|got - want| <= atol + rtol * M``, where ``M`` is the largest ``|value|``
in that output column (1 for shares), and two float results of the same
function agree when they differ by at most twice that.  ``want`` is the
exact value rounded from a 128-bit ``arb`` enclosure.  Unless given, rtol and
atol come from the dtype the function returned, or the input ``dtype`` when
that is coarser (:data:`TOLERANCES`):
1e-12 for float64, 1e-5/1e-6 for float32, 1e-2/1e-3 for float16 and
2e-2/1e-2 for bfloat16.  NaN or infinity where the exact value is finite
always fails.  A masked share must be exactly ``0.0`` in every dtype
(``exp(-inf)`` is 0 in IEEE arithmetic), and a visible share must be
positive.

Exactness: against the exact functions nothing is rounded.  Two exact
values ``sum_g a_g e^(g/s) / sum_g c_g e^(g/s)`` are compared by
cross-multiplying and reading the sign of the resulting exponential sum:
by Lindemann-Weierstrass such a sum with distinct exponents is zero only
when every coefficient is zero, and a non-zero one is decided from ``arb``
enclosures tightened until they exclude 0.

>>> from fractions import Fraction as F
>>> inp = AttentionInput([[0], [1]], [[0], [1]], [[1], [3]], scale_squared=1)
>>> check_rows_sum_to_one(reference, inp)      # exact: the shares sum to 1, not 0.9999
>>> def unnormalised(queries, keys, values, *, mask=None, scale=None):
...     import numpy as np
...     return np.exp(queries @ keys.T) @ values
>>> check_rows_sum_to_one(unnormalised, inp)
Traceback (most recent call last):
...
exactattn.properties.PropertyFailure: property failed: every row of shares sums to exactly 1
  function: unnormalised (float; rtol=1e-12, atol=1e-12 from float64; |got - exact| <= atol + rtol*M)
  input: AttentionInput(queries=[[0], [1]], keys=[[0], [1]], values=[[1], [3]], mask=None, scale_squared=1)
  row 0: shares [1.0, 1.0] sum to 2.0, want 1
  row 1: shares [1.0, 2.718281828459045] sum to 3.718281828459045, want 1
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from fractions import Fraction
from typing import Any, Callable, Sequence

from .errors import ExactAttnError, InputError, ShapeError
from .exact import to_exact, to_matrix
from .call import EMPTY_ROWS as EMPTY_ROW_POLICIES
from .softmax import ExpRatio, SoftmaxRow

__all__ = [
    "AttentionInput",
    "Implementation",
    "MASK_FORMS",
    "MASK_KINDS",
    "Mask",
    "PropertyFailure",
    "TOLERANCES",
    "attend_as_function",
    "check_all",
    "check_bias_cancels",
    "check_causal_first_output",
    "check_cost",
    "check_identical_queries",
    "check_identical_tokens",
    "check_key_bias_cancels",
    "check_key_permutation",
    "check_masked_entries_absent",
    "check_masked_entries_ignored",
    "check_matches_reference",
    "check_online_softmax",
    "check_outputs_within_values",
    "check_query_permutation",
    "check_rows_sum_to_one",
    "check_share_support",
    "check_shift_invariance",
    "check_value_bias_shifts",
    "input_from_head",
    "reference",
]

MASK_KINDS = ("bool_keep", "bool_drop", "additive", "causal_top_left", "causal_bottom_right")
MASK_FORMS = ("bool_keep", "bool_drop", "additive", "mask")
TOLERANCES = {  # dtype -> (rtol, atol)
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


class PropertyFailure(AssertionError):
    """A property of attention does not hold for one function on one input."""


def _frac_text(q) -> str:
    return "-inf" if q is None else str(q)


def _entry_text(e) -> str:
    """An entry as it can be typed back: integers bare, other rationals as strings."""
    if isinstance(e, Fraction) and e.denominator == 1:
        return str(e.numerator)
    return repr(_frac_text(e))


def _matrix_text(m) -> str:
    return "[" + ", ".join("[" + ", ".join(_entry_text(e) for e in r) + "]" for r in m) + "]"


def _rational_sqrt(q: Fraction) -> Fraction | None:
    a, b = math.isqrt(q.numerator), math.isqrt(q.denominator)
    return Fraction(a, b) if a * a == q.numerator and b * b == q.denominator else None


# --------------------------------------------------------------------------- masks
class Mask:
    """Which keys each query sees, and (additive masks) what is added to its scaled scores.

    Kinds (the names of :mod:`exactattn.policies`):

    * ``bool_keep``: ``rows[i][j]`` True = query i attends to key j (SDPA ``attn_mask``);
    * ``bool_drop``: True = key j is ignored (``nn.MultiheadAttention``);
    * ``additive``: ``rows[i][j]`` is added to the scaled score; ``None`` (or
      ``"-inf"``) is minus infinity and hides the key;
    * ``causal_top_left``: query i sees keys ``j <= i`` (PyTorch ``is_causal``);
    * ``causal_bottom_right``: query i sees keys ``j <= i + n_keys - n_queries``
      (FlashAttention, KV-cache decoding).

    Shapes: ``rows`` is n_queries x n_keys; causal masks take the two sizes instead.

    Raises:
        InputError: an unknown kind, a non-bool entry in a boolean mask.
        ShapeError: ragged or empty rows, sizes that do not match.

    >>> m = Mask("causal_bottom_right", n_queries=2, n_keys=3)
    >>> m.keep()
    [[True, True, False], [True, True, True]]
    >>> Mask("additive", [["0", "-inf"]]).as_form("bool_drop")
    [[False, True]]
    >>> Mask("bool_keep", [[1, 0]])
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: mask[0][0] must be True or False in a bool_keep mask (got 1)
    """

    __slots__ = ("kind", "n_queries", "n_keys", "rows")

    def __init__(self, kind: str, rows=None, *, n_queries: int | None = None,
                 n_keys: int | None = None):
        if kind not in MASK_KINDS:
            raise InputError(f"kind must be one of {', '.join(MASK_KINDS)} (got {kind!r})")
        self.kind = kind
        if kind.startswith("causal"):
            if rows is not None:
                raise InputError(f"rows must be None for a {kind} mask; give n_queries "
                                 f"and n_keys (got {rows!r})")
            for name, v in (("n_queries", n_queries), ("n_keys", n_keys)):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise InputError(f"{name} must be a positive integer (got {v!r})")
            self.n_queries, self.n_keys, self.rows = n_queries, n_keys, None
            return
        if rows is None or isinstance(rows, (str, bytes)):
            raise ShapeError(f"rows must be a list of mask rows for a {kind} mask (got {rows!r})")
        out = []
        for i, r in enumerate(rows):
            row = []
            for j, e in enumerate(r):
                if kind == "additive":
                    if e is None or (isinstance(e, str) and e.strip().lower() == "-inf"):
                        row.append(None)
                    else:
                        row.append(to_exact(e, name=f"mask[{i}][{j}]"))
                else:
                    if not isinstance(e, bool):
                        raise InputError(
                            f"mask[{i}][{j}] must be True or False in a {kind} mask (got {e!r})")
                    row.append(e)
            out.append(tuple(row))
        if not out or not out[0]:
            raise ShapeError(f"mask must have at least one row and one column (got {rows!r})")
        if len({len(r) for r in out}) != 1:
            raise ShapeError(f"mask must have rows of equal length (got lengths {[len(r) for r in out]})")
        self.rows = tuple(out)
        self.n_queries, self.n_keys = len(out), len(out[0])
        for name, want, got in (("n_queries", n_queries, self.n_queries),
                                ("n_keys", n_keys, self.n_keys)):
            if want is not None and want != got:
                raise ShapeError(f"mask must have {name} = {want} (got {got})")

    def visible(self, i: int, j: int) -> bool:
        """Whether query i sees key j."""
        if self.kind == "causal_top_left":
            return j <= i
        if self.kind == "causal_bottom_right":
            return j <= i + self.n_keys - self.n_queries
        e = self.rows[i][j]
        if self.kind == "bool_keep":
            return e
        if self.kind == "bool_drop":
            return not e
        return e is not None

    def offset(self, i: int, j: int) -> Fraction:
        """What the mask adds to a visible scaled score: 0 except in additive masks."""
        if self.kind == "additive" and self.rows[i][j] is not None:
            return self.rows[i][j]
        return Fraction(0)

    def keep(self) -> list[list[bool]]:
        """The mask as booleans, True = visible."""
        return [[self.visible(i, j) for j in range(self.n_keys)] for i in range(self.n_queries)]

    @property
    def has_offsets(self) -> bool:
        """True for an additive mask with a finite non-zero entry (not expressible as booleans)."""
        return self.kind == "additive" and any(e not in (None, 0) for r in self.rows for e in r)

    def as_form(self, form: str) -> list[list]:
        """The mask written as ``bool_keep``, ``bool_drop`` or ``additive`` (``None`` = -inf).

        Raises:
            InputError: an unknown form; an additive mask with finite
                non-zero entries asked for as booleans.
        """
        if form not in MASK_FORMS[:3]:
            raise InputError(f"form must be one of {', '.join(MASK_FORMS[:3])} (got {form!r})")
        if form == "additive":
            if self.kind == "additive":
                return [list(r) for r in self.rows]
            return [[Fraction(0) if v else None for v in r] for r in self.keep()]
        if self.has_offsets:
            raise InputError(
                f"mask_as must be 'additive' for an additive mask with finite offsets "
                f"(got {form!r}); draw inputs without them or accept additive masks")
        keep = self.keep()
        return keep if form == "bool_keep" else [[not v for v in r] for r in keep]

    def _select(self, rows: Sequence[int], cols: Sequence[int]) -> "Mask":
        kind = self.kind if self.kind in ("bool_keep", "bool_drop", "additive") else "bool_keep"
        src = self.rows if self.rows is not None else self.keep()
        return Mask(kind, [[src[i][j] for j in cols] for i in rows])

    def permute_keys(self, permutation: Sequence[int]) -> "Mask":
        """The mask with its columns in the order ``permutation`` (causal masks become bool_keep)."""
        return self._select(range(self.n_queries), permutation)

    def permute_queries(self, permutation: Sequence[int]) -> "Mask":
        """The mask with its rows in the order ``permutation``."""
        return self._select(permutation, range(self.n_keys))

    def row(self, i: int) -> tuple:
        """Query i's view: (visible, offset) per key, for comparing two rows."""
        return tuple((self.visible(i, j), self.offset(i, j)) for j in range(self.n_keys))

    def __eq__(self, other) -> bool:
        return (isinstance(other, Mask) and self.kind == other.kind and self.rows == other.rows
                and (self.n_queries, self.n_keys) == (other.n_queries, other.n_keys))

    def __repr__(self) -> str:
        if self.rows is None:
            return f"Mask({self.kind!r}, n_queries={self.n_queries}, n_keys={self.n_keys})"
        if self.kind == "additive":
            body = _matrix_text(self.rows)
        else:
            body = repr([list(r) for r in self.rows])
        return f"Mask({self.kind!r}, {body})"

    def _repr_pretty_(self, p, cycle):  # Hypothesis's and IPython's pretty printer
        p.text(repr(self))


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True, eq=True, repr=False)
class AttentionInput:
    """One input to an attention function: queries, keys, values, a mask and a scale.

    Shapes: ``queries`` n_q x d_k, ``keys`` n_k x d_k, ``values`` n_k x d_v,
    ``mask`` n_q x n_k (or None: every key visible).

    ``scale_squared`` is the square of the factor the scores are multiplied
    by (so ``1/sqrt(48)`` stays exact as ``1/48``); None means the default
    ``1/sqrt(d_k)``.  With an additive mask the scale must be rational, so
    that scaled score plus offset stays a rational number.

    Raises:
        ShapeError: sizes that do not fit together; InputError: bad entries or scale.

    >>> inp = AttentionInput([[1, 0]], [[1, 0], [0, 1]], [["1/2"], [2]])
    >>> inp
    AttentionInput(queries=[[1, 0]], keys=[[1, 0], [0, 1]], values=[['1/2'], [2]], mask=None, scale_squared=None)
    >>> inp.n_queries, inp.n_keys, inp.d_k, inp.d_v, inp.effective_scale_squared
    (1, 2, 2, 1, Fraction(1, 2))
    >>> AttentionInput([[1, 0]], [[1]], [[1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: keys must be 1 x 2 (got 1 x 1)
    """

    queries: Any
    keys: Any
    values: Any
    mask: Mask | None = None
    scale_squared: Any = None

    def __post_init__(self):
        q = to_matrix(self.queries, name="queries")
        d_k = len(q[0])
        k = to_matrix(self.keys, name="keys", shape=(None, d_k))
        v = to_matrix(self.values, name="values", shape=(len(k), None))
        object.__setattr__(self, "queries", q)
        object.__setattr__(self, "keys", k)
        object.__setattr__(self, "values", v)
        if self.mask is not None:
            if not isinstance(self.mask, Mask):
                raise InputError(f"mask must be a Mask or None (got {self.mask!r})")
            if (self.mask.n_queries, self.mask.n_keys) != (len(q), len(k)):
                raise ShapeError(f"mask must be {len(q)} x {len(k)} (got "
                                 f"{self.mask.n_queries} x {self.mask.n_keys})")
        if self.scale_squared is not None:
            s2 = to_exact(self.scale_squared, name="scale_squared")
            if s2 <= 0:
                raise InputError(f"scale_squared must be positive (got {self.scale_squared!r})")
            object.__setattr__(self, "scale_squared", s2)
        if self.mask is not None and self.mask.has_offsets and \
                _rational_sqrt(self.effective_scale_squared) is None:
            raise InputError(
                f"scale_squared must be the square of a rational with an additive mask "
                f"(got {self.effective_scale_squared}); the scaled scores must stay rational")

    n_queries = property(lambda self: len(self.queries))
    n_keys = property(lambda self: len(self.keys))
    d_k = property(lambda self: len(self.queries[0]))
    d_v = property(lambda self: len(self.values[0]))

    @property
    def effective_scale_squared(self) -> Fraction:
        """The scale squared actually used: ``1/d_k`` when ``scale_squared`` is None."""
        return Fraction(1, self.d_k) if self.scale_squared is None else self.scale_squared

    def visible(self, i: int, j: int) -> bool:
        return self.mask is None or self.mask.visible(i, j)

    def visible_keys(self, i: int) -> list[int]:
        return [j for j in range(self.n_keys) if self.visible(i, j)]

    def replace(self, **changes) -> "AttentionInput":
        """A copy with some fields changed (checked again)."""
        fields = dict(queries=self.queries, keys=self.keys, values=self.values,
                      mask=self.mask, scale_squared=self.scale_squared)
        fields.update(changes)
        return AttentionInput(**fields)

    def __repr__(self) -> str:
        return (f"AttentionInput(queries={_matrix_text(self.queries)}, "
                f"keys={_matrix_text(self.keys)}, values={_matrix_text(self.values)}, "
                f"mask={self.mask!r}, scale_squared="
                f"{None if self.scale_squared is None else _entry_text(self.scale_squared)})")

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))


def input_from_head(head, x, *, floats: str | None = None) -> AttentionInput:
    """The attention input a head sees for tokens ``x``: its queries, keys, values, mask and scale.

    The mask is ``causal_top_left`` for a causal head; the scale is the
    head's 1/divisor (None when the divisor is the default sqrt(d_k); 1 when
    the head has no divisor).

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> inp = input_from_head(ex.head, ex.x)
    >>> inp.queries[1], inp.scale_squared, inp.effective_scale_squared   # divisor 2 = sqrt(d_k)
    ([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], None, Fraction(1, 4))
    """
    from .head import attend
    trace = attend(head, x, engine="pencil", floats=floats)
    n = trace.n
    mask = Mask("causal_top_left", n_queries=n, n_keys=n) if head.causal else None
    d2 = head.divisor_squared
    scale_squared = Fraction(1) if d2 is None else (None if d2 == head.d_k else 1 / d2)
    return AttentionInput(trace.queries, trace.keys, trace.values, mask, scale_squared)


def _identity(n: int) -> list[list[Fraction]]:
    return [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]


# --------------------------------------------------------------------------- exact functions
@lru_cache(maxsize=256)
def _sympy_square(scale) -> Any:
    return scale ** 2


@lru_cache(maxsize=256)
def _inverse_sqrt(num: int, den: int) -> Any:
    import sympy
    return 1 / sympy.sqrt(sympy.Rational(den, num))


def _scale_squared_of(scale, d_k: int) -> Fraction:
    if scale is None:
        return Fraction(1, d_k)
    if type(scale).__module__.startswith("sympy") and not getattr(scale, "is_Rational", False):
        sq = _sympy_square(scale)
        if not getattr(sq, "is_Rational", False) or not scale.is_positive:
            raise InputError(f"scale must be a positive rational or 1/sqrt(q) (got {scale})")
        s2 = to_exact(sq, name="scale")
    else:
        s = to_exact(scale, name="scale")
        if s <= 0:
            raise InputError(f"scale must be positive (got {scale!r})")
        s2 = s * s
    return s2


def reference(queries, keys, values, *, mask: Mask | None = None, scale=None,
              empty_row: str = "zero") -> list[list[ExpRatio]]:
    """Exact attention: ``outputs[i] = sum_j softmax_j(scale * queries[i] . keys[j] + mask[i][j]) values[j]``.

    The softmax is :class:`exactattn.softmax.SoftmaxRow` (closed forms, row
    maximum subtracted on the rationals).  Every mask kind is supported and
    queries and keys may differ in number.

    Shapes: queries n_q x d_k, keys n_k x d_k, values n_k x d_v -> n_q x d_v.

    Args:
        mask: a :class:`Mask` or None.
        scale: None (1/sqrt(d_k)), a positive exact number, or a sympy
            ``1/sqrt(q)``; rational whenever the mask is additive.
        empty_row: what a query that sees no key gets (``zero``, ``uniform``, ``nan``).

    Returns:
        n_q x d_v :class:`~exactattn.softmax.ExpRatio` entries.

    Raises:
        ShapeError, InputError, FloatInputError: as :class:`AttentionInput`;
        a binary float scale.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> out = reference([[0]], [[0], [0]], [[1], [3]])
    >>> out[0][0].exact()
    Fraction(2, 1)
    >>> reference([[1]], [[0], [1]], [[0], [1]], scale=1)[0][0].closed_form()
    E/(1 + E)
    """
    q = to_matrix(queries, name="queries")
    d_k = len(q[0])
    k = to_matrix(keys, name="keys", shape=(None, d_k))
    v = to_matrix(values, name="values", shape=(len(k), None))
    if mask is not None and not isinstance(mask, Mask):
        raise InputError(f"mask must be a Mask or None (got {mask!r})")
    if mask is not None and (mask.n_queries, mask.n_keys) != (len(q), len(k)):
        raise ShapeError(f"mask must be {len(q)} x {len(k)} (got {mask.n_queries} x {mask.n_keys})")
    s2 = _scale_squared_of(scale, d_k)
    additive = mask is not None and mask.has_offsets  # offsets are added to scaled scores
    root = _rational_sqrt(s2)
    if additive and root is None:
        raise InputError(f"scale must be rational with an additive mask that has finite "
                         f"offsets (got 1/sqrt({1 / s2}))")
    out = []
    for i, qi in enumerate(q):
        raw = []
        for j, kj in enumerate(k):
            if mask is not None and not mask.visible(i, j):
                raw.append(None)
                continue
            dot = sum((a * b for a, b in zip(qi, kj)), Fraction(0))
            raw.append(dot * root + mask.offset(i, j) if additive else dot)
        row = SoftmaxRow(raw, None if additive else 1 / s2, empty_row)
        out.append([row.combine([vj[c] for vj in v]) for c in range(len(v[0]))])
    return out


def _selector_head(inp_q, inp_k, inp_v, *, causal: bool, scale, symbolic: bool = False):
    """A head whose projections pick queries, keys and values out of x = [q | k | v]."""
    from .head import Head
    d_k, d_v = len(inp_q[0]), len(inp_v[0])
    width = 2 * d_k + d_v

    def pick(offset: int, count: int):
        return [[int(m == offset + s) for m in range(width)] for s in range(count)]
    kwargs = {}
    if scale is not None:
        s2 = _scale_squared_of(scale, d_k)
        root = _rational_sqrt(s2)
        kwargs["divisor"] = 1 / root if root is not None else f"sqrt({1 / s2})"
    head = Head(pick(0, d_k), pick(d_k, d_k), pick(2 * d_k, d_v), layout="slots",
                causal=causal, symbolic=symbolic, **kwargs)
    x = [list(a) + list(b) + list(c) for a, b, c in zip(inp_q, inp_k, inp_v)]
    return head, x


def _self_attention_mask(mask: Mask | None, n_q: int, n_k: int) -> bool:
    if n_q != n_k:
        raise ShapeError(f"keys must number as many as queries for exactattn.attend, "
                         f"{n_q} (got {n_k})")
    if mask is None:
        return False
    if mask.kind not in ("causal_top_left", "causal_bottom_right"):
        raise InputError(f"mask must be None or causal for exactattn.attend (got {mask.kind!r})")
    return True


def attend_as_function(queries, keys, values, *, mask: Mask | None = None,
                       scale=None) -> list[list[ExpRatio]]:
    """:func:`exactattn.attend` (pencil engine) as an attention function of queries, keys and values.

    Builds a head whose projections pick ``queries``, ``keys`` and
    ``values`` out of the token rows ``x[i] = queries[i] ++ keys[i] ++
    values[i]`` and runs it, so the checks exercise the head engine itself.
    Self-attention only (as many keys as queries); the mask must be None or
    causal (with equal lengths the two alignments coincide).

    Raises:
        ShapeError: different numbers of queries and keys.
        InputError: a boolean or additive mask.

    >>> attend_as_function([[0], [0]], [[0], [0]], [[1], [3]])[1][0].exact()
    Fraction(2, 1)
    >>> first = attend_as_function([[0], [0]], [[0], [0]], [[1], [3]],
    ...                            mask=Mask("causal_top_left", n_queries=2, n_keys=2))
    >>> first[0][0].exact()
    Fraction(1, 1)
    """
    from .head import attend
    q, k, v = (to_matrix(m, name=name) for m, name in
               ((queries, "queries"), (keys, "keys"), (values, "values")))
    causal = _self_attention_mask(mask, len(q), len(k))
    head, x = _selector_head(q, k, v, causal=causal, scale=scale)
    trace = attend(head, x, engine="pencil")
    return [[trace.output(i, c) for c in range(head.d_v)] for i in range(trace.n)]


# --------------------------------------------------------------------------- exact values
def _padd(p: dict, q: dict, k: Fraction = Fraction(1)) -> dict:
    r = dict(p)
    for g, c in q.items():
        r[g] = r.get(g, 0) + k * c
    return {g: c for g, c in r.items() if c != 0}


def _pmul(p: dict, q: dict) -> dict:
    r: dict = {}
    for g, a in p.items():
        for h, b in q.items():
            r[g + h] = r.get(g + h, 0) + a * b
    return {g: c for g, c in r.items() if c != 0}


class _Exact:
    """``sum_g num[g] e(g) / sum_g den[g] e(g)`` with ``e(g) = exp(g / sqrt(D))`` (``exp(g)``, D None)."""

    __slots__ = ("num", "den", "D", "nan")

    def __init__(self, num: dict, den: dict, D=None, nan: bool = False):
        self.num = {g: c for g, c in num.items() if c != 0}
        self.den, self.D, self.nan = den, D, nan

    @classmethod
    def of(cls, value, where: str) -> "_Exact":
        if isinstance(value, _Exact):
            return value
        if isinstance(value, ExpRatio):
            row = value.row
            if row.nan:
                return cls({}, {0: 1}, None, nan=True)
            if row.empty and not row.counts:
                return cls({}, {Fraction(0): 1})
            D = row.divisor_squared
            root = None if D is None else _rational_sqrt(D)
            if D is None or root is not None:  # rational scale: put it into the gaps
                f = Fraction(1) if D is None else 1 / root
                return cls({g * f: a for g, a in value.numerators.items()},
                           {g * f: c for g, c in row.counts.items()})
            return cls(dict(value.numerators), dict(row.counts), D)
        if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
            return cls({Fraction(0): Fraction(value)}, {Fraction(0): 1})
        if type(value).__module__.startswith("sympy") and getattr(value, "is_Rational", False):
            return cls({Fraction(0): to_exact(value)}, {Fraction(0): 1})
        raise InputError(f"{where} must be a Fraction or an ExpRatio from an exact function "
                         f"(got {value!r})")

    def _free(self) -> bool:
        return all(g == 0 for g in self.num) and all(g == 0 for g in self.den)

    def _D_with(self, other: "_Exact"):
        if self.D == other.D or other._free():
            return self.D
        if self._free():
            return other.D
        raise InputError(f"values with different divisors cannot be compared "
                         f"(got sqrt({self.D}) and sqrt({other.D}))")

    def __add__(self, other) -> "_Exact":
        other = _Exact.of(other, "value")
        D = self._D_with(other)
        if self.den == other.den:
            return _Exact(_padd(self.num, other.num), self.den, D, self.nan or other.nan)
        return _Exact(_padd(_pmul(self.num, other.den), _pmul(other.num, self.den)),
                      _pmul(self.den, other.den), D, self.nan or other.nan)

    def cmp(self, other) -> int:
        """The sign of ``self - other`` (dens are positive), decided exactly."""
        other = _Exact.of(other, "value")
        D = self._D_with(other)
        if self.den == other.den:  # same normaliser: compare the numerators
            return _poly_sign(_padd(self.num, other.num, Fraction(-1)), D)
        diff = _padd(_pmul(self.num, other.den), _pmul(other.num, self.den), Fraction(-1))
        return _poly_sign(diff, D)

    def sign(self) -> int:
        return _poly_sign(self.num, self.D)

    def ball(self, prec: int):
        return _poly_ball(self.num, self.D) / _poly_ball(self.den, self.D)

    def __float__(self) -> float:
        if self.nan:
            return math.nan
        from .digits import working_precision
        with working_precision(128):
            return float(self.ball(128).mid())

    def text(self) -> str:
        if self.nan:
            return "nan"
        if self._free():
            return str(Fraction(sum(self.num.values(), Fraction(0)),
                                sum(self.den.values(), Fraction(0))))
        import sympy

        def side(p):
            return sympy.Add(*[sympy.Rational(c.numerator, c.denominator) *
                               sympy.exp(sympy.Rational(g.numerator, g.denominator) /
                                         (1 if self.D is None else
                                          sympy.sqrt(sympy.Rational(self.D.numerator,
                                                                    self.D.denominator))))
                               for g, c in p.items()])
        return f"{float(self):.12g} (exactly {side(self.num) / side(self.den)})"


def _poly_ball(p: dict, D):
    from flint import arb, fmpq
    scale = None if D is None else arb(fmpq(D.numerator, D.denominator)).sqrt()
    total = arb(0)
    for g, c in p.items():
        e = arb(fmpq(g.numerator, g.denominator))
        if scale is not None:
            e = e / scale
        total += arb(fmpq(c.numerator, c.denominator)) * e.exp()
    return total


def _poly_sign(p: dict, D) -> int:
    """The sign of ``sum_g p[g] exp(g/sqrt(D))``: from the coefficients when they agree, else from enclosures."""
    cs = [c for c in p.values() if c != 0]
    if not cs:
        return 0
    if all(c > 0 for c in cs):
        return 1
    if all(c < 0 for c in cs):
        return -1
    from .digits import MAX_PREC, working_precision
    prec = 64
    while prec <= MAX_PREC:  # non-zero by Lindemann-Weierstrass, so this ends
        with working_precision(prec):
            s = _poly_ball({g: Fraction(c) for g, c in p.items()}, D)
            if s > 0:
                return 1
            if s < 0:
                return -1
        prec *= 2
    raise ExactAttnError(f"the sign of an exponential sum was not decided by {MAX_PREC} bits")


# --------------------------------------------------------------------------- implementations
def _float_sqrt(q: Fraction) -> float:
    """sqrt(q) correctly rounded to a float (from a 128-bit integer square root)."""
    shift = 256
    return float(Fraction(math.isqrt((q.numerator << shift) // q.denominator), 1 << (shift // 2)))


def _check_tol(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or not math.isfinite(value):
        raise InputError(f"{name} must be a non-negative finite number (got {value!r})")
    return float(value)


class _Result:
    """One call's outputs: entries as ``_Exact`` (exact functions) or floats, with the tolerance."""

    def __init__(self, rows, exact: bool, rtol: float = 0.0, atol: float = 0.0, dtype: str = ""):
        self.rows, self.exact, self.rtol, self.atol, self.dtype = rows, exact, rtol, atol, dtype


class Implementation:
    """An attention function under test, with how to call it and how to compare its results.

    ``fn(queries, keys, values, *, mask=None, scale=None) -> outputs`` (see
    the module docstring for the interface).

    Args:
        exact: True for a function over ``Fraction`` that returns exact
            entries (compared exactly); False (default) for a float function.
        dtype: the numpy dtype the inputs are cast to (``float64``,
            ``float32``, ``float16``) for a float function.
        convert: applied to every array argument (e.g. ``torch.from_numpy``).
        mask_as: how the mask is passed: ``bool_keep`` (default for float
            functions), ``bool_drop``, ``additive`` or ``mask`` (the
            :class:`Mask` itself; default for exact functions).
        empty_row: what the function gives a query that sees no key
            (``zero``, ``uniform``, ``nan``).
        rtol, atol: the float tolerance; default from the returned dtype
            (:data:`TOLERANCES`).
        name: how reports name the function (default: its ``__name__``).

    Raises:
        InputError: any argument outside the above.

    >>> Implementation(reference, exact=True).describe()
    'reference (exact)'
    >>> Implementation(len, dtype="float8")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: dtype must be one of float64, float32, float16 (got 'float8')
    """

    def __init__(self, fn: Callable, *, exact: bool = False, dtype: str = "float64",
                 convert: Callable | None = None, mask_as: str | None = None,
                 empty_row: str = "zero", rtol: float | None = None, atol: float | None = None,
                 name: str | None = None):
        if not callable(fn):
            raise InputError(f"fn must be callable (got {fn!r})")
        if not isinstance(exact, bool):
            raise InputError(f"exact must be True or False (got {exact!r})")
        if dtype not in ("float64", "float32", "float16"):
            raise InputError(f"dtype must be one of float64, float32, float16 (got {dtype!r})")
        if convert is not None and not callable(convert):
            raise InputError(f"convert must be callable or None (got {convert!r})")
        mask_as = mask_as if mask_as is not None else ("mask" if exact else "bool_keep")
        if mask_as not in MASK_FORMS:
            raise InputError(f"mask_as must be one of {', '.join(MASK_FORMS)} (got {mask_as!r})")
        if empty_row not in EMPTY_ROW_POLICIES:
            raise InputError(
                f"empty_row must be one of {', '.join(EMPTY_ROW_POLICIES)} (got {empty_row!r})")
        if name is not None and not isinstance(name, str):
            raise InputError(f"name must be a string (got {name!r})")
        self.fn, self.exact, self.dtype, self.convert = fn, exact, dtype, convert
        self.mask_as, self.empty_row = mask_as, empty_row
        self.rtol, self.atol = _check_tol("rtol", rtol), _check_tol("atol", atol)
        self.name = name or getattr(fn, "__name__", None) or repr(fn)

    def describe(self, result: _Result | None = None) -> str:
        if self.exact:
            return f"{self.name} (exact)"
        if result is None:
            tol = "tolerance from the returned dtype"
        else:
            src = "given" if self.rtol is not None and self.atol is not None else \
                f"from {result.dtype}"
            tol = f"rtol={result.rtol:g}, atol={result.atol:g} {src}"
        return f"{self.name} (float; {tol}; |got - exact| <= atol + rtol*M)"

    def _scale_arg(self, inp: AttentionInput):
        if inp.scale_squared is None:
            return None
        s2 = inp.scale_squared
        root = _rational_sqrt(s2)
        if self.exact:
            return root if root is not None else _inverse_sqrt(s2.numerator, s2.denominator)
        return float(root) if root is not None else _float_sqrt(s2)

    def __call__(self, inp: AttentionInput) -> _Result:
        """Call the function on ``inp`` and read its outputs (n_q x d_v)."""
        mask = inp.mask
        scale = self._scale_arg(inp)
        if self.exact:
            if mask is not None and self.mask_as != "mask":
                mask = mask.as_form(self.mask_as)
            out = self.fn([list(r) for r in inp.queries], [list(r) for r in inp.keys],
                          [list(r) for r in inp.values], mask=mask, scale=scale)
            rows = [[_Exact.of(e, f"outputs[{i}][{c}]") for c, e in enumerate(r)]
                    for i, r in enumerate(out)]
            self._check_shape(rows, inp)
            return _Result(rows, True)
        import numpy as np
        conv = self.convert or (lambda a: a)

        def arr(m):
            return conv(np.array([[float(e) for e in r] for r in m], dtype=self.dtype))
        if mask is not None:
            form = "bool_keep" if self.mask_as == "mask" else self.mask_as
            m = mask.as_form(form)
            if form == "additive":
                mask = conv(np.array([[-math.inf if e is None else float(e) for e in r]
                                      for r in m], dtype=self.dtype))
            else:
                mask = conv(np.array(m, dtype=bool))
        out = self.fn(arr(inp.queries), arr(inp.keys), arr(inp.values), mask=mask, scale=scale)
        if hasattr(out, "detach"):  # a PyTorch tensor: bfloat16 has no numpy dtype
            out = out.detach().cpu()
            dtype = str(out.dtype).replace("torch.", "")
            out = out.double().numpy()
        else:
            out = np.asarray(out)
            dtype = out.dtype.name
        # the looser of the input dtype and the returned one: float32 inputs upcast
        # to float64 still carry float32's rounding
        if TOLERANCES.get(dtype, TOLERANCES["float64"]) < TOLERANCES[self.dtype]:
            dtype = self.dtype
        rtol, atol = TOLERANCES.get(dtype, TOLERANCES["float64"])
        rtol = self.rtol if self.rtol is not None else rtol
        atol = self.atol if self.atol is not None else atol
        if out.shape != (inp.n_queries, inp.d_v):
            raise PropertyFailure(
                f"outputs must be {inp.n_queries} x {inp.d_v} (got shape {tuple(out.shape)})\n"
                f"  function: {self.name}\n  input: {inp!r}")
        rows = out.astype(np.float64).tolist()
        return _Result(rows, False, rtol, atol, dtype)

    def _check_shape(self, rows, inp):
        if len(rows) != inp.n_queries or any(len(r) != inp.d_v for r in rows):
            got = f"{len(rows)} x {[len(r) for r in rows]}"
            raise PropertyFailure(
                f"outputs must be {inp.n_queries} x {inp.d_v} (got {got})\n"
                f"  function: {self.name}\n  input: {inp!r}")


def _impl(fn) -> Implementation:
    if isinstance(fn, Implementation):
        return fn
    if fn is reference or fn is attend_as_function:
        return Implementation(fn, exact=True)
    return Implementation(fn)


# --------------------------------------------------------------------------- comparisons
def _text(x) -> str:
    if isinstance(x, _Exact):
        return x.text()
    if isinstance(x, Fraction):
        return str(x)
    return repr(x)


def _same(res: _Result, a, b, M: Fraction) -> bool:
    """Two results of the function agree: exactly, or within twice the tolerance."""
    if res.exact:
        return not a.nan and not b.nan and a.cmp(b) == 0
    return math.isfinite(a) and math.isfinite(b) and \
        abs(a - b) <= 2 * (res.atol + res.rtol * float(M))


def _equals(res: _Result, got, want, M: Fraction) -> bool:
    """A result equals an exact value (``Fraction`` or ``_Exact``)."""
    if res.exact:
        return not got.nan and got.cmp(want) == 0
    w = float(want)
    return math.isfinite(got) and abs(got - w) <= res.atol + res.rtol * float(M)


def _at_least(res: _Result, got, lo: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not got.nan and got.cmp(lo) >= 0
    return math.isfinite(got) and got >= float(lo) - (res.atol + res.rtol * float(M))


def _at_most(res: _Result, got, hi: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not got.nan and got.cmp(hi) <= 0
    return math.isfinite(got) and got <= float(hi) + (res.atol + res.rtol * float(M))


def _add(res: _Result, a, b):
    return a + b if res.exact else a + float(b)


def _sum(res: _Result, xs):
    if res.exact:
        total = _Exact.of(Fraction(0), "sum")
        for x in xs:
            total = total + x
        return total
    return math.fsum(xs)


def _is_nan(res: _Result, x) -> bool:
    return x.nan if res.exact else math.isnan(x)


def _fail(prop: str, impl: Implementation, res: _Result | None, inp, lines: list[str]):
    text = [f"property failed: {prop}", f"  function: {impl.describe(res)}", f"  input: {inp!r}"]
    text += [f"  {line}" for line in lines]
    raise PropertyFailure("\n".join(text))


def _column_scale(values, c: int) -> Fraction:
    return max((abs(v[c]) for v in values), default=Fraction(0))


def _row_text(res, row) -> str:
    return "[" + ", ".join(_text(x) for x in row) + "]"


def _shares(impl: Implementation, inp: AttentionInput) -> _Result:
    return impl(inp.replace(values=_identity(inp.n_keys)))


# --------------------------------------------------------------------------- the checks
def check_rows_sum_to_one(fn, inp: AttentionInput) -> None:
    """Every row of shares sums to exactly 1 (a row that sees no key follows ``empty_row``).

    The shares are the outputs for values = the n_k x n_k identity.

    Raises:
        PropertyFailure: a row whose shares do not sum to 1 (or, for an empty
            row, do not follow the function's ``empty_row`` policy).
    """
    impl = _impl(fn)
    prop = "every row of shares sums to exactly 1"
    res = _shares(impl, inp)
    bad = []
    for i, row in enumerate(res.rows):
        if inp.visible_keys(i):
            total = _sum(res, row)
            if not _equals(res, total, Fraction(1), Fraction(1)):
                bad.append(f"row {i}: shares {_row_text(res, row)} sum to {_text(total)}, want 1")
        elif impl.empty_row == "nan":
            if not all(_is_nan(res, x) for x in row):
                bad.append(f"row {i} sees no key: shares {_row_text(res, row)}, want nan (empty_row=nan)")
        else:
            want = Fraction(0) if impl.empty_row == "zero" else Fraction(1, inp.n_keys)
            if not all(_equals(res, x, want, Fraction(1)) for x in row):
                bad.append(f"row {i} sees no key: shares {_row_text(res, row)}, want {want} each "
                           f"(empty_row={impl.empty_row})")
    if bad:
        _fail(prop, impl, res, inp, bad)


def check_matches_reference(fn, inp: AttentionInput) -> None:
    """The outputs equal :func:`reference`'s exact outputs (under the function's ``empty_row``).

    Exactly for an exact function; within the stated tolerance for a float one.

    Raises:
        PropertyFailure: an output that differs from the exact one.
    """
    impl = _impl(fn)
    res = impl(inp)
    scale = Implementation(reference, exact=True)._scale_arg(inp)
    want = reference(inp.queries, inp.keys, inp.values, mask=inp.mask, scale=scale,
                     empty_row=impl.empty_row)
    bad = []
    for i, row in enumerate(res.rows):
        for c, got in enumerate(row):
            w = _Exact.of(want[i][c], "reference")
            if w.nan:
                ok = _is_nan(res, got)
            else:
                ok = _equals(res, got, w, _column_scale(inp.values, c))
            if not ok:
                bad.append(f"outputs[{i}][{c}] = {_text(got)}, exact {_text(w)}")
    if bad:
        _fail("the outputs equal the exact attention", impl, res, inp, bad)


def check_share_support(fn, inp: AttentionInput) -> None:
    """Every share is positive where the key is visible and exactly 0 where it is masked.

    Rows that see no key are left to :func:`check_rows_sum_to_one`.  A float
    share may underflow to 0.0 where the exact share is below ``atol``
    (``exp(-800)`` is 0 in float64); anywhere else a visible share must be > 0.

    Raises:
        PropertyFailure: a visible share that is not > 0, or a masked one that is not 0.

    >>> keep = Mask("bool_keep", [[True, False]])
    >>> check_share_support(reference, AttentionInput([[1]], [[1], [1]], [[0], [0]], keep))
    >>> def ignores_mask(queries, keys, values, *, mask=None, scale=None):
    ...     return reference(queries, keys, values, scale=scale)
    >>> check_share_support(Implementation(ignores_mask, exact=True),
    ...                     AttentionInput([[1]], [[1], [1]], [[0], [0]], keep))
    Traceback (most recent call last):
    ...
    exactattn.properties.PropertyFailure: property failed: shares are positive on visible keys and exactly 0 on masked ones
      function: ignores_mask (exact)
      input: AttentionInput(queries=[[1]], keys=[[1], [1]], values=[[0], [0]], mask=Mask('bool_keep', [[True, False]]), scale_squared=None)
      shares[0][1] = 1/2 for a masked key, want exactly 0
    """
    impl = _impl(fn)
    res = _shares(impl, inp)
    exact = None
    bad = []
    for i, row in enumerate(res.rows):
        if not inp.visible_keys(i):
            continue
        for j, x in enumerate(row):
            if inp.visible(i, j):
                if res.exact:
                    ok = not x.nan and x.sign() > 0
                else:
                    ok = math.isfinite(x) and x > 0
                    if x == 0.0:  # underflow is no fault when the exact share is below atol
                        if exact is None:
                            exact = _shares(Implementation(reference, exact=True), inp)
                        ok = float(exact.rows[i][j]) <= res.atol
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {_text(x)} for a visible key, want > 0")
            else:
                ok = (not x.nan and x.sign() == 0) if res.exact else x == 0.0
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {_text(x)} for a masked key, want exactly 0")
    if bad:
        _fail("shares are positive on visible keys and exactly 0 on masked ones", impl, res, inp, bad)


def _compare_outputs(prop, impl, inp, base: _Result, other: _Result, rows_map, shift=None):
    """Rows ``other[i]`` against ``base[src]`` (+ ``shift``) for ``(i, src)`` in ``rows_map``.

    Rows of ``inp`` (the base input) that see no key are skipped.
    """
    bad = []
    for i, src in rows_map:
        if not inp.visible_keys(src):
            continue
        for c in range(inp.d_v):
            M = _column_scale(inp.values, c)
            want = base.rows[src][c]
            got = other.rows[i][c]
            if shift is not None:
                want = _add(base, want, shift[c])
                M = M + abs(shift[c])
            if not _same(other, got, want, M):
                bad.append(f"outputs[{i}][{c}] = {_text(got)}, want {_text(want)}")
    if bad:
        _fail(prop, impl, other, inp, bad)


def check_shift_invariance(fn, inp: AttentionInput, shifts: Sequence | None = None) -> None:
    """Adding a constant to a row of scores changes nothing: softmax(s + c) = softmax(s).

    The constant ``shifts[i]`` (default ``i + 1``) is added to every raw score
    of query i by appending ``shifts[i]`` to the query and 1 to every key; the
    scale is then passed explicitly, so the widened head keeps the original
    one.  Outputs must be unchanged.

    Raises:
        PropertyFailure: an output that moved.
        ShapeError: ``shifts`` of the wrong length.
    """
    impl = _impl(fn)
    if shifts is None:
        shifts = [Fraction(i + 1) for i in range(inp.n_queries)]
    shifts = [to_exact(s, name=f"shifts[{i}]") for i, s in enumerate(shifts)]
    if len(shifts) != inp.n_queries:
        raise ShapeError(f"shifts must have one entry per query, {inp.n_queries} (got {len(shifts)})")
    wide = inp.replace(queries=[list(q) + [s] for q, s in zip(inp.queries, shifts)],
                       keys=[list(k) + [Fraction(1)] for k in inp.keys],
                       scale_squared=inp.effective_scale_squared)
    base, other = impl(inp), impl(wide)
    _compare_outputs(f"adding a constant to a row of scores changes nothing (shifts "
                     f"{[str(s) for s in shifts]})", impl, inp, base, other,
                     [(i, i) for i in range(inp.n_queries)])


def _check_permutation(permutation, n: int, name: str) -> list[int]:
    if permutation is None:
        return list(reversed(range(n)))
    perm = list(permutation)
    if sorted(perm) != list(range(n)):
        raise InputError(f"{name} must be a permutation of 0..{n - 1} (got {permutation!r})")
    return perm


def check_key_permutation(fn, inp: AttentionInput, permutation: Sequence[int] | None = None) -> None:
    """Permuting keys and values together (and the mask's columns) leaves every output unchanged.

    ``permutation`` lists the new order of the keys (default: reversed).  A
    causal mask is carried along as the boolean mask it stands for.

    Raises:
        PropertyFailure: an output that changed.
    """
    impl = _impl(fn)
    perm = _check_permutation(permutation, inp.n_keys, "permutation")
    moved = inp.replace(keys=[inp.keys[p] for p in perm], values=[inp.values[p] for p in perm],
                        mask=None if inp.mask is None else inp.mask.permute_keys(perm))
    base, other = impl(inp), impl(moved)
    _compare_outputs(f"permuting keys and values together leaves the outputs unchanged "
                     f"(keys in the order {perm})", impl, inp, base, other,
                     [(i, i) for i in range(inp.n_queries)])


def check_query_permutation(fn, inp: AttentionInput, permutation: Sequence[int] | None = None) -> None:
    """Permuting the queries (and the mask's rows) permutes the outputs the same way.

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[permutation[i]]``.
    """
    impl = _impl(fn)
    perm = _check_permutation(permutation, inp.n_queries, "permutation")
    moved = inp.replace(queries=[inp.queries[p] for p in perm],
                        mask=None if inp.mask is None else inp.mask.permute_queries(perm))
    base, other = impl(inp), impl(moved)
    _compare_outputs(f"permuting the queries permutes the outputs (queries in the order {perm})",
                     impl, inp, base, other, list(enumerate(perm)))


def check_identical_queries(fn, inp: AttentionInput) -> int:
    """Two queries with the same numbers (and the same mask row) get the same output row.

    Returns:
        the number of pairs of identical queries compared (0: nothing to check).

    Raises:
        PropertyFailure: two identical queries with different outputs.
    """
    impl = _impl(fn)
    pairs = [(a, b) for a in range(inp.n_queries) for b in range(a + 1, inp.n_queries)
             if inp.queries[a] == inp.queries[b]
             and (inp.mask is None or inp.mask.row(a) == inp.mask.row(b))]
    if not pairs:
        return 0
    res = impl(inp)
    bad = []
    for a, b in pairs:
        for c in range(inp.d_v):
            if not _same(res, res.rows[a][c], res.rows[b][c], _column_scale(inp.values, c)):
                bad.append(f"queries {a} and {b} are identical but outputs[{a}][{c}] = "
                           f"{_text(res.rows[a][c])} and outputs[{b}][{c}] = {_text(res.rows[b][c])}")
    if bad:
        _fail("identical queries get identical rows", impl, res, inp, bad)
    return len(pairs)


def _check_bias(bias, width: int, name: str) -> list[Fraction]:
    if bias is None:
        return [Fraction(1)] * width
    b = [to_exact(e, name=f"{name}[{i}]") for i, e in enumerate(bias)]
    if len(b) != width:
        raise ShapeError(f"{name} must have {width} numbers (got {len(b)})")
    return b


def check_key_bias_cancels(fn, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the keys cancels: ``k_j + b`` adds ``q_i . b`` to every score of row i, a constant.

    (A bias on the queries adds ``b . k_j``, which varies with j, so it does
    *not* cancel in general.)  Default bias: all ones.

    Raises:
        PropertyFailure: an output that changed.

    >>> check_key_bias_cancels(reference, AttentionInput([[1, 2]], [[0, 1], [1, 0]], [[1], [3]]),
    ...                        bias=[5, -1])
    """
    impl = _impl(fn)
    b = _check_bias(bias, inp.d_k, "bias")
    moved = inp.replace(keys=[[a + e for a, e in zip(k, b)] for k in inp.keys])
    base, other = impl(inp), impl(moved)
    _compare_outputs(f"a bias on the keys cancels out of the shares (bias {[str(e) for e in b]})",
                     impl, inp, base, other, [(i, i) for i in range(inp.n_queries)])


def check_value_bias_shifts(fn, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the values shifts every output by exactly that bias (the shares sum to 1).

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[i] + bias`` for a row that sees a key.

    >>> check_value_bias_shifts(reference, AttentionInput([[1]], [[1], [2]], [[0], [3]]), ["1/2"])
    """
    impl = _impl(fn)
    b = _check_bias(bias, inp.d_v, "bias")
    moved = inp.replace(values=[[a + e for a, e in zip(v, b)] for v in inp.values])
    base, other = impl(inp), impl(moved)
    _compare_outputs(f"a bias on the values shifts every output by that bias "
                     f"(bias {[str(e) for e in b]})", impl, inp, base, other,
                     [(i, i) for i in range(inp.n_queries)], shift=b)


def check_outputs_within_values(fn, inp: AttentionInput) -> None:
    """Each output lies between the smallest and largest visible value in its column.

    ``min_j values[j][c] <= outputs[i][c] <= max_j values[j][c]`` over the keys
    query i sees: an output is a weighted average with positive weights adding to 1.

    Raises:
        PropertyFailure: an output outside that range.
    """
    impl = _impl(fn)
    res = impl(inp)
    bad = []
    for i, row in enumerate(res.rows):
        seen = inp.visible_keys(i)
        if not seen:
            continue
        for c, got in enumerate(row):
            col = [inp.values[j][c] for j in seen]
            lo, hi = min(col), max(col)
            M = _column_scale(inp.values, c)
            if not (_at_least(res, got, lo, M) and _at_most(res, got, hi, M)):
                bad.append(f"outputs[{i}][{c}] = {_text(got)} lies outside [{lo}, {hi}], "
                           f"the visible values of column {c}")
    if bad:
        _fail("each output lies between the smallest and largest visible value", impl, res, inp, bad)


def check_causal_first_output(fn, inp: AttentionInput) -> None:
    """With a causal mask the first query sees only the first key, so its output is exactly ``values[0]``.

    Raises:
        InputError: the mask is not causal top-left (or bottom-right with as
            many keys as queries, where the two coincide).
        PropertyFailure: ``outputs[0] != values[0]``.

    >>> causal = Mask("causal_top_left", n_queries=2, n_keys=2)
    >>> check_causal_first_output(attend_as_function,
    ...                           AttentionInput([[1], [2]], [[3], [4]], [[5], [6]], causal))
    >>> check_causal_first_output(reference, AttentionInput([[1]], [[1]], [[1]]))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: mask must be causal_top_left (or causal_bottom_right with as many keys as queries) for this check (got None)
    """
    impl = _impl(fn)
    m = inp.mask
    if m is None or not (m.kind == "causal_top_left" or
                         (m.kind == "causal_bottom_right" and m.n_queries == m.n_keys)):
        raise InputError(f"mask must be causal_top_left (or causal_bottom_right with as many keys "
                         f"as queries) for this check (got {m!r})")
    res = impl(inp)
    bad = []
    for c in range(inp.d_v):
        got, want = res.rows[0][c], inp.values[0][c]
        if not _equals(res, got, want, _column_scale(inp.values, c)):
            bad.append(f"outputs[0][{c}] = {_text(got)}, want values[0][{c}] = {want}")
    if bad:
        _fail("with a causal mask the first output is its own value", impl, res, inp, bad)


def check_masked_entries_ignored(fn, inp: AttentionInput, change: Fraction | int = 7) -> None:
    """Changing a key or value that query i cannot see leaves output i unchanged.

    For each query with a masked key, every entry of the keys and values it
    cannot see has ``change`` added, and its output row is compared.

    Raises:
        PropertyFailure: an output that moved when only hidden entries changed.
    """
    impl = _impl(fn)
    delta = to_exact(change, name="change")
    base = None
    bad = []
    res = None
    for i in range(inp.n_queries):
        hidden = [j for j in range(inp.n_keys) if not inp.visible(i, j)]
        if not hidden or not inp.visible_keys(i):
            continue
        if base is None:
            base = impl(inp)
        moved = inp.replace(
            keys=[[e + delta for e in k] if j in hidden else k for j, k in enumerate(inp.keys)],
            values=[[e + delta for e in v] if j in hidden else v for j, v in enumerate(inp.values)])
        res = impl(moved)
        for c in range(inp.d_v):
            M = max(_column_scale(inp.values, c), _column_scale(moved.values, c))
            if not _same(res, res.rows[i][c], base.rows[i][c], M):
                bad.append(f"outputs[{i}][{c}] moved from {_text(base.rows[i][c])} to "
                           f"{_text(res.rows[i][c])} when hidden keys {hidden} changed")
    if bad:
        _fail("keys and values at masked positions do not reach the outputs", impl, res, inp, bad)


def check_masked_entries_absent(inp: AttentionInput) -> int:
    """No key or value at a masked position appears in any output, proved with sympy symbols.

    Every key and value entry is replaced by a symbol (``k_j_c``, ``v_j_c``)
    and :func:`exactattn.attend` runs with ``engine="symbolic"``; output i's
    free symbols must avoid those of the keys query i cannot see.  Uses the
    queries and scale of ``inp``; the mask must be None or causal with as
    many keys as queries (what ``attend`` supports).

    Returns:
        how many (query, hidden key) pairs were checked.

    Raises:
        PropertyFailure: a hidden key's or value's symbol in an output.
        InputError, ShapeError: a mask or shape ``attend`` does not support.

    >>> check_masked_entries_absent(AttentionInput([[1], [2]], [[0], [0]], [[0], [0]],
    ...                                            Mask("causal_top_left", n_queries=2, n_keys=2)))
    1
    """
    import sympy
    from .head import attend
    causal = _self_attention_mask(inp.mask, inp.n_queries, inp.n_keys)
    k_sym = [[sympy.Symbol(f"k_{j}_{c}") for c in range(inp.d_k)] for j in range(inp.n_keys)]
    v_sym = [[sympy.Symbol(f"v_{j}_{c}") for c in range(inp.d_v)] for j in range(inp.n_keys)]
    q = [[sympy.Rational(e.numerator, e.denominator) for e in r] for r in inp.queries]
    scale = None
    if inp.scale_squared is not None:
        s2 = inp.scale_squared
        scale = sympy.sqrt(sympy.Rational(s2.numerator, s2.denominator))
    head, x = _selector_head(q, k_sym, v_sym, causal=causal, scale=scale, symbolic=True)
    trace = attend(head, x, engine="symbolic")
    bad, checked = [], 0
    for i in range(inp.n_queries):
        hidden = {s for j in range(inp.n_keys) if not inp.visible(i, j)
                  for s in k_sym[j] + v_sym[j]}
        checked += sum(1 for j in range(inp.n_keys) if not inp.visible(i, j))
        for c in range(inp.d_v):
            leak = sympy.sympify(trace.outputs[i][c]).free_symbols & hidden
            if leak:
                bad.append(f"outputs[{i}][{c}] contains {sorted(map(str, leak))}, entries of keys "
                           f"or values query {i} cannot see")
    if bad:
        impl = Implementation(attend_as_function, exact=True, name="exactattn.attend (symbolic)")
        _fail("keys and values at masked positions appear in no output", impl, None, inp, bad)
    return checked


def check_online_softmax(raw: Sequence, divisor_squared, values=None, *, blocks=None,
                         empty_row: str = "zero") -> int:
    """The online (blockwise, running-maximum) softmax equals the one-pass softmax exactly.

    ``blocks`` is one split (a block size or a list of lengths); None tries
    every split of the row (2**(n-1) of them).  See :mod:`exactattn.online`.

    Returns:
        the number of splits compared.

    Raises:
        PropertyFailure: a split whose maximum, normaliser or outputs differ.

    >>> check_online_softmax([Fraction(0), None, Fraction(3)], Fraction(2))
    4
    """
    from .online import all_splits, online_softmax
    splits = list(all_splits(len(raw))) if blocks is None else [blocks]
    for split in splits:
        res = online_softmax(raw, divisor_squared, values, blocks=split, empty_row=empty_row)
        if not res.equals_one_pass():
            ref, outs = res.one_pass()
            raise PropertyFailure("\n".join([
                "property failed: the online softmax equals the one-pass softmax exactly",
                f"  raw scores: {[_frac_text(r) for r in raw]}, divisor squared {divisor_squared}",
                f"  blocks: {res.blocks}",
                f"  online: max {res.row.max_raw}, normaliser {res.row.counts}, "
                f"outputs {[o.numerators for o in res.outputs]}",
                f"  one pass: max {ref.max_raw}, normaliser {ref.counts}, "
                f"outputs {[o.numerators for o in outs]}"]))
    return len(splits)


# --------------------------------------------------------------------------- head-level checks
def _head_fail(prop: str, head, x, lines: list[str]):
    text = [f"property failed: {prop}", "  function: exactattn.attend (exact)",
            f"  head: {head!r}", f"  x: {_matrix_text(x)}"] + [f"  {line}" for line in lines]
    raise PropertyFailure("\n".join(text))


def check_identical_tokens(head, x) -> int:
    """Two tokens with the same numbers get the same row of shares and the same output (no positions).

    Returns:
        the number of pairs of identical tokens compared.

    Raises:
        InputError: a causal head (its rows differ by position on purpose).
        PropertyFailure: identical tokens with different rows.

    >>> from exactattn.examples import chronicle
    >>> check_identical_tokens(chronicle().head, chronicle().x)    # tokens 2 and 4
    1
    """
    from .head import attend
    if head.causal:
        raise InputError("head must not be causal for this check (got causal=True)")
    trace = attend(head, x, engine="pencil")
    n = trace.n
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if trace.x[a] == trace.x[b]]
    bad = []
    for a, b in pairs:
        for j in range(n):
            if _Exact.of(trace.share(a, j), "share").cmp(_Exact.of(trace.share(b, j), "share")):
                bad.append(f"tokens {a} and {b} are identical but shares[{a}][{j}] != shares[{b}][{j}]")
        for c in range(head.d_v):
            if _Exact.of(trace.output(a, c), "output").cmp(_Exact.of(trace.output(b, c), "output")):
                bad.append(f"tokens {a} and {b} are identical but outputs[{a}][{c}] != outputs[{b}][{c}]")
    if bad:
        _head_fail("two tokens with the same numbers get the same row", head, x, bad)
    return len(pairs)


def _biased_head(head, query_bias, key_bias, value_bias):
    """The head with biases, as a head over ``x ++ [1]`` whose extra weight column is the bias."""
    from .head import Head

    def widen(W, b):
        return [list(r) + [e] for r, e in zip(W, b)]
    return Head(widen(head.W_Q, query_bias), widen(head.W_K, key_bias), widen(head.W_V, value_bias),
                layout="slots", causal=head.causal, divisor=head.divisor)


def check_bias_cancels(head, x, *, key_bias: Sequence | None = None,
                       value_bias: Sequence | None = None) -> None:
    """A key bias cancels out of the shares; a value bias shifts every output by exactly itself.

    Derivation: with ``k_j = W_K x_j + b_k`` the score ``q_i . k_j`` gains
    ``q_i . b_k``, the same for every key j of row i, and a softmax ignores a
    constant added to a row.  With ``v_j = W_V x_j + b_v`` each output gains
    ``sum_j shares[i][j] b_v = b_v``.  A *query* bias adds ``b_q . k_j``,
    which depends on j, so it does not cancel (see the tests for a head
    where it moves the shares).  The biased head is built exactly, as a head
    over ``x ++ [1]`` whose extra weight column is the bias.

    Raises:
        PropertyFailure: shares that moved, or outputs not shifted by ``value_bias``.
    """
    from .head import attend
    b_k = _check_bias(key_bias, head.d_k, "key_bias")
    b_v = _check_bias(value_bias, head.d_v, "value_bias")
    zeros = [Fraction(0)] * head.d_k
    plain = attend(head, x, engine="pencil")
    biased_head = _biased_head(head, zeros, b_k, b_v)
    biased = attend(biased_head, [list(r) + [Fraction(1)] for r in plain.x], engine="pencil")
    bad = []
    for i in range(plain.n):
        for j in range(plain.n):
            if _Exact.of(plain.share(i, j), "share").cmp(_Exact.of(biased.share(i, j), "share")):
                bad.append(f"shares[{i}][{j}] changed under key bias {[str(e) for e in b_k]}")
        if not plain.rows[i].empty:
            for c in range(head.d_v):
                want = _Exact.of(plain.output(i, c), "output") + b_v[c]
                if _Exact.of(biased.output(i, c), "output").cmp(want):
                    bad.append(f"outputs[{i}][{c}] did not shift by value bias {b_v[c]}")
    if bad:
        _head_fail("a key bias cancels and a value bias shifts the outputs by itself", head, x, bad)


def check_cost(head, x) -> dict[str, int]:
    """The multiply-adds counted inside the engine's loops equal the formula derived from the loop bounds.

    Runs ``attend(head, x, engine="pencil")`` and compares ``trace.macs`` stage
    by stage with :func:`exactattn.cost.derive` (sympy sums over the loop
    nests: ``n D (2 d_k + d_v)``, ``n^2 d_k``, ``n^2 d_v``; a causal head sees
    n(n+1)/2 pairs) at n, D = d_model, d_k, d_v.  Units: MACs.

    Returns:
        the counted MACs per stage, with their ``total``.

    Raises:
        PropertyFailure: a stage whose count differs from the derived figure.

    >>> from exactattn.examples import chronicle
    >>> check_cost(chronicle().head, chronicle().x)
    {'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
    """
    from .cost import SYMBOLS, derive
    from .head import attend
    trace = attend(head, x, engine="pencil")
    n, D, d_k, d_v = SYMBOLS
    at = {n: trace.n, D: head.d_model, d_k: head.d_k, d_v: head.d_v}
    derived = {stage: int(expr.xreplace(at)) for stage, expr in derive(causal=head.causal).items()}
    counted = dict(trace.macs)
    counted["total"] = sum(trace.macs.values())
    bad = [f"{stage}: counted {counted.get(stage)} MACs, derived {derived[stage]} "
           f"({derive(causal=head.causal)[stage]})"
           for stage in derived if counted.get(stage) != derived[stage]]
    if bad:
        _head_fail("the counted cost equals the derived formula", head, x, bad)
    return counted


# --------------------------------------------------------------------------- all at once
_FUNCTION_CHECKS = (
    ("matches reference", check_matches_reference),
    ("rows sum to one", check_rows_sum_to_one),
    ("share support", check_share_support),
    ("shift invariance", check_shift_invariance),
    ("key permutation", check_key_permutation),
    ("query permutation", check_query_permutation),
    ("identical queries", check_identical_queries),
    ("key bias cancels", check_key_bias_cancels),
    ("value bias shifts", check_value_bias_shifts),
    ("outputs within values", check_outputs_within_values),
    ("masked entries ignored", check_masked_entries_ignored),
)


def check_all(fn, inp: AttentionInput) -> list[str]:
    """Run every function-level check that applies to ``inp``; return the names of those run.

    The permutation checks are skipped under a causal mask (a causal mask
    is about positions, and permuting turns it into a boolean one); the
    causal-first-output check runs when the mask is causal and aligned so
    that the first query sees only the first key.

    Raises:
        PropertyFailure: the first property that fails, with its report.
    """
    impl = _impl(fn)
    ran = []
    m = inp.mask
    positional = m is not None and m.kind.startswith("causal")
    for name, check in _FUNCTION_CHECKS:
        if positional and name.endswith("permutation"):
            continue
        check(impl, inp)
        ran.append(name)
    if m is not None and (m.kind == "causal_top_left" or
                          (m.kind == "causal_bottom_right" and m.n_queries == m.n_keys)):
        check_causal_first_output(impl, inp)
        ran.append("causal first output")
    return ran
