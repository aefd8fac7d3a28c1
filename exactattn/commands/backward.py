"""``exactattn backward``: the backward pass of a worked example, table by table, to check by hand.

The forward walkthrough (``exactattn walkthrough``) read backwards: for a
stated upstream gradient ``--d-out`` (default: the loss "sum of the last
output column", ``dO_i = (0, ..., 0, 1)`` for every token), the shares, ``dP
= dO V^T``, ``D_i``, ``dS``, the closed forms, ``dQ``, ``dK``, ``dV`` and the
weight and bias gradients (:mod:`exactattn.present.backward_tables`), every number
exact or certified.  The modifier flags apply as in the table commands
(sinks, ALiBi, windows; soft-capping and RoPE are refused with one line: their
gradients are certified decimals, with no closed form to print).
"""

from __future__ import annotations

from ..errors import InputError, shorten
from .flags import add_digits_option, add_format_option, add_source_options, load_source
from .modifier_flags import add_flags, apply_modifiers, example_meta

HELP = "the backward pass of a worked example (dO, P, dP, D, dS, dQ, dK, dV, dW) to check by hand"
#: the most tokens the backward walkthrough prints (its closed forms grow with the call)
MAX_TOKENS = 32


def register(sub) -> None:
    p = sub.add_parser("backward", help=HELP, description=HELP + ".")
    add_source_options(p)
    p.add_argument("--d-out", metavar="ROWS",
                   help="the upstream gradient dO: one row for every token ('0,0,0,1') or one "
                        "row per token separated by ';' ('1,0;0,1'); exact numbers such as 1/2 "
                        "(default: 0, ..., 0, 1 for every token)")
    add_digits_option(p, "decimal places of values that are not exact (certified; default 4)")
    add_format_option(p)
    add_flags(p, lse=False, dropout=False)


def parse_d_out(text: str | None, n: int, d_v: int) -> list[list]:
    """The ``--d-out`` rows (n x d_v), exactly; a single row is every token's.

    Raises:
        InputError: a row of the wrong width, a number that is not exact, a count of rows
            that is neither 1 nor n.
    """
    from ..numbers.exact import to_matrix
    if text is None:
        return [[0] * (d_v - 1) + [1] for _ in range(n)]
    rows = [r.strip() for r in text.split(";")]
    if len(rows) not in (1, n):
        raise InputError(f"--d-out must have 1 or {n} rows (got {len(rows)}: "
                         f"{shorten(text, quote=True)}); separate rows with ';'")
    cells = [[c.strip() for c in r.split(",")] for r in rows]
    for r in cells:
        if len(r) != d_v:
            raise InputError(f"--d-out rows must have {d_v} numbers like the values (got "
                             f"{len(r)}: {shorten(','.join(r), quote=True)})")
    m = to_matrix(cells, name="--d-out")
    return m * n if len(m) == 1 else m


def run(args) -> int:
    from ..present.backward_tables import backward_sections
    from ..gradients import head_gradients
    for flag in ("--softcap", "--rope"):          # the walkthrough prints closed forms
        if getattr(args, flag[2:]) is not None:
            raise InputError(f"{flag} must come without backward (got {flag}); soft-capped and "
                             "rotary gradients have no closed form to print: use verify "
                             "--backward or exactattn.gradients for their certified decimals")
    ex = apply_modifiers(load_source(args), args)
    n = len(ex.x)
    if n > MAX_TOKENS:
        raise InputError(f"the example must have at most {MAX_TOKENS} tokens for the backward "
                         f"walkthrough (got {n}); use exactattn.gradients from Python")
    d_out = parse_d_out(args.d_out, n, ex.head.d_v)
    hg = head_gradients(ex.head, ex.x, d_out, dropout_keep=getattr(ex, "dropout_keep", None))
    sections = backward_sections(ex, hg, args.digits, closed_forms=args.format == "json")
    g = hg.call
    return sections, example_meta(ex, "backward", args.digits, generators=g.terms.generator_text(),
                                  d_out=[[str(x) for x in r] for r in g.d_out]), 0
