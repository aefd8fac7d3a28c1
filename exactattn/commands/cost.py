"""``cost``: the same head at several row lengths, multiply-adds counted and derived.

``exactattn cost`` prints projection MACs, pair MACs, the total, the ratio to
the row above and the pairs' share, then the check (the derived formula against
the count at the last row), the crossover and the doubling ratio.
``--conventions`` prints the exact counts next to common accounting instead.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import shorten
from ..render import FORMATS, render

HELP = "multiply-adds at several row lengths: counted, derived, crossover, conventions"


#: the most token counts --rows may list (each row is derived and maybe run)
MAX_ROWS = 100
#: the largest --count-limit: about 10^9 multiply-adds counted in Python loops take minutes
MAX_COUNT_LIMIT = 1_000_000_000


_short = shorten


def _positive(flag: str, high: int | None = None):
    what = "a positive whole number" if high is None else f"a whole number from 1 to {high}"

    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:
            v = 0
        if v < 1 or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"{flag} must be {what} (got {_short(text)!r})")
        return v
    return parse


def _rows_arg(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    bad = argparse.ArgumentTypeError(
        f"--rows must be a comma-separated list of positive whole numbers such as "
        f"4,8,16,32 (got {_short(text)!r})")
    if not text.strip() or any(not p for p in parts):
        raise bad
    try:
        rows = [int(p) for p in parts]
    except ValueError:
        raise bad from None
    if any(r < 1 for r in rows):
        raise bad
    if len(rows) > MAX_ROWS:
        raise argparse.ArgumentTypeError(
            f"--rows must list at most {MAX_ROWS} token counts (got {len(rows)}); "
            "pick fewer, e.g. powers of two")
    return rows


def register(sub) -> None:
    from ..examples import chronicle
    head = chronicle().head
    p = sub.add_parser("cost", help=HELP, description=HELP,
                       epilog="A multiply-add (MAC) is one multiplication plus one addition; "
                              "FLOPs = 2 x MACs. See docs/cost.md.")
    p.add_argument("--rows", type=_rows_arg, default=None, metavar="LIST",
                   help="token counts, comma-separated (default 4,8,16,32; with "
                        "--conventions one count, default 32)")
    p.add_argument("--d-model", type=_positive("--d-model"), default=head.d_model,
                   metavar="D", help=f"d_model (default {head.d_model}, the example head)")
    p.add_argument("--d-k", type=_positive("--d-k"), default=head.d_k, metavar="K",
                   help=f"key width d_k (default {head.d_k}, the example head)")
    p.add_argument("--d-v", type=_positive("--d-v"), default=None, metavar="V",
                   help="value width d_v (default: d_k)")
    p.add_argument("--causal", action="store_true",
                   help="causal mask: masked pairs are skipped (n(n+1)/2 remain)")
    p.add_argument("--align", choices=("top-left", "bottom-right"), default=None,
                   help="causal alignment when --keys differs from the row length "
                        "(default top-left)")
    p.add_argument("--keys", type=_positive("--keys"), default=None, metavar="M",
                   help="key length m (default: the row length n)")
    p.add_argument("--heads", type=_positive("--heads"), default=None, metavar="H",
                   help="H heads of width d_k/d_v plus the output projection W_O")
    p.add_argument("--layers", type=_positive("--layers"), default=1, metavar="L",
                   help="L stacked layers (default 1)")
    p.add_argument("--decode", action="store_true",
                   help="generate the tokens one at a time with a KV cache")
    p.add_argument("--conventions", action="store_true",
                   help="the exact counts next to common accounting (n^2, n^2/2, FLOPs) at "
                        "one row length; takes --rows N, --causal, --d-model, --d-k, --d-v, "
                        "--heads, --layers, --count-limit (not --decode, --keys, --align)")
    p.add_argument("--count-limit", type=_positive("--count-limit", MAX_COUNT_LIMIT),
                   default=10_000_000, metavar="MACS",
                   help="run the head only for rows whose derived total is at most this "
                        f"(default 10000000, at most {MAX_COUNT_LIMIT}); larger rows are "
                        "shown derived, marked as such")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.set_defaults(func=run)


def _check_combinations(args) -> None:
    """Refuse every option that the chosen table would not use (none is ignored silently)."""
    from ..errors import InputError
    if args.conventions:
        fix = ("the conventions compare one prefill of n queries over the same n keys; "
               "drop {flag}, or drop --conventions for the table that uses it")
        if args.decode:
            raise InputError("--decode must be left out with --conventions (got both); "
                             + fix.format(flag="--decode"))
        if args.keys is not None:
            raise InputError(f"--keys must be left out with --conventions (got --keys "
                             f"{args.keys}); " + fix.format(flag="--keys"))
        if args.align is not None:
            raise InputError(f"--align must be left out with --conventions (got --align "
                             f"{args.align}); " + fix.format(flag="--align"))
        if args.rows is not None and len(args.rows) != 1:
            listed = ",".join(map(str, args.rows))
            raise InputError(f"--rows must be one token count with --conventions (got "
                             f"{_short(listed)}); pass e.g. --rows {args.rows[-1]}")
    if args.align is not None and not args.causal:
        raise InputError(f"--align needs --causal (got --align {args.align} without "
                         "--causal); add --causal or drop --align")
    if args.decode and args.keys is not None:
        raise InputError(f"--keys must be left out with --decode (got --keys {args.keys}); "
                         "decoding sets its own key length")
    if args.decode and args.align is not None:
        raise InputError(f"--align must be left out with --decode (got --align {args.align}); "
                         "each decoded token attends to every cached key")
    if args.layers > 1 and args.keys is not None:
        raise InputError(f"--layers must be 1 with --keys (got --layers {args.layers} and "
                         f"--keys {args.keys}); stacked layers attend over their own tokens: "
                         "drop one of the two")
    d_v = args.d_k if args.d_v is None else args.d_v
    if args.layers > 1 and args.heads is None and d_v != args.d_model:
        source = f"--d-v {d_v}" if args.d_v is not None else f"d_v = --d-k = {d_v}"
        raise InputError(f"--d-v must equal --d-model = {args.d_model} to stack --layers "
                         f"without --heads (got {source}); pass --d-v {args.d_model}, or "
                         "--heads 1 to add W_O")


def run(args) -> int:
    from ..cost import conventions_sections, cost_sections
    _check_combinations(args)
    if args.conventions:
        n = 32 if args.rows is None else args.rows[0]
        sections = conventions_sections(n, args.d_model, args.d_k, args.d_v,
                                        causal=args.causal, heads=args.heads,
                                        layers=args.layers, count_limit=args.count_limit)
    else:
        rows = [4, 8, 16, 32] if args.rows is None else args.rows
        sections = cost_sections(rows, args.d_model, args.d_k, args.d_v,
                                 causal=args.causal, alignment=args.align or "top-left",
                                 keys=args.keys, heads=args.heads, layers=args.layers,
                                 decode=args.decode, count_limit=args.count_limit)
    meta = {"command": "cost", "unit": "MACs (FLOPs = 2 x MACs)"}
    sys.stdout.write(render(sections, args.format, meta))
    if not args.conventions:
        same = [n for n in sections[0].notes if n.strip().startswith("same:")]
        if same and same[0].strip() != "same: true":
            return 1
    return 0
