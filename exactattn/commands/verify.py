"""``verify``: check a float attention implementation against the exact answer, in ULPs.

Every option either changes the report or is refused with one line (exit 2):
policy flags override the spec file's policy field by field (``--like``
first, then the single flags), and flags that cannot apply (random-input
sizes with ``--spec``, ``--mask-kind`` without a mask, ``--alignment``
without causal attention, ``--gqa`` without grouped heads, search options
without ``--search``) are refused rather than ignored.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..call.policy import UNSUPPORTED, Policy
from ..errors import InputError, shorten
from ..options import MAX_PLACES, argtype, choice, memory, whole, whole_list
from ..present.render import FORMATS, Section, plural, render
from .flags import refuse_rules
from .modifier_flags import FLAGS, add_flags, add_policy_flags, apply, refuse

HELP = "check a float attention implementation (numpy, torch, flex, flash-attn, jax, module:function) against the exact answer"

#: the largest --max-ulps: no two float64 values are further apart, so a larger one means the same
MAX_ULPS = 2 ** 64
_RANDOM_FIX = "pass a smaller --n, --n-keys, --d-k or --heads, fewer --dtype, or --memory SIZE"


def _dtypes(text: str) -> list[str] | tuple[str, ...]:
    """A list of dtype names (each once), or for ``all`` the tuple of every dtype."""
    from ..verify import DTYPES
    if text.strip() == "all":
        return DTYPES
    names = [t.strip() for t in text.split(",")]
    for i, n in enumerate(names):
        if n not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"--dtype must be {', '.join(DTYPES)}, a comma list of them or all (got "
                f"{shorten(n)!r})")
        if n in names[:i]:
            raise argparse.ArgumentTypeError(
                f"--dtype must name each dtype once (got {n} twice); drop the repeat")
    return names


def _check_invariance(text: str) -> tuple[str, ...]:
    from ..verify.invariance import KINDS
    names = tuple(t.strip() for t in text.split(","))
    bad = [n for n in names if n not in KINDS]
    if bad:
        raise InputError(f"--invariance must be a comma list of {', '.join(KINDS)} (got "
                         f"{shorten(bad[0], quote=True)})")
    return names


def _check_probes(text: str) -> tuple[str, ...]:
    from ..verify.probes import check_probes   # numpy loads only when --probes is given
    return check_probes(text)


#: verify's own options, in --help's order, by group (None: no group; a function adds the
#: shared policy or modifier flags to the parser): flag -> (type, help); a type is a
#: tuple of choices, ``whole`` and the like (called with the flag), True (a switch), a dict of
#: argparse's own keywords
OPTIONS = (
    (None, {
        "--impl": ({"default": "numpy", "metavar": "NAME"}, "numpy, numpy-naive, torch, flex, "
                   "flash-attn, jax (jax.nn.dot_product_attention on the CPU) or module:function; "
                   "the module is looked for in the current directory first (default numpy)"),
        "--device": (("cpu", "cuda"), "where --impl torch, flex or flash-attn runs: cpu or cuda "
                     "(default cpu; flash-attn cuda); the exact reference stays on the CPU"),
        "--backend": (("flash", "efficient", "cudnn", "math"), "--impl torch: the one SDPA "
                      "backend allowed (torch.nn.attention.sdpa_kernel); one torch cannot select "
                      "on the device is refused by name"),
        "--score-mod": ({"metavar": "MODULE:FUNCTION"}, "--impl flex: your score_mod(score, b, h, "
                        "q_idx, kv_idx) in place of the policy's (the exact answer is still the "
                        "policy's: --softcap, --alibi, ...)"),
        "--mask-mod": ({"metavar": "MODULE:FUNCTION"}, "--impl flex: your mask_mod(b, h, q_idx, "
                       "kv_idx) -> bool, through create_block_mask, in place of the policy's "
                       "visible keys (--causal, --window, ...)"),
        "--arrays": (("numpy", "torch", "jax"), "what a module:function impl is handed: numpy, "
                     "torch or jax (default numpy arrays)"),
        "--dtype": ({"type": _dtypes, "metavar": "DTYPE"}, "float64, float32, float16, bfloat16, "
                    "a comma list, or all: every dtype the implementation runs (default float32, "
                    "or the spec file's)"),
        "--memory": ({"type": memory("--memory"), "metavar": "SIZE"}, "check random inputs of any "
                     "--n in row blocks within SIZE (e.g. 4GiB), on Dask's local scheduler "
                     "(exactattn blocks for a cluster)")}),
    (lambda p: add_policy_flags(
        p, "policy (what the right answer is; overrides the spec file's)", ("like", "scale",
        "causal", "alignment", "empty_row", "mask_kind", "gqa"), causal="hide keys after the "
        "query (--no-causal turns a spec's causal off)"), None),
    (lambda p: add_flags(p, lse_help="also check each row's log-sum-exp that the implementation "
                         "returns with its output, in natural-log units (--lse 2: base 2)"), None),
    ("inputs", {
        "--spec": ({"metavar": "FILE"}, "a verify spec file (JSON or TOML)"),
        "--n": (whole, "random inputs: queries (16)"),
        "--n-keys": (whole, "random inputs: keys (default --n)"),
        "--d-k": (whole, "random inputs: head width (8)"),
        "--heads": (whole, "random inputs: query heads (1)"),
        "--kv-heads": (whole, "random inputs: key/value heads (default --heads)"),
        "--seed": (lambda f: whole(f, low=0), "random inputs or --search: the seed, a whole "
                   "number from 0 (0)")}),
    (None, {
        "--backward": (True, "check the implementation's gradients dQ, dK, dV "
                       "(torch: autograd of SDPA; jax: jax.vjp; numpy: a float reference "
                       "backward; module:function: f(query, key, value, grad_out, ...) -> (dq, "
                       "dk, dv)) against the exact ones, for a standard-normal dO drawn from "
                       "--seed (with --spec too); with --search N, search for the worst input of "
                       "the backward"),
        "--probes": ({"type": argtype(_check_probes, "--probes", echo=False),
                      "metavar": "LIST"}, "derived inputs also run through the implementation "
                     "and judged on the plain ULP count: ones (values all 1: each output is its "
                     "row's share sum), identity (each output is one key's share), positive "
                     "(|values|: no cancellation); a comma list, or none (default all three)"),
        "--invariance": ({"type": argtype(_check_invariance, "--invariance", echo=False),
                          "metavar": "LIST"}, "rerun the call's rows inside other batches (batch), "
                         "with padded keys and queries (pad) and with num_splits 1, 2, 4 (split, "
                         "for a function that takes it): bitwise identical, the ULPs between the "
                         "runs and each run's ULPs from the exact value; a comma list")}),
    ("split-merge (split-KV, flash-decoding)", {
        "--split-merge": (True, "check partial states: --impl returns "
                          "(output, lse) on each block of keys (--splits), --merge combines them; "
                          "every block's state and the merged (output, lse) are judged against "
                          "the exact rows"),
        "--splits": ({"type": whole_list("--splits"), "metavar": "CUTS"}, "split-merge: the key "
                     "positions the keys are cut before, increasing (e.g. 3,5: blocks [0, 3), [3, "
                     "5), [5, S); default S/2)"),
        "--merge": ({"metavar": "MODULE:FUNCTION"}, "split-merge: your merge(states, *, "
                    "sink=None) -> (output, lse); default: exactattn merges the states in "
                    "float64, checking the blocks only")}),
    ("report", {
        "--max-ulps": (lambda f: whole(f, low=0, high=MAX_ULPS), "tolerance in ULPs by either "
                       "count (default: per output, the proved error of a correct kernel "
                       "accumulating in --accumulation; 2*ceil(sqrt(S + d_k)) + 4 + ceil(max "
                       "|scaled score|) for the probes, the log-sum-exp, RoPE, ALiBi and dropout)"),
        "--accumulation": ({"choices": ("float32", "float16", "bfloat16", "float64"),
                            "default": "float32"}, "what the kernel accumulates in (float32); "
                           "float16/bfloat16: its scores and weights are stored in that dtype"),
        "--worst": ({"type": whole("--worst"), "default": 5}, "outputs listed (5)"),
        "--digits": ({"type": whole("--digits", low=1, high=MAX_PLACES), "default": 12},
                     f"significant digits of the certified exact values, 1 to {MAX_PLACES} (12)"),
        "--timings": (True, "add the wall-clock seconds of the "
                      "implementation, the exact side and the judging of every output (they "
                      "differ from run to run)"),
        "--flops": (True, "also report torch FlopCounterMode's count (needs "
                    "torch)"),
        "--format": ({"type": choice("--format", FORMATS), "default": "text"},
                     f"output format: {', '.join(FORMATS)}")}),
    ("search", {
        "--search": ({"type": whole("--search"), "metavar": "N"}, "search N Hypothesis inputs for "
                     "the largest error and print the shrunk reproducer as a spec file (the "
                     "search is estimated first and refused past about a minute)"),
        "--search-measure": (("ulps", "terms"), "what the search maximises: ulps or terms (ulps)"),
        "--max-size": (whole, "search: largest L, S and E (4); a search draws small inputs, so "
                       "sizes past a few dozen are refused"),
        "--max-batch": (whole, "search: largest batch B (2)"),
        "--max-heads": (whole, "search: largest number of query heads (4); the key/value heads "
                        "are drawn among its divisors (--heads and --kv-heads fix them instead)")}),
)


def register(sub) -> None:
    p = sub.add_parser("verify", help=HELP, description=HELP + ". Every output is compared with "
                       "the exact value correctly rounded to the dtype; errors in ULPs and "
                       "relative error; NaN/inf where the exact value is finite, or an "
                       "implementation that raises, is a hard failure.")
    for group, flags in OPTIONS:
        if callable(group):        # the shared policy or modifier flags
            group(p)
            continue
        g = p if group is None else p.add_argument_group(group)
        for flag, (kind, text) in flags.items():
            kw = dict(kind) if isinstance(kind, dict) else {"action": "store_true"} if kind is \
                True else {"type": choice(flag, kind) if isinstance(kind, tuple) else kind(flag)}
            g.add_argument(flag, help=text, **kw)


#: the flags each option cannot come with, in the order they are checked (read by
#: :func:`~exactattn.commands.flags.refuse_rules`)
RULES = (
    ("--splits --merge", "--split-merge"),
    ("--backward --search --memory --flops --timings", "--split-merge",
     "a split-merge check runs the forward's blocks and their merge once"),
    ("--lse", "--split-merge", "a split-merge check always judges every block's and the merged "
     "log-sum-exp, in natural-log units"),
    (" ".join(FLAGS[f] for f in UNSUPPORTED["split"]), "--split-merge",
     "a block's keys reach the function without their positions"),
    ("--invariance", "--backward --split-merge --search --memory --probes --flops --lse",
     "the invariance check reruns the forward's outputs"),
    ("--probes", "--backward --split-merge --memory",
     "the probes are forward runs of the whole call"),
    ("--flops", "--backward", "the FLOP count is the forward's"),
    ("--n --n-keys --d-k", "--search", "the search draws its own inputs, sized by --max-size"),
    ("--max-heads", "--heads", "--heads fixes the query heads of every input the search draws",
     "--search"),
    ("--spec --flops", "--search", "the search draws its own inputs"),
    ("--search-measure --max-size --max-batch --max-heads", "--search N"),
    ("--n --n-keys --d-k --heads --kv-heads", "--spec", "the spec file fixes the inputs"),
    ("--seed", "--spec", "the spec file fixes the inputs", "!--backward"),   # else it draws dO
)
#: what ``--memory`` (row blocks of random inputs) refuses, after every rule
BLOCKS = ("--memory", "--spec --search --backward --heads --flops --device --backend --score-mod "
          "--mask-mod --lse", "row blocks check one head of random inputs")


def _refuse_misplaced(args) -> None:
    """Refuse options that the chosen inputs would ignore."""
    refuse_rules(args, RULES)
    if args.kv_heads is not None and args.heads is None:
        raise InputError(f"--kv-heads must come with --heads (got --kv-heads "
                         f"{shorten(str(args.kv_heads))} "
                         "alone); without --heads there is one query head")
    if args.heads is not None and args.kv_heads is not None and args.heads % args.kv_heads:
        raise InputError(f"--heads must be a multiple of --kv-heads (got "
                         f"{shorten(str(args.heads))} and {shorten(str(args.kv_heads))})")
    refuse_rules(args, (BLOCKS,))


def _fit(args, policy: Policy, problem, searching: bool):
    """The problem with its mask read under the policy's mask kind; flags that cannot apply refused."""
    if args.alignment is not None and not policy.causal:
        raise InputError(f"--alignment must come with causal attention (got --alignment "
                         f"{args.alignment} without it); add --causal")
    if searching:     # the most query heads drawn, and the key/value heads when fixed
        top = args.heads or args.max_heads or 4
        heads = (top, args.kv_heads or (1 if top > 1 else top))
    else:
        heads = (problem.shape["H_q"], problem.shape["H_kv"])
    if args.gqa is not None and heads[0] == heads[1]:
        fix = ("give the spec's key and value fewer heads than its query" if args.spec else
               "pass --max-heads 2 or more, or --heads 4 --kv-heads 2" if searching else
               "add e.g. --heads 4 --kv-heads 2")
        raise InputError(f"--gqa must come with more query heads than key/value heads (got "
                         f"{heads[0]} and {heads[1]}); {fix}")
    has_mask = not searching and problem.mask is not None
    if args.mask_kind is not None and not has_mask and not searching:
        raise InputError("--mask-kind must come with a spec file that has a mask, or with "
                         "--search (got no mask); it says how that mask is read")
    if has_mask and policy.mask_kind != problem.mask_kind:
        source = (f"--mask-kind {args.mask_kind}" if args.mask_kind is not None
                  else f"--like {args.like}")
        try:
            problem = problem.with_mask_kind(policy.mask_kind)
        except InputError as e:
            raise InputError(f"{source} reads the mask as {policy.mask_kind}, but {e}; add "
                             f"--mask-kind {problem.mask_kind} to read it as the spec "
                             "does") from None
    return None if problem is None else problem.with_policy(policy)


