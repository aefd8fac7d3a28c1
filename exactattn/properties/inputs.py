"""One input to an attention function: queries, keys, values, an explicit mask and a policy.

Which keys a query sees comes from the call model alone:
:meth:`~exactattn.call.policy.Policy.visible_keys` (the causal rule and its
alignment, a window, a query offset) narrowed by the explicit
:class:`~exactattn.call.policy.Mask`'s ``keeps``.  The scale is the policy's (stored
by the divisor squared ``D``); soft-cap, sink, ALiBi, RoPE and dropout are
the policy's too, with the dropout keep-mask as data (``dropout_keep``).
Keys and values may hold ``inf``/``nan`` where no query sees them (checked by
:meth:`Call.check_nonfinite <exactattn.call.Call.check_nonfinite>`,
the one check).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from ..call.policy import DEFAULT_SCALE, Mask, Policy
from ..errors import InputError, ShapeError, shorten
from ..numbers.exact import is_symbolic, to_matrix
from ..engines.head import attend
from ..call.inputs import Call, nonfinite_value
from .report import input_text


def _nonfinite_marked(rows):
    """The rows with ``inf``/``nan`` entries (floats or text) replaced by their Python float."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        return rows, False
    out, found = [], False
    for r in rows:
        if isinstance(r, (str, bytes)) or not hasattr(r, "__iter__"):
            return rows, False
        row = []
        for e in r:
            bad = nonfinite_value(e)
            found |= bad is not None
            row.append(e if bad is None else bad)
        out.append(row)
    return out, found


def _rationals(rows, name: str, shape=(None, None), nonfinite: bool = False) -> list[list]:
    """A matrix of ``Fraction`` entries, refusing sympy symbols with a message that fits.

    With ``nonfinite``, ``inf``/``nan`` entries are kept as Python floats."""
    if nonfinite:
        marked, found = _nonfinite_marked(rows)
        if found:
            finite = [[Fraction(0) if isinstance(e, float) else e for e in r] for r in marked]
            m = _rationals(finite, name, shape)
            return [[e if isinstance(e, float) else x for e, x in zip(r, mr)]
                    for r, mr in zip(marked, m)]
    m = to_matrix(rows, name=name, shape=shape, symbolic=True)
    for i, r in enumerate(m):
        for j, e in enumerate(r):
            if is_symbolic(e):
                raise InputError(
                    f"{name}[{i}][{j}] must be a rational number (got {shorten(str(e))}); the "
                    "properties' inputs and reference are exact over rationals: for symbols, "
                    "run a head with exactattn.attend(head, x, engine='symbolic')")
    return m


