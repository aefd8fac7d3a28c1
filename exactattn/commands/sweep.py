"""``sweep divisor`` and ``sweep length``: the divisor slider and the length slider."""

from __future__ import annotations

import argparse
import sys

from ..errors import shorten
from ..render import FORMATS, render
from .tables import _digits_arg, add_source_options, load_source

HELP = "one row's shares as the divisor runs, or the counted cost as the row grows"


def _row_arg(text: str) -> int:
    try:
        if len(text.strip()) > 12:
            raise ValueError(text)
        return int(text)
    except ValueError:
        shown = shorten(text)
        raise argparse.ArgumentTypeError(
            f"--row must be a token number such as 2 (got {shown!r})") from None


def register(sub) -> None:
    p = sub.add_parser("sweep", help=HELP, description=HELP)
    kinds = p.add_subparsers(dest="sweep", metavar="KIND", required=True)
    d = kinds.add_parser("divisor", help="shares of one query row from a small to a large "
                         "divisor, with the two limits (max, 1/n)",
                         description="shares of one query row from a small to a large divisor, "
                         "with the two limits: concentration on the maximum (ties split "
                         "equally) and the uniform 1/n")
    add_source_options(d)
    d.add_argument("--row", type=_row_arg, default=None, metavar="I",
                   help="the query row, 1-based (default: the example's focus token)")
    d.add_argument("--divisors", default=None, metavar="LIST",
                   help="divisors, comma-separated, e.g. 1/2,1,sqrt(2),4, each from 1e-1000 "
                        "to 1e1000, at most 100 (default 1/8,1/4,1/2,1,2,4,8,32,128 and the "
                        "head's own)")
    d.add_argument("--digits", type=_digits_arg, default=4, metavar="N",
                   help="decimal places for the shares (certified; default 4)")
    d.add_argument("--format", choices=FORMATS, default="text", help="output format")
    d.set_defaults(func=run, kind="divisor")
    n = kinds.add_parser("length", help="the multiply-adds counted at several row lengths: "
                         "linear and quadratic parts",
                         description="the multiply-adds the pencil engine counts at several "
                         "row lengths: projections (linear in n), scores and mixing (quadratic)")
    add_source_options(n)
    n.add_argument("--lengths", default="4,8,16,32,64", metavar="LIST",
                   help="row lengths, comma-separated (default 4,8,16,32,64; at most 256)")
    n.add_argument("--format", choices=FORMATS, default="text", help="output format")
    n.set_defaults(func=run, kind="length")


def run(args) -> int:
    from ..sweep import check_row, divisor_sweep, length_sweep, parse_divisors, parse_lengths
    # the options are checked here first, so that a message names the flag, not the
    # library's keyword argument (--divisors, not divisors)
    if args.kind == "divisor":
        divisors = None if args.divisors is None else \
            [label for label, _ in parse_divisors(args.divisors, "--divisors")]
        ex = load_source(args)
        row = None if args.row is None else check_row(args.row, len(ex.x), "--row")
        sections = divisor_sweep(ex, row, divisors=divisors, places=args.digits)
        meta = {"example": ex.name, "mode": "sweep divisor", "digits": args.digits}
    else:
        lengths = parse_lengths(args.lengths, "--lengths")
        ex = load_source(args)
        sections = length_sweep(ex, lengths)
        meta = {"example": ex.name, "mode": "sweep length"}
    sys.stdout.write(render(sections, args.format, meta))
    return 0