def _inputs(args):
    """``(problem, spec policy, spec dtype)`` from --spec or the random-input options."""
    if args.spec:
        from ..call.spec import load_problem
        problem, policy, dtype, fields = load_problem(args.spec, extras=True)
        args.lse = fields.lse if args.lse is None else args.lse   # --lse, else the spec's
        return problem, policy, dtype
    if args.search:
        return None, None, None
    from ..call import Call
    from ..call.limits import check_work
    n, d_k, heads = args.n or 16, args.d_k or 8, args.heads or 1
    check_work({"B": 1, "H_q": heads, "H_kv": args.kv_heads or heads, "L": n,
                "S": args.n_keys or n, "E": d_k, "E_v": d_k}, "the random inputs", _RANDOM_FIX)
    return Call.random(n, d_k, seed=args.seed or 0, n_keys=args.n_keys, heads=heads,
                       kv_heads=args.kv_heads), None, None


def _run_search(args, impl, policy: Policy, dtypes: list[str]) -> int:
    from ..call.spec import problem_text
    from ..testing.report import report_sections
    from ..verify import search
    from ..call.limits import check_search
    from ..verify.search import HARD_SCORE
    if len(dtypes) != 1:
        raise InputError(f"--dtype must name one dtype with --search (got {','.join(dtypes)})")
    if args.mask_kind is not None and not getattr(impl, "takes_mask", True):
        raise InputError(f"--mask-kind must come with an implementation that takes a mask "
                         f"(got --impl {shorten(args.impl)}, which takes none); the search "
                         "draws masks only for one that does")
    bounds = dict(max_size=args.max_size or 4, max_batch=args.max_batch or 2,   # each from 1
                  max_heads=args.max_heads or 4)
    check_search(args.search, bounds["max_size"], ("--search", "--max-size", "--max-batch",
                 "--max-heads" if args.heads is None else "--heads"),
                 max_batch=bounds["max_batch"], max_heads=args.heads or bounds["max_heads"],
                 masks=getattr(impl, "takes_mask", True))
    options = dict(examples=args.search, seed=args.seed or 0, measure=args.search_measure or "ulps",
                   max_ulps=args.max_ulps, heads=args.heads, kv_heads=args.kv_heads, **bounds)
    if args.backward:       # the same search, scored by the backward check
        from ..verify.backward import search_backward
        from ..testing.report import backward_sections
        res = search_backward(impl, dtypes[0], policy, **options)
        sections = backward_sections([res.report], worst=args.worst, digits=args.digits,
                                     timings=args.timings)
    else:
        res = search(impl, dtypes[0], policy, **options,
                     **({} if args.probes is None else {"probes": args.probes}))
        sections = report_sections([res.report], worst=args.worst, digits=args.digits,
                                   timings=args.timings)
    sys.stdout.write(render(sections, args.format, {"command": "verify", "search": args.search}))
    def label(score):
        ulps = "ULP" if score == 1 else "ULPs"
        return "hard failure" if score >= HARD_SCORE else \
            f"{score:g} {ulps if res.measure == 'ulps' else ulps + ' at the terms'}"
    shrunk = (f"shrinking stopped after {plural(res.shrink_tries, 'try', 'tries')}, the "
              "smallest reproducer yet" if res.stopped else "shrunk reproducer")
    rerun = f"--spec FILE --backward --seed {args.seed or 0}" if args.backward else "--spec FILE"
    sh = res.call.shape
    shape = " ".join(f"{k}={sh[k]}" for k in sh) + \
        ("" if res.call.mask_shape is None else
         f" mask {'x'.join(map(str, res.call.mask_shape))}")
    largest = max(res.score, res.unshrunk_score)
    smallest = "" if res.score >= largest else \
        f"; the smallest failing input has {label(res.score)}"
    probed = [p.probe.label for p in getattr(res.report, "probes", []) if not p.passed]
    if probed:        # a probe fails where the outputs may not: say so beside the score
        fails = f"fails {plural(len(probed), 'probe')} ({', '.join(probed)})"
        smallest += f" on its outputs and {fails}" if smallest else f"; the reproducer {fails}"
    if res.report.passed:   # a large plain count may still be within the tolerance at the terms
        smallest += "; it passes (within the tolerance by one of the two counts)"
    sys.stdout.write(f"\nsearch: {plural(res.examples, 'input')}, largest error "
                     f"{label(largest)}{smallest}; shape {shape} ({shrunk} below; save it and "
                     f"rerun with {rerun})\n")
    sys.stdout.write(problem_text(res.call, dtypes[0]) + "\n")
    return 0 if res.report.passed else 1


