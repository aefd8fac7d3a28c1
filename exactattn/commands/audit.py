"""``audit``: which printed digits in a published attention table are wrong.

``exactattn audit --table page.md --spec head.json`` reads every table of
the file (Markdown, CSV, LaTeX ``tabular``, JSON or HTML), judges each printed
number against the exact value it claims to be, and prints a verdict per
cell: right, truncated, rounded half up where half-even differs (or the
reverse), off by one in the last digit, or wrong, with the right value at the
places printed and the exact value.  Exit status 0 when every cell is right,
1 when one is not, 2 for bad input.

Without ``--spec``/``--example`` the file's score table (``--scores N``) is
the source: the other tables are judged as its softmax.  ``--demo`` audits
the worked example's own tables, then a copy with one cell changed.
"""

from __future__ import annotations

import sys

from ..errors import InputError
from ..options import choice, whole
from .flags import add_format_option, add_source_options, span_type

HELP = "judge every printed number of a published attention table: right, truncated, ... wrong"
#: the demo's changed cell: the worked example's output of token 1, column 4
DEMO_CHANGE = ("| 1 | 0.4528 | 0.2565 | 0.2907 | 0.6453 |", "| 1 | 0.4528 | 0.2565 | 0.2907 | 0.6543 |")


def _quantities(text: str) -> list[str]:
    from ..audit.layout import QUANTITIES
    check = choice("--quantity", QUANTITIES)
    return [check(part) for part in text.split(",")]


def register(sub) -> None:
    from ..audit.judge import TIES
    from ..audit.parse import TABLE_FORMATS
    p = sub.add_parser("audit", help=HELP, description=HELP + ". Exit status 1 when any cell is "
                       "not right, 2 for bad input.")
    p.add_argument("--table", metavar="FILE",
                   help="the printed tables: Markdown, CSV, LaTeX tabular, JSON or HTML (a "
                        "saved page is fine; several tables per file)")
    p.add_argument("--table-format", type=choice("--table-format", TABLE_FORMATS),
                   metavar="FORMAT", help=f"how to read --table: {', '.join(TABLE_FORMATS)} "
                                          "(default: by suffix, else by content)")
    src = add_source_options(
        p, spec_first=True, spec_help="the head and tokens the tables are computed from (a JSON "
                                      "or TOML spec file)",
        example_help="a built-in example: chronicle, tiny, bank-river, bank-loan, self-match")
    src.add_argument("--scores", type=whole("--scores"), metavar="N",
                     help="the file's table N holds the printed scores: the other tables are "
                          "judged as their softmax (the default with no --spec or --example: "
                          "the first table titled scores, else table 1)")
    p.add_argument("--divisor", metavar="D",
                   help="with printed scores: what they are divided by before the softmax "
                        "(2, sqrt(2), none; default none)")
    p.add_argument("--no-scale", action="store_true",
                   help="with --spec or --example: the tables read the raw scores (no divisor)")
    p.add_argument("--quantity", type=_quantities, metavar="Q",
                   help="what the tables print: raw, scaled, shares, outputs, queries, keys or "
                        "values, or a comma list, one per table audited (default: read from "
                        "each table's title)")
    p.add_argument("--tables", type=span_type("--tables", "numbers"), metavar="RANGE",
                   help="the tables to audit, by number in the file: 2, 1..3 (default all)")
    p.add_argument("--rows", type=span_type("--rows", "numbers"), metavar="RANGE",
                   help="the tokens the printed rows are, e.g. 2 or 1..4 (default: from the "
                        "row labels, else in order)")
    p.add_argument("--ties", type=choice("--ties", TIES), default="half_even",
                   help="the rounding of an exact tie: half_even (default) or half_up")
    p.add_argument("--not-right", action="store_true",
                   help="list only the cells that are not right (the summary counts all)")
    p.add_argument("--closed-forms", action="store_true",
                   help="add each exact value's closed form")
    p.add_argument("--demo", action="store_true",
                   help="audit the worked example's tables as `walkthrough` prints them, then "
                        "a copy with one cell changed")
    add_format_option(p)


def _options(args) -> dict:
    if args.divisor is not None and (args.spec or args.example):
        raise InputError("--divisor must come with printed scores, not --spec or --example "
                         "(got both); the head's own divisor applies (--no-scale drops it)")
    if args.no_scale and not (args.spec or args.example):
        raise InputError("--no-scale must come with --spec or --example (got printed scores); "
                         "printed scores are divided by --divisor")
    if args.spec is not None and not args.spec.strip():
        raise InputError("--spec must name a JSON or TOML file (got '')")
    return {"spec": args.spec, "example": args.example, "scores": args.scores,
            "divisor": args.divisor, "no_scale": args.no_scale, "ties": args.ties,
            "quantity": args.quantity,
            "which": None if args.tables is None else [k + 1 for k in args.tables],
            "rows": args.rows}


def demo_sections() -> list:
    """The worked example's tables (:class:`~exactattn.present.render.Section` values) as
    ``walkthrough`` builds them, at 4 places."""
    from ..examples import example
    from ..present.tables import attend_example, build
    ex = example("chronicle")
    return build("walkthrough", ex, attend_example(ex), 4)


def demo_text() -> tuple[str, str]:
    """The worked example's tables as ``walkthrough --format markdown`` prints them, and a
    copy with one cell changed (:data:`DEMO_CHANGE`)."""
    from ..present.render import render
    text = render(demo_sections(), "markdown")
    if text.count(DEMO_CHANGE[0]) != 1:     # pragma: no cover - the walkthrough changed
        raise InputError("the demo's cell must appear once in the walkthrough (got "
                         f"{text.count(DEMO_CHANGE[0])}); update DEMO_CHANGE")
    return text, text.replace(DEMO_CHANGE[0], DEMO_CHANGE[1])


def _demo(args) -> int:
    from ..audit import audit_text
    from ..audit.report import report_sections, summary_line
    from ..present.render import Section
    clean_text, changed_text = demo_text()
    clean = audit_text(clean_text, example="chronicle")
    changed = audit_text(changed_text, example="chronicle")
    intro = Section("demo", "Demo: the worked example's tables, audited", [], [], [
        "`exactattn walkthrough --format markdown`, audited with --example chronicle: "
        + summary_line(clean)[len("audit: "):],
        f"the same text with one cell changed ({DEMO_CHANGE[0].split('|')[-2].strip()} -> "
        f"{DEMO_CHANGE[1].split('|')[-2].strip()} in the outputs of token 1): "
        + summary_line(changed)[len("audit: "):] + "; the report of that copy follows"])
    sections = [intro] + report_sections(changed, only_not_right=True)
    return sections, {"command": "audit", "demo": True}, \
        0 if clean.clean and len(changed.not_right) == 1 else 1


def run(args) -> int:
    if args.demo:
        if args.table or args.spec or args.example or args.scores is not None:
            raise InputError("--demo must come alone (got it with --table, --spec, --example "
                             "or --scores); the demo audits the worked example's own tables")
        return _demo(args)
    if args.table is None:
        raise InputError("audit needs --table FILE (got none); see `exactattn audit --help`, "
                         "or try `exactattn audit --demo`")
    if not args.table.strip():
        raise InputError("--table must name a file (got '')")
    from ..audit import audit
    from ..audit.report import report_text
    result = audit(args.table, fmt=args.table_format, **_options(args))
    sys.stdout.write(report_text(result, args.format, only_not_right=args.not_right,
                                 closed_forms=args.closed_forms))
    return 0 if result.clean else 1
