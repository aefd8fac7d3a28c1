"""The ALiBi slope rule as its authors' code writes it, in floats (Press et al. 2022,
``get_slopes`` in the ALiBi repository): the tests' independent float rule, shared so it
is written once."""

import math


def paper_slopes(n: int) -> list[float]:
    """The n slopes, head 0 first: 2^(-8/n), 2^(-16/n), ... for a power of two; otherwise the
    slopes of the power of two below, then every other slope of the one above."""
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + paper_slopes(2 * c)[0::2][:n - c]
