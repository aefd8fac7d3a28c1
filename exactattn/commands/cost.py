"""``cost``: the same head at several row lengths, multiply-adds counted and derived.

``exactattn cost`` prints projection MACs, pair MACs, the total, the ratio to
the row above and the pairs' share, then the check (the derived formula against
the count at the last row), the crossover and the doubling ratio.
``--conventions`` prints the exact counts next to common accounting instead;
``--audit`` runs the installed FLOP counters on fixed attention calls and
judges each figure against the derived count (``--counters`` picks them);
``--judge FLOPS --call ... --shape B,H,L,S,E`` judges one reported figure.

Registering the command loads neither sympy nor the cost tables (``--help``
stays fast); they are loaded when the command runs.
"""

from __future__ import annotations

import argparse
import re
from itertools import accumulate

from ..call.policy import ALIGNMENTS
from ..cost.sizes import MAX_SIZE
from ..errors import InputError, shorten
from ..examples import chronicle
from ..options import argtype, check_whole, choice, whole, whole_list
from .flags import add_format_option, given

HELP = "multiply-adds at several row lengths: counted, derived, crossover, conventions"

#: the most token counts --rows may list (each row is derived and maybe run)
MAX_ROWS = 100
#: the largest --count-limit (per row; the whole run is held to MAX_SECONDS)
MAX_COUNT_LIMIT = 1_000_000_000
#: the longest a command may count, estimated before it starts (seconds, 2-core machine)
MAX_SECONDS = 30
#: the largest L or S --judge takes (the visible keys are read row by row)
MAX_TOKENS = 10 ** 6


def _alignment(text: str) -> str:
    """--align: top_left or bottom_right; the retired ``top-left`` gets the fix."""
    try:
        return choice("--align", ALIGNMENTS)(text)
    except argparse.ArgumentTypeError as e:
        fixed = text.strip().replace("-", "_")
        if fixed in ALIGNMENTS:
            raise argparse.ArgumentTypeError(f"{e}; write --align {fixed}") from None
        raise


def _counters(text: str) -> list[str]:
    """--counters: comma-separated counter names, or ``none`` (the derived side only)."""
    from ..audit.counters import COUNTERS
    names = [c.key for c in COUNTERS]
    parts = [p.strip() for p in text.split(",")]
    if parts != ["none"] and (set(parts) - set(names) or len(set(parts)) != len(parts)):
        raise InputError(f"--counters must be a comma-separated list of {', '.join(names)}, "
                         f"or none (got {shorten(text, quote=True)})")
    return [] if parts == ["none"] else parts


def register(sub) -> None:
    head = chronicle().head
    size = f"from 1 to {MAX_SIZE}"
    p = sub.add_parser("cost", help=HELP, description=HELP,
                       epilog="A multiply-add (MAC) is one multiplication plus one addition; "
                              "FLOPs = 2 x MACs. See docs/cost.md.")
    p.add_argument("--rows", type=whole_list("--rows", high=MAX_SIZE, most=MAX_ROWS),
                   default=None, metavar="LIST",
                   help=f"token counts, comma-separated, at most {MAX_ROWS} (default "
                        "4,8,16,32; with --conventions one count, default 32)")

    def sized(flag: str, default, metavar: str, text: str) -> None:
        p.add_argument(flag, type=whole(flag, high=MAX_SIZE), default=default, metavar=metavar,
                       help=text)
    sized("--d-model", head.d_model, "D",
          f"d_model, {size} like every size (default {head.d_model}, the example head)")
    sized("--d-k", head.d_k, "K", f"key width d_k (default {head.d_k}, the example head)")
    sized("--d-v", None, "V", "value width d_v (default: d_k)")
    p.add_argument("--causal", action="store_true",
                   help="causal mask: masked pairs are skipped (n(n+1)/2 remain)")
    p.add_argument("--align", type=_alignment, default=None, metavar="ALIGN",
                   help=f"causal alignment when --keys differs from the row length: "
                        f"{' or '.join(ALIGNMENTS)} (default {ALIGNMENTS[0]})")
    sized("--keys", None, "M", "key length m (default: the row length n)")
    sized("--heads", None, "H", "H heads of width d_k/d_v plus the output projection W_O")
    sized("--layers", 1, "L", "L stacked layers (default 1)")
    p.add_argument("--decode", action="store_true",
                   help="generate the tokens one at a time with a KV cache")
    p.add_argument("--conventions", action="store_true",
                   help="the exact counts next to common accounting (n^2, n^2/2, FLOPs) at "
                        "one row length; takes --rows N, --causal, --d-model, --d-k, --d-v, "
                        "--heads, --layers, --count-limit (not --decode, --keys, --align)")
    p.add_argument("--count-limit", type=whole("--count-limit", high=MAX_COUNT_LIMIT),
                   default=10_000_000, metavar="MACS",
                   help="run the head only for rows whose derived total is at most this "
                        f"(default 10000000, at most {MAX_COUNT_LIMIT}); larger rows are "
                        f"shown derived, marked as such; a command that would count for "
                        f"more than about {MAX_SECONDS} s is refused")
    p.add_argument("--audit", action="store_true",
                   help="run the installed FLOP counters (torch FlopCounterMode, fvcore, "
                        "ptflops, thop, calflops, DeepSpeed) on fixed attention calls and "
                        "modules, each figure judged against the derived count; takes "
                        "--counters and --format only")
    p.add_argument("--counters", type=argtype(_counters, "--counters", echo=False), default=None, metavar="LIST",
                   help="with --audit: which counters, comma-separated (torch, fvcore, "
                        "ptflops, ptflops_aten, thop, calflops, deepspeed; default all), or "
                        "none for the derived figures only")
    p.add_argument("--judge", type=argtype(_flops, "--judge", echo=False), default=None, metavar="FLOPS",
                   help="judge a reported FLOP figure for one SDPA call: the exact FLOPs, each "
                        "convention's, a verdict and the departure that gives the figure; "
                        "exit 0 right, 1 wrong; takes --call, --shape, --kv-heads, --causal, "
                        "--align, --backward, --unit, --format")
    p.add_argument("--call", type=choice("--call", ("sdpa", "flash", "mem_efficient", "math")),
                   default=None, metavar="CALL",
                   help="with --judge: sdpa (default), flash, mem_efficient or math")
    p.add_argument("--shape", default=None, metavar="B,H,L,S,E[,E_v]",
                   help="with --judge: batch, query heads, queries, keys, d_k[, d_v]")
    sized("--kv-heads", None, "K", "with --judge: key/value heads (GQA; default H)")
    p.add_argument("--backward", action="store_true",
                   help="with --judge: the figure is the backward pass's")
    p.add_argument("--unit", type=choice("--unit", ("flops", "macs")), default=None,
                   metavar="UNIT", help="with --judge: the figure's unit, flops (default) or "
                   "macs (multiply-adds, as thop and ptflops print; 1 MAC = 2 FLOPs)")
    add_format_option(p)


