"""The pencil-check tables, built from a :class:`~exactattn.head.Trace`.

Each mode returns a list of :class:`Section` (a titled grid of cells plus notes
and exact data); :mod:`exactattn.render` turns sections into text, Markdown,
LaTeX, CSV or JSON.  Modes, in walkthrough order: ``row``, ``weights``,
``project``, ``square``, ``scores``.

Cells show exact rationals as fractions (``25/8``), their decimal when it
terminates (``3.125``), and shares and outputs as certified decimals at the
requested places (correctly rounded, see :mod:`exactattn.digits`).

>>> from exactattn.examples import chronicle
>>> ex = chronicle()
>>> s = square(ex, attend_example(ex))
>>> s[0].rows[1]
['2', '25/8 = 3.125', '0', '3/4 = 0.75', '0']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .digits import format_exact, round_fraction
from .errors import InputError
from .head import Trace, attend

__all__ = ["MODES", "Section", "attend_example", "build", "divisor_text", "exact_text",
           "explain", "neuron_layer"]

MODES = ("row", "weights", "project", "square", "scores")


@dataclass
class Section:
    """One titled table: ``columns`` (header cells), ``rows`` (string cells), notes, data."""
    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def attend_example(example, *, no_scale: bool = False, engine: str = "auto") -> Trace:
    """Run an example's head on its tokens (``no_scale`` drops the divisor)."""
    head = example.head
    if no_scale:
        from copy import copy
        head = copy(head)
        head.divisor_squared = None
    return attend(head, example.x, engine=engine)


def exact_text(q) -> str:
    """A rational as text: ``'25/8'``, ``'3'``, ``'-1/2'``; sympy values via ``str``."""
    if isinstance(q, Fraction):
        return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
    return str(q)


def _with_decimal(q) -> str:
    if not isinstance(q, Fraction):
        return str(q)
    text = exact_text(q)
    if q.denominator == 1:
        return text
    dec = format_exact(q)
    return f"{text} = {dec}" if dec is not None else f"{text} ~ {round_fraction(q, 6)}"


def _scaled_text(raw: Fraction, head) -> str:
    """``raw / divisor`` as exact text plus its decimal (certified when irrational)."""
    value = head.scale(raw)
    if isinstance(value, Fraction):
        return _with_decimal(value)
    from flint import arb, fmpq

    from .digits import certify
    d2 = head.divisor_squared
    approx = certify(lambda prec: arb(fmpq(raw.numerator, raw.denominator))
                     / arb(fmpq(d2.numerator, d2.denominator)).sqrt(), 6)
    return f"{value} ~ {approx}"


def _vector(v) -> str:
    return "(" + ", ".join(exact_text(e) for e in v) + ")"


def _labels(example, n: int) -> list[str]:
    return [str(i + 1) for i in range(n)]


def _printable(text: str) -> str:
    """Token text for a table cell: unprintable characters (newlines, tabs) escaped."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def row(example, trace: Trace, places: int = 4) -> list[Section]:
    """The tokens: index, id, byte count, text, and the numbers each arrives with."""
    names = example.slot_names or [f"x{m + 1}" for m in range(trace.head.d_model)]
    cols = ["n", "id", "bytes", "text"] + names
    rows = []
    for i, (tok, xs) in enumerate(zip(example.tokens, trace.x)):
        rows.append([str(i + 1), "" if tok.id is None else str(tok.id), str(tok.nbytes),
                     _printable(tok.text)] + [exact_text(e) for e in xs])
    notes = [f"{trace.n} tokens, each with d_model = {trace.head.d_model} numbers"]
    if example.title:
        notes.insert(0, f"source text: {example.title}")
    return [Section("row", "The row: tokens and their numbers", cols, rows, notes,
                    {"x": [[exact_text(e) for e in r] for r in trace.x]})]


def weights(example, trace: Trace, places: int = 4) -> list[Section]:
    """The three matrices, one line per output slot (or per input in the rows layout)."""
    head = trace.head
    out = []
    for name in ("W_Q", "W_K", "W_V"):
        m = head.weights(name)
        if head.layout == "slots":
            label = "slot"
            cols = [label] + [f"x{c + 1}" for c in range(head.d_model)]
        else:
            label = "input"
            cols = [label] + [f"slot {c + 1}" for c in range(len(m[0]))]
        rows = [[str(r + 1)] + [exact_text(e) for e in line] for r, line in enumerate(m)]
        shape = f"{len(m)} x {len(m[0])}"
        out.append(Section(f"weights/{name}", f"{name} ({shape}, {head.layout} layout)",
                           cols, rows, [], {name: [[exact_text(e) for e in r] for r in m]}))
    out[-1].notes.append("slots layout: q = W_Q x, one line per output slot" if head.layout ==
                         "slots" else "rows layout: q = x @ W_Q, one line per input number")
    return out


def neuron_layer(flat_weights: list, inputs: list, width: int, bias=0) -> list:
    """A row of bias-free neurons: neuron s returns ``sum_m w[s*D + m] x[m] + bias``.

    The same flat weights as a projection matrix in the slots layout give the
    same numbers; :func:`project` reports that cross-check.

    >>> neuron_layer([1, 2, 3, 4], [1, 1], 2)
    [3, 7]
    """
    d = len(inputs)
    return [sum(flat_weights[s * d + m] * inputs[m] for m in range(d)) + bias
            for s in range(width)]


def project(example, trace: Trace, places: int = 4) -> list[Section]:
    """Each token's query, key and value, and the bias-free-neuron cross-check."""
    head = trace.head
    rows = [[str(i + 1), _vector(trace.queries[i]), _vector(trace.keys[i]),
             _vector(trace.values[i])] for i in range(trace.n)]
    same = True
    for name, got in (("W_Q", trace.queries), ("W_K", trace.keys), ("W_V", trace.values)):
        m = head.weights(name, "slots")
        flat = [e for line in m for e in line]
        for i, xs in enumerate(trace.x):
            same &= neuron_layer(flat, xs, len(m)) == list(got[i])
    mults = head.d_k * head.d_model
    notes = [
        f"one projection of one token: {mults} multiplications and "
        f"{head.d_k * (head.d_model - 1)} additions ({mults} multiply-adds)",
        "the projection equals a row of bias-free neurons fed the same flat weights: "
        f"the same numbers: {'true' if same else 'false'}",
    ]
    data = {"queries": [[exact_text(e) for e in r] for r in trace.queries],
            "keys": [[exact_text(e) for e in r] for r in trace.keys],
            "values": [[exact_text(e) for e in r] for r in trace.values],
            "neurons_agree": same}
    return [Section("project", "Projections: query, key and value of each token",
                    ["token", "query", "key", "value"], rows, notes, data)]


