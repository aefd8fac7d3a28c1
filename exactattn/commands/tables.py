"""``row``, ``weights``, ``project``, ``square``, ``scores`` and ``walkthrough``.

Each mode takes only the options that change what it prints: ``row``,
``weights`` and ``project`` print exact numbers only (no ``--digits``,
``--no-scale`` or ``--explain``); ``square`` and ``scores`` also draw a picture
(``--format svg|png``, written to ``-o PATH`` or stdout).

Any size: tables are written row by row as they are built (JSON, JSON Lines
and CSV hold one row at a time); past 16 tokens the formats for people
(text, Markdown, LaTeX) show the first 8 queries and keys (``--queries``,
``--keys`` choose others) and every query's sum and largest share.  A run
past two seconds shows a progress bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..call.policy import divisor_text
from ..errors import InputError
from ..options import choice, index_pair, whole
from ..present.render import ALL_FORMATS
from ..present.stream import CORNER, PAGE, View, busy, check_span, span_text
from ..present.svg import PICTURE_FORMATS, PICTURE_MODES, picture
from .flags import (add_digits_option, add_format_option, add_source_options, check_output,
                    load_source, span_type, write_output)
from .modifier_flags import add_flags, apply_modifiers, example_meta
from ..present.tables import MODES, attend_example, build, explain

HELP = {
    "row": "the tokens and the numbers each arrives with",
    "weights": "the projection matrices W_Q, W_K and W_V, in the head's layout",
    "project": "each token's query, key and value, with the bias-free-neuron check",
    "square": "raw scores (queries x keys) and scaled scores, with the divisor",
    "scores": "shares per row, outputs, one token in vs out, and the multiply-adds",
    "walkthrough": "all five tables in order (row, weights, project, square, scores)",
}
#: the modes whose output has decimals, a divisor and a score to explain
NUMERIC_MODES = ("square", "scores", "walkthrough")
#: the modes with a row per token (--queries) and a column per key (--keys)
TOKEN_MODES = ("row", "project", "square", "scores", "walkthrough")
KEY_MODES = ("square", "scores", "walkthrough")


def _table_format(mode: str):
    """--format for a mode without a picture: a picture format is refused with the reason."""
    check = choice("--format", ALL_FORMATS)

    def convert(text: str) -> str:
        if text.strip() in PICTURE_FORMATS:
            raise argparse.ArgumentTypeError(
                f"--format {text.strip()} must be used with scores or square (got {mode}); "
                "other modes print tables: use text, markdown, latex, json, jsonl or csv")
        return check(text)
    return convert


def register(sub) -> None:
    for mode in MODES + ("walkthrough",):
        p = sub.add_parser(mode, help=HELP[mode], description=HELP[mode])
        add_source_options(p)
        if mode in PICTURE_MODES:
            add_format_option(p, ALL_FORMATS + PICTURE_FORMATS)
            p.add_argument("-o", "--output", metavar="PATH",
                           help="write the picture (--format svg or png) to PATH "
                                "instead of stdout")
        else:
            add_format_option(p, ALL_FORMATS, type=_table_format(mode))
        if mode in ("row", "weights", "walkthrough"):
            p.add_argument("--fractions", action="store_true",
                           help="show inputs typed as decimals (0.8) as exact fractions (4/5) "
                                "instead; by default text, markdown and latex show them as typed")
        if mode != "square":        # the square shows scores and shares only: no vectors
            p.add_argument("--columns", type=whole("--columns"), metavar="N",
                           help="text, markdown and latex: the first N numbers of each token, "
                                f"weight line, projection and output (default all up to {PAGE}, "
                                f"else {CORNER}); csv and json write every value")
        if mode in TOKEN_MODES:
            p.add_argument("--queries", type=span_type("--queries"), metavar="RANGE",
                           help="the tokens (query rows) to show, e.g. 1..8 or 1..4,10 "
                                f"(default all; past {PAGE} tokens text, markdown and latex "
                                "show 1..8)")
        if mode in KEY_MODES:
            p.add_argument("--keys", type=span_type("--keys"), metavar="RANGE",
                           help="the keys (columns) of the score and share squares to show "
                                f"(default all; past {PAGE} tokens text, markdown and latex "
                                "show 1..8)")
        if mode in NUMERIC_MODES:
            add_digits_option(p, "decimal places of values that are not exact: shares, "
                                 "outputs, irrational scores (certified; default 4)")
            p.add_argument("--no-scale", action="store_true",
                           help="drop the divisor: shares read the raw scores")
            p.add_argument("--explain", type=index_pair("--explain"), metavar="I,J",
                           help="also write out the score of query I against key J term by term")
            add_flags(p, lse=mode != "square", dropout=False)
        p.set_defaults(mode=mode, wrap=PAGE)


def run(args) -> int:
    digits = getattr(args, "digits", 4)
    explain_at = getattr(args, "explain", None)
    output, pictured = getattr(args, "output", None), args.format in PICTURE_FORMATS
    if pictured and explain_at:
        raise InputError(f"--explain must be used with a table format, not {args.format}; "
                         "drop --explain or use --format text")
    if output is not None and not pictured:
        raise InputError(f"-o must be used with --format svg or png (got --format "
                         f"{args.format}); tables go to stdout: redirect them with >")
    check_output(output)
    if args.format == "png" and output is None and sys.stdout.isatty():
        raise InputError("-o must name a file for --format png (got a terminal on stdout); "
                         "pass -o shares.png or redirect stdout to a file")
    with busy("reading the head"):
        ex = apply_modifiers(load_source(args), args)
    if explain_at is not None and not all(1 <= v <= len(ex.x) for v in explain_at):
        raise InputError(f"--explain must name two tokens from 1 to {len(ex.x)} (got "
                         f"{explain_at[0]},{explain_at[1]})")
    n = len(ex.x)
    queries, keys = getattr(args, "queries", None), getattr(args, "keys", None)
    check_span(queries, n, "--queries"), check_span(keys, n, "--keys")
    with busy("running the head"):
        trace = attend_example(ex, no_scale=getattr(args, "no_scale", False))
    if pictured:  # a heatmap, not a table (exactattn.present.svg)
        write_output(picture(args.mode, ex, trace, digits, args.format), output)
        return 0
    if args.mode in ("scores", "walkthrough") and trace.engine != "symbolic":
        with busy(f"certifying {n * n:,} shares and {n * trace.head.d_v:,} outputs"):
            trace.share_decimals(digits)
            trace.output_decimals(digits)
    view = View.of(args.format, n, queries, keys)
    view = dataclasses.replace(view, fractions=getattr(args, "fractions", False),
                               columns=getattr(args, "columns", None) if view.people else None)
    closed = args.format in ("json", "jsonl")
    sections = build(args.mode, ex, trace, digits, closed_forms=closed, view=view,
                     lse=getattr(args, "lse", None))
    if explain_at:
        sections.append(explain(trace, *explain_at, places=digits))
    d2 = trace.head.divisor_squared
    meta = example_meta(ex, args.mode, digits, divisor=None if d2 is None else divisor_text(d2),
                        causal=ex.head.causal)
    for name, span in (("queries", queries), ("keys", keys)):
        if span is not None:
            meta[name] = span_text(span)
    return sections, meta, 0
