"""Exact integer matrix products through float64 BLAS, cut into limbs.

An int64 matrix whose entries need up to 62 bits is cut into w-bit limbs
(the top one signed), with ``inner * 2^(2w) <= 2^52`` for the inner dimension
of the product: every product of two limbs and every partial sum of a limb
product is then an integer below 2^53, which float64 represents exactly, in
any order of summation.  The product is the sum of the limb products shifted
by their weights, carried exactly in int64 (:func:`limb_digits`).  No binary
float ever becomes a value: the floats hold integers only.

This is what lets a block of attention rows run through BLAS when its inputs
are floats read exactly (a float32 value over a common denominator needs
about 48 bits): :func:`score_split` gives the scores cut at ``2^shift``, and
:func:`mix` the exact product of non-negative fixed-point weights with value
numerators.

>>> import numpy as np
>>> a = np.array([[2 ** 40 + 3, -5]]); b = np.array([[7], [2 ** 45]])
>>> int(mix(a, b)[0, 0]) == (2 ** 40 + 3) * 7 - 5 * 2 ** 45
True
>>> high, low = score_split(np.array([[3, 1]]), np.array([[5, 2 ** 30]]), 10)
>>> int(high[0, 0]) * 2 ** 10 + int(low[0, 0]) == 15 + 2 ** 30, 0 <= int(low[0, 0]) < 2 ** 10
(True, True)
"""

from __future__ import annotations


#: the scores' high parts stay below 2^60 (headroom for differences in int64)
_HIGH_LIMIT = 1 << 60


def abs_max(a) -> int:
    """The largest |entry| of an integer array, as an int (0 when empty)."""
    return max(int(a.max()), -int(a.min())) if a.size else 0     # no int64 overflow at -2^63


def limb_digits(a, b) -> tuple[list, int]:
    """Exact ``a @ b`` of int64 arrays as base-2^w digits ``(P, w)``.

    ``a @ b = sum_s P[s] 2^(w s)``, each ``P[s]`` an int64 array adding the
    products of limbs i + j = s.  Shapes: a r x m, b m x c; each P[s] r x c.
    Entries of a and b below 2^62 in absolute value.
    """
    import numpy as np
    w = (52 - b.shape[0].bit_length()) // 2

    def limbs(x):
        count = max(1, -(-(abs_max(x).bit_length() + 1) // w))
        return [((x >> (w * i)) & ((1 << w) - 1) if i < count - 1 else x >> (w * i))
                .astype(np.float64) for i in range(count)]
    la, lb = limbs(a), limbs(b)
    digits: list = [None] * (len(la) + len(lb) - 1)
    for i, x in enumerate(la):
        for j, y in enumerate(lb):
            p = (x @ y).astype(np.int64)
            digits[i + j] = p if digits[i + j] is None else digits[i + j] + p
    return digits, w


def score_split(q, k, shift: int, bound: int | None = None):
    """Exact scores ``q @ k.T`` cut at 2^shift: ``(high, low)`` int64 arrays, or None.

    ``N = high 2^shift + low`` with ``0 <= low < 2^shift`` (``low`` is 0 for
    ``shift`` 0).  Shapes: q r x d, k m x d (int64 numerators); high and low
    r x m.  ``bound``: a bound on every |N| (default ``d max|q| max|k|``).
    None when an entry is not int64, shift is not 0 to 62, or ``bound /
    2^shift`` reaches 2^60.
    """
    import numpy as np
    if bound is None and q.dtype != object and k.dtype != object:
        bound = q.shape[1] * abs_max(q) * abs_max(k)
    if q.dtype == object or k.dtype == object or not 0 <= shift <= 62 or \
            bound >> shift >= _HIGH_LIMIT:
        return None
    digits, w = limb_digits(q, k.T)
    t, r = divmod(shift, w)
    digits += [np.zeros_like(digits[0]) for _ in range(t + 2 - len(digits))]
    for s in range(len(digits) - 1):        # carries: every digit but the top one in [0, 2^w)
        carry = digits[s] >> w
        digits[s] -= carry << w
        digits[s + 1] += carry
    low = digits[t] & ((1 << r) - 1)
    for s in range(t - 1, -1, -1):
        low = (low << w) | digits[s]
    high = digits[-1]
    for s in range(len(digits) - 2, t, -1):
        high = (high << w) + digits[s]
    return (high << (w - r)) + (digits[t] >> r), low


def mix(t, v):
    """``t @ v`` exactly, as an array of Python ints (object), for int64 arrays t and v.

    Shapes: t r x m, v m x c; the result r x c (small: a block's outputs).
    """
    digits, w = limb_digits(t, v)
    total = digits[-1].astype(object)
    for p in reversed(digits[:-1]):
        total = total * (1 << w) + p.astype(object)
    return total
