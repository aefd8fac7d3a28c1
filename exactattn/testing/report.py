"""The tables of a verify run: the worst outputs, a summary per dtype, the cost of the call.

Presentation only: every number printed here was computed by
:func:`~exactattn.verify.check.verify` (or is a certified decimal of an exact
value).  Reruns print the same bytes: wall-clock timings appear only when
asked for (``timings=True``).
"""

from __future__ import annotations

import itertools
from typing import Sequence

from ..present.render import Section, number_cell, plural
from ..verify.check import Report
from ..verify.compare import Comparison, failures_first, worst_first
from ..numbers.formats import certified_scientific, float_format, shortest_repr

__all__ = ["report_sections"]


def _got(r: Report, e) -> str:
    return "raised" if r.raised is not None else shortest_repr(e.got, r.dtype)


def _entry_cells(r: Report, e, digits: int) -> list[str]:
    """An entry's cells from its exact value on: exact, exact in the dtype, got, the counts."""
    return [certified_scientific(e.exact, digits), shortest_repr(e.rounded, r.dtype), _got(r, e),
            number_cell(e.ulps, "d"), number_cell(e.terms_ulps, ".2f"), number_cell(e.rel),
            _status(r, e)] + ([number_cell(e.tolerance, "d")] if _per_entry(r) else [])


def _per_entry(r) -> bool:
    """True when the report's outputs have tolerances of their own (a proved bound)."""
    return getattr(r, "bound", None) is not None


def _status(r: Report, e) -> str:
    """``ok``, ``ok at terms`` (past the tolerance in ULPs, within it at the size of the
    terms: cancellation), ``over`` or ``hard``."""
    if e.status == "ok" and e.ulps is not None and r.max_ulps is not None and \
            e.ulps > r.max_ulps and not _per_entry(r):
        return "ok at terms"
    return e.status


def _value_columns(r: Report) -> list[str]:
    return ["exact (certified)", f"exact in {r.dtype}", r.impl.split(" ")[0], "ULPs",
            "at terms", "rel. error", "status"] + (["allowed"] if _per_entry(r) else [])


def _problem_notes(r: Report, of_total: bool = True) -> list[str]:
    """The problem's shape and policy, and how many inputs moved when rounded (of all)."""
    sh = r.call.shape
    total = sum(getattr(r.call, n).size for n in ("query", "key", "value"))
    return [f"problem: {r.call.name}; B={sh['B']} H_q={sh['H_q']} H_kv={sh['H_kv']} "
            f"L={sh['L']} S={sh['S']} E={sh['E']} E_v={sh['E_v']}; inputs rounded to "
            f"{r.dtype}: {r.moved_inputs}" + (f" of {total}" if of_total else ""),
            f"policy: {r.policy.describe()}"]


def _tolerance_note(r: Report, length: str) -> str:
    if _per_entry(r):
        return (f"tolerance: {r.bound}; NaN/inf where the exact value is finite is a hard "
                "failure")
    cap = ", the last tripled under a soft-cap" if r.policy.softcap is not None else ""
    return (f"tolerance: {plural(r.max_ulps, 'ULP')} by either count (2*ceil(sqrt({length} + "
            f"d_k)) + 4 + ceil(max |scaled score|){cap} unless set): 'ok at terms' is past it in "
            "ULPs and within it at terms; NaN/inf where the exact value is finite is a hard failure")


def _worst_section(r: Report, worst: int, digits: int, backward: bool = False) -> Section:
    """The worst outputs of a report against the exact answer, or of a backward report
    (failures first, its rank) the worst gradient entries against the exact gradients."""
    rows = [[*([e.index[0]] if backward else []), ",".join(map(str, e.index[backward:])),
             *_entry_cells(r, e, digits)] for e in r.found.top(worst)]
    notes = [
        *_problem_notes(r, of_total=not backward),
        *([] if backward else _modifier_notes(r)),
        "exact: " + ("dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO with dS = P (dO V^T - "
                     "D), D_i = dO_i . O_i, " if backward else "") +
        f"certified to {digits} significant digits; 'exact in {r.dtype}' is the exact value "
        f"correctly rounded to {r.dtype}" + ("" if backward else " (arb enclosures, "
                                             "round-to-nearest-even, subnormals, overflow to inf)"),
        f"ULPs: {r.dtype} floats between the implementation's value and 'exact in {r.dtype}'; "
        "at terms: |error| in ULPs at " + ("the size of the terms the entry adds up (dQ and dK "
                                           "cancel: every row of dS sums to 0)" if backward else
                                           "sum_j shares |values| (cancellation)"),
        _tolerance_note(r, "max(L, S)" if backward else "S"),
    ] + r.notes
    what = ("worst gradient entry", "worst gradient entries") if backward else ("worst output",)
    return Section(
        f"verify-{'backward-' * backward}{r.dtype}", f"{r.impl} in {r.dtype}: the "
        f"{plural(min(worst, len(r.entries)), *what)} against the exact "
        f"{'gradients' if backward else 'answer'}",
        (["gradient", "b,h,i,c"] if backward else ["output b,h,i,c"]) + _value_columns(r), rows,
        notes, data={"summary": r.summary()})


