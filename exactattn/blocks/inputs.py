"""Verify's random inputs as floats: what ``blocks --random`` and ``verify --memory`` certify.

A row block reads a one-head :class:`~exactattn.call.Call`
(:meth:`Call.head <exactattn.call.Call.head>`: integer numerators over common
denominators, the head's policy and masks); float arrays become a call with
:meth:`Call.from_floats <exactattn.call.Call.from_floats>`, read as the dyadic
rationals they are, never through decimal text.

>>> from exactattn.call import Call
>>> x = Call.from_floats(*random_floats(4, 2, seed=1))
>>> x.shape["L"], x.shape["E"], x.numerators("query")[1] > 1, x.policy.describe()
(4, 2, True, 'scale=1/sqrt(d_k) causal=off alignment=top_left empty_row=zero mask=bool_keep gqa=interleave')
"""

from __future__ import annotations

import numpy as np

from ..options import check_choice, check_whole

#: float dtypes random inputs are drawn in (numpy rounds to them exactly, ties to even)
FLOAT_DTYPES = ("float64", "float32", "float16")


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
