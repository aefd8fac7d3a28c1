"""The pencil-check tables, built from one :class:`~exactattn.trace.Trace`.

Each mode returns a list of :class:`~exactattn.render.Section` (a titled grid
of cells plus notes and exact data); :func:`exactattn.render.render` writes them
as text, Markdown, LaTeX, CSV or JSON.  Modes, in walkthrough order: ``row``,
``weights``, ``project``, ``square``, ``scores``.

Cells show exact rationals as fractions (``25/8``) with their decimal when it
terminates (``25/8 = 3.125``) or a rounded one when it does not (``1/3 ~
0.3333``).  Shares and outputs are read from the trace's bulk certified path
(:meth:`~exactattn.trace.Trace.share_decimals`, correctly rounded, whatever
engine made the trace); text and Markdown mark the exact ones as exact (a key
the query does not see is ``masked``, a share that is exactly 1/2 reads ``1/2
= 0.5``), while the machine formats keep the decimal every cell of the column
has.  This module chooses what to show; every number comes from the trace.

>>> from exactattn.examples import chronicle
>>> ex = chronicle()
>>> s = square(ex, attend_example(ex))
>>> s[0].rows[1]
['2', '25/8 = 3.125', '0', '3/4 = 0.75', '0']
"""

from __future__ import annotations

from fractions import Fraction

from .call import divisor_text
from .digits import format_exact, round_fraction
from .errors import InputError
from .head import Head, Trace, attend
from .kernels import score
from .render import Cell, Section, plural, printable
from .trace import SymbolicValue

__all__ = ["MODES", "Section", "attend_example", "build", "divisor_words", "exact_text",
           "explain", "neuron_layer", "raw_match", "value_cell", "with_divisor"]

MODES = ("row", "weights", "project", "square", "scores")


def with_divisor(head: Head, divisor_squared: Fraction | None) -> Head:
    """The same head with the scores divided by sqrt(``divisor_squared``) (None: not divided)."""
    return head.with_policy(head.policy.replace(scale=divisor_squared))


def attend_example(example, *, no_scale: bool = False, engine: str = "auto") -> Trace:
    """Run an example's head on its tokens (``no_scale`` drops the divisor)."""
    head = with_divisor(example.head, None) if no_scale else example.head
    return attend(head, example.x, engine=engine)


# --------------------------------------------------------------------------- cell texts
def exact_text(q) -> str:
    """A rational as text: ``'25/8'``, ``'3'``, ``'-1/2'``; sympy values via ``str``."""
    if isinstance(q, Fraction):
        return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
    return str(q)


def _with_decimal(q, places: int) -> str:
    """``25/8 = 3.125`` (a terminating decimal), ``1/3 ~ 0.3333`` (rounded), ``3``."""
    if not isinstance(q, Fraction):
        return str(q)
    text = exact_text(q)
    if q.denominator == 1:
        return text
    dec = format_exact(q)
    return f"{text} = {dec}" if dec is not None else f"{text} ~ {round_fraction(q, places)}"


def _scaled_text(raw: Fraction, head: Head, places: int) -> str:
    """``raw / divisor`` exactly, with its decimal (certified when it is irrational)."""
    value = head.scale(raw)
    if getattr(value, "is_Rational", False):       # e.g. 0 / sqrt(2): exactly 0
        value = Fraction(int(value.p), int(value.q))
    if isinstance(value, Fraction):
        return _with_decimal(value, places)
    if getattr(value, "free_symbols", None):      # a symbolic score has no decimal
        return str(value)
    return f"{value} ~ {SymbolicValue(value).decimal(places)}"


def _rational(value) -> Fraction | None:
    """An exact share or output as a ``Fraction`` when it is rational, else None."""
    return value.rational()


def value_cell(value, decimal: str, masked: bool = False, *, short: bool = False) -> str:
    """The cell of a share or output: its certified ``decimal``; for readers, exact values marked.

    ``masked``: the key is hidden from the query (the share is exactly 0).
    An exact rational reads ``1/2 = 0.5`` (``1/3 ~ 0.3333`` when its decimal
    does not terminate), or ``1/2`` alone with ``short`` (inside a vector).
    """
    if masked:
        return Cell(decimal, "masked")
    q = _rational(value)
    if q is None:
        return decimal
    text = exact_text(q)
    if q.denominator == 1 or short:
        return Cell(decimal, text)
    dec = format_exact(q)
    return Cell(decimal, f"{text} = {dec}" if dec is not None else f"{text} ~ {decimal}")


