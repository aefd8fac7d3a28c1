"""verify's limits, in one place: how much a check may read and how long it may run.

Every limit is a one-line :class:`~exactattn.errors.InputError` raised before
the work starts, so that no run goes on for long or fills the memory:

* a problem holds at most :data:`MAX_INPUTS` numbers (query, key, value and
  the mask broadcast to every head): each is read as an exact rational;
* one check (:func:`~exactattn.verify.check.verify`, ``exactattn verify``)
  is estimated before it runs (:func:`estimate`, from the sizes alone) and
  refused past :data:`MAX_SECONDS` or :data:`MAX_MEMORY` bytes;
* a search (:func:`~exactattn.verify.search.search`, ``verify --search``)
  draws L, S and E, batches and heads up to :data:`MAX_SEARCH_SIZE`
  (Hypothesis cannot draw much larger lists), shrinks for at most :data:`SHRINK_TRIES` tries
  (:data:`PASSING_SHRINK_TRIES` when no drawn input failed), and
  its whole run is estimated (:func:`search_seconds`) and held to
  :data:`MAX_SECONDS` too.

The estimates are rough upper bounds on the project's 2-core machine: the
exact side costs about 3 us per visible pair, 0.1 us per multiply-add, 30 us
per output compared and 8 us per input read, and holds about 300 bytes per
pair, input and output; a search adds Hypothesis's own work per drawn input.
Sizes are whole numbers of any size: the arithmetic is exact (a billion
tokens is refused, never an overflow).

>>> seconds, size = estimate({"B": 1, "H_q": 1, "H_kv": 1, "L": 16, "S": 16, "E": 8, "E_v": 8})
>>> seconds < 1, size < 2 ** 20
(True, True)
>>> check_work({"B": 1, "H_q": 1, "H_kv": 1, "L": 10 ** 8, "S": 10 ** 8, "E": 8, "E_v": 8},
...            "the random inputs", "pass a smaller --n")
Traceback (most recent call last):
...
exactattn.errors.InputError: the random inputs must take at most about 60 s and 1 GiB to check exactly (got L=100000000 S=100000000 E=8 E_v=8: about 1000 years and 2000000000 GiB); pass a smaller --n
"""

from __future__ import annotations

from contextlib import contextmanager

import math
from fractions import Fraction

from ..errors import InputError

#: the longest one verify run (a check, or a whole search) may take, estimated up front
MAX_SECONDS = 60
#: the most memory one check may hold, estimated up front (bytes)
MAX_MEMORY = 2 ** 30
#: the most numbers a problem may hold (query, key, value and the mask, every head)
MAX_INPUTS = 2 ** 20
#: the largest L, S and E a search draws (Hypothesis draws at most a few thousand numbers)
MAX_SEARCH_SIZE = 32
#: the most inputs a search tries while shrinking its worst case (then it keeps the smallest yet)
SHRINK_TRIES = 1000
#: the same when no drawn input failed: a passing worst case is only shrunk to show its error
PASSING_SHRINK_TRIES = 100

# costs in nanoseconds (integers, so that astronomically large sizes stay exact)
_PER_INPUT = 8_000           # an input read as an exact rational and rounded to the dtype
_PER_PAIR = 3_000            # a visible (query, key) pair: its exact score and exponential
_PER_MAC = 100               # a multiply-add of the exact scores and mix
_PER_OUTPUT = 30_000         # an output rounded to the dtype and compared
_PER_DRAW = 10_000           # Hypothesis drawing one number of a search input
_PER_TRY = 2_000_000         # Hypothesis's own work per search input
_BYTES = 300                 # held per pair, input and output (Fractions, balls, entries)


def _counts(sh: dict) -> tuple[int, int, int]:
    """(inputs, pairs, outputs) of a problem of shape ``sh``, every pair counted as visible."""
    heads = sh["B"] * sh["H_q"]
    inputs = heads * sh["L"] * sh["E"] + sh["B"] * sh["H_kv"] * sh["S"] * (sh["E"] + sh["E_v"])
    return inputs, heads * sh["L"] * sh["S"], heads * sh["L"] * sh["E_v"]


def _nanoseconds(sh: dict) -> int:
    inputs, pairs, outputs = _counts(sh)
    return (_PER_INPUT * inputs + _PER_PAIR * pairs + _PER_MAC * pairs * (sh["E"] + sh["E_v"])
            + _PER_OUTPUT * outputs)


def estimate(shape: dict) -> tuple[Fraction, int]:
    """About how long verify takes on a problem of ``shape`` (``Call.shape``'s keys), and
    how much memory it holds: ``(seconds, bytes)``.

    Every pair counted as visible (an upper bound: a mask or the causal rule
    hides some); the seconds exact, as a ``Fraction``.
    """
    return Fraction(_nanoseconds(shape), 10 ** 9), _BYTES * sum(_counts(shape))