def _probe_section(r: Report, worst: int, digits: int) -> Section:
    """One row per probe (derived values run through the implementation), then the worst
    probe outputs when a probe failed."""
    rows = []
    for run in r.probes:
        s = run.found.summary()
        rows.append([run.probe.label, str(s["count"]), number_cell(s["max_ulps"], "d"),
                     number_cell(s["median_ulps"], "d"), number_cell(s["max_rel"]),
                     str(s["over"]), str(s["hard"]), "PASS" if run.passed else "FAIL"])
    notes = [f"{name}: {what}" for name, what in dict((run.probe.name, run.probe.what)
                                                        for run in r.probes).items()]
    notes.append(f"every term of a probe's output is non-negative, so it passes on the plain "
                 f"ULP count alone (within {plural(r.max_ulps, 'ULP')}"
                 + ("" if r.bound is None else ", or the proved error of a correct kernel on "
                    "the probe's values where that is larger") +
                 "): no cancellation can make up for a wrong normaliser")
    if any(run.probe.name == "identity" for run in r.probes):
        notes.append("identity outputs are shares: each is allowed 2 more ULPs per unit of "
                     "ln(1 / share), which bounds its gap to the row's largest share (a small "
                     "share's float error grows with its gap), and under a soft-cap 8 more per unit of the "
                     "largest capped logit (a float tanh's error, times the cap)")
    raised = [f"hard failure on the {run.probe.label} probe: {r.impl} raised {run.raised}"
              for run in r.probes if run.raised is not None]
    bad = sorted(((run.probe.label, e) for run in r.probes if not run.passed
                  for e in run.found.failures), key=lambda p: worst_first(p[1]))[:worst]
    if bad:
        notes.append("the worst probe outputs:")
        for label, e in bad:
            cells = _entry_cells(r, e, digits)
            notes.append(f"  {label}, output {','.join(map(str, e.index))}: exact "
                         f"{cells[0]}, exact in {r.dtype} {cells[1]}, got {cells[2]}, "
                         f"{cells[3]} ULPs, {e.status}")
    return Section(f"verify-probes-{r.dtype}", f"{r.impl} in {r.dtype}: probes (derived values)",
                   ["probe", "outputs", "max ULPs", "median ULPs", "max rel. error",
                    "over tolerance", "hard failures", "result"], rows, notes + raised,
                   data={"probes": {run.probe.label: {**run.found.summary(),
                                                      "passed": run.passed}
                                    for run in r.probes}})


def _modifier_notes(r: Report) -> list[str]:
    """One line per modifier: the kind of value it gives (and what dropout does to the rows)."""
    notes = [f"{name}: {kind} ({why})" for name, kind, why in r.reference.value_kinds()]
    if r.policy.sink is not None:
        notes.append("sink: counted once in every row's normaliser; the keys' shares sum to "
                     "less than 1")
    return notes


def _lse_section(r: Report, worst: int, digits: int) -> Section:
    """The rows whose log-sum-exp is furthest from the exact one."""
    rows = [[",".join(map(str, e.index)), _exact_text(e, digits), shortest_repr(e.rounded, r.dtype),
             _got(r, e), number_cell(e.ulps, "d"), number_cell(e.rel), e.status]
            for e in r.lse_found.worst[:worst]]
    unit = "natural log" if r.lse == "e" else "base 2 (log2)"
    s = {"base": r.lse, **{k: v for k, v in r.lse_found.summary().items()
                           if k in ("count", "max_ulps", "over", "hard")}}
    notes = [f"log-sum-exp of each row in {unit}, the sink included: certified transcendental "
             "(exact when the row has one key); -inf for a row with no key must be -inf",
             f"rows: {s['count']}; max ULPs {number_cell(s['max_ulps'], 'd')}; over tolerance "
             f"{s['over']}; hard failures {s['hard']}"]
    return Section(f"verify-lse-{r.dtype}", f"{r.impl} in {r.dtype}: log-sum-exp per row",
                   ["row b,h,i", "exact (certified)", f"exact in {r.dtype}",
                    r.impl.split(" ")[0], "ULPs", "rel. error", "status"], rows, notes,
                   data={"summary": s})