def _run_blocks(args) -> int:
    """``verify --memory SIZE``: random float inputs checked in row blocks (issue 15's engine)."""
    from ..blocks import check_impl, random_floats
    from .blocks import write_report
    dtype, *more = args.dtype or ["float32"]
    if more:
        raise InputError(f"--dtype must be one dtype with --memory (got {','.join(args.dtype)}); "
                         "row blocks check one dtype per run")
    report = check_impl(args.impl, *random_floats(args.n or 16, args.d_k or 8, seed=args.seed or 0,
                                                  n_keys=args.n_keys, dtype=dtype),
                        dtype, apply(None, args), memory=args.memory, max_ulps=args.max_ulps,
                        worst=args.worst, accumulation=args.accumulation)
    return write_report(report, "json" if args.format == "json" else "text", args.memory)


def run(args) -> int:
    from ..testing.report import report_sections
    from ..verify import flop_counts, verify
    _refuse_misplaced(args)
    if args.memory is not None:
        return _run_blocks(args)
    impl = _load(args)
    problem, spec_policy, spec_dtype = _inputs(args)
    policy = apply(spec_policy, args)
    from ..verify.check import check_sink        # before any input is drawn or rounded
    check_sink(policy, *(f"--{f}" if getattr(args, f, None) is not None else
                         f"the spec file's policy.{f}" for f in ("sink", "softcap")))
    problem = _fit(args, policy, problem, searching=bool(args.search))
    refuse(args, problem, bool(args.search))
    notes = []
    dtypes = args.dtype or [spec_dtype or "float32"]
    if isinstance(dtypes, tuple):   # --dtype all: every dtype the implementation runs
        skipped = [d for d in dtypes if d not in impl.dtypes]
        dtypes = [d for d in dtypes if d in impl.dtypes]
        if not dtypes:
            raise InputError(f"--dtype all must leave a dtype {impl.name} runs (got none)")
        notes += [f"{d} skipped: {impl.name} does not run it{impl.dtype_hint(d)}"
                  for d in skipped]
    if args.search:
        return _run_search(args, impl, policy, dtypes)
    from ..call.limits import check_work     # every dtype checked: one run each
    check_work(problem.shape, *((f"the problem of {shorten(args.spec)}", "check a smaller "
                                 "problem: fewer tokens, heads or a narrower head") if args.spec
                                else ("the random inputs", _RANDOM_FIX)), runs=len(dtypes))
    if args.invariance:
        return _run_invariance(args, impl, problem, dtypes, notes)
    digits = dict(worst=args.worst, digits=args.digits)
    if args.backward:
        from ..testing.report import backward_sections
        from ..verify.backward import verify_backward
        reports = _each(dtypes, lambda dt: f"{impl.name} backward in {dt}: certifying dQ, dK and "
                        "dV", lambda dt: verify_backward(impl, problem, dt, seed=args.seed or 0,
                                                         max_ulps=args.max_ulps, lse=args.lse))
        return _write(reports, backward_sections(reports, **digits, timings=args.timings,
                                                       notes=notes), {"backward": True})
    if args.split_merge:
        return _run_split(args, impl, problem, dtypes, notes)
    outputs = math.prod(problem.shape[k] for k in ("B", "H_q", "L", "E_v"))
    probes = {} if args.probes is None else {"probes": args.probes}
    reports = _each(dtypes, lambda dt: f"{impl.name} in {dt}: certifying {outputs:,} outputs",
                    lambda dt: verify(impl, problem, dt, max_ulps=args.max_ulps, lse=args.lse,
                                      accumulation=args.accumulation, **probes))
    for rep, dt in zip(reports, dtypes * bool(args.flops)):
        rep.flops = flop_counts(problem, dt)
    return _write(reports, report_sections(reports, **digits, timings=args.timings,
                                                 notes=notes))