def duration(seconds) -> str:
    """A duration in words, to one significant figure past a minute: ``40 s``, ``3 hours``.

    >>> duration(40), duration(7200), duration(10 ** 15)
    ('40 s', '2 hours', '30000000 years')
    >>> duration(10 ** 100)
    'more than 10^92 years'

    """
    if seconds < 120:
        return f"{math.ceil(seconds)} s"
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600),
                       ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{_count(int(seconds // size), lead=True)} {unit}"


def _dims(shape: dict) -> str:
    names = [k for k in ("B", "H_q", "H_kv") if shape[k] != 1] + ["L", "S", "E", "E_v"]
    return " ".join(f"{k}={_count(shape[k])}" for k in names)


def _gib(size: int) -> str:
    gib = Fraction(size, 2 ** 30)
    return f"{float(gib):.1f} GiB" if gib < 10 else f"{_count(int(gib), lead=True)} GiB"


def _count(count: int, lead: bool = False) -> str:
    """A whole number written out (``lead``: to one significant figure, rounded down: 2345 ->
    2000), past 10**15 as a power of ten, so that no huge number is written out."""
    if count >= 10 ** 15:
        return f"more than 10^{math.floor((count.bit_length() - 1) * math.log10(2))}"
    return str(int(str(count)[0]) * 10 ** (len(str(count)) - 1)) if lead else str(count)


def check_work(shape: dict, what: str, fix: str, *, runs: int = 1) -> None:
    """Refuse ``runs`` checks of ``shape`` (one per dtype) whose :func:`estimate` passes
    :data:`MAX_SECONDS` or :data:`MAX_MEMORY`.

    ``what`` names the inputs in the message and ``fix`` says how to get under
    the limit (both in the caller's words: flags on the command line).

    Raises:
        InputError: the estimate is over either limit.
    """
    seconds, size = (x * runs for x in estimate(shape))   # each run's report keeps its reference
    if seconds > MAX_SECONDS or size > MAX_MEMORY:
        raise InputError(f"{what} must take at most about {MAX_SECONDS} s and "
                         f"{MAX_MEMORY // 2 ** 30} GiB to check exactly (got {_dims(shape)}: "
                         f"about {duration(seconds)} and {_gib(size)}); {fix}")


_LIFTED = [False]


@contextmanager
def lifted():
    """Within it, :func:`check_inputs` takes any count (a call whose outputs were already
    judged in bulk, built for a few of its exact values)."""
    old, _LIFTED[0] = _LIFTED[0], True
    try:
        yield
    finally:
        _LIFTED[0] = old


def check_inputs(count: int, what: str, fix: str) -> None:
    """Refuse ``count`` numbers to read past :data:`MAX_INPUTS` (any within :func:`lifted`).

    Raises:
        InputError: more than :data:`MAX_INPUTS`.
    """
    if count > MAX_INPUTS and not _LIFTED[0]:
        raise InputError(f"{what} must hold at most {MAX_INPUTS} numbers in all (got "
                         f"{_count(count)}); {fix}")


def search_seconds(examples: int, max_size: int, max_batch: int = 1, max_heads: int = 1,
                   masks: bool = False) -> Fraction:
    """About how long a search of ``examples`` inputs of sizes up to ``max_size`` takes.

    Two runs of ``examples`` inputs (explore, then find again) and at most
    :data:`SHRINK_TRIES` shrinking tries, each priced at the largest input:
    ``max_batch`` batches of ``max_heads`` query and key/value heads, with a
    full B x H_q x L x S mask drawn when ``masks``.

    >>> float(search_seconds(100, 4)), float(search_seconds(100, 4, 2, 4, True))
    (3.62112, 13.70496)
    """
    s = max_size
    shape = {"B": max_batch, "H_q": max_heads, "H_kv": max_heads, "L": s, "S": s, "E": s,
             "E_v": 2}
    inputs, pairs, _ = _counts(shape)
    drawn = inputs + (pairs if masks else 0)
    per_try = _PER_TRY + _PER_DRAW * drawn + _nanoseconds(shape)
    return Fraction((2 * examples + SHRINK_TRIES) * per_try, 10 ** 9)


def check_search(examples: int, max_size: int, names: tuple = ("examples", "max_size"), *,
                 max_batch: int = 1, max_heads: int = 1, masks: bool = False) -> None:
    """Refuse a search whose bounds or estimated seconds are past the limits.

    ``names`` spell the arguments as the caller's user does (``--search``,
    ``--max-size``, then optionally ``--max-batch`` and ``--max-heads`` on the
    command line); ``max_batch`` and ``max_heads`` are the largest B and H_q
    drawn, ``masks`` whether a mask is drawn too (:func:`search_seconds`).

    Raises:
        InputError: ``max_size``, ``max_batch`` or ``max_heads`` over
            :data:`MAX_SEARCH_SIZE`, or an estimate over :data:`MAX_SECONDS`.
    """
    names = tuple(names) + ("max_batch", "max_heads")[len(names) - 2:]
    n_examples, n_size = names[:2]
    sizes = list(zip(names[1:], (max_size, max_batch, max_heads)))    # (name, bound)
    for name, bound in sizes:
        if bound > MAX_SEARCH_SIZE:
            raise InputError(f"{name} must be at most {MAX_SEARCH_SIZE} (got {_count(bound)}); "
                             "a search draws small inputs and shrinks them: check larger "
                             "calls with a spec file instead")
    shape = (max_size, max_batch, max_heads, masks)
    seconds = search_seconds(examples, *shape)
    if seconds > MAX_SECONDS:
        shrinking = search_seconds(0, *shape)
        most = math.floor((MAX_SECONDS - shrinking) / (search_seconds(1, *shape) - shrinking))
        smaller = " or ".join(f"a smaller {n}" for n, b in sizes if b > 1)
        fix = (f"pass {n_examples} {most} or fewer" if most >= 1 else
               f"pass {smaller or 'a smaller ' + n_size}")
        bounds = "".join(f", {n} {b}" for n, b in sizes[1:] if b > 1)
        raise InputError(f"{n_examples} must take at most about {MAX_SECONDS} s with "
                         f"{n_size} {max_size}{bounds} (got "
                         f"{_count(examples)}: about {duration(seconds)}); {fix}")

