"""The divisor experiment's limits and argument checks (see :mod:`exactattn.scale`).

Every limit is a one-line error, so that no run goes on for long: d_k from 1
to :data:`MAX_WIDTH`, at most :data:`MAX_WIDTHS` widths, trials from 2 to
:data:`MAX_TRIALS`, tokens from 2 to :data:`MAX_TOKENS`, a seed from 0 to
:data:`MAX_SEED`, and at most :data:`MAX_DRAWS` normal draws in all.

>>> parse_widths("4, 16,64")
[4, 16, 64]
>>> parse_widths("4,0")
Traceback (most recent call last):
...
exactattn.errors.InputError: widths must be a comma-separated list of whole numbers from 1 to 65536 such as 4,16,64,256 (got '4,0')
"""

from __future__ import annotations

from typing import Sequence

from ..errors import InputError, shorten
from ..options import check_once, check_whole, check_whole_list

DEFAULT_WIDTHS = (4, 16, 64, 256)
#: the largest key width d_k, rows per width, keys per row and seed accepted
MAX_WIDTH = 65_536
MAX_TRIALS = 10_000_000
MAX_TOKENS = 10_000
MAX_SEED = 2 ** 64 - 1
#: the most widths in one run (two table rows each)
MAX_WIDTHS = 64
#: the most standard-normal draws in one run, trials x sum(widths) x (tokens + 1): numpy
#: draws them in blocks at a few nanoseconds each, so a few seconds
MAX_DRAWS = 200_000_000


def parse_widths(text, name: str = "widths") -> list[int]:
    """Key widths from ``"4,16,64,256"`` (or a list of ints): 1 to MAX_WIDTH, no repeats.

    ``name`` is how the caller's user spells the argument.  At most
    :data:`MAX_WIDTHS` widths.

    Raises:
        InputError: an empty list, a width that is not a whole number from 1
            to MAX_WIDTH, more than MAX_WIDTHS widths, a repeated width.
    """
    try:
        widths = check_whole_list(text, name, high=MAX_WIDTH, most=None)
    except InputError:
        raise InputError(f"{name} must be a comma-separated list of whole numbers from 1 to "
                         f"{MAX_WIDTH} such as 4,16,64,256 (got {shorten(text, quote=True)})"
                         ) from None
    return check_widths(widths, name)


def check_widths(widths: Sequence[int], name: str = "widths") -> list[int]:
    """``widths`` if there are at most :data:`MAX_WIDTHS` and none repeats."""
    if len(widths) > MAX_WIDTHS:
        raise InputError(f"{name} must list at most {MAX_WIDTHS} widths (got {len(widths)}); "
                         "pick a few, e.g. powers of four such as 4,16,64,256")
    return check_once(widths, name, "width")


def check_counts(trials, tokens, seed) -> tuple[int, int, int]:
    """Trials (2..MAX_TRIALS), tokens (2..MAX_TOKENS) and a seed (0..MAX_SEED)."""
    return (check_whole(trials, "trials", low=2, high=MAX_TRIALS),
            check_whole(tokens, "tokens", low=2, high=MAX_TOKENS),
            check_whole(seed, "seed", low=0, high=MAX_SEED))


def check_draws(trials: int, widths: Sequence[int], tokens: int,
                names: tuple[str, str, str] = ("trials", "widths", "tokens")) -> int:
    """The number of normal draws of a run, ``trials x sum(widths) x (tokens + 1)``.

    Raises:
        InputError: more than :data:`MAX_DRAWS`.

    >>> check_draws(1000, [4, 16, 64, 256], 4)
    1700000
    >>> check_draws(10_000_000, [4, 16], 4)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: trials x sum(widths) x (tokens + 1) must be at most 200000000 normal draws (got 10000000 x 20 x 5 = 1000000000); lower trials or drop the widest widths
    """
    t, w, k = names
    draws = trials * sum(widths) * (tokens + 1)
    if draws > MAX_DRAWS:
        raise InputError(f"{t} x sum({w}) x ({k} + 1) must be at most {MAX_DRAWS} normal "
                         f"draws (got {trials} x {sum(widths)} x {tokens + 1} = "
                         f"{draws}); lower {t} or drop the widest {w}")
    return draws