def _flops(text: str) -> int:
    """--judge: a FLOP figure, a whole number from 0."""
    if not text.strip().isdigit():
        raise InputError(f"--judge must be a FLOP figure, a whole number from 0 such as 12960 "
                         f"(got {shorten(text, quote=True)})")
    return int(text.strip())


def parse_shape(text: str) -> tuple:
    """--shape: ``B,H,L,S,E[,E_v]`` as whole numbers (E_v defaults to E), read when --judge runs.

    >>> parse_shape("2,5,9,9,4")
    (2, 5, 9, 9, 4, 4)
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (5, 6) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise InputError(f"--shape must be B,H,L,S,E or B,H,L,S,E,E_v, five or six whole "
                         f"numbers such as 2,5,9,9,4 (got {text!r})")
    dims = [check_whole(int(p), f"each size of --shape {text}",
                        high=MAX_TOKENS if i in (2, 3) else MAX_SIZE)
            for i, p in enumerate(parts)]
    return tuple(dims) if len(dims) == 6 else (*dims, dims[4])


#: the options --audit leaves out, in the order they are named
_NOT_AUDIT = ("--rows --d-k --d-v --d-model --causal --align --keys --heads --layers --decode "
              "--conventions --count-limit")


def _given(args, skip: tuple = ()) -> tuple | None:
    """The first option of :data:`_NOT_AUDIT` given a value other than the parser's default
    (d_model and d_k: the example head's): ``(flag, value)``, or None."""
    head = chronicle().head
    default = {"d_k": head.d_k, "d_model": head.d_model, "layers": 1, "count_limit": 10_000_000}
    return next(((f, getattr(args, d)) for f in given(args, _NOT_AUDIT) if (d := f[2:].replace(
        "-", "_")) not in skip and getattr(args, d) != default.get(d)), None)


def _check_audit(args) -> None:
    if args.audit and args.conventions:
        raise InputError("--audit must be left out with --conventions (got both); they print "
                         "two different tables: drop one")
    if not args.audit:
        if args.counters is not None:
            raise InputError("--counters needs --audit (got --counters without --audit); "
                             "add --audit or drop --counters")
        return
    found = _given(args)
    if found:
        flag, value = found
        shown = "" if isinstance(value, bool) else " " + (
            ",".join(map(str, value)) if isinstance(value, list) else str(value))
        raise InputError(f"{flag} must be left out with --audit (got {flag}{shown}); the "
                         f"audit runs its own fixed calls: drop {flag}")


def _check_judge(args) -> None:
    if args.judge is None:
        for flag in given(args, "--call --shape --kv-heads --backward --unit")[:1]:
            raise InputError(f"{flag} needs --judge (got {flag} without --judge); add "
                             f"--judge FLOPS or drop {flag}")
        return
    if args.shape is None:
        raise InputError("--judge needs --shape B,H,L,S,E[,E_v] (got none); pass e.g. "
                         "--shape 2,5,9,9,4")
    if args.audit or args.conventions:
        flag = "--audit" if args.audit else "--conventions"
        raise InputError(f"--judge must be left out with {flag} (got both); {flag} prints "
                         "another table: drop one")
    found = _given(args, ("causal", "align", "conventions"))
    if found:
        raise InputError(f"{found[0]} must be left out with --judge (got {found[0]}); --shape "
                         f"gives the sizes: drop {found[0]}")


def _check_combinations(args) -> None:
    """Refuse every option that the chosen table would not use (none is ignored silently)."""
    _check_judge(args)
    _check_audit(args)
    if args.conventions:
        for flag, got in (("--decode", args.decode and "both"),
                          ("--keys", args.keys is not None and f"--keys {args.keys}"),
                          ("--align", args.align is not None and f"--align {args.align}")):
            if got:
                raise InputError(f"{flag} must be left out with --conventions (got {got}); the "
                                 "conventions compare one prefill of n queries over the same n "
                                 f"keys; drop {flag}, or drop --conventions for the table that "
                                 "uses it")
        if args.rows is not None and len(args.rows) != 1:
            listed = ",".join(map(str, args.rows))
            raise InputError(f"--rows must be one token count with --conventions (got "
                             f"{shorten(listed)}); pass e.g. --rows {args.rows[-1]}")
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


def _check_work(work: list[tuple[int, float]], limit: int, *, together: bool = False) -> None:
    """Refuse, before anything runs, a command that would count for over MAX_SECONDS.

    ``work`` is ``(MACs, estimated seconds)`` per run; ``together``: the runs
    are counted all or none (the conventions' two exact rows).
    """
    seconds = sum(s for _, s in work)
    if seconds <= MAX_SECONDS:
        return
    runs = sorted(work)    # the most MACs whose run, with every smaller one, fits the time
    fits = None if together else max((m for (m, _), spent in zip(runs, accumulate(
        s for _, s in runs)) if spent <= MAX_SECONDS), default=None)
    if fits is not None:
        fix = f"pass --count-limit {fits} (or less) to derive the larger rows instead"
    else:
        below = max(m for m, _ in work) if together else min(m for m, _ in work)
        fix = (f"pass --count-limit {below - 1} (or less) to derive "
               f"{'the exact rows' if together else 'every row'} instead, or fewer tokens")
    raise InputError(
        f"--count-limit must leave at most about {MAX_SECONDS} s of counting (got "
        f"--count-limit {limit}: {sum(m for m, _ in work)} MACs to count by running the "
        f"head, about {f'{seconds:.0f} s' if seconds < 120 else f'{seconds / 60:.0f} minutes'}); "
        f"{fix}")


def run(args) -> int:
    _check_combinations(args)
    if args.judge is not None:
        from ..audit.flops import judge_sections
        sections, right = judge_sections(
            args.judge, args.call or "sdpa", parse_shape(args.shape), causal=args.causal,
            alignment=args.align or ALIGNMENTS[0], kv_heads=args.kv_heads,
            backward=args.backward, unit=args.unit or "flops")
        return sections, {"command": "cost --judge", "unit": "MACs (FLOPs = 2 x MACs)" if
                          args.unit == "macs" else "FLOPs (2 x MACs)"}, 0 if right else 1
    if args.audit:
        from ..audit.flops import audit_sections
        from ..present.stream import busy
        with busy("running the FLOP counters on their calls"):
            sections = audit_sections(args.counters)
        return sections, {"command": "cost --audit", "unit": "MACs and FLOPs"}, \
            0 if sections[0].data["same"] else 1
    from ..cost.conventions import conventions_work   # each table loads both (cost_tables)
    from ..cost.rows import counting_work
    from .cost_tables import conventions_sections, cost_sections
    if args.conventions:
        n = 32 if args.rows is None else args.rows[0]
        options = dict(heads=args.heads, layers=args.layers, count_limit=args.count_limit)
        _check_work(conventions_work(n, args.d_model, args.d_k, args.d_v, **options),
                    args.count_limit, together=True)
        sections = conventions_sections(n, args.d_model, args.d_k, args.d_v,
                                        causal=args.causal, **options)
    else:
        rows = [4, 8, 16, 32] if args.rows is None else args.rows
        options = dict(causal=args.causal, alignment=args.align or ALIGNMENTS[0],
                       keys=args.keys, heads=args.heads, layers=args.layers,
                       decode=args.decode, count_limit=args.count_limit)
        _check_work(counting_work(rows, args.d_model, args.d_k, args.d_v, **options),
                    args.count_limit)
        sections = cost_sections(rows, args.d_model, args.d_k, args.d_v, **options)
    same = [n.strip() for n in sections[0].notes if n.strip().startswith("same:")]
    return sections, {"command": "cost", "unit": "MACs (FLOPs = 2 x MACs)"}, \
        int(not args.conventions and same[:1] not in ([], ["same: true"]))
