"""``cost``: the same head at several row lengths, multiply-adds counted and derived.

``exactattn cost`` prints projection MACs, pair MACs, the total, the ratio to
the row above and the pairs' share, then the check (the derived formula against
the count at the last row), the crossover and the doubling ratio.
``--conventions`` prints the exact counts next to common accounting instead.
"""

from __future__ import annotations

import argparse
import sys

from ..render import FORMATS, render

HELP = "multiply-adds at several row lengths: counted, derived, crossover, conventions"


def _positive(flag: str):
    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a positive whole number (got {text!r})")
        return v
    return parse


def _rows_arg(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    bad = argparse.ArgumentTypeError(
        f"--rows must be a comma-separated list of positive whole numbers such as "
        f"4,8,16,32 (got {text!r})")
    if not text.strip() or any(not p for p in parts):
        raise bad
    try:
        rows = [int(p) for p in parts]
    except ValueError:
        raise bad from None
    if any(r < 1 for r in rows):
        raise bad
    return rows


def register(sub) -> None:
    from ..examples import chronicle
    head = chronicle().head
    p = sub.add_parser("cost", help=HELP, description=HELP,
                       epilog="A multiply-add (MAC) is one multiplication plus one addition; "
                              "FLOPs = 2 x MACs. See docs/cost.md.")
    p.add_argument("--rows", type=_rows_arg, default=[4, 8, 16, 32], metavar="LIST",
                   help="token counts, comma-separated (default 4,8,16,32)")
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
                   help="the exact counts next to common accounting (n^2, n^2/2, FLOPs)")
    p.add_argument("--count-limit", type=_positive("--count-limit"), default=10_000_000,
                   metavar="MACS", help="run the head only for rows whose derived total "
                                        "is at most this (default 10000000); larger rows "
                                        "are shown derived, marked as such")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..cost import conventions_sections, cost_sections
    from ..errors import InputError
    if args.align is not None and not args.causal:
        raise InputError(f"--align needs --causal (got --align {args.align})")
    if args.decode and args.keys is not None:
        raise InputError(f"--keys must be left out with --decode (got --keys {args.keys}); "
                         "decoding sets its own key length")
    if args.conventions:
        sections = conventions_sections(args.rows[-1], args.d_model, args.d_k, args.d_v,
                                        causal=args.causal, heads=args.heads,
                                        layers=args.layers)
    else:
        sections = cost_sections(args.rows, args.d_model, args.d_k, args.d_v,
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