def _each(dtypes, label, check) -> list:
    """``check(dtype)`` of each dtype, in order, each under its progress line ``label(dtype)``."""
    from ..present.stream import busy
    reports = []
    for dt in dtypes:
        with busy(label(dt)):
            reports.append(check(dt))
    return reports


def _write(reports, sections, head=None, **more) -> tuple:
    """The sections, the run's meta data (``head`` and ``more`` around the impl) and the exit
    status: 0 when every report passed."""
    passed = all(r.passed for r in reports)
    return sections, {"command": "verify", **(head or {}), "impl": reports[0].impl, **more,
                      "policy": reports[0].policy.as_dict(), "passed": passed}, int(not passed)


def _load(args):
    """The implementation under test (its backward with --backward), with --arrays, --device,
    --backend, --score-mod and --mask-mod (:func:`~exactattn.verify.impls.load_from_flags`)."""
    from ..verify.impls import load_from_flags
    opts = {k: getattr(args, k) for k in ("device", "backend", "score_mod", "mask_mod")
            if getattr(args, k) is not None}
    impl = load_from_flags(args.impl, arrays=args.arrays, merge=args.merge, **opts)
    if args.backward:
        from ..verify.backward_impls import load_backward
        return load_backward(impl if opts or args.impl in ("flex", "flash-attn") else args.impl,
                             arrays=args.arrays or "numpy")
    return impl


