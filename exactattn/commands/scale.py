"""``scale``: why the divisor (random rows at several key widths; see :mod:`exactattn.scale`)."""

from __future__ import annotations

import sys

from ..render import FORMATS
from .tables import _digits_arg

HELP = ("why the divisor: random rows at several key widths, divided and undivided, "
        "measured spreads beside their exact expectations")


def register(sub) -> None:
    p = sub.add_parser("scale", help=HELP, description=HELP,
                       epilog="The samples are float64 (a Monte-Carlo experiment); the "
                              "expectations are exact or certified. Same seed, same output.")
    p.add_argument("--widths", default="4,16,64,256", metavar="LIST",
                   help="key widths d_k, comma-separated (default 4,16,64,256)")
    p.add_argument("--trials", default="1000", metavar="N",
                   help="rows drawn at each width (default 1000)")
    p.add_argument("--seed", default="0", metavar="S",
                   help="seed of the generator, a non-negative integer (default 0)")
    p.add_argument("--tokens", default="4", metavar="N",
                   help="keys per row, n (default 4)")
    p.add_argument("--digits", type=_digits_arg, default=4, metavar="N",
                   help="decimal places printed (default 4)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar on stderr even when it is not a terminal")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..scale import run as run_scale
    return run_scale(args.widths, trials=args.trials, seed=args.seed, tokens=args.tokens,
                     places=args.digits, fmt=args.format, progress=True if args.progress
                     else None, stdout=sys.stdout, stderr=sys.stderr)
