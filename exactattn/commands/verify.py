"""``verify``: check a float attention implementation against the exact answer, in ULPs."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..call import ALIGNMENTS, EMPTY_ROWS as EMPTY_ROW_POLICIES, GQA_MAPS, MASK_KINDS, PRESETS, Policy, preset
from ..render import FORMATS, render

HELP = "check a float attention implementation (numpy, torch, module:function) against the exact answer"


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer (got {text!r})")
        return v
    return parse


def _nonneg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"--max-ulps must be a non-negative integer (got {text!r})")
    return v


def _dtypes(text: str) -> list[str]:
    from ..verify import DTYPES
    names = list(DTYPES) if text == "all" else [t.strip() for t in text.split(",")]
    for n in names:
        if n not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"--dtype must be {', '.join(DTYPES)}, a comma list of them or all (got {n!r})")
    return names


def register(sub) -> None:
    p = sub.add_parser("verify", help=HELP, description=HELP + ". Every output is compared with "
                       "the exact value correctly rounded to the dtype; errors in ULPs and "
                       "relative error; NaN/inf where the exact value is finite is a hard failure.")
    p.add_argument("--impl", default="numpy", metavar="NAME",
                   help="numpy, numpy-naive, torch or module:function (default numpy)")
    p.add_argument("--arrays", choices=("numpy", "torch"), default="numpy",
                   help="what a module:function impl is handed (default numpy arrays)")
    p.add_argument("--dtype", type=_dtypes, default=None, metavar="DTYPE",
                   help="float64, float32, float16, bfloat16, a comma list, or all "
                        "(default float32, or the spec file's)")
    pol = p.add_argument_group("policy (what the right answer is)")
    pol.add_argument("--like", choices=tuple(PRESETS), help="set the policies as this library does")
    pol.add_argument("--scale", help="default (1/sqrt(d_k)), a number, '1/sqrt(q)' or none")
    pol.add_argument("--causal", action="store_true", default=None, help="hide keys after the query")
    pol.add_argument("--alignment", choices=ALIGNMENTS, help="causal alignment when L != S")
    pol.add_argument("--empty-row", choices=EMPTY_ROW_POLICIES,
                     help="what a query that sees no key gets")
    pol.add_argument("--mask-kind", choices=MASK_KINDS, help="how the spec's mask is read")
    pol.add_argument("--gqa", choices=GQA_MAPS, help="which key/value head a query head reads")
    src = p.add_argument_group("inputs")
    src.add_argument("--spec", metavar="FILE", help="a verify spec file (JSON or TOML)")
    src.add_argument("--n", type=_positive("--n"), default=16, help="random inputs: queries (16)")
    src.add_argument("--n-keys", type=_positive("--n-keys"), default=None,
                     help="random inputs: keys (default --n)")
    src.add_argument("--d-k", type=_positive("--d-k"), default=8, help="random inputs: head width (8)")
    src.add_argument("--heads", type=_positive("--heads"), default=1, help="query heads (1)")
    src.add_argument("--kv-heads", type=_positive("--kv-heads"), default=None,
                     help="key/value heads (default --heads)")
    src.add_argument("--seed", type=int, default=0, help="random inputs: numpy seed (0)")
    out = p.add_argument_group("report")
    out.add_argument("--max-ulps", type=_nonneg, default=None,
                     help="tolerance in ULPs (default 2*ceil(sqrt(S + d_k)) + 4)")
    out.add_argument("--worst", type=_positive("--worst"), default=5, help="outputs listed (5)")
    out.add_argument("--digits", type=_positive("--digits"), default=12,
                     help="significant digits of the certified exact values (12)")
    out.add_argument("--flops", action="store_true",
                     help="also report torch FlopCounterMode's count (needs torch)")
    out.add_argument("--format", choices=FORMATS, default="text", help="output format")
    se = p.add_argument_group("search")
    se.add_argument("--search", type=_positive("--search"), metavar="N",
                    help="search N Hypothesis inputs for the largest error and print the shrunk "
                         "reproducer as a spec file")
    se.add_argument("--search-measure", choices=("ulps", "terms"), default="ulps",
                    help="what the search maximises (default ulps)")
    se.add_argument("--max-size", type=_positive("--max-size"), default=4,
                    help="search: largest L, S and E (4)")
    p.set_defaults(func=run)


def _policy(args, base: Policy | None) -> Policy:
    policy = preset(args.like) if args.like else (base or Policy())
    changes = {}
    if args.scale is not None:
        changes["scale"] = args.scale
    if args.causal:
        changes["causal"] = True
    for name in ("alignment", "empty_row", "mask_kind", "gqa"):
        v = getattr(args, name)
        if v is not None:
            changes[name] = v
    return policy.replace(**changes) if changes else policy


def run(args) -> int:
    from ..impls import load_impl
    from ..verify import (flop_counts, load_spec, random_problem, report_sections, search,
                          spec_text, verify)
    impl = load_impl(args.impl, arrays=args.arrays)
    spec_policy, spec_dtype = None, None
    if args.spec:
        problem, spec_policy, spec_dtype = load_spec(args.spec)
    else:
        problem = random_problem(args.n, args.d_k, seed=args.seed, n_keys=args.n_keys,
                                 heads=args.heads, kv_heads=args.kv_heads)
    policy = _policy(args, spec_policy)
    dtypes = args.dtype or [spec_dtype or "float32"]
    if args.search:
        if len(dtypes) != 1:
            raise InputError(f"--dtype must name one dtype with --search (got {','.join(dtypes)})")
        res = search(impl, dtypes[0], policy, examples=args.search, seed=args.seed,
                     max_size=args.max_size, measure=args.search_measure,
                     max_ulps=args.max_ulps)
        sections = report_sections([res.report], worst=args.worst, digits=args.digits)
        text = render(sections, args.format, {"command": "verify", "search": args.search})
        sys.stdout.write(text)
        label = "hard failure" if res.score >= 2 ** 63 else \
            f"{res.score:g} {'ULPs' if res.measure == 'ulps' else 'ULPs at the terms'}"
        sys.stdout.write(f"\nsearch: {res.examples} inputs, largest error {label} "
                         f"(shrunk reproducer below; save it and rerun with --spec FILE)\n")
        sys.stdout.write(spec_text(res.problem, policy, dtypes[0]) + "\n")
        return 0 if res.report.passed else 1
    reports = []
    for dt in dtypes:
        rep = verify(impl, problem, policy, dt, max_ulps=args.max_ulps)
        if args.flops:
            rep.flops = flop_counts(problem, rep.policy, dt)
        reports.append(rep)
    sections = report_sections(reports, worst=args.worst, digits=args.digits)
    meta = {"command": "verify", "impl": reports[0].impl, "policy": reports[0].policy.as_dict(),
            "passed": all(r.passed for r in reports)}
    sys.stdout.write(render(sections, args.format, meta))
    return 0 if all(r.passed for r in reports) else 1