def _vector(v) -> str:
    """``(0, 3, 1/2, 0)``: exact entries as fractions, cells as they are (for each reader)."""
    parts = [p if isinstance(p, str) else exact_text(p) for p in v]
    machine = "(" + ", ".join(str.__str__(p) for p in parts) + ")"
    reader = "(" + ", ".join(getattr(p, "reader", p) for p in parts) + ")"
    return machine if reader == machine else Cell(machine, reader)


def divisor_words(head: Head, places: int = 4) -> str:
    """The head's divisor in words: ``'sqrt(d_k) = sqrt(4) = 2'``, ``'3'``, ``'none (unscaled)'``,
    ``'sqrt(2) ~ 1.4142 (irrational: scaled scores stay exact)'``."""
    d2 = head.divisor_squared
    if d2 is None:
        return "none (unscaled)"
    text = divisor_text(d2)
    of_dk = "sqrt(d_k) = " if d2 == head.d_k else ""
    if text.startswith("sqrt("):      # irrational: the root once, then a certified decimal
        return (f"{of_dk}{text} ~ {SymbolicValue(head.divisor).decimal(places)} "
                "(irrational: scaled scores stay exact)")
    return f"{of_dk}sqrt({exact_text(d2)}) = {text}" if of_dk else text


# --------------------------------------------------------------------------- the modes
def row(example, trace: Trace, places: int = 4) -> list[Section]:
    """The tokens: index, id, byte count, text, and the numbers each arrives with."""
    names = example.slot_names or [f"x{m + 1}" for m in range(trace.head.d_model)]
    cols = ["n", "id", "bytes", "text"] + names
    rows = []
    for i, (tok, xs) in enumerate(zip(example.tokens, trace.x)):
        rows.append([str(i + 1), "" if tok.id is None else str(tok.id), str(tok.nbytes),
                     printable(tok.text)] + [exact_text(e) for e in xs])
    notes = [f"{plural(trace.n, 'token')}, each with d_model = "
             f"{plural(trace.head.d_model, 'number')}"]
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
            cols = ["slot"] + [f"x{c + 1}" for c in range(head.d_model)]
        else:
            cols = ["input"] + [f"slot {c + 1}" for c in range(len(m[0]))]
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
        f"one projection of one token: {plural(mults, 'multiplication')} and "
        f"{plural(head.d_k * (head.d_model - 1), 'addition')} "
        f"({plural(mults, 'multiply-add')})",
        "the projection equals a row of bias-free neurons fed the same flat weights: "
        f"the same numbers: {'true' if same else 'false'}",
    ]
    data = {"queries": [[exact_text(e) for e in r] for r in trace.queries],
            "keys": [[exact_text(e) for e in r] for r in trace.keys],
            "values": [[exact_text(e) for e in r] for r in trace.values],
            "neurons_agree": same}
    return [Section("project", "Projections: query, key and value of each token",
                    ["token", "query", "key", "value"], rows, notes, data)]


def square(example, trace: Trace, places: int = 4) -> list[Section]:
    """Raw scores (queries x keys) and scaled scores, with the divisor stated.

    ``places``: the decimals of values that are not exact (an irrational
    scaled score, a rational whose decimal does not terminate).
    """
    n, head = trace.n, trace.head
    cols = ["query"] + [f"key {j + 1}" for j in range(n)]
    raws = [trace.raw_score_row(i) for i in range(n)]
    raw = [[str(i + 1)] + ["-inf" if v is None else _with_decimal(v, places) for v in r]
           for i, r in enumerate(raws)]
    mask = " (causal: -inf above the diagonal)" if head.causal else ""
    out = [Section("square/raw", f"Raw scores: queries[i] . keys[j]{mask}", cols, raw, [],
                   {"raw_scores": [[None if v is None else exact_text(v) for v in r]
                                   for r in raws]})]
    d2 = head.divisor_squared
    if d2 is None:
        out[0].notes.append("divisor: none (unscaled); the shares read the raw scores")
        return out
    scaled = [[str(i + 1)] + ["-inf" if v is None else _scaled_text(v, head, places)
                              for v in r] for i, r in enumerate(raws)]
    out.append(Section("square/scaled", f"Scaled scores: raw / {divisor_text(d2)}", cols,
                       scaled, [f"divisor: {divisor_words(head, places)}"],
                       {"divisor": divisor_text(d2),
                        "scaled_scores": [[None if v is None else exact_text(head.scale(v))
                                           for v in r] for r in raws]}))
    return out


