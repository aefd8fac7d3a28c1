"""``page``: the interactive page of a two-number head, one self-contained HTML file."""

from __future__ import annotations

import os
import shlex

from ..errors import InputError, shorten
from ..options import whole
from .flags import add_digits_option, check_output, load_spec, write_output

HELP = ("one self-contained HTML page with a sentence switch, divisor and length sliders, "
        "a picture and questions; every number certified beforehand")

EPILOG = ("The page holds every sentence named with --example (a bank sentence brings the "
          "other bank sentence) and --spec (heads whose tokens have two numbers, d_model = 2), "
          "at most 8, each at most 64 tokens; with neither, bank-river and bank-loan. Divisor "
          "stops: 1/8 to 128, each sqrt(2) times the one before, plus each head's own and "
          "none. Length stops: n = 1,000, 2,000, 4,000, 8,000, 16,000. The page makes no "
          "network request and works from file://; its script only picks which precomputed "
          "value to show. See docs/page.md.")


def register(sub) -> None:
    p = sub.add_parser("page", help=HELP, description=HELP, epilog=EPILOG)
    p.add_argument("--example", action="append", default=None, metavar="NAME",
                   help="a built-in example with two numbers per token: bank-river, "
                        "bank-loan, tiny (repeat for more sentences; default bank-river)")
    p.add_argument("--spec", action="append", default=None, metavar="FILE",
                   help="a head and tokens from a JSON or TOML spec file with d_model = 2 "
                        "(repeat for more sentences)")
    p.add_argument("--row", type=whole("--row"), default=None, metavar="I",
                   help="the query row of every sentence, 1-based (default: each example's "
                        "focus token)")
    add_digits_option(p, "decimal places of shares and outputs (certified; default 4)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the page to PATH (default stdout)")


def run(args) -> int:
    from ..examples import example
    from ..page import build_page, with_companions
    from ..present.stream import busy
    check_output(args.output)
    if args.output is not None and not os.path.isdir(os.path.dirname(os.path.abspath(
            args.output))):   # known before the numbers are computed
        raise InputError(f"-o must name a file that can be written (got "
                         f"{shorten(repr(args.output))}: its folder does not exist)")
    names = args.example or ([] if args.spec else ["bank-river"])
    sentences = [example(name) for name in with_companions(names)] + \
        [load_spec(path) for path in args.spec or []]
    command = "exactattn " + " ".join(shlex.quote(a) for a in _command_words(args))
    with busy("certifying the page's numbers"):
        text = build_page(sentences, places=args.digits, row=args.row, command=command)
    write_output(text, args.output)
    return 0


def _command_words(args) -> list[str]:
    """The options that decide the page's numbers, as a command line (not -o)."""
    words = ["page"]
    for name in args.example or []:
        words += ["--example", name]
    for path in args.spec or []:
        words += ["--spec", shorten(path, 80)]
    if args.row is not None:
        words += ["--row", str(args.row)]
    if args.digits != 4:
        words += ["--digits", str(args.digits)]
    return words
