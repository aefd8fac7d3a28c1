"""The FLOP-counter audit: each installed counter run on the audit's calls, each figure
judged, and the tables in words.

:func:`audit_counters` derives every call of :mod:`~exactattn.cost.audit_calls`
(:func:`~exactattn.cost.audit.ledger`), runs each counter on it
(:mod:`~exactattn.audit.counters`, each in its own interpreter) and judges each
figure (:func:`~exactattn.cost.audit.verdict`).  :func:`audit_sections` turns
that into one :class:`~exactattn.present.render.Section` (``cost/audit``): the
call, the torch kernel that ran it, the derived MACs / FLOPs of each stage, the
operations of a float softmax (counted separately), and each counter's figure
with its verdict.  :func:`judge_sections` is the ``cost/judge`` table of one
reported figure (:func:`~exactattn.cost.judge.judge_figure`).

>>> from exactattn.cost.audit import Verdict
>>> verdict_text(Verdict(1920, 1632, ("full_square",)))
'1920: full square'
>>> verdict_text(Verdict(80, 240, ("batch_factor",), factor=Fraction(1, 3)))
'80: batch x1/3'
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..cost.audit import ERRORS, PASSES, Verdict, ledger, verdict
from ..cost.audit_calls import AUDIT_CALLS, call
from ..errors import InputError
from ..numbers.digits import round_fraction
from ..present.render import Section
from .counters import COUNTERS, counter, measure_all, versions


@dataclass(frozen=True)
class CounterAudit:
    """Everything the audit table shows.

    ``ledgers``: one :class:`~exactattn.cost.audit.Ledger` per call; ``counters``:
    the counter keys run; ``cells``: ``{(call, counter, unit): Verdict}``;
    ``kernels``: ``{call: torch kernel}``; ``versions``: installed versions (None:
    not installed); ``details``: ``{(call, counter): (skipped op, ...)}``.
    """

    ledgers: list
    counters: list
    cells: dict
    kernels: dict
    versions: dict
    details: dict


def audit_counters(counters=None, calls=None, jobs: int = 2) -> CounterAudit:
    """Derive every call, run each installed counter on it, and judge each figure.

    Args:
        counters: counter keys (:data:`~exactattn.audit.counters.COUNTERS`;
            default all; an empty list runs none: the derived side only).
        calls: call keys (default all of :data:`~exactattn.cost.audit_calls.AUDIT_CALLS`).
        jobs: counters run at once, each in its own interpreter.

    Raises:
        InputError: an unknown counter or call.
    """
    chosen = [c.key for c in COUNTERS] if counters is None else [counter(k).key for k in counters]
    picked = list(AUDIT_CALLS) if calls is None else [call(k) for k in calls]
    if not picked:
        raise InputError("calls must name at least one call (got none)")
    ledgers = [ledger(c) for c in picked]
    measured = measure_all(chosen, [c.key for c in picked], jobs) if chosen else {}
    cells, details = {}, {}
    for L in ledgers:
        for key in chosen:
            m = measured[(key, L.call.key)]
            if m.details:
                details[(L.call.key, key)] = m.details
            for unit, per_mac in counter(key).readings:
                figure = None if m.figures is None else m.figures.get(unit)
                cells[(L.call.key, key, unit)] = verdict(L, figure, per_mac, m.error)
    kernels = {k: m.figures["kernel"] for (c, k), m in measured.items()
               if c == "kernel" and m.figures}
    return CounterAudit(ledgers, chosen, cells, kernels, versions(), details)


#: each finding: (short text for a cell, what it means)
FINDINGS = {
    "matches": ("matches", "the derived count, exactly"),
    "full_square": ("full square", "counts all L x S query-key pairs where the causal rule or "
                    "the mask leaves fewer (what a dense kernel computes; the mask's "
                    "saving is lost)"),
    "omits_attention": ("omits attention", "leaves out the scores and the mix (an SDPA "
                        "kernel without a formula, or products it does not patch)"),
    "omits_linear": ("omits projections", "leaves out the projections and W_O"),
    "batch_factor": ("batch x{factor}", "scores and mix counted at the query's batch, not "
                     "the broadcast batch (a formula that reads the first operand's shape; "
                     "k = query batch / broadcast batch)"),
    "batch_factor_scores": ("scores batch x{factor}", "the scores product counted at the "
                            "query's batch (a matmul formula that reads the first operand; "
                            "k = query batch / broadcast batch)"),
    "attention_twice": ("attention twice", "scores, softmax and mix counted twice (a module "
                        "hook and the torch calls inside the module)"),
    "causal_half": ("n^2/2", "half the full L x S square under the causal rule (n^2/2, not "
                    "the n(n+1)/2 pairs a causal square keeps)"),
    "scores_only": ("scores only", "counts the scores product Q K^T alone, not the mix"),
    "mix_only": ("mix only", "counts the mix product P V alone, not the scores"),
    "one_product": ("one product", "counts one of the two products alone (the scores or the "
                    "mix: at E = E_v the figure cannot tell which)"),
    "layout_swap": ("layout swap", "reads operands laid out (B, S, H, D), as flash-attn and "
                    "xformers take them, as (B, H, S, D): the heads and the sequence trade "
                    "places"),
    "image_layout": ("(B, C, H, W) read", "reads each 4-d operand (B, H, L, E) as an image "
                     "block (B, C, H, W), as a vision block's formula does: the heads as "
                     "channels, a head's L x E entries as pixels, attention over the pixels"),
    "kv_heads": ("at KV heads x{factor}", "counts the H_kv key/value heads where every one "
                 "of the H_q query heads scores and mixes (GQA shares keys, not work)"),
    "macs_as_flops": ("MACs as FLOPs", "reports the multiply-adds as FLOPs (1 per "
                      "multiply-add, not 2)"),
    "no_recompute": ("no recompute", "a backward without the recomputation of the scores "
                     "that a fused kernel runs (backward = 2 x forward)"),
    "recompute": ("recompute", "a backward with a recomputation of the scores that the math "
                  "path does not run (it keeps P from the forward)"),
    "softmax": ("+softmax", "adds one operation per score for the softmax"),
    "bias": ("+bias", "adds the bias additions (one per output of each projection)"),
    "bias_once": ("+bias once", "adds each bias once per layer, not once per token"),
    "scale": ("+scaling", "adds the multiplications by the scale"),
    "mask": ("+mask", "adds one addition per score for the additive mask"),
    "unexplained": ("unexplained", "no departure tried gives this figure"),
    "fails": ("fails", "the counter raised an error on this call"),
    "not_installed": ("not installed", "the counter, or what the call needs (e.g. "
                                       "transformers), does not install or import here"),
}


def _factor(q: Fraction | None) -> str:
    return "?" if q is None else str(q)       # Fraction's own text: 3, 1/3


def verdict_text(v: Verdict) -> str:
    """A cell: ``figure: finding, finding`` (``counts nothing`` when a layer gets 0)."""
    findings = list(v.findings)
    if {"omits_attention", "omits_linear"} <= set(findings):
        findings = ["counts nothing"] + [f for f in findings
                                         if f not in ("omits_attention", "omits_linear")]
    words = []
    for f in findings:
        short = FINDINGS[f][0] if f in FINDINGS else f
        if f == "unexplained" and v.expected:
            short += f" (x{round_fraction(Fraction(v.figure, v.expected), 2)})"
        words.append(short.format(factor=_factor(v.factor)))
    if v.figure is None:
        return ", ".join(words)
    figure = v.figure if isinstance(v.figure, int) else round(v.figure, 2)
    return f"{figure}: {', '.join(words)}"


def _stage(macs: dict, stage: str) -> str:
    if stage not in macs:
        return "-"
    return f"{macs[stage]} / {2 * macs[stage]}"


def _versions(a: CounterAudit) -> list[str]:
    parts, missing = [], []
    for key in a.counters:
        c = counter(key)
        version = a.versions.get(c.distribution)
        if all(v.findings == ("not_installed",) for (_, k, _), v in a.cells.items() if k == key):
            missing.append(c.name)
        else:
            parts.append(f"{c.name} {version} ({c.convention})")
    lines = ["counters run: " + ("; ".join(parts) if parts else "none")]
    if missing:
        lines.append("not installed (or not importable): " + ", ".join(missing))
    lines.append(f"torch {a.versions.get('torch')}, transformers "
                 f"{a.versions.get('transformers')} (BERT and GPT-2 built from small configs, "
                 "nothing downloaded)")
    return lines


def _notes(a: CounterAudit) -> list[str]:
    notes = ["projections, scores, mix, W_O, total: derived MACs / FLOPs (FLOPs = 2 x MACs), "
             "from the loops over the visible pairs; each counter's cell is its figure in its "
             "own unit and a verdict; torch kernel: the aten op that ran the attention "
             "(flash_attention_for_cpu is aten::_scaled_dot_product_flash_attention_for_cpu)",
             "softmax: what a float softmax over the visible keys takes (k exponentials, "
             "k - 1 additions, k divisions for a row of k keys), never folded into the MACs",
             "derived = counted by running every call: "
             + ("true" if all(L.same for L in a.ledgers) else "FALSE: " + ", ".join(
                 L.call.key for L in a.ledgers if not L.same))]
    notes += _versions(a)
    used = {f for v in a.cells.values() for f in v.findings}
    for f, (short, meaning) in FINDINGS.items():
        if f in used:
            kind = "error" if f in ERRORS else "convention" if f not in (
                "matches", "not_installed") else ""
            short = short.format(factor="k")
            notes.append(f"{short}: {meaning}" + (f" ({kind})" if kind else ""))
    for (call, key, unit), v in a.cells.items():
        if v.findings == ("fails",):
            notes.append(f"{counter(key).name} on {call} ({unit}) fails: {v.error}")
        if v.alternatives:
            notes.append(f"{counter(key).name} on {call} ({unit}): also fits "
                         + "; ".join(", ".join(alt) for alt in v.alternatives))
    skipped: dict = {}
    for (call, key), ops in a.details.items():
        skipped.setdefault((key, ops), []).append(call)
    for (key, ops), calls in skipped.items():
        notes.append(f"{counter(key).name} skipped {', '.join(ops)} on {', '.join(calls)}")
    notes.append("calls:")
    notes += [f"  {L.call.key}: {L.call.title}; {L.call.code}" for L in a.ledgers]
    return notes


def _columns(a: CounterAudit) -> list[tuple[str, str, str]]:
    return [(key, unit, f"{key} {unit}") for key in a.counters
            for unit, _ in counter(key).readings]


def _kernel(name: str | None) -> str:
    return "-" if not name else name.removeprefix("_scaled_dot_product_")


def _section(a: CounterAudit) -> Section:
    stages = ("projections", "scores", "mix", "out_projection")
    cols = _columns(a)
    kernels = bool(a.kernels)   # measured when a counter ran
    header = ["call"] + (["torch kernel"] if kernels else []) + \
        ["projections", "scores", "mix", "W_O", "total", "softmax (float)"] + [c[2] for c in cols]
    rows, data = [], []
    for L in a.ledgers:
        key = L.call.key
        ops = L.softmax_ops
        judged = {label: a.cells[(key, k, u)] for k, u, label in cols}
        rows.append([key] + ([_kernel(a.kernels.get(key))] if kernels else []) +
                    [_stage(L.macs, s) for s in stages + ("total",)] +
                    [f"exp {ops['exp']}, add {ops['add']}, div {ops['div']}"] +
                    [verdict_text(v) for v in judged.values()])
        data.append({
            "call": key, "title": L.call.title, "code": L.call.code,
            "kernel": a.kernels.get(key), "derived_macs": dict(L.macs),
            "counted_macs": dict(L.counted), "dense_macs": dict(L.dense),
            "softmax_ops": dict(ops),
            "counters": {label: {"figure": v.figure, "expected": v.expected,
                                 "findings": list(v.findings), "error": v.error}
                         for label, v in judged.items()}})
    title = "FLOP counters audited: each counter's figure against the derived count"
    return Section("cost/audit", title, header, rows, _notes(a),
                   {"calls": data, "versions": dict(a.versions), "counters": list(a.counters),
                    "same": all(L.same for L in a.ledgers)})


def audit_sections(counters=None, calls=None, jobs: int = 2) -> list:
    """The ``cost/audit`` table: every call derived, each installed counter's figure judged.

    Args and errors as :func:`audit_counters` (``counters=[]``:
    the derived side only).
    """
    return [_section(audit_counters(counters, calls, jobs))]


def judge_sections(figure: int, call: str, shape: tuple, **options) -> tuple[list, bool]:
    """The ``cost/judge`` table and whether the figure is right (see
    :func:`~exactattn.cost.judge.judge_figure`)."""
    from ..cost.judge import formula, judge_figure
    v = judge_figure(figure, call, shape, **options)
    L_, s = v.ledger, v.ledger.call.shape
    unit = "FLOPs" if v.per_mac == 2 else "MACs"
    causal = s.policy.causal
    P, full = s.pairs(), s.queries * s.keys
    rows, data = [], []
    passes = ["forward"] + ([v.pass_, "backward_autograd" if v.pass_ == "backward"
                             else "backward"] if v.pass_ != "forward" else [])
    names = {"forward": "forward", "backward": "backward, scores recomputed (fused kernels)",
             "backward_autograd": "backward, P kept (math autograd, 2 x forward)"}
    ways = [("exact", "exactattn: the visible pairs", P)]
    if causal:
        ways += [("full_square", "full L x S square (torch's formula, PaLM, Megatron)", full),
                 ("causal_half", "L x S / 2 for causal (Kaplan et al., FlashAttention)",
                  Fraction(full, 2))]
    B, H = s.batch_size, s.heads
    for p in passes:
        ws, wm = PASSES[p]
        for key, who, pairs in ways:
            macs = B * H * pairs * (ws * s.d_k + wm * s.d_v)
            judged = p == (v.pass_ if options.get("backward") else "forward") and key == "exact"
            rows.append([names[p], who, str(pairs), str(macs), str(2 * macs),
                         "judged against" if judged else ""])
            data.append({"pass": p, "convention": key, "pairs_per_head": str(pairs),
                         "macs": str(macs), "flops": str(2 * macs), "judged": judged})
    sz = s.shape
    notes = [f"call: {call}: {L_.call.code}",
             f"shape: B {sz['B']}, H {sz['H_q']}, H_kv {sz['H_kv']}, L {sz['L']}, S {sz['S']}, "
             f"E {sz['E']}, E_v {sz['E_v']}" + (f"; causal ({s.policy.alignment}), P = {P} "
                                                "visible pairs a head" if causal else ""),
             f"reported: {figure} {unit} ({'backward' if options.get('backward') else 'forward'})"]
    explained = []
    if v.right:
        notes.append(f"verdict: right: {figure} is the exact count")
    elif v.findings == ("unexplained",):
        notes.append(f"verdict: wrong: {figure} is not {v.expected}, and no departure tried "
                     f"gives it (unexplained, x{float(Fraction(figure, v.expected)):.4g})")
    else:
        words = ", ".join(FINDINGS[f][0].format(factor=_factor(v.factor)) for f in v.findings)
        notes.append(f"verdict: wrong: {figure} is not {v.expected} (right: {v.expected}); "
                     f"{words}, {'an error' if v.is_error else 'a convention'}")
        for f in (v.findings, *v.alternatives):
            text, numbers, value = formula(v, f)
            if value != figure:   # the formula must reproduce the figure exactly
                raise AssertionError(f"formula {numbers} = {value}, not {figure}")
            meaning = "; ".join(FINDINGS[x][1] for x in f)
            head = "explanation" if f is v.findings else "also fits"
            notes.append(f"{head}: {text} = {numbers} = {figure} ({meaning})")
            explained.append({"findings": list(f), "formula": text, "numbers": numbers})
    if L_.counted is not None:
        notes.append("derived = counted by running the call: "
                     + ("true" if L_.same else "FALSE"))
    doc = {"call": call, "code": L_.call.code, "shape": sz, "causal": causal,
           "pass": v.pass_, "figure": figure, "expected": v.expected,
           "right": v.right, "findings": list(v.findings),
           "alternatives": [list(a) for a in v.alternatives], "explanations": explained,
           "conventions": data}
    title = f"{figure} {unit} judged for {call} on {sz['B']}x{sz['H_q']}x{sz['L']}x{sz['E']}"
    section = Section("cost/judge", title, ["pass", "convention", "pairs a head", "MACs",
                                             "FLOPs", ""], rows, notes, doc)
    return [section], v.right