def _run_split(args, impl, problem, dtypes, notes) -> int:
    """``verify --split-merge``: each key block's (output, lse) and their merge, row by row."""
    from ..testing.report import split_sections
    from ..verify.split import cut_lengths, load_merge, verify_split
    if args.lse == "2":     # the spec's (--lse is refused with --split-merge)
        raise InputError("the spec file's policy.lse must be e for --split-merge (got 2); the "
                         "blocks' log-sum-exps are in natural-log units")
    S = problem.shape["S"]
    try:       # the library's refusals, named as flags
        lengths = cut_lengths(args.splits if args.splits is not None else [S // 2], S)
        merge = None if args.merge is None else load_merge(args.merge, arrays=args.arrays or
                                                           "numpy")
    except InputError as e:
        raise InputError(f"--{e}") from None
    reports = _each(dtypes, lambda dt: f"{impl.name} in {dt}: {len(lengths)} key blocks, merged "
                    "and certified", lambda dt: verify_split(impl, problem, dt, lengths,
                                                             merge=merge, max_ulps=args.max_ulps))
    return _write(reports, split_sections(reports, worst=args.worst, digits=args.digits,
                                                notes=notes), {"split_merge": True},
                  merge=reports[0].merge, blocks=lengths)


def _run_invariance(args, impl, problem, dtypes, notes) -> int:
    """``verify --invariance``: the call's rows rerun in other batches, paddings and KV splits."""
    from ..verify.invariance import check_invariance
    reports = _each(dtypes, lambda dt: f"{impl.name} in {dt}: the rows rerun", lambda dt:
                    check_invariance(impl, problem, dt, args.invariance, seed=args.seed or 0,
                                     max_ulps=args.max_ulps, accumulation=args.accumulation))

    def row(r):
        if r.got is None:
            return [r.label, "-", "-", "-", f"cannot be asked: {r.why}"]
        return [r.label, "identical" if r.same else "differs", "NaN" if r.ulps is None else
                str(r.ulps), str(r.report.summary()["max_ulps"]),
                "within" if r.report.passed else "past"]
    sections = [Section(f"invariance/{rep.dtype}", f"{rep.impl} in {rep.dtype}: the call's rows "
                        "rerun", ["run", "bitwise", "ULPs from the first run", "max ULPs from "
                                  "exact", "tolerance"], [row(r) for r in rep.runs],
                        notes + [rep.verdict()], {"verdict": rep.verdict()}) for rep in reports]
    passed = all(rep.passed for rep in reports)
    return sections, {"command": "verify", "impl": impl.name,
                      "invariance": list(args.invariance), "passed": passed}, int(not passed)
