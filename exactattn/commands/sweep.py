"""``sweep divisor`` and ``sweep length``: the divisor slider and the length slider."""

from __future__ import annotations

from ..options import argtype, whole, whole_list
from ..present.sweep import MAX_LENGTH, check_row, divisor_sweep, length_sweep, parse_divisors
from .flags import add_digits_option, add_format_option, add_source_options, load_source

HELP = "one row's shares as the divisor runs, or the counted cost as the row grows"


def _divisors(text: str) -> list[str]:
    return [label for label, _ in parse_divisors(text, "--divisors")]


def register(sub) -> None:
    p = sub.add_parser("sweep", help=HELP, description=HELP)
    kinds = p.add_subparsers(dest="sweep", metavar="KIND", parser_class=type(p))
    kinds.required = True
    d = kinds.add_parser("divisor", help="shares of one query row from a small to a large "
                         "divisor, with the two limits (max, 1/n)",
                         description="shares of one query row from a small to a large divisor, "
                         "with the two limits: concentration on the maximum (ties split "
                         "equally) and the uniform 1/n")
    add_source_options(d)
    d.add_argument("--row", type=whole("--row"), default=None, metavar="I",
                   help="the query row, 1-based (default: the example's focus token)")
    d.add_argument("--divisors", type=argtype(_divisors, "--divisors", echo=False), default=None,
                   metavar="LIST",
                   help="divisors, comma-separated, e.g. 1/2,1,sqrt(2),4, each from 1e-1000 "
                        "to 1e1000, at most 100 (default 1/8,1/4,1/2,1,2,4,8,32,128 and the "
                        "head's own)")
    add_digits_option(d, "decimal places for the shares (certified; default 4)")
    add_format_option(d)
    d.set_defaults(kind="divisor")
    n = kinds.add_parser("length", help="the multiply-adds counted at several row lengths: "
                         "linear and quadratic parts",
                         description="the multiply-adds the pencil engine counts at several "
                         "row lengths: projections (linear in n), scores and mixing (quadratic)")
    add_source_options(n)
    n.add_argument("--lengths", type=whole_list("--lengths", high=MAX_LENGTH, most=MAX_LENGTH),
                   default=[4, 8, 16, 32, 64], metavar="LIST",
                   help=f"row lengths, comma-separated, each 1 to {MAX_LENGTH} "
                        "(default 4,8,16,32,64)")
    add_format_option(n)
    n.set_defaults(kind="length")


def run(args) -> int:
    ex = load_source(args)
    if args.kind == "divisor":
        row = None if args.row is None else check_row(args.row, len(ex.x), "--row")
        sections = divisor_sweep(ex, row, divisors=args.divisors, places=args.digits,
                                 closed_forms=args.format == "json")
        meta = {"example": ex.name, "mode": "sweep divisor", "digits": args.digits}
    else:
        sections = length_sweep(ex, args.lengths)
        meta = {"example": ex.name, "mode": "sweep length"}
    return sections, meta, 0