def _summary(name: str, title: str, columns: list[str], reports: Sequence[Report], rows_of,
             timings: bool, notes: Sequence[str]) -> Section:
    """A summary table: ``rows_of(report)`` gives each report's rows (timed when asked)."""
    rows = [row + ([f"{r.seconds['impl']:.2f}/{r.seconds['exact']:.2f}/"
                    f"{r.seconds.get('compare', 0.0):.2f}"] if timings else [])
            for r in reports for row in rows_of(r)]
    verdict = "PASS" if all(r.passed for r in reports) else "FAIL"
    return Section(name, title, columns + ["seconds impl/exact/judge"] * timings, rows,
                   [*notes, f"result: {verdict}"])   # last: | tail -1


def _counts(s: dict, mean: bool = True) -> list[str]:
    """A summary's cells: entries, max (mean) and median ULPs, at terms, rel., over, hard."""
    return [str(s["count"]), number_cell(s["max_ulps"], "d"),
            *([number_cell(s["mean_ulps"], ".2f")] if mean else []),
            number_cell(s["median_ulps"], "d"), number_cell(s["max_terms_ulps"], ".2f"),
            number_cell(s["max_rel"]), str(s["over"]), str(s["hard"])]


def _summary_section(reports: Sequence[Report], timings: bool, notes: Sequence[str]) -> Section:
    columns = ["dtype", "outputs", "max ULPs", "mean ULPs", "median ULPs", "max at terms",
               "max rel. error", "over tolerance", "hard failures"]
    probes = any(r.probes for r in reports)       # a probes column when any report has them
    lse = any(r.lse is not None for r in reports)     # an lse column when the rows' lse is checked
    return _summary("verify-summary", "Summary per dtype", columns + ["probes"] * probes +
                    ["lse rows"] * lse, reports, lambda r: [[
                        r.dtype, *_counts(r.summary()), *[_passed_cell(len(r.probes), sum(
                            not p.passed for p in r.probes))] * probes,
                        *[_passed_cell(r.lse_found.count, r.lse_found.over + r.lse_found.hard)]
                        * lse]], timings, notes)


def _passed_cell(total: int, failed: int) -> str:
    """``6 pass``, ``2 of 6 fail`` or ``none``: a report's probes, or its rows' log-sum-exps."""
    return "none" if not total else f"{total} pass" if not failed else f"{failed} of {total} fail"


def _cost_section(reports: Sequence[Report]) -> Section:
    r = reports[0]
    macs = r.reference.macs
    rows = [["exactattn (visible pairs, counted)", f"{macs['scores']}", f"{macs['mix']}",
             f"{macs['scores'] + macs['mix']}", f"{2 * (macs['scores'] + macs['mix'])}"]]
    notes = [f"visible pairs: {r.reference.pairs}; MACs = pairs x E (scores) + pairs x E_v "
             "(mix); FLOPs = 2 per MAC"]
    sh = r.call.shape
    derived = r.derived_macs()
    if derived is not None:
        rows.append(["exactattn.cost.derive_at (from the loop bounds)", str(derived[0]),
                     str(derived[1]), str(sum(derived)), str(2 * sum(derived))])
    rect = 2 * sh["B"] * sh["H_q"] * sh["L"] * sh["S"] * (sh["E"] + sh["E_v"])
    counted = next((rr for rr in reports if rr.flops), None)
    if counted is not None:
        for label, fl in counted.flops.items():
            rows.append([f"FlopCounterMode, {label} path ({counted.dtype})", "-", "-", "-",
                         str(fl)])
            if fl == 0:
                notes.append(f"FlopCounterMode counted 0 FLOPs on the {label} path: the kernel "
                             "that ran has no registered FLOP formula")
            elif fl == rect:
                notes.append(f"FlopCounterMode's {label} path counts the full L x S rectangle "
                             f"({plural(rect, 'FLOP')}): no causal or mask discount; exactattn "
                             f"counts {plural(r.reference.pairs, 'visible pair')} of "
                             f"{sh['B'] * sh['H_q'] * sh['L'] * sh['S']}")
            else:
                notes.append(f"FlopCounterMode's {label} path counts {plural(fl, 'FLOP')}; the "
                             f"full rectangle is {rect}")
    return Section("verify-cost", "Cost of the call",
                   ["count", "scores MACs", "mix MACs", "MACs", "FLOPs"], rows, notes)


