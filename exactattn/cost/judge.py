"""The shape of a judged SDPA call, ``B,H,L,S,E[,E_v]``, as ``exactattn cost --judge`` takes it.

The figure is judged by :func:`exactattn.audit.flops.judge_figure`.
"""

from __future__ import annotations

import re

from ..errors import InputError
from ..options import check_whole
from .sizes import MAX_SIZE

#: the largest L or S judged (the visible keys are read row by row)
MAX_TOKENS = 10 ** 6


def parse_shape(text: str) -> tuple:
    """``B,H,L,S,E[,E_v]`` as whole numbers (E_v defaults to E).

    Raises:
        InputError: not five or six positive whole numbers.

    >>> parse_shape("2,5,9,9,4")
    (2, 5, 9, 9, 4, 4)
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (5, 6) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise InputError(f"--shape must be B,H,L,S,E or B,H,L,S,E,E_v, five or six whole "
                         f"numbers such as 2,5,9,9,4 (got {text!r})")
    dims = [check_whole(int(p), f"each size of --shape {text}",
                        high=MAX_TOKENS if i in (2, 3) else MAX_SIZE)
            for i, p in enumerate(parts)]
    return tuple(dims) if len(dims) == 6 else (*dims, dims[4])
