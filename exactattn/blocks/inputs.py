"""The exact inputs of one attention head, as integer numerators over common denominators.

A row block reads its queries, all keys and all values (or the visible
ones) from an :class:`ExactInputs`: ``query = q / q_den`` (n_q x d_k),
``key = k / k_den`` (n_k x d_k), ``value = v / v_den`` (n_k x d_v), numpy
arrays of integers (int64 where every entry fits, else Python ints), the
:class:`~exactattn.call.policy.Policy` of the call and an optional explicit boolean
mask.  That is what :mod:`exactattn.numbers.bulk` computes from, and what a Dask
cluster receives once (it is small: O(n d), never O(n^2)).  It is built from a
:class:`~exactattn.call.Call` (:func:`from_call`, which validated it) or from binary
floats (:func:`from_floats`).

Binary floats are read as the dyadic rationals they are (:func:`float_ints`),
never through decimal text and never silently: a caller hands floats only
where the floats ARE the inputs (a float kernel's own arguments).

>>> import numpy as np
>>> float_ints(np.array([[0.75, -2.0], [0.0, 0.125]], dtype=np.float32))
(array([[ 6, -16],
       [ 0,   1]]), 8)
>>> x = random_inputs(4, 2, seed=1)
>>> x.n_q, x.d_k, x.q_den > 1, x.policy.describe()
(4, 2, True, 'scale=1/sqrt(d_k) causal=off alignment=top_left empty_row=zero mask=bool_keep gqa=interleave')
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..call.modifiers import dropout_factors
from ..call.policy import Policy
from ..errors import InputError, shorten
from ..options import check_choice, check_whole

__all__ = ["float_ints"]

#: float dtypes random inputs are drawn in (numpy rounds to them exactly, ties to even)
FLOAT_DTYPES = ("float64", "float32", "float16")


def float_ints(a) -> tuple[np.ndarray, int]:
    """A float array as exact integers over one power of two: ``(ints, den)``.

    Every finite binary float is ``m 2^e``; the numerators are ``m 2^(e - e_min)``
    over ``den = 2^-e_min`` (1 when every entry is an integer).  int64 where
    every numerator fits below 2^62, else Python ints.

    Raises:
        InputError: an entry is NaN or infinite.
    """
    a = np.asarray(a, dtype=np.float64)       # float16/32 -> float64 is exact
    if not np.isfinite(a).all():
        raise InputError(f"inputs must be finite floats (got {shorten(str(a[~np.isfinite(a)][0]))}"
                         "); a NaN or infinite input has no exact value")
    m, e = np.frexp(a)
    mant = np.ldexp(m, 53).astype(np.int64)            # exact: 53 significant bits at most
    exp = e.astype(np.int64) - 53
    nz = mant != 0
    if not nz.any():
        return np.zeros(a.shape, dtype=np.int64), 1
    low = np.where(nz, mant & -mant, 1)                 # strip trailing zero bits
    tz = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
    mant, exp = mant >> tz, exp + tz
    den_exp = max(0, -int(exp[nz].min()))
    shift = np.where(nz, exp + den_exp, 0)
    width = int((np.frexp(np.abs(mant).astype(np.float64))[1] + shift).max())
    if width <= 61:
        return mant << shift, 1 << den_exp
    out = np.array([int(x) << int(s) for x, s in zip(mant.ravel().tolist(),
                                                     shift.ravel().tolist())], dtype=object)
    return out.reshape(a.shape), 1 << den_exp


@dataclass(frozen=True, eq=False)
class ExactInputs:
    """One call's exact inputs: numerators over common denominators, the policy, a mask.

    Shapes: ``q`` n_q x d_k, ``k`` n_k x d_k, ``v`` n_k x d_v (integer
    arrays); ``mask`` None or n_q x n_k booleans (True = the key may be seen;
    the policy's positional rule applies on top of it); ``dropout_keep`` None
    or n_q x n_k booleans, the keep-mask of ``policy.dropout``.
    """

    q: np.ndarray
    q_den: int
    k: np.ndarray
    k_den: int
    v: np.ndarray
    v_den: int
    policy: Policy
    mask: np.ndarray | None = None
    name: str = "inputs"
    dropout_keep: np.ndarray | None = None

    n_q = property(lambda self: self.q.shape[0], doc="queries")
    n_k = property(lambda self: self.k.shape[0], doc="keys")
    d_k = property(lambda self: self.q.shape[1], doc="query/key width")
    d_v = property(lambda self: self.v.shape[1], doc="value width")
    #: the sizes by the names verify's reports use
    shape = property(lambda self: {"L": self.n_q, "S": self.n_k, "E": self.d_k, "E_v": self.d_v})

    @property
    def divisor_squared(self) -> Fraction | None:
        """D, with scores divided by sqrt(D) (None: no scaling)."""
        return self.policy.divisor_squared_for(self.d_k)

    @property
    def score_bound(self) -> int:
        """A bound on every |raw-score numerator| of the call: ``ceil(max|q_i| max|k_j|)``
        with Euclidean norms (Cauchy-Schwarz), exact."""
        if "_bound" not in self.__dict__:
            from math import isqrt
            norms = [int((a.astype(object) ** 2).sum(axis=1).max()) if a.size else 0
                     for a in (self.q, self.k)]
            object.__setattr__(self, "_bound", isqrt(norms[0] * norms[1]) + 1)
        return self.__dict__["_bound"]

    @property
    def den(self) -> int:
        """The common denominator of the raw scores, ``q_den * k_den``."""
        return self.q_den * self.k_den


def from_call(call, b: int = 0, h: int = 0) -> ExactInputs:
    """The (batch b, query head h) head of an exact :class:`~exactattn.call.Call`.

    Raises:
        InputError: an additive mask (row blocks take boolean masks only); dropout without
            its keep-mask, or a keep-mask without dropout; an ``inf`` or ``nan`` a query sees.
    """
    from ..numbers.bulk import int_rows
    from ..numbers.exact import common_denominator
    policy = call.policy.for_head(h)
    kv = policy.kv_head(h, call.shape["H_q"], call.shape["H_kv"])
    mask, dropped = call.block_mask(b, h), call.dropout_keep
    if (policy.dropout is None) != (dropped is None):
        dropout_factors(policy.dropout, None if dropped is None else [True])
    keep = None
    if mask is not None:
        if mask.kind == "additive":
            raise InputError("mask must be boolean for row blocks (got an additive mask); "
                             "check additive masks with exactattn verify")
        keep = policy.keep(call.shape["L"], call.shape["S"], mask)
    call.check_nonfinite()         # inf and NaN only where no query looks: read as 0
    call = call.finite()
    (q, qd), (k, kd), (v, vd) = ((int_rows(m[0]), m[1]) for m in (common_denominator(
        a.tolist()) for a in (call.query[b, h], call.key[b, kv], call.value[b, kv])))
    return ExactInputs(q, qd, k, kd, v, vd, policy, keep, call.name,
                       None if dropped is None else dropped[b, h])


def random_floats(n: int, d: int, *, seed: int = 0, dtype: str = "float32",
                  n_keys: int | None = None, d_v: int | None = None) -> tuple:
    """Standard-normal query, key and value rounded to ``dtype``: verify's random inputs.

    The same draws as :meth:`exactattn.call.Call.random` (numpy
    ``default_rng(seed)``: query n x d, key n_keys x d, value n_keys x d_v, in
    that order), rounded to the dtype as ``verify`` rounds them (ties to
    even), without its limit on the number of inputs.  Returns three numpy
    arrays of the dtype.

    Raises:
        InputError: a size below 1, a negative seed, an unknown dtype.
    """
    n_keys = n if n_keys is None else n_keys
    d_v = d if d_v is None else d_v
    for name, value in (("n", n), ("d", d), ("n_keys", n_keys), ("d_v", d_v)):
        check_whole(value, name)
    check_whole(seed, "seed", low=0)
    check_choice(dtype, "dtype", FLOAT_DTYPES)
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype)
                 for shape in ((n, d), (n_keys, d), (n_keys, d_v)))


def from_floats(query, key, value, policy: Policy | None = None, *,
                name: str = "floats") -> ExactInputs:
    """Inputs that are binary floats (a float kernel's own arguments), read exactly.

    Shapes: query n_q x d_k, key n_k x d_k, value n_k x d_v float arrays.

    Raises:
        InputError: a NaN or infinite entry.
    """
    (q, qd), (k, kd), (v, vd) = (float_ints(a) for a in (query, key, value))
    return ExactInputs(q, qd, k, kd, v, vd, policy or Policy(), name=name)


def random_inputs(n: int, d: int, *, seed: int = 0, dtype: str = "float32",
                  n_keys: int | None = None, d_v: int | None = None,
                  policy: Policy | None = None) -> ExactInputs:
    """:func:`random_floats`, read exactly (:func:`from_floats`)."""
    return from_floats(*random_floats(n, d, seed=seed, dtype=dtype, n_keys=n_keys, d_v=d_v),
                       policy, name=f"random n={n} d={d} seed={seed} {dtype}")