def report_sections(reports: Sequence[Report], *, worst: int = 5, digits: int = 12,
                    timings: bool = False, notes: Sequence[str] = ()) -> list:
    """The tables of one or more reports: the worst outputs of each, the cost, a summary per
    dtype ending on the ``result:`` line (the last line of the text).

    Exact values are printed with ``digits`` significant digits (1 to 50),
    certified (correctly rounded); "exact in <dtype>" is the correctly
    rounded float the ULPs are counted from.  ``timings`` adds the wall-clock
    seconds of the implementation and of the exact side (they differ from
    run to run); ``notes`` are added under the summary.
    """
    sections = [_worst_section(r, worst, digits) for r in reports]
    sections += [_lse_section(r, worst, digits) for r in reports if r.lse is not None]
    sections += [_probe_section(r, worst, digits) for r in reports if r.probes]
    sections.append(_cost_section(reports))
    sections.append(_summary_section(reports, timings, notes))
    return sections


# --------------------------------------------------------------------------- backward
def _parts(pairs) -> dict:
    """``(key, entry)`` pairs counted by key, one :class:`Comparison` each, in order met."""
    parts: dict = {}
    for key, e in pairs:
        parts.setdefault(key, Comparison(0)).add(e)
    return parts


def _gradient_rows(r: Report) -> list[list[str]]:
    """One summary row per gradient (dQ, dK, dV) of a backward report."""
    return [[r.dtype, name, *_counts(part.summary(), mean=False)]
            for name, part in _parts((e.index[0], e) for e in r.entries).items()]


def backward_sections(reports: Sequence[Report], *, worst: int = 5, digits: int = 12,
                      timings: bool = False, notes: Sequence[str] = ()) -> list:
    """The tables of backward reports (:func:`~exactattn.verify.backward.verify_backward`):
    the worst gradient entries of each dtype (failures first), a summary per dtype and gradient.
    """
    columns = ["dtype", "gradient", "entries", "max ULPs", "median ULPs", "max at terms",
               "max rel. error", "over tolerance", "hard failures"]
    return [*(_worst_section(r, worst, digits, backward=True) for r in reports),
            _summary("verify-backward-summary", "Summary per dtype and gradient", columns,
                     reports, _gradient_rows, timings, notes)]


