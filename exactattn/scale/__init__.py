"""Why the divisor: random rows at several key widths, divided by sqrt(d_k) and not.

The experiment behind ``exactattn scale``.  At each
key width d_k, ``trials`` independent rows are drawn: one query q and n keys
k_1..k_n whose entries are independent standard normals.  A row's scores are
``s_j = q . k_j`` (undivided) and ``s_j / sqrt(d_k)`` (divided); both columns
come from the same draws.  For each we measure

* the **range** of a row, ``max_j s_j - min_j s_j``, averaged over the rows;
* the **standard deviation over all scores**, ``sqrt(mean of s_j^2)`` over
  every score of every row (measured about the exact mean 0);
* the **mean biggest share**, ``mean of max_j softmax(s)_j``;
* how many rows put **more than 0.99** of their share on one token.

Exact expectations, beside each measured spread:

* ``E[s_j^2] = d_k`` undivided, 1 divided (``E[q_m^2 k_m^2] = 1`` for each of
  the d_k terms), so the expected standard deviation is ``sqrt(d_k)`` and 1.
  The per-row mean square is ``|q|^2 C / n`` with ``|q|^2 ~ chi2(d_k)`` and
  ``C ~ chi2(n)`` independent, so its variance is exactly
  ``d_k (d_k + 2) (n + 2) / n - d_k^2`` (divided: over ``d_k^2``); the band
  uses this derived standard error.
* The scores of a row share q, so they are **not** independent; but given q
  they are iid ``N(0, |q|^2)``, so the range is ``|q| W_n`` with ``W_n`` the
  range of n iid standard normals, independent of ``|q|``::

      E[range] = E|q| E[W_n]      (divided: / sqrt(d_k))
      E|q|     = sqrt(2) Gamma((d_k + 1)/2) / Gamma(d_k/2)      (chi mean)
      E[W_n]   = integral over R of 1 - Phi(x)^n - (1 - Phi(x))^n dx

  The integral is evaluated in ball arithmetic (python-flint ``acb.integral``)
  with a certified tail bound, so the printed digits are certified.  For
  n = 2, 3, 4 it equals the closed forms ``2/sqrt(pi)``, ``3/sqrt(pi)`` and
  ``12 atan(sqrt(2)) / pi^(3/2)``.  The band for the range uses the standard
  error estimated from the sample.

A band is ``expected +- 3 standard errors`` of the mean; a measurement outside
its band is flagged ``NO``.  The band leans on the normal approximation to a
mean of ``trials`` rows, so even a correct experiment misses a band about 1
time in 370, and more often at small ``trials`` (under about 100), where the
approximation is rough: a miss is reported, never treated as a failure.

Limits (each a one-line error): d_k from 1 to
:data:`MAX_WIDTH` (65536), at most :data:`MAX_WIDTHS` widths, trials from 2
to :data:`MAX_TRIALS` (10,000,000), tokens from 2 to :data:`MAX_TOKENS`
(10,000), a seed from 0 to :data:`MAX_SEED` (2^64 - 1), and at most
:data:`MAX_DRAWS` (200,000,000) normal draws in all, ``trials x sum(widths) x
(tokens + 1)``.

Exactness: the samples are binary floats (``numpy.random.Generator`` with
PCG64, drawn in blocks; a Monte-Carlo experiment, so floats are what is being
measured) and the measured columns are float statistics printed to the
requested places; only the expectations are exact or certified.  The same
seed gives byte-identical output on the same machine (each width draws from
its own generator seeded by ``(seed, d_k, n)``, so a width's rows do not
depend on the other widths).

The draws: at key width d_k each of ``trials`` rows draws one query q and n keys
k_1..k_n with independent standard-normal entries, in that order, from a
``numpy.random.Generator`` (PCG64) seeded by ``(seed, d_k, n)``.  The draws are made
in blocks of about a million numbers, so memory stays a few megabytes whatever the
run; the blocks are cut from one stream, so the block size does not change the
numbers.  The tables (:func:`scale_sections`) compute nothing themselves: they build
the bands, flags and notes from the draws (:func:`measure`) and the certified
expectations (:func:`expected_range`, :func:`expected_std`, :func:`certify_w`).

Reference: Vaswani et al. 2017, sec. 3.2.1 (footnote 4: q.k has mean 0 and
variance d_k).

>>> expected_range(4, 4, divided=False, places=4)     # 3 sqrt(2 pi)/4 * 2.05875...
'3.8704'
>>> secs = scale_sections([4], trials=50, seed=1, tokens=4)
>>> [s.name for s in secs]
['scale/spread', 'scale/shares']
>>> expected_range(2, 1, divided=False, places=6)       # 2/sqrt(pi) * sqrt(2/pi)
'0.900316'
>>> expected_std(16, False, 4), expected_std(2, False, 4), expected_std(2, True, 4)
('4.0000', '1.4142', '1.0000')
>>> und, div = measure(4, 10, seed=1, tokens=4)
>>> div.mean_range == und.mean_range / 2, und.trials, div.divided
(True, 10, True)
>>> scale_sections("4,0")
Traceback (most recent call last):
...
exactattn.errors.InputError: widths must be a whole number from 1 to 65536 (got '0')
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator, Sequence

from ..errors import InputError
from ..numbers.digits import certify, check_places
from ..options import check_whole, check_whole_list
from ..present.render import Section, plural
from ..present.stream import WorkBar

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


@functools.cache
def expected_w(n: int, prec: int):
    """``E[W_n]``, the expected range of n iid standard normals, as an ``arb`` ball.

    ``E[W_n] = integral over R of 1 - Phi(x)^n - (1 - Phi(x))^n dx``, evaluated
    in ball arithmetic (python-flint ``acb.integral``, rigorous for this entire
    integrand) on [-T, T]; the two tails lie in ``[0, 2 n phi(T)]``
    (``0 <= integrand <= n (1 - Phi(|x|))`` and ``integral_T^oo (1 - Phi) <=
    phi(T)``), which is added as a ball.  Computed at ``prec`` bits (the caller
    sets python-flint's precision).

    >>> certify(lambda prec: expected_w(4, prec), 6)       # 12 atan(sqrt 2) / pi^(3/2)
    '2.058751'
    """
    from flint import acb, arb
    # tail cut: n phi(T) well below 2^-prec
    T = math.ceil(math.sqrt(2 * (prec + 8) * math.log(2) + 2 * math.log(2 * n))) + 1
    root2 = arb(2).sqrt()

    def integrand(x, analytic):  # entire in x: no branch cut to check
        below = (-x / root2).erfc() / 2  # Phi(x)
        above = (x / root2).erfc() / 2  # 1 - Phi(x)
        return 1 - below ** n - above ** n

    core = acb.integral(integrand, -T, T).real
    phi_T = (arb(-T * T) / 2).exp() / (2 * arb.pi()).sqrt()
    tails = (2 * n * phi_T).union(arb(0))  # both tails together lie in [0, 2 n phi(T)]
    return core + tails


def expected_range(n: int, d_k: int, *, divided: bool, places: int = 4) -> str:
    """The exact expected range of a row of n scores at width d_k, certified to ``places``.

    ``E|q| E[W_n]`` (divided by sqrt(d_k) when ``divided``); correctly rounded.

    Raises:
        InputError: n outside 2..MAX_TOKENS or d_k outside 1..MAX_WIDTH.

    >>> expected_range(4, 16, divided=True)
    '2.0269'
    """
    check_whole(n, "tokens", low=2, high=MAX_TOKENS)
    check_whole(d_k, "d_k", high=MAX_WIDTH)

    def ball(prec: int):        # E|q| = sqrt(2) Gamma((d_k + 1)/2) / Gamma(d_k/2), the chi mean
        from flint import arb, fmpq
        value = arb(2).sqrt() * (arb(fmpq(d_k + 1, 2)).lgamma() - arb(fmpq(d_k, 2)).lgamma()
                                 ).exp() * expected_w(n, prec)
        return value / arb(d_k).sqrt() if divided else value
    return certify(ball, places)


def expected_std(d_k: int, divided: bool, places: int = 4) -> str:
    """``sqrt(E[s^2])``: sqrt(d_k) undivided, 1 divided, certified to ``places``."""
    from flint import arb
    check_whole(d_k, "d_k", high=MAX_WIDTH)
    return certify(lambda prec: arb(1 if divided else d_k).sqrt(), places)


def certify_w(n: int, places: int) -> str:
    """``E[W_n]`` certified to ``places`` places.

    >>> certify_w(2, 6), certify_w(3, 6)       # 2/sqrt(pi), 3/sqrt(pi)
    ('1.128379', '1.692569')
    """
    return certify(lambda prec: expected_w(n, prec), places)


def mean_square_variance(n: int, d_k: int, divided: bool) -> Fraction:
    """Exact variance of one row's mean square ``(1/n) sum_j s_j^2``.

    The per-row mean square is ``|q|^2 C / n`` with ``|q|^2 ~ chi2(d_k)`` and
    ``C ~ chi2(n)`` independent, so its variance is ``d_k (d_k + 2) (n + 2) / n
    - d_k^2``; divided by ``d_k^2`` when the scores are divided by sqrt(d_k).

    >>> mean_square_variance(4, 4, False), mean_square_variance(4, 4, True)
    (Fraction(20, 1), Fraction(5, 4))
    """
    v = Fraction(d_k * (d_k + 2) * (n + 2), n) - d_k * d_k
    return v / (d_k * d_k) if divided else v


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


#: half-width of a confidence band, in standard errors
BAND_SE = 3


def _fmt(x: float, places: int) -> str:
    text = f"{x:.{places}f}"
    return "0." + "0" * places if text.startswith("-") and float(text) == 0 else text


def scale_sections(widths: Sequence[int] = DEFAULT_WIDTHS, *, trials: int = 1000,
                   seed: int = 0, tokens: int = 4, places: int = 4,
                   progress_stream=None) -> list[Section]:
    """Run the experiment and build its tables (``scale/spread``, ``scale/shares``).

    ``data`` of ``scale/spread`` holds ``all_inside``: every measured spread
    lies inside its band.  ``progress_stream`` (e.g. ``sys.stderr``) receives a
    progress bar.

    Raises:
        InputError: an empty width list, a width outside 1..MAX_WIDTH, trials
            outside 2..MAX_TRIALS, tokens outside 2..MAX_TOKENS, a seed outside
            0..MAX_SEED, more than MAX_DRAWS normal draws in all
            (:func:`~exactattn.scale.check_draws`), places outside 0..50.
    """
    widths = check_whole_list(widths, "widths", high=MAX_WIDTH, most=MAX_WIDTHS, once="width")
    trials, tokens, seed = check_counts(trials, tokens, seed)
    check_places(places)
    draws = check_draws(trials, widths, tokens)
    bar = WorkBar("scale", trials * len(widths), draws, progress_stream) if progress_stream \
        else None
    try:
        return _sections(widths, trials, seed, tokens, places, bar)
    except BaseException:
        if bar is not None:
            bar.abandon()
        raise


def _sections(widths, trials, seed, tokens, places, bar) -> list[Section]:
    spread_rows, share_rows, data_rows = [], [], []
    misses = 0
    for d_k in widths:
        tick = None if bar is None else \
            (lambda rows, d=d_k: bar.advance(f"(d_k = {d})", rows, rows * d * (tokens + 1)))
        for r in measure(d_k, trials, seed, tokens, tick):
            exp_range = expected_range(tokens, d_k, divided=r.divided, places=places)
            # the band's centre is the certified value at more places, as a float
            centre = float(expected_range(tokens, d_k, divided=r.divided, places=12))
            lo_r, hi_r = centre - BAND_SE * r.se_range, centre + BAND_SE * r.se_range
            in_r = lo_r <= r.mean_range <= hi_r
            var = Fraction(1) if r.divided else Fraction(d_k)
            ms_var = mean_square_variance(tokens, d_k, r.divided)
            se_v = math.sqrt(ms_var / trials)
            lo_v, hi_v = float(var) - BAND_SE * se_v, float(var) + BAND_SE * se_v
            in_v = lo_v <= r.mean_square <= hi_v
            misses += (not in_r) + (not in_v)
            std = math.sqrt(r.mean_square)
            exp_std = expected_std(d_k, r.divided, places)
            divisor = f"sqrt({d_k})" if r.divided else "none"
            spread_rows.append([
                str(d_k), divisor, _fmt(r.mean_range, places), exp_range,
                f"[{_fmt(lo_r, places)}, {_fmt(hi_r, places)}]", "yes" if in_r else "NO",
                _fmt(std, places), exp_std,
                f"[{_fmt(math.sqrt(max(lo_v, 0.0)), places)}, {_fmt(math.sqrt(hi_v), places)}]",
                "yes" if in_v else "NO"])
            share_rows.append([str(d_k), divisor, _fmt(r.mean_biggest_share, places),
                               str(r.concentrated), str(trials)])
            data_rows.append({
                "d_k": d_k, "divided": r.divided, "mean_range": repr(r.mean_range),
                "se_range": repr(r.se_range), "expected_range": exp_range,
                "range_band": [repr(lo_r), repr(hi_r)], "range_inside": in_r,
                "mean_square": repr(r.mean_square), "expected_variance": str(var),
                "mean_square_variance": str(ms_var),
                "std": repr(std), "expected_std": exp_std, "std_inside": in_v,
                "mean_biggest_share": repr(r.mean_biggest_share),
                "rows_over_0.99": r.concentrated})
    w_n = certify_w(tokens, places)
    all_inside = not misses
    notes = [
        f"{trials} rows per width, each one query and {tokens} keys with independent "
        f"standard-normal entries (seed {seed}); scores q.k_j, undivided and divided by "
        "sqrt(d_k) (the same draws)",
        "range: largest minus smallest score of a row, averaged over the rows; expected "
        f"E|q| E[W_{tokens}] (/ sqrt(d_k) divided), E|q| = sqrt(2) Gamma((d_k+1)/2) / "
        f"Gamma(d_k/2), E[W_{tokens}] = {w_n} (the expected range of {tokens} iid normals; "
        "an arb integral with a tail bound)",
        "std: sqrt(mean of s^2) over all scores (about the exact mean 0); expected "
        "variance d_k undivided, 1 divided",
        f"band: expected +- {BAND_SE} standard errors of the mean of the {trials} rows "
        "(range: SE estimated from the sample; variance: SE derived, Var = d_k (d_k+2) "
        "(n+2)/n - d_k^2, then the square root of the band); in band: yes/NO",
        "the band treats the mean of the rows as normal (central limit theorem), so a band "
        "misses by chance about 1 time in 370; "
        + (f"with only {trials} trials that approximation is rough (it wants about 100 or "
           "more) and the sample SE is itself noisy, so misses come more often"
           if trials < 100 else
           "below about 100 trials that approximation is rough and misses come more often")
        + ": a NO is a chance event, not a failure",
        "measured columns are float64 Monte-Carlo statistics; expected columns are "
        f"certified (correctly rounded at {places} places)",
        "every measurement lies inside its band" if all_inside else
        f"{misses} of {plural(4 * len(widths), 'measurement')} "
        f"{'lies' if misses == 1 else 'lie'} outside {'its' if misses == 1 else 'their'} "
        "band (NO); by chance alone each band misses about 1 time in 370; try another seed "
        "or more trials",
    ]
    spread = Section(
        "scale/spread", "Spread of a row's scores: measured vs exact expectation",
        ["d_k", "divided by", "range", "expected", "band", "in band",
         "std", "expected", "band", "in band"],
        spread_rows, notes,
        {"seed": seed, "trials": trials, "tokens": tokens, "widths": widths,
         "numbers": "float64 Monte-Carlo samples (numpy.random.Generator, PCG64)",
         "all_inside": all_inside, "rows": data_rows})
    shares = Section(
        "scale/shares",
        f"Shares: the mean biggest share and rows with more than {CONCENTRATED} on one token",
        ["d_k", "divided by", "mean biggest share", f"rows > {CONCENTRATED}", "of rows"],
        share_rows,
        ["undivided, the scores spread like sqrt(d_k) and the softmax saturates as d_k "
         "grows; divided by sqrt(d_k), the spread stays near 1 at every width"],
        {"rows": [{"d_k": int(r[0]), "divided": r[1] != "none",
                   "mean_biggest_share": r[2], "rows_over_0.99": int(r[3])}
                  for r in share_rows]})
    return [spread, shares]
