"""The divisor experiment's tables: measured spreads beside their exact expectations.

Computes nothing itself: the floats come from :mod:`exactattn.scale.draws`, the
certified expectations from :mod:`exactattn.scale.expect`; this module builds
the bands, flags and notes, and :func:`run` prints them.

>>> secs = scale_sections([4], trials=50, seed=1, tokens=4)
>>> [s.name for s in secs]
['scale/spread', 'scale/shares']
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Sequence

from ..numbers.digits import check_places
from ..present.render import Section, plural
from ..present.stream import WorkBar, progress_shown
from .draws import CONCENTRATED, measure
from .expect import certify_w, expected_range, expected_std, mean_square_variance
from .limits import DEFAULT_WIDTHS, check_counts, check_draws, parse_widths

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
    widths = parse_widths(widths if isinstance(widths, str) else list(widths))
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
    all_inside = True
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
            all_inside &= in_r and in_v
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
    measurements = 4 * len(widths)
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
        f"{misses} of {plural(measurements, 'measurement')} "
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


def run(widths=DEFAULT_WIDTHS, *, trials=1000, seed=0, tokens=4, places=4, fmt="text",
        progress: bool | None = None, stdout=None, stderr=None) -> int:
    """Print the experiment; returns the exit status, 0.

    A measurement outside its band is flagged ``NO`` in the table and counted
    in the notes, but it is a chance event (about 1 band in 370 at 3 standard
    errors, more often at small ``trials``), not a failure, so the status
    stays 0; ``data["all_inside"]`` of the first table says whether every
    measurement landed in its band.  Bad arguments raise.

    ``progress``: None shows the bar on ``stderr`` only when it is a terminal;
    True always, False never; the CLI's ``--no-progress`` never
    (:func:`~exactattn.present.stream.progress_shown`).  Nothing but the tables goes to
    ``stdout``.

    Raises:
        InputError: as :func:`scale_sections`.
    """
    from ..present.render import render
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    show = progress_shown(stderr, progress)
    sections = scale_sections(widths, trials=trials, seed=seed, tokens=tokens, places=places,
                              progress_stream=stderr if show else None)
    data = sections[0].data
    meta = {"mode": "scale", "seed": data["seed"], "trials": data["trials"],
            "tokens": data["tokens"], "widths": data["widths"], "digits": places}
    stdout.write(render(sections, fmt, meta))
    return 0