# --------------------------------------------------------------------------- failures only
def failure_digits(dtype: str) -> int:
    """Significant digits that show an exact value past its ``dtype`` rounding: the dtype's
    decimal precision ``ceil(p log10 2)`` plus 3 (float16 7, bfloat16 6, float32 11, float64 19).

    >>> [failure_digits(d) for d in ("float16", "bfloat16", "float32", "float64")]
    [7, 6, 11, 19]
    """
    p = float_format(dtype).precision
    return -(-p * 30103 // 100000) + 3


def _failure_index(r: Report, e) -> str:
    """An entry's index in the caller's rank: ``[i, c]`` for an L x E_v output, ``dV[j, c]``
    for a gradient entry."""
    grad = e.index[0] if isinstance(e.index[0], str) else ""
    idx = e.index[1:] if grad else e.index
    return f"{grad}[{', '.join(map(str, idx[len(idx) - r.call.rank:]))}]"


def failure_summary(r: Report, what: str = "outputs") -> str:
    """One line: how many of the report's entries are outside the tolerance, and the rule.

    ``<impl>: k of N <what> outside the tolerance in <dtype> (T ULPs by either count: ...)``.
    """
    hard = f", {r.found.hard} of them NaN/inf or raised" if r.found.hard else ""
    head = (f"{r.impl}: {r.found.over + r.found.hard} of {r.found.count} {what} outside the "
            f"tolerance in {r.dtype}{hard} (tolerance ")
    if _per_entry(r):
        rows = f"; and {len(r.rows_past)} rows past the row rule (the notes)" if getattr(
            r, "rows_past", None) else ""
        return f"{head}{r.bound}; NaN or inf where the exact value is finite fails outright){rows}"
    return (f"{head}{plural(r.max_ulps, 'ULP')} by either count: {r.dtype} floats from the exact "
            f"value correctly rounded to {r.dtype}, or |error| in ULPs at the size of the terms; "
            "NaN or inf where the exact value is finite fails outright)")


def failure_section(r: Report, worst: int = 5, digits: int | None = None) -> Section:
    """The ``worst`` entries outside the tolerance (hard failures first, then the largest
    errors at the terms), each with its exact value certified to ``digits`` significant
    digits (default :func:`failure_digits`), the exact value correctly rounded to the
    dtype, the value got and the errors; the index in the caller's rank."""
    digits = failure_digits(r.dtype) if digits is None else digits
    bad = sorted(r.found.failures, key=failures_first)[:worst]
    rows = [[_failure_index(r, e), *_entry_cells(r, e, digits)] for e in bad]
    length = "max(L, S)" if bad and isinstance(bad[0].index[0], str) else "S"
    notes = [f"policy: {r.policy.describe()}", _tolerance_note(r, length)] + r.notes
    title = f"the {plural(len(rows), 'worst entry', 'worst entries')} outside the tolerance" \
        if rows or not getattr(r, "rows_past", None) else \
        "no entry outside its own tolerance: the rows past the row rule are in the notes"
    return Section(f"failures-{r.dtype}", title, ["index", *_value_columns(r)], rows, notes,
                   data={"summary": r.summary()})


# --------------------------------------------------------------------------- split-merge
def _exact_text(x, digits: int) -> str:
    """An entry's exact value certified; ``-inf`` for a log-sum-exp of no key, ``nan`` for the
    policy's NaN (verify's lse rows, split-merge's values)."""
    e = x.exact
    if e.row.nan:
        return "nan"
    if getattr(e, "neg_inf", False):
        return "-inf"
    return certified_scientific(e, digits)


def _split_worst_section(r, worst: int, digits: int) -> Section:
    """The values furthest from the exact ones (failures first), block by block and merged."""
    rows = []
    for x in r.found.worst[:worst]:
        raised = x.where in r.raised or (x.where == "merged" and r.raised)
        rows.append([",".join(map(str, x.index[:3])), x.where, x.what, _exact_text(x, digits),
                     shortest_repr(x.rounded, r.dtype) if x.rounded is not None else "-",
                     "raised" if raised else shortest_repr(x.got, r.dtype),
                     number_cell(x.ulps, "d"), x.status])
    sh = r.call.shape
    some, every = r.empty_blocks()
    edges = [0, *itertools.accumulate(r.lengths)]
    merge = (f"merge: {r.merge}, judged against the exact one-pass row" if r.merge else
             "merge: none given (--merge); the states were merged here in float64, skipping "
             "blocks at lse = -inf, so only the blocks are under test")
    notes = [
        *_problem_notes(r),
        "blocks: " + ", ".join(f"[{a}, {b})" for a, b in zip(edges, edges[1:])) + f" of S = "
        f"{sh['S']} keys; each block's (output, lse) against that block's own exact row, "
        "the merged one against the whole row (the sink counted once, at the merge)",
        merge,
        f"rows with a block that sees no key: {some} of {len(r.rows)} (that block must give "
        f"output 0 and lse -inf); rows that see no key at all: {every} (the merge must give "
        f"the policy's empty row, empty_row {r.policy.empty_row}"
        + (": output 0, lse -inf)" if r.policy.empty_row == "zero" else ")"),
        f"exact: certified to {digits} significant digits; lse in natural-log units; 'exact "
        f"in {r.dtype}' is the exact value correctly rounded to {r.dtype}",
        _tolerance_note(r, "S"),
    ]
    for where, line in r.raised.items():
        notes.append(f"hard failure: {r.merge if where == 'merged' else r.impl} raised {line}; "
                     f"{'the merged' if where == 'merged' else where + chr(39) + 's'} values "
                     "count as failed" if not line.startswith("nothing") else
                     f"hard failure: {r.merge} was not called: a block raised; the merged "
                     "values count as failed")
    return Section(
        f"verify-split-{r.dtype}", f"{r.impl} on {plural(len(r.lengths), 'key block')}, merged "
        f"by {r.merge or 'exactattn'}, in {r.dtype}: the {plural(len(rows), 'worst value')} "
        "against the exact rows",
        ["row b,h,i", "where", "value", "exact (certified)", f"exact in {r.dtype}",
         "got", "ULPs", "status"], rows, notes)


def _split_rows(r) -> list[list[str]]:
    """One summary row per block and one for the merge: values, max ULPs, over, hard."""
    return [[r.dtype, where, str(c.count), number_cell(c.max_ulps, "d"), str(c.over), str(c.hard)]
            for where, c in _parts((x.where, x) for x in r.found.kept).items()]


def split_sections(reports: Sequence, *, worst: int = 5, digits: int = 12,
                   notes: Sequence[str] = ()) -> list:
    """The tables of split-merge reports (:func:`~exactattn.verify.split.verify_split`): the
    worst values of each dtype (failures first), a summary per dtype and block."""
    sections = [_split_worst_section(r, worst, digits) for r in reports]
    columns = ["dtype", "where", "values", "max ULPs", "over tolerance", "hard failures"]
    sections.append(_summary("verify-split-summary", "Summary per dtype and block", columns,
                             reports, _split_rows, False, notes))
    return sections