def divisor_text(head) -> str:
    """The head's divisor in words: ``'sqrt(4) = 2'``, ``'sqrt(2) ~ 1.414214 (...)'``, ``'none'``."""
    d2 = head.divisor_squared
    if d2 is None:
        return "none (unscaled)"
    d = head.divisor
    if isinstance(d, Fraction):
        if d2 == head.d_k:
            return f"sqrt(d_k) = sqrt({head.d_k}) = {exact_text(d)}"
        return exact_text(d)
    from .digits import certify
    from flint import arb, fmpq
    approx = certify(lambda prec: arb(fmpq(d2.numerator, d2.denominator)).sqrt(), 6)
    return f"sqrt({exact_text(d2)}) ~ {approx} (irrational: scaled scores stay exact)"


def square(example, trace: Trace, places: int = 4) -> list[Section]:
    """Raw scores (queries x keys) and scaled scores, with the divisor stated."""
    n = trace.n
    cols = ["query"] + [f"key {j + 1}" for j in range(n)]

    def cell(v):
        return "-inf" if v is None else _with_decimal(v)
    raw = [[str(i + 1)] + [cell(v) for v in trace.raw_scores[i]] for i in range(n)]
    scaled_m = trace.scaled_scores
    scaled = [[str(i + 1)] + ["-inf" if r is None else _scaled_text(r, trace.head)
                              for r in trace.raw_scores[i]] for i in range(n)]
    mask = " (causal: -inf above the diagonal)" if trace.head.causal else ""
    out = [Section("square/raw", f"Raw scores: queries[i] . keys[j]{mask}", cols, raw, [],
                   {"raw_scores": [[None if v is None else exact_text(v) for v in r]
                                   for r in trace.raw_scores]})]
    if trace.head.divisor_squared is None:
        out[0].notes.append("divisor: none (unscaled); the shares read the raw scores")
    else:
        out.append(Section("square/scaled", f"Scaled scores: raw / {trace.divisor}", cols,
                           scaled, [f"divisor: {divisor_text(trace.head)}"],
                           {"divisor": str(trace.divisor),
                            "scaled_scores": [[None if v is None else exact_text(v) for v in r]
                                              for r in scaled_m]}))
    return out


