"""The tables of ``exactattn model check``: a model's float32 attention against the exact one.

Presentation only: every number printed here was computed by
:func:`~exactattn.models.check.check_layer` (or is a certified decimal of an
exact value).  Reruns print the same bytes; wall-clock timings appear only
when asked for (``timings=True``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..present.render import Section, number_cell, plural, printable
from ..numbers.formats import scientific_parts, scientific_text, shortest_repr
from ..verify.compare import Comparison
from .check import DTYPE, LayerCheck


def scientific(decimal: str) -> str:
    """A certified decimal written ``d.ddde-XX`` with the same digits (presentation only).

    >>> scientific("-0.0000599470151"), scientific("12.50"), scientific("0.000")
    ('-5.99470151e-05', '1.250e+01', '0')
    """
    digits = len(decimal.lstrip("-").replace(".", "").lstrip("0"))     # the significant ones
    return scientific_text(*scientific_parts(Fraction(decimal), digits), digits)


def _row(label: list[str], w: Comparison) -> list[str]:
    d = worst_data(w)
    return label + [number_cell(d["ulps"], "d"), number_cell(d["terms_ulps"], ".2f"),
                    number_cell(d["rel"], ".2e"), ",".join(map(str, d["cell"])),
                    shortest_repr(d["model"], DTYPE), scientific(d["exact"]), str(w.misses),
                    str(w.over + w.hard)]


def worst_data(w: Comparison) -> dict:
    """A group judged (:func:`~exactattn.models.check.judge_group`) as JSON data (cells
    counted from 1; each error the largest over the group's entries that are not hard
    failures, 0 when there is none)."""
    worst = w.worst[0]
    return {"entries": w.count, "ulps": w.max_ulps or 0, "terms_ulps": w.max_terms or 0.0,
            "rel": w.max_rel or 0.0, "cell": [k + 1 for k in worst.index], "model": worst.got,
            "exact": w.worst_exact, "misses": w.misses, "over": w.over, "hard": w.hard,
            "budget": w.budget}


def check_sections(run, checks: Sequence[LayerCheck], places: int, note: str,
                   seconds: float | None = None, jobs: int = 1) -> list[Section]:
    """The probability table and the output table (the verdict: each head on the model's own
    q, k, v), the drift table and a summary ending with :func:`result_line`, from the layers
    checked.

    ``seconds``: the wall-clock time of the exact check (printed only when given, so
    that reruns print the same bytes), run in ``jobs`` processes.
    """
    budgets = ", ".join(f"layer {c.layer}: {c.budget}" for c in checks)
    sections = []
    n = checks[0].n if checks else len(run.tokens)

    def heads(group: str, what: str, cell: str, notes: list[str]) -> Section:
        """The table of every head's ``group`` (``probs``, ``outputs``) judged."""
        pairs = [(c.layer, h.head, getattr(h, group)) for c in checks for h in c.heads]
        notes = notes + [
            f"ULPs: {DTYPE} floats between the model's value and the exact value correctly "
            f"rounded to {DTYPE}; at terms: |error| in ULPs at the size of the terms it adds up; "
            "rel. error: |error| / |exact|; each column is its own worst over the head",
            "worst: the entry with the most ULPs (counted from 1), its exact value certified to "
            f"9 significant digits; off at {places} places: entries whose float printed to "
            f"{places} places differs from the certified decimal; over: past the ULP budget on "
            f"both counts ({budgets}: verify's default, 2*ceil(sqrt(n + d_k)) + 4 + "
            "ceil(max |scaled score|), for one attention call on the model's own float32 "
            "queries, keys and values), or NaN/inf"]
        return Section(f"model/{what}", f"{run.model}: attention {what}, {DTYPE} "
                       f"({run.implementation}) vs exact",
                       ["layer", "head", "ULPs", "at terms", "rel. error", f"worst ({cell})",
                        f"model ({DTYPE})", "exact (certified)", f"off at {places} places",
                        "over"], [_row([str(c), str(h)], w) for c, h, w in pairs], notes,
                       {"heads": [dict(layer=c, head=h, **worst_data(w)) for c, h, w in pairs]})
    if run.probs_returned:
        sections.append(heads("probs", "probabilities", "query,key", [
            "probabilities: the model's attention weights (output_attentions=True) against the "
            "exact shares; the terms of a share are its row's shares, which add up to 1 (ULPs "
            "of 1)"]))
    notes = ["outputs: each head's outputs before W_O against the exact attention of the "
             "model's own q, k, v (the terms: shares * |values|)"]
    if not run.probs_returned:
        notes.append(f"{run.implementation} returned no attention probabilities "
                     "(output_attentions needs eager attention): the outputs are compared")
    sections.append(heads("outputs", "outputs", "token,column", notes))
    sections.append(_drift_section(run, checks))
    total = sum(c.certified for c in checks)
    tokens = " ".join(printable(t.text) for t in run.tokens)
    over, count = sum(c.over for c in checks), sum(len(c.heads) for c in checks)
    summary = [
        f"model: {run.description}; {plural(len(run.layers), 'layer')} of "
        f"{plural(run.heads, 'head')} ({run.kv_heads} key/value), "
        f"{'causal' if run.causal else 'bidirectional'}"
        f"{'' if run.rope is None else ', ' + run.rope.text()}, "
        f"attention '{run.implementation}'",
        f"tokens ({n}): {tokens}",
        f"inputs: each layer's input hidden states and the model's own q, k, v, captured by "
        f"forward hooks; {note}",
        f"exact: every head's attention on the model's q, k, v (the verdict) and the exact chain "
        f"from the layer input (projections with biases, shares, outputs, W_O + b_O: the "
        f"drift); {total:,} entries certified to {places} places and compared",
    ]
    if seconds is not None:
        layers = sum(c.seconds for c in checks)
        summary.append(f"time: the model's float32 forward pass {run.seconds:.3f} s; the exact "
                       f"check {seconds:.1f} s ({seconds / run.seconds:,.0f}x), in "
                       f"{plural(jobs, 'process', 'processes')} ({layers:.1f} s of layers)")
    summary.append("verdict: a head is over its tolerance when an entry of its probabilities "
                   "or outputs is past the ULP budget on both counts, or NaN/inf")
    summary.append(result_line(checks))         # the last line of the report
    sections.append(Section("model/summary", "What was checked", [], [], summary,
                            {"entries": total, "tokens": [t.text for t in run.tokens],
                             "heads": count, "over": over, "passed": over == 0}))
    return sections


