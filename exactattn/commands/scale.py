"""``scale``: why the divisor (random rows at several key widths; see :mod:`exactattn.scale`)."""

from __future__ import annotations

import sys

from ..options import whole, whole_list
from .flags import add_digits_option, add_format_option

HELP = ("why the divisor: random rows at several key widths, divided and undivided, "
        "measured spreads beside their exact expectations")

EPILOG = ("The samples are float64 (a Monte-Carlo experiment, numpy's PCG64 generator); the "
          "expectations are exact or certified. Same seed, same output. Each band is "
          "expected +- 3 standard errors of the mean, a normal approximation that is rough "
          "at small --trials (under about 100); a measurement outside its band is flagged "
          "NO and counted in the notes. Exit status: 0 when the tables were printed, NO "
          "flags included (a miss is a chance event, about 1 band in 370); 2 for a bad "
          "option. Limits: --widths entries 1..65536 (at most 64 widths), --trials "
          "2..10000000, --tokens 2..10000, --seed 0..2^64-1, and --trials x sum of --widths "
          "x (--tokens + 1) at most 200000000 normal draws. A progress bar goes to stderr "
          "(never stdout) with --progress or when stderr is a terminal. "
          "See docs/examples.md.")


def register(sub) -> None:
    from ..scale import MAX_SEED, MAX_TOKENS, MAX_TRIALS, MAX_WIDTH, MAX_WIDTHS
    p = sub.add_parser("scale", help=HELP, description=HELP, epilog=EPILOG)
    p.add_argument("--widths", type=whole_list("--widths", high=MAX_WIDTH, most=MAX_WIDTHS,
                                               once="width"),
                   default=[4, 16, 64, 256], metavar="LIST",
                   help="key widths d_k, comma-separated, each 1 to 65536 "
                        "(default 4,16,64,256)")
    p.add_argument("--trials", type=whole("--trials", low=2, high=MAX_TRIALS), default=1000,
                   metavar="N", help="rows drawn at each width, 2 to 10000000 (default 1000)")
    p.add_argument("--seed", type=whole("--seed", low=0, high=MAX_SEED), default=0,
                   metavar="S",
                   help="seed of the generator, a whole number from 0 to 2^64-1 (default 0)")
    p.add_argument("--tokens", type=whole("--tokens", low=2, high=MAX_TOKENS), default=4,
                   metavar="N", help="keys per row, n, 2 to 10000 (default 4)")
    add_digits_option(p, "decimal places printed (default 4)")
    add_format_option(p)
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar on stderr even when it is not a terminal")


def run(args) -> int:
    """The experiment's tables on stdout; a progress bar on stderr where
    :func:`~exactattn.present.stream.progress_shown` says (``--progress``: always)."""
    from ..present.stream import progress_shown
    from ..scale import check_draws, scale_sections
    check_draws(args.trials, args.widths, args.tokens, ("--trials", "--widths", "--tokens"))
    sections = scale_sections(args.widths, trials=args.trials, seed=args.seed,
                              tokens=args.tokens, places=args.digits,
                              progress_stream=sys.stderr if progress_shown(args.progress) else None)
    meta = {"mode": "scale", "seed": args.seed, "trials": args.trials, "tokens": args.tokens,
            "widths": args.widths, "digits": args.digits}
    return sections, meta, 0