def scores(example, trace: Trace, places: int = 4, closed_forms: bool = True) -> list[Section]:
    """Shares per row (sum, largest), the mixed outputs, one token in vs out, the MACs.

    ``closed_forms`` adds each share's and output's exact sympy closed form to
    the sections' data (what JSON prints); the other formats skip it, and with
    it the sympy import.
    """
    n, head = trace.n, trace.head
    cols = ["query"] + [f"key {j + 1}" for j in range(n)] + ["sum", "largest"]
    rows, exact_shares, dec_shares = [], [], []
    for i in range(n):
        decs = [trace.share(i, j).decimal(places) for j in range(n)]
        row_sm = trace.rows[i]
        best = max(range(n), key=lambda j: (row_sm.gaps[j] is not None,
                                            row_sm.gaps[j] or 0, -j))
        ties = [j for j in range(n) if row_sm.gaps[j] == row_sm.gaps[best]]
        where = "key " + ", ".join(str(j + 1) for j in ties)
        total = "exactly 1" if trace.row_sums_to_one(i) else "not 1"
        rows.append([str(i + 1)] + decs + [total, f"{decs[best]} at {where}"])
        dec_shares.append(decs)
        if closed_forms:
            exact_shares.append([str(trace.share(i, j).closed_form()) for j in range(n)])
    notes = [f"divisor used for these shares: {divisor_text(head)}",
             f"shares at {places} certified places (correctly rounded); "
             "printed values may not add to 1 because of rounding"]
    identical = [(a + 1, b + 1) for a in range(n) for b in range(a + 1, n)
                 if trace.raw_scores[a] == trace.raw_scores[b] and trace.x[a] == trace.x[b]]
    for a, b in identical:
        notes.append(f"rows {a} and {b} are identical: tokens {a} and {b} carry the same "
                     "numbers (no positional information)")
    shares_sec = Section("scores/shares", "Shares (attention weights): softmax of each row",
                         cols, rows, notes, {"shares_exact": exact_shares,
                                             "shares_decimal": dec_shares, "places": places})
    ocols = ["token"] + [f"out {c + 1}" for c in range(head.d_v)]
    orows, oexact = [], []
    for i in range(n):
        orows.append([str(i + 1)] + [trace.output(i, c).decimal(places)
                                     for c in range(head.d_v)])
        if closed_forms:
            oexact.append([str(trace.output(i, c).closed_form()) for c in range(head.d_v)])
    out_sec = Section("scores/outputs", "Outputs: sum_j shares[i][j] * values[j]", ocols,
                      orows, [], {"outputs_exact": oexact,
                                  "outputs_decimal": [r[1:] for r in orows]})
    f = min(example.focus, n - 1)
    inout = Section(
        "scores/in-out", f"Token {f + 1} in and out", ["", "numbers"],
        [["in (x)", _vector(trace.x[f])], ["value", _vector(trace.values[f])],
         ["out", "(" + ", ".join(orows[f][1:]) + ")"]],
        [], {"token": f + 1})
    m = trace.macs
    if m is None:
        cost = Section("scores/macs", "Multiply-adds", ["stage", "MACs"], [],
                       ["the fast engine counts nothing; see `exactattn cost` for the "
                        "derived figures"], {})
    else:
        total = sum(m.values())
        cost = Section("scores/macs", "Multiply-adds this run took (counted in the loops)",
                       ["stage", "MACs"],
                       [["projections", str(m["projections"])], ["scores", str(m["scores"])],
                        ["mixing", str(m["mix"])], ["total", str(total)]],
                       ["a multiply-add (MAC) is one multiplication and one addition; "
                        "FLOPs = 2 x MACs"], dict(m, total=total))
    return [shares_sec, out_sec, inout, cost]


BUILDERS = {"row": row, "weights": weights, "project": project, "square": square,
            "scores": scores}


def build(mode: str, example, trace: Trace, places: int = 4, *,
          closed_forms: bool = True) -> list[Section]:
    """The sections of one mode (``row``, ``weights``, ``project``, ``square``, ``scores``)."""
    if mode not in BUILDERS:
        raise InputError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "scores":
        return scores(example, trace, places, closed_forms)
    return BUILDERS[mode](example, trace, places)


def explain(trace: Trace, query: int, key: int) -> Section:
    """The raw score of ``query`` against ``key`` (1-based) written out term by term.

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> explain(attend_example(ex), 2, 1).rows[0][1]
    '0×0 + 3×1 + 1/2×1/4 + 0×1/2 = 25/8 = 3.125'
    """
    n = trace.n
    for label, v in (("query", query), ("key", key)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= n:
            raise InputError(f"{label} must be a token number from 1 to {n} (got {v!r})")
    q, k = trace.queries[query - 1], trace.keys[key - 1]
    def factor(v):
        text = exact_text(v)
        return f"({text})" if v < 0 else text
    terms = " + ".join(f"{factor(a)}×{factor(b)}" for a, b in zip(q, k))
    value = sum((a * b for a, b in zip(q, k)), Fraction(0))
    text = f"{terms} = {_with_decimal(value)}"
    notes = []
    if trace.head.divisor_squared is not None:
        notes.append(f"divided by {trace.divisor}: {_scaled_text(value, trace.head)}")
    if trace.raw_scores[query - 1][key - 1] is None:
        notes.append("this pair is masked (causal): the head never computes it, and its "
                     "scaled score counts as -inf")
    return Section("explain", f"Score of query {query} against key {key}",
                   ["pair", "terms"], [[f"q{query}.k{key}", text]], notes,
                   {"value": exact_text(value)})