def result_line(checks: Sequence[LayerCheck]) -> str:
    """The last line of ``model check``: ``result: PASS`` or ``result: FAIL (K of N heads over
    their tolerance)``, K counted by :attr:`~exactattn.models.check.LayerCheck.over`."""
    over, count = sum(c.over for c in checks), sum(len(c.heads) for c in checks)
    return "result: PASS" if over == 0 else \
        f"result: FAIL ({over} of {count} heads over their tolerance)"


def _drift_section(run, checks: Sequence[LayerCheck]) -> Section:
    """Per layer: the model's float projections q, k, v against the exact ones, and its heads
    before and after W_O against the exact chain from the layer input (not judged)."""
    rows, data = [], []
    for c in checks:
        chain = max((h.chain for h in c.heads if h.chain is not None),
                    key=lambda w: (w.max_ulps or 0, w.max_terms or 0.0), default=None)
        drift = {name: {"ulps": d.max_ulps, "off": d.count - d.histogram.get(0, 0),
                        "entries": d.count} for name, d in c.drift.items()}
        cells = [str(c.layer)] + [f"{d['ulps']} ({d['off']}/{d['entries']})" for d in drift.values()]
        for w in (chain, c.projected):
            cells += ["-", "-"] if w is None else [number_cell(w.max_ulps or 0, "d"),
                                                   number_cell(w.max_rel or 0.0, ".2e")]
        rows.append(cells)
        data.append({"layer": c.layer, "projections": drift, "heads": None if chain is None
                     else worst_data(chain), "W_O": worst_data(c.projected)})
    notes = ["q, k, v: the model's float32 projections (before any rotary embedding) against "
             "the exact x W + b correctly rounded to float32: the most ULPs, and (in brackets) "
             "how many entries are not that rounding",
             "heads, W_O: the model's head outputs before and after W_O (+ b_O) against the "
             "exact chain from the layer input (exact projections, exact attention, exact W_O), "
             "the worst head; the projections' drift is included, so these are reported, not "
             "judged"]
    return Section("model/drift", f"{run.model}: the model's float projections vs exact",
                   ["layer", "q ULPs", "k ULPs", "v ULPs", "heads ULPs", "heads rel.",
                    "W_O ULPs", "W_O rel."], rows, notes, {"layers": data})
