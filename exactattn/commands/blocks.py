"""``blocks``: certified shares and outputs at any length, in row blocks, streamed in row order.

The inputs are a spec file (a head spec with tokens, or a one-head verify
spec) or ``--random N,D,SEED`` (verify's standard-normal inputs, rounded to
``--dtype``).  Blocks of query rows run on a local Dask cluster over this
machine's cores (``--scheduler none``: this process; ``--scheduler
tcp://host:8786`` or ``DASK_SCHEDULER_ADDRESS``: an existing cluster), their
size chosen from ``--memory``; the rows are written as their blocks finish,
in row order, as CSV or one JSON document.  ``--check IMPL`` instead runs a
float implementation (torch's SDPA, numpy, module:function) once and checks
every output against the exact one in ULPs, block by block.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from itertools import chain

from ..call.policy import ALIGNMENTS
from ..errors import InputError, shorten
from ..options import argtype, choice, memory, whole
from ..present.render import number_cell
from .flags import add_digits_option, add_format_option, load_spec, refuse_rules
from .modifier_flags import add_policy_flags, apply, apply_modifiers

HELP = "certified shares and outputs at any length, in row blocks (local cores or a Dask cluster)"
STREAM_FORMATS = ("csv", "json")


def _random(text: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() and len(p) < 10 for p in parts) or \
            int(parts[0]) < 1 or int(parts[1]) < 1:
        raise argparse.ArgumentTypeError(f"--random must be N,D,SEED: tokens, head width and "
                                         f"seed, such as 4096,64,0 (got {shorten(text)!r})")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _scheduler(text: str) -> str:
    from ..blocks.engine import check_scheduler
    return check_scheduler(text, "--scheduler")


def register(sub) -> None:
    p = sub.add_parser("blocks", help=HELP, description=HELP + ". Rows are written in order as "
                       "their blocks finish; the digits are the same for every block size and "
                       "wherever the blocks run.")
    src = p.add_argument_group("inputs (one of)")
    src.add_argument("--spec", metavar="FILE", help="a head spec (tokens, W_Q, W_K, W_V) or a "
                     "verify spec with one head (query, key, value, boolean mask)")
    src.add_argument("--random", type=_random, metavar="N,D,SEED",
                     help="standard-normal query, key and value of N tokens and width D, as "
                          "`exactattn verify --n N --d-k D --seed SEED` draws them")
    src.add_argument("--dtype", type=choice("--dtype", ("float32", "float16", "float64")),
                     default=None, help="--random: the float type the inputs are rounded to, "
                     "and the one --check runs (default float32)")
    add_policy_flags(p, "policy (overrides the spec file's)",
                     ("scale", "causal", "alignment", "window", "empty_row"),
                     alignment=f"causal alignment when queries and keys differ: "
                               f"{', '.join(ALIGNMENTS)}",
                     window="a sliding window: keys LEFT before to RIGHT after the query "
                            "(none = no limit on that side); blocks skip keys outside it")
    run_ = p.add_argument_group("blocks")
    run_.add_argument("--memory", type=memory("--memory"), default=None, metavar="SIZE",
                      help="memory for the whole run, all workers together, such as 4GiB or "
                           "512MiB; the block size follows from it (default 4GiB)")
    run_.add_argument("--rows", type=whole("--rows"), default=None,
                      help="query rows per block (instead of choosing them from --memory)")
    run_.add_argument("--scheduler", type=argtype(_scheduler, "--scheduler", echo=False),
                      default=None, metavar="ADDR",
                      help="local (a Dask cluster over this machine's cores; the default), "
                           "none (this process) or a Dask scheduler address such as "
                           "tcp://host:8786 (default: $DASK_SCHEDULER_ADDRESS, else local)")
    run_.add_argument("--workers", type=whole("--workers", high=1024), default=None,
                      help="worker processes of the local cluster (default: the cores)")
    out = p.add_argument_group("output")
    out.add_argument("--show", type=choice("--show", ("outputs", "shares", "both")),
                     default="outputs", help="outputs, shares or both (default outputs)")
    add_digits_option(out, "decimal places, certified (default 4)", metavar=None)
    add_format_option(out, STREAM_FORMATS + ("text",), default=None, metavar=None,
                      help="csv or json (rows); text or json (--check) (default csv, or text "
                           "with --check)")
    chk = p.add_argument_group("check a float implementation")
    chk.add_argument("--check", metavar="IMPL", default=None,
                     help="torch, numpy or module:function: run it once and compare every output "
                          "with the exact one in ULPs, block by block")
    chk.add_argument("--max-ulps", type=whole("--max-ulps", low=0), default=None,
                     help="tolerance in ULPs (default: verify's)")
    chk.add_argument("--worst", type=whole("--worst", high=1000), default=5,
                     help="outputs listed (5)")


def _refuse(args) -> None:
    if (args.spec is None) == (args.random is None):
        raise InputError("blocks needs --spec FILE or --random N,D,SEED (got "
                         f"{'both' if args.spec else 'neither'}); see `exactattn blocks --help`")
    refuse_rules(args, (("--max-ulps", "--check IMPL"),))
    if args.check is None:
        if args.format == "text":
            raise InputError("--format must be csv or json for rows (got text); text is for "
                             "--check")
    elif args.format == "csv" or args.show != "outputs":
        what = "--format csv" if args.format == "csv" else f"--show {args.show}"
        raise InputError(f"{what} must come without --check (got both); --check prints a "
                         "report (--format text or json)")
    if args.workers is not None and args.scheduler not in (None, "local"):
        raise InputError(f"--workers must come with a local cluster (got --scheduler "
                         f"{shorten(args.scheduler)}); a cluster at an address has its own workers")
    refuse_rules(args, (("--rows", "--memory", "--memory chooses the rows"),))
    if args.spec and args.dtype is not None and args.check is None:
        raise InputError("--dtype must come with --random or --check (got --spec alone); a spec "
                         "file holds its own numbers")


def _inputs(args):
    """``(inputs, floats or None, dtype)``: the exact inputs, the float arrays for --check."""
    from ..blocks import random_floats
    from ..call import Call
    from ..call.spec import load_problem, parse, read_text
    dtype = args.dtype or "float32"
    if args.random:
        n, d, seed = args.random
        floats = random_floats(n, d, seed=seed, dtype=dtype)
        policy = apply(None, args)
        name = f"random n={n} d={d} seed={seed} {dtype}"
        return Call.from_floats(*floats, policy=policy, name=name).head(), floats, dtype
    text, fmt = read_text(args.spec)
    doc = parse(text, fmt=fmt, where=shorten(args.spec, 200))
    if isinstance(doc, dict) and "tokens" in doc:
        if args.check:
            raise InputError("--check must come with --random or a verify spec (got a head "
                             "spec); a float implementation takes query, key and value")
        ex = apply_modifiers(load_spec(args.spec), args)
        return Call.of_head(ex.head, ex.x, name=ex.name, dropout_keep=getattr(
            ex, "dropout_keep", None)).head(), None, dtype
    problem, spec_policy, spec_dtype = load_problem(args.spec)
    sh = problem.shape
    if sh["B"] * sh["H_q"] != 1:
        raise InputError(f"spec must hold one head for blocks (got B={sh['B']}, H_q="
                         f"{sh['H_q']}); check several heads with exactattn verify")
    policy = apply(spec_policy, args)
    dtype = args.dtype or spec_dtype or "float32"
    if args.check:
        if problem.mask is not None:
            raise InputError("--check must come without a mask (got a spec with one); check "
                             "masks with exactattn verify")
        problem, _ = problem.rounded(dtype)
        floats = tuple(problem.floats(k).reshape(problem.shape["L" if k == "query" else "S"], -1)
                       for k in ("query", "key", "value"))
        return Call.from_floats(*floats, policy=policy, name=problem.name).head(), floats, dtype
    return problem.with_policy(policy).head(), None, dtype


def run(args) -> int:
    from ..blocks import DEFAULT_MEMORY, Engine, certify, check_impl
    from ..present.stream import progress
    _refuse(args)
    inputs, floats, dtype = _inputs(args)
    budget = args.memory or DEFAULT_MEMORY
    with Engine(args.scheduler, args.workers) as engine:
        if args.check:
            report = check_impl(args.check, *floats, dtype, inputs.policy, memory=budget,
                                rows=args.rows, engine=engine, max_ulps=args.max_ulps,
                                worst=args.worst)
            return write_report(report, args.format or "text", budget)
        shares = args.show in ("shares", "both")
        blocks = certify(inputs, args.digits, shares=shares, memory=budget, rows=args.rows,
                         engine=engine)
        first = next(blocks)
        sh = inputs.shape
        total = -(-sh["L"] // (first.r1 - first.r0))
        shown = progress(chain([first], blocks), total, f"blocks of {first.r1 - first.r0} rows")
        head = {"command": "blocks", "inputs": inputs.name, "policy": inputs.policy.as_dict(),
                "digits": args.digits, "n_queries": sh["L"], "n_keys": sh["S"],
                "d_v": sh["E_v"], "rows_per_block": first.r1 - first.r0, "blocks": total,
                "engine": engine.describe()}
        if engine.note:
            print(f"exactattn: note: {engine.note}", file=sys.stderr)
        (_write_json if args.format == "json" else _write_csv)(shown, head, args.show)
    return 0


def _write_csv(blocks, head: dict, show: str) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    width = head["n_keys"] if show != "outputs" else head["d_v"]
    out.writerow(["kind", "query"] + [str(c) for c in range(1, width + 1)])
    for b in blocks:
        for i in range(b.r1 - b.r0):
            if show != "outputs":
                out.writerow(["share", b.r0 + i + 1] + b.shares[i])
            if show != "shares":
                out.writerow(["output", b.r0 + i + 1] + b.outputs[i])
        sys.stdout.flush()


def _write_json(blocks, head: dict, show: str) -> None:
    w = sys.stdout.write
    w(json.dumps(head)[:-1] + ', "rows": [\n')
    sep = ""
    for b in blocks:
        for i in range(b.r1 - b.r0):
            row = {"query": b.r0 + i + 1, **({"shares": b.shares[i]} if show != "outputs" else {}),
                   **({"outputs": b.outputs[i]} if show != "shares" else {})}
            w(sep + json.dumps(row))
            sep = ",\n"
        sys.stdout.flush()
    w("\n]}\n")


def write_report(report, fmt: str, budget: int) -> int:
    """A :class:`~exactattn.blocks.check.BlockedReport` as text or JSON on stdout (``budget``: the
    memory in bytes); the exit status (0 passed, 1 not)."""
    from ..blocks.memory import size_text
    s = report.summary()
    doc = {"command": "blocks", "check": report.impl, "dtype": report.dtype,
           "policy": report.policy.as_dict(), "shape": report.shape,
           "tolerance_ulps": report.max_ulps, "proved_ulps": report.found.proved,
           "passed": report.passed, "summary": s,
           "fallbacks": report.found.fallbacks, "blocks": report.blocks,
           "rows_per_block": report.rows, "memory": size_text(budget), "engine": report.engine,
           "worst": [{"query": w.index[0] + 1, "column": w.index[1] + 1, "got": w.got,
                      "exact_rounded": w.rounded, "ulps": w.ulps, "rel": w.rel,
                      "terms_ulps": w.terms_ulps, "status": w.status}
                     for w in report.found.worst],
           "notes": report.notes}
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0 if report.passed else 1
    sh = report.shape
    lines = [f"check {report.impl} in {report.dtype}: L={sh['L']} S={sh['S']} E={sh['E']} "
             f"E_v={sh['E_v']}, {report.policy.describe()}",
             f"blocks: {report.blocks} of {report.rows} rows on {report.engine} "
             f"(memory {doc['memory']})",
             f"outputs: {s['count']}, over {_tolerance(report)}: {s['over']}, hard: {s['hard']}"
             f"  -> {'PASS' if report.passed else 'FAIL'}",
             f"ULPs: max {s['max_ulps']}, median {s['median_ulps']}, mean "
             f"{number_cell(s['mean_ulps'])}; at the terms: max "
             f"{number_cell(s['max_terms_ulps'])}; relative error: max {number_cell(s['max_rel'])}",
             f"decided by the exact per-entry path: {report.found.fallbacks}",
             "worst:"]
    for w in doc["worst"]:
        lines.append(f"  query {w['query']} column {w['column']}: got {w['got']!r}, exact "
                     f"rounded {w['exact_rounded']!r}, {w['ulps']} ULPs ({w['status']})")
    lines += [f"note: {n}" for n in report.notes]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0 if report.passed else 1


def _tolerance(report) -> str:
    """The tolerance in words: the proved bound's range, or one number of ULPs."""
    if report.found.proved is None:
        return f"{report.max_ulps} ULPs"
    lo, hi = report.found.proved
    return (f"the proved bound ({lo}{f' to {hi}' if hi != lo else ''} ULPs at the terms; "
            f"{report.max_ulps} where none holds)")
