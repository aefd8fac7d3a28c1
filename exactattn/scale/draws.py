"""The divisor experiment's draws: random rows, measured undivided and divided (floats).

At key width d_k each of ``trials`` rows draws one query q and n keys
k_1..k_n with independent standard-normal entries, in that order, from a
``numpy.random.Generator`` (PCG64) seeded by ``(seed, d_k, n)``: the same
arguments give the same floats, and a width's rows do not depend on the
other widths.  The draws are made in blocks of about a million numbers, so
memory stays a few megabytes whatever the run; the blocks are cut from one
stream, so the block size does not change the numbers.

>>> und, div = measure(4, 10, seed=1, tokens=4)
>>> div.mean_range == und.mean_range / 2, und.trials, div.divided
(True, 10, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

from ..options import check_whole
from .limits import MAX_WIDTH, check_counts, check_draws

#: a row "concentrates" when one token gets more than this share
CONCENTRATED = 0.99
#: numbers drawn at a time (8 MB of float64)
BLOCK = 1 << 20
#: the experiment's tag in the seed sequence, so its streams are its own
_STREAM = 0x5CA1E


@dataclass
class ScaleResult:
    """Measured statistics of one width, divided or not (floats: Monte-Carlo)."""
    d_k: int
    divided: bool
    trials: int
    tokens: int
    mean_range: float
    se_range: float
    mean_square: float
    mean_biggest_share: float
    concentrated: int


def generator(seed: int, d_k: int, tokens: int):
    """The ``numpy.random.Generator`` of one width: PCG64 seeded by ``(seed, d_k, tokens)``."""
    import numpy as np
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [_STREAM, seed, d_k, tokens])))


def score_blocks(rng, d_k: int, tokens: int, trials: int) -> Iterator:
    """The scores ``q . k_j`` of ``trials`` rows, as float64 arrays of shape (rows, tokens).

    Each row draws q (d_k numbers), then k_1 .. k_n (d_k each), from ``rng``;
    rows are drawn a block at a time, and a row too long for one block draws
    its keys a block at a time.
    """
    import numpy as np
    per_row = (tokens + 1) * d_k
    if per_row <= BLOCK:
        batch = BLOCK // per_row
        for start in range(0, trials, batch):
            z = rng.standard_normal((min(batch, trials - start), tokens + 1, d_k))
            yield (z[:, 1:, :] * z[:, :1, :]).sum(axis=2)
        return
    keys = max(1, BLOCK // d_k)
    for _ in range(trials):
        q = rng.standard_normal(d_k)
        parts = [(rng.standard_normal((min(keys, tokens - start), d_k)) * q).sum(axis=1)
                 for start in range(0, tokens, keys)]
        yield np.concatenate(parts)[None, :]


def measure(d_k: int, trials: int, seed: int, tokens: int,
            progress: Callable[[int], None] | None = None) -> tuple[ScaleResult, ScaleResult]:
    """Draw ``trials`` rows at width ``d_k``; the (undivided, divided) statistics.

    Shapes: per trial, q is d_k, keys are tokens x d_k, scores are tokens.
    ``progress(rows)`` is called after each block of rows.

    Raises:
        InputError: d_k outside 1..MAX_WIDTH, trials outside 2..MAX_TRIALS,
            tokens outside 2..MAX_TOKENS, seed outside 0..MAX_SEED, more
            than MAX_DRAWS draws.
    """
    import numpy as np
    d_k = check_whole(d_k, "d_k", high=MAX_WIDTH)
    trials, tokens, seed = check_counts(trials, tokens, seed)
    check_draws(trials, [d_k], tokens, ("trials", "d_k", "tokens"))
    root = math.sqrt(d_k)
    count, mean_r, m2_r = 0, 0.0, 0.0        # the ranges' mean and squared deviations (Chan)
    square_sums, biggest_sums = [], {False: [], True: []}
    conc = {False: 0, True: 0}
    for s in score_blocks(generator(seed, d_k, tokens), d_k, tokens, trials):
        rows = s.shape[0]
        top = s.max(axis=1)
        ranges = top - s.min(axis=1)
        block_mean = float(ranges.mean())
        delta, total = block_mean - mean_r, count + rows
        mean_r += delta * rows / total
        m2_r += float(((ranges - block_mean) ** 2).sum()) + delta * delta * count * rows / total
        count = total
        square_sums.append(float((s * s).sum()))
        gaps = s - top[:, None]
        for divided in (False, True):
            share = 1.0 / np.exp(gaps / root if divided else gaps).sum(axis=1)
            biggest_sums[divided].append(float(share.sum()))
            conc[divided] += int((share > CONCENTRATED).sum())
        if progress is not None:
            progress(rows)
    se_r = math.sqrt(m2_r / (trials - 1)) / math.sqrt(trials)
    ms = math.fsum(square_sums) / (trials * tokens)
    out = []
    for divided in (False, True):
        f = root if divided else 1.0
        out.append(ScaleResult(d_k, divided, trials, tokens, mean_r / f, se_r / f,
                               ms / (f * f), math.fsum(biggest_sums[divided]) / trials,
                               conc[divided]))
    return out[0], out[1]
