"""``row``, ``weights``, ``project``, ``square``, ``scores`` and ``walkthrough``."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..errors import shorten as _short
from ..render import FORMATS, render
from ..svg import PICTURE_FORMATS
from ..tables import MODES, attend_example, build, explain

HELP = {
    "row": "the tokens and the numbers each arrives with",
    "weights": "the three weight matrices, one line per output slot",
    "project": "each token's query, key and value, with the bias-free-neuron check",
    "square": "raw scores (queries x keys) and scaled scores, with the divisor",
    "scores": "shares per row, outputs, one token in vs out, and the multiply-adds",
    "walkthrough": "all five tables in order (row, weights, project, square, scores)",
}


def add_source_options(p: argparse.ArgumentParser) -> None:
    """--example / --spec: where the head and tokens come from."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--example", default=None, metavar="NAME",
                     help="a built-in example (default: chronicle)")
    src.add_argument("--spec", metavar="FILE",
                     help="a head and tokens from a JSON or TOML spec file")


def load_source(args):
    """The Example named by --example or --spec (chronicle by default)."""
    if args.spec is not None:
        if not args.spec.strip():
            raise InputError("--spec must name a JSON or TOML file (got '')")
        from ..spec import load
        return load(args.spec)
    from ..examples import example
    return example("chronicle" if args.example is None else args.example)


def _explain_arg(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        i, j = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--explain must be two token numbers I,J such as 2,1 (got {_short(text)!r})") from None
    return i, j


def _digits_arg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 50:
        raise argparse.ArgumentTypeError(
            f"--digits must be an integer from 0 to 50 (got {_short(text)!r})")
    return v


def register(sub) -> None:
    for mode in MODES + ("walkthrough",):
        p = sub.add_parser(mode, help=HELP[mode], description=HELP[mode])
        add_source_options(p)
        p.add_argument("--format", choices=FORMATS + PICTURE_FORMATS, default="text",
                       help="output format (svg/png: a heatmap, scores and square only)")
        p.add_argument("--digits", type=_digits_arg, default=4, metavar="N",
                       help="decimal places for shares and outputs (certified; default 4)")
        p.add_argument("--no-scale", action="store_true",
                       help="drop the divisor: shares read the raw scores")
        p.add_argument("--explain", type=_explain_arg, metavar="I,J",
                       help="also write out the score of query I against key J term by term")
        p.set_defaults(func=run, mode=mode)


def run(args) -> int:
    if args.format in PICTURE_FORMATS and args.explain:
        raise InputError(f"--explain must be used with a table format, not {args.format}; "
                         "drop --explain or use --format text")
    ex = load_source(args)
    trace = attend_example(ex, no_scale=args.no_scale)
    if args.format in PICTURE_FORMATS:  # a heatmap, not a table (exactattn.svg)
        from ..svg import picture
        return picture(args.mode, ex, trace, args.digits, args.format, sys.stdout)
    modes = MODES if args.mode == "walkthrough" else (args.mode,)
    sections = [s for m in modes
                for s in build(m, ex, trace, args.digits, closed_forms=args.format == "json")]
    if args.mode in ("square", "walkthrough") and getattr(ex, "extra_sections", None):
        sections.extend(ex.extra_sections(ex, trace, args.digits))  # e.g. raw vs projected
    if args.explain:
        sections.append(explain(trace, *args.explain))
    meta = {"example": ex.name, "mode": args.mode, "digits": args.digits,
            "layout": ex.head.layout, "divisor": None if trace.head.divisor_squared is None
            else str(trace.divisor), "causal": ex.head.causal}
    sys.stdout.write(render(sections, args.format, meta))
    return 0