@dataclass(frozen=True, eq=True, repr=False)
class AttentionInput:
    """One input to an attention function: queries, keys, values, an explicit mask and a policy.

    Shapes: ``queries`` n_q x d_k, ``keys`` n_k x d_k, ``values`` n_k x d_v,
    ``mask`` n_q x n_k (or None: no explicit mask), ``dropout_keep`` n_q x
    n_k booleans (True = kept; with ``policy.dropout``) or None.

    ``policy`` (:class:`~exactattn.call.policy.Policy`) holds the scale (by the
    divisor squared ``D``; ``"default"`` is ``D = d_k``, None no scaling),
    the causal rule and its alignment, and what a row that sees no key gets
    (``empty_row``).  Query i sees key j when the policy's
    ``visible_keys(i, n_q, n_k)`` holds j and the mask keeps (i, j).

    Raises:
        ShapeError: sizes that do not fit together; InputError: bad entries,
        a mask or policy of the wrong type.

    >>> inp = AttentionInput([[1, 0]], [[1, 0], [0, 1]], [["1/2"], [2]])
    >>> inp
    AttentionInput(queries=[[1, 0]], keys=[[1, 0], [0, 1]], values=[['1/2'], [2]], mask=None, policy=Policy())
    >>> inp.n_queries, inp.n_keys, inp.d_k, inp.d_v, inp.divisor_squared
    (1, 2, 2, 1, Fraction(2, 1))
    >>> causal = AttentionInput([[0], [0]], [[0], [0], [0]], [[1], [2], [3]],
    ...                         policy=Policy(causal=True, alignment="bottom_right"))
    >>> causal.visible_keys(0), causal.visible_keys(1)
    ([0, 1], [0, 1, 2])
    >>> AttentionInput([[1, 0]], [[1]], [[1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: keys must be 1 x 2 (got 1 x 1)
    """

    queries: Any
    keys: Any
    values: Any
    mask: Mask | None = None
    policy: Policy = Policy()
    dropout_keep: Any = None

    def __post_init__(self):
        q = _rationals(self.queries, "queries")
        d_k = len(q[0])
        k = _rationals(self.keys, "keys", (None, d_k), nonfinite=True)
        v = _rationals(self.values, "values", (len(k), None), nonfinite=True)
        object.__setattr__(self, "queries", q)
        object.__setattr__(self, "keys", k)
        object.__setattr__(self, "values", v)
        if self.mask is not None:
            if not isinstance(self.mask, Mask):
                raise InputError(f"mask must be an exactattn.call.policy.Mask or None "
                                 f"(got {shorten(repr(self.mask))})")
            if (self.mask.n_queries, self.mask.n_keys) != (len(q), len(k)):
                raise ShapeError(f"mask must be {len(q)} x {len(k)} (got "
                                 f"{self.mask.n_queries} x {self.mask.n_keys})")
        if self.policy is None:
            object.__setattr__(self, "policy", Policy())
        elif not isinstance(self.policy, Policy):
            raise InputError(f"policy must be an exactattn.call.policy.Policy or None "
                             f"(got {shorten(repr(self.policy))})")
        if self.dropout_keep is not None:
            keep = [list(r) for r in self.dropout_keep]
            if len(keep) != len(q) or any(len(r) != len(k) for r in keep) or \
                    not all(isinstance(e, bool) for r in keep for e in r):
                raise ShapeError(f"dropout_keep must be {len(q)} x {len(k)} true/false entries "
                                 f"(got {shorten(repr(self.dropout_keep))})")
            object.__setattr__(self, "dropout_keep", keep)
        if any(isinstance(e, float) for r in k + v for e in r) or \
                (self.policy.dropout is None) != (self.dropout_keep is None):
            _ = self.reference_problem    # the one non-finite and dropout check, now

    n_queries = property(lambda self: len(self.queries))
    n_keys = property(lambda self: len(self.keys))
    d_k = property(lambda self: len(self.queries[0]))
    d_v = property(lambda self: len(self.values[0]))

    @property
    def divisor_squared(self) -> Fraction | None:
        """``D``: the scores are divided by sqrt(D) (``d_k`` by default); None for no scaling."""
        return self.policy.divisor_squared_for(self.d_k)

    @cached_property
    def keep(self):
        """n_q x n_k numpy booleans, True where query i sees key j: ``Policy.keep`` with the mask."""
        return self.policy.keep(self.n_queries, self.n_keys, self.mask)

    def visible_keys(self, i: int) -> list[int]:
        """The keys query i sees: the policy's visible keys that the mask keeps."""
        return self.keep[i].nonzero()[0].tolist()

    def visible(self, i: int, j: int) -> bool:
        """Whether query i sees key j."""
        return bool(self.keep[i, j])

    def effective_mask(self) -> Mask | None:
        """The explicit mask with the causal rule folded in (None: every key visible).

        An additive mask stays additive (its offsets kept, ``-inf`` where the
        causal rule hides); otherwise the result is a ``bool_keep`` mask.
        This is what reaches a function, which is told nothing else about
        visibility.
        """
        return self.policy.fold(self.mask, self.n_queries, self.n_keys)

    @cached_property
    def call(self) -> Call:
        """The input as a one-head :class:`~exactattn.call.Call` (L x E, the explicit mask and the
        policy with it): what the exact reference (:class:`~exactattn.verify.Reference`) and the
        adapter (:func:`~exactattn.verify.adapter.make_call`) read.
        """
        mask = self.mask
        return Call(self.queries, self.keys, self.values, None if mask is None else mask.rows,
                    policy=self.policy, mask_kind=None if mask is None else mask.kind,
                    name="attention input", dropout_keep=self.dropout_keep,
                    labels=("queries", "keys", "values"))

    @property
    def reference_problem(self) -> Call:
        """:attr:`call`, checked (non-finite entries hidden; dropout and its mask together)."""
        from ..call.modifiers import dropout_factors
        p = self.call
        p.check_nonfinite()
        if (self.policy.dropout is None) != (self.dropout_keep is None):
            dropout_factors(self.policy.dropout, self.dropout_keep and [True])
        return p

    def replace(self, **changes) -> "AttentionInput":
        """A copy with some fields changed (checked again)."""
        fields = dict(queries=self.queries, keys=self.keys, values=self.values,
                      mask=self.mask, policy=self.policy, dropout_keep=self.dropout_keep)
        fields.update(changes)
        return AttentionInput(**fields)

    def __repr__(self) -> str:
        return input_text(self)

    def _repr_pretty_(self, p, cycle):  # Hypothesis's and IPython's pretty printer
        p.text(repr(self))


def input_from_head(head, x, *, floats: str | None = None) -> AttentionInput:
    """The attention input a head sees for tokens ``x``: its queries, keys, values and policy.

    The policy is the head's (causal top_left for a causal head), with the
    scale ``"default"`` when the divisor is the default sqrt(d_k).

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> inp = input_from_head(ex.head, ex.x)
    >>> inp.queries[1], inp.policy.divisor_squared, inp.divisor_squared   # divisor 2 = sqrt(d_k)
    ([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], 'default', Fraction(4, 1))
    """
    trace = attend(head, x, engine="pencil", floats=floats)
    policy = head.policy
    if head.divisor_squared == head.d_k:
        policy = policy.replace(divisor_squared=DEFAULT_SCALE)
    return AttentionInput(trace.queries, trace.keys, trace.values, None, policy)