def _numeric(trace: Trace, what: str) -> None:
    if trace.engine == "symbolic":
        raise InputError(f"trace must come from a numeric engine for {what} (got symbolic); "
                         "run attend with engine='pencil' or 'fast'")


def scores(example, trace: Trace, places: int = 4, closed_forms: bool = True) -> list[Section]:
    """Shares per row (sum, largest), the mixed outputs, one token in vs out, the MACs.

    Shares and outputs come from the trace's bulk certified decimals.
    ``closed_forms`` adds each share's and output's exact sympy closed form to
    the sections' data (what JSON prints); the other formats skip it, and with
    it the sympy import.

    Raises:
        InputError: a symbolic trace (its shares have no largest key to name).
    """
    _numeric(trace, "the scores table")
    n, head = trace.n, trace.head
    share_dec, output_dec = trace.share_decimals(places), trace.output_decimals(places)
    cols = ["query"] + [f"key {j + 1}" for j in range(n)] + ["sum", "largest"]
    rows, exact_shares, masked_any = [], [], False
    for i in range(n):
        raw, sm = trace.raw_score_row(i), trace.row(i)
        cells = [value_cell(trace.share(i, j), share_dec[i][j], raw[j] is None) for j in range(n)]
        masked_any |= None in raw
        top = sm.largest()
        if top:
            best, where = cells[top[0]], "key " + ", ".join(str(j + 1) for j in top)
            largest = Cell(f"{best} at {where}", f"{getattr(best, 'reader', best)} at {where}")
        else:
            largest = "-"
        if trace.row_sums_to_one(i):
            total = "exactly 1"
        else:
            total = "nan (no visible key)" if sm.nan else \
                "exactly 0 (no visible key)" if sm.empty else "not 1"
        rows.append([str(i + 1)] + cells + [total, largest])
        if closed_forms:
            exact_shares.append([str(trace.share(i, j).closed_form()) for j in range(n)])
    notes = [f"divisor used for these shares: {divisor_words(head, places)}",
             f"shares at {places} certified places (correctly rounded); "
             "printed values may not add to 1 because of rounding"]
    if masked_any:
        notes.append("a masked key (one the query does not see) gets a share of exactly 0")
    identical = [(a + 1, b + 1) for a in range(n) for b in range(a + 1, n)
                 if trace.raw_score_row(a) == trace.raw_score_row(b) and trace.x[a] == trace.x[b]]
    for a, b in identical:
        notes.append(f"rows {a} and {b} are identical: tokens {a} and {b} carry the same "
                     "numbers (no positional information)")
    shares_sec = Section("scores/shares", "Shares (attention weights): softmax of each row",
                         cols, rows, notes, {"shares_exact": exact_shares,
                                             "shares_decimal": share_dec, "places": places})
    ocols = ["token"] + [f"out {c + 1}" for c in range(head.d_v)]
    orows, oexact = [], []
    for i in range(n):
        orows.append([str(i + 1)] + [value_cell(trace.output(i, c), output_dec[i][c], False)
                                     for c in range(head.d_v)])
        if closed_forms:
            oexact.append([str(trace.output(i, c).closed_form()) for c in range(head.d_v)])
    out_sec = Section("scores/outputs", "Outputs: sum_j shares[i][j] * values[j]", ocols,
                      orows, [], {"outputs_exact": oexact, "outputs_decimal": output_dec})
    f = min(example.focus, n - 1)
    inout = Section(
        "scores/in-out", f"Token {f + 1} in and out", ["", "numbers"],
        [["in (x)", _vector(trace.x[f])], ["value", _vector(trace.values[f])],
         ["out", _vector([value_cell(trace.output(f, c), output_dec[f][c], short=True)
                          for c in range(head.d_v)])]],
        [], {"token": f + 1})
    m = trace.macs
    if m is None:
        cost = Section("scores/macs", "Multiply-adds", ["stage", "MACs"], [],
                       [f"the {trace.engine} engine counts nothing; see `exactattn cost` for "
                        "the derived figures"], {})
    else:
        total = sum(m.values())
        cost = Section("scores/macs", "Multiply-adds this run took (counted in the loops)",
                       ["stage", "MACs"],
                       [["projections", str(m["projections"])], ["scores", str(m["scores"])],
                        ["mixing", str(m["mix"])], ["total", str(total)]],
                       ["a multiply-add (MAC) is one multiplication and one addition; "
                        "FLOPs = 2 x MACs"], dict(m, total=total))
    return [shares_sec, out_sec, inout, cost]


def raw_match(example, trace: Trace, places: int = 4) -> list[Section]:
    """The raw self-match ``x[i] . x[j]`` (no projections) beside the projected scores.

    Runs the same tokens through W_Q = W_K = I (d_k = d_model) with divisor
    sqrt(d_model) (none when ``trace`` is unscaled), and compares each token's
    own share and favourite key with those of ``trace`` (the projected run).
    ``square`` and ``walkthrough`` print it for examples with ``compare_raw``.

    Shapes: x n x d_model; both squares n x n.

    Returns two sections: ``compare/raw`` (raw scores and shares) and
    ``compare/own`` (own share raw vs projected).

    >>> from exactattn.examples import tiny
    >>> ex = tiny()
    >>> raw, own = raw_match(ex, attend_example(ex))
    >>> raw.rows[0][1:3]
    ['1', '-11/25 = -0.44']
    >>> own.rows[0]
    ['1', '0.7346', 'key 1', '0.1372', 'key 2']
    """
    head = example.head
    d = head.d_model
    identity = [[int(r == c) for c in range(d)] for r in range(d)]
    divisor = None if trace.head.divisor_squared is None else f"sqrt({d})"
    raw_head = Head(identity, identity, head.weights("W_V"), layout=head.layout,
                    divisor=divisor, causal=head.causal)
    raw = attend(raw_head, trace.x, engine="pencil")
    n = trace.n
    raw_dec, own_dec = raw.share_decimals(places), trace.share_decimals(places)

    def favourite(t, i):
        return "key " + ", ".join(str(j + 1) for j in t.row(i).largest())

    def own(t, dec, i):
        return value_cell(t.share(i, i), dec[i][i], t.raw_score_row(i)[i] is None)

    cols = ["query"] + [f"key {j + 1}" for j in range(n)]
    raw_rows = [[str(i + 1)] + ["-inf" if v is None else _with_decimal(v, places)
                                for v in raw.raw_score_row(i)] for i in range(n)]
    raw_sec = Section(
        "compare/raw", "Raw self-match (no projections): x[i] . x[j]", cols, raw_rows,
        [f"divisor for the raw shares: {divisor_words(raw_head, places)}",
         "x[i] . x[i] is a sum of squares, so without projections a token tends to match "
         "itself best"],
        {"raw_scores": [[None if v is None else exact_text(v) for v in raw.raw_score_row(i)]
                        for i in range(n)],
         "raw_shares_decimal": raw_dec})
    own_rows = [[str(i + 1), own(raw, raw_dec, i), favourite(raw, i),
                 own(trace, own_dec, i), favourite(trace, i)] for i in range(n)]
    own_sec = Section(
        "compare/own", "Own share: raw (x . x) vs projected (queries . keys)",
        ["token", "own share raw", "favourite raw", "own share projected",
         "favourite projected"], own_rows,
        [f"shares at {places} certified places"],
        {"own_raw": [str.__str__(r[1]) for r in own_rows],
         "own_projected": [str.__str__(r[3]) for r in own_rows]})
    return [raw_sec, own_sec]


BUILDERS = {"row": row, "weights": weights, "project": project, "square": square,
            "scores": scores}


def build(mode: str, example, trace: Trace, places: int = 4, *,
          closed_forms: bool = True) -> list[Section]:
    """The sections of one mode (``row``, ``weights``, ``project``, ``square``, ``scores``).

    ``square`` adds the raw self-match (:func:`raw_match`) for an example with
    ``compare_raw``.
    """
    if mode not in BUILDERS:
        raise InputError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "scores":
        return scores(example, trace, places, closed_forms)
    sections = BUILDERS[mode](example, trace, places)
    if mode == "square" and getattr(example, "compare_raw", False):
        sections.extend(raw_match(example, trace, places))
    return sections


def explain(trace: Trace, query: int, key: int, places: int = 4) -> Section:
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
    (value,), = score([q], [k], lambda i: range(1))[0]   # a masked pair too: the kernel's sum
    value = Fraction(value)
    text = f"{terms} = {_with_decimal(value, places)}"
    notes = []
    d2 = trace.head.divisor_squared
    if d2 is not None:
        notes.append(f"divided by {divisor_text(d2)}: {_scaled_text(value, trace.head, places)}")
    if trace.raw_score_row(query - 1)[key - 1] is None:
        notes.append("this pair is masked (causal): the head never computes it, and its "
                     "scaled score counts as -inf")
    return Section("explain", f"Score of query {query} against key {key}",
                   ["pair", "terms"], [[f"q{query}.k{key}", text]], notes,
                   {"value": exact_text(value)})
