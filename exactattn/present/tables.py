"""The pencil-check tables, built from one :class:`~exactattn.engines.trace.Trace`.

The tables are data: :data:`TABLES` lists every table in walkthrough order, each with
its mode (``row``, ``weights``, ``project``, ``square``, ``scores``), when it is shown
and its builder, a function of one :class:`Tables` (the example, the trace, the places,
the view).  :func:`build` reads the list; each table is a
:class:`~exactattn.present.render.Section` (a titled grid of cells plus notes and exact
data), which :func:`exactattn.present.render.write` writes as text, Markdown, LaTeX,
CSV, JSON or JSON Lines.

Cells show exact rationals as fractions (``25/8``) with their decimal when it
terminates (``25/8 = 3.125``) or a rounded one when it does not (``1/3 ~
0.3333``); see :mod:`exactattn.present.cells`.  Shares and outputs are read from the
trace's bulk certified path (:meth:`~exactattn.engines.trace.Trace.share_decimals`,
correctly rounded, whatever engine made the trace).  This module chooses what
to show; every number comes from the trace.

Any size: rows are built when written (:class:`~exactattn.present.stream.LazyRows`),
and a :class:`~exactattn.present.stream.View` says which tokens and keys to show.
Past 16 keys, people (text, Markdown, LaTeX) get a readable corner, the
first 8 queries and keys, plus a line per query with its sum and largest
share; the machine formats get everything, streamed.

>>> from exactattn.examples import chronicle
>>> ex = chronicle()
>>> s = build("square", ex, attend_example(ex))
>>> s[0].rows[1]
['2', '25/8 = 3.125', '0', '3/4 = 0.75', '0']
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

from ..options import check_choice
from ..call.policy import divisor_text
from .cells import (RowForms, Scaler, divisor_words, exact_text, value_cell,
                    vector, with_decimal)
from ..engines.head import Head, attend
from ..engines.trace import Trace
from ..reference.kernels import score
from ..numbers.exact import common_denominator
from .modifier_tables import STAGES, dropout, grid_section, lse
from .render import Section, plural, printable
from .score_tables import in_out, macs, outputs, scores
from .stream import Grid, LazyRows, View, shown_note, span_text
from .sweep import check_row, with_divisor

MODES = ("row", "weights", "project", "square", "scores")
#: the projections of at most this many tokens are checked against bias-free neurons
NEURON_TOKENS = 64


def attend_example(example, *, no_scale: bool = False, engine: str = "auto") -> Trace:
    """Run an example's head on its tokens (``no_scale`` drops the divisor).

    The head's policy says the empty-row answer; a spec's dropout keep-mask
    (``example.dropout_keep``, :class:`~exactattn.engines.spec.HeadSpec`) goes with the call.
    """
    head = with_divisor(example.head, None) if no_scale else example.head
    return attend(head, example.x, engine=engine, dropout_keep=getattr(example, "dropout_keep", None))


def _texts(values, picked=None) -> list[str]:
    return [exact_text(values[c]) for c in (range(len(values)) if picked is None else picked)]


_DECIMAL_TEXT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+)$")


def _typed_texts(t, name: str, line: int, values, picked) -> list[str]:
    """Input entries for people (line ``line`` of ``name``: ``x``, ``W_Q`` ...): a decimal the
    user typed as typed (``-0.731``) when it is the entry's exact value, every other entry
    (and every one with ``--fractions``) exactly."""
    exact, typed = _texts(values, picked), getattr(t.example, "typed", {}).get(name)
    if not typed or t.view.fractions or not t.view.people:
        return exact
    typed = typed[line]
    return [typed[c] if c < len(typed) and _DECIMAL_TEXT.match(typed[c]) and
            Fraction(typed[c]) == values[c] else text for c, text in zip(picked, exact)]


# --------------------------------------------------------------------------- the modes
class Tables:
    """What the tables of one trace read: the example, the trace, the places and the view
    (default: everything), and what several tables share, computed once when first read
    (the closed forms).  ``lse`` (``"e"`` or ``"2"``; default the example's) asks for
    ``scores/lse``."""

    def __init__(self, example, trace: Trace, places: int = 4, view: View | None = None, *,
                 closed_forms: bool = True, lse: str | None = None):
        self.example, self.trace, self.places = example, trace, places
        self.view = view or View()
        self.head, self.n, self.policy = trace.head, trace.n, trace.policy
        self.closed_forms = closed_forms
        self.lse = lse if lse is not None else getattr(example, "lse", None)

    @functools.cached_property
    def forms(self):
        return RowForms(self.trace) if self.closed_forms else None


def row(t: Tables) -> Section:
    """The tokens: index, id, byte count, text, and the numbers each arrives with."""
    example, trace, view = t.example, t.trace, t.view
    n, d = trace.n, trace.head.d_model
    names = example.slot_names or [f"x{m + 1}" for m in range(d)]
    toks, slots = view.rows(n), view.part(d)
    cols = ["n", "id", "bytes", "text"] + [names[m] for m in slots]

    def line(i: int) -> list[str]:
        tok = example.tokens[i]
        return [str(i + 1), "" if tok.id is None else str(tok.id), str(tok.nbytes),
                printable(tok.text)] + _typed_texts(t, "x", i, trace.x[i], slots)
    notes = [f"{plural(n, 'token')}, each with d_model = {plural(d, 'number')}"]
    if example.title:
        notes.insert(0, f"source text: {example.title}")
    notes += shown_note("choose tokens with --queries" + _COLUMNS * (len(slots) < d),
                        ("tokens", toks, n), ("numbers", slots, d))
    return Section("row", "The row: tokens and their numbers", cols, LazyRows.over(toks, line),
                   notes, {"x": LazyRows.over(toks, lambda i: _texts(trace.x[i]))})


_COLUMNS = " and how many numbers with --columns"


def weights(t: Tables) -> list[Section]:
    """The three matrices, one line per output slot (or per input in the rows layout)."""
    view, head = t.view, t.head
    slots = head.layout == "slots"
    out = []
    for name in ("W_Q", "W_K", "W_V"):
        m, b = head.weights(name), "b_" + name[-1]
        bias = head.bias(b)
        lines, width = view.part(len(m)), view.part(len(m[0]))
        cols = ["slot" if slots else "input"] + [f"x{c + 1}" if slots else f"slot {c + 1}"
                                                  for c in width]
        rows = [[str(r + 1)] + _typed_texts(t, name, r, m[r], width) for r in lines]
        notes = shown_note("choose how many with --columns" if len(width) < len(m[0]) else None,
                           ("lines", lines, len(m)), ("columns", width, len(m[0])))
        data = {name: [_texts(r) for r in m]}
        if bias is not None:    # a + b_Q column in the slots layout (one number a slot line),
            if slots:           # a + b_Q row in the rows layout (one number a slot column)
                cols.append(f"+ {b}")
                for r, line in zip(lines, rows):
                    line.append(exact_text(bias[r]))
            else:
                rows.append([f"+ {b}"] + _texts(bias, width))
            notes.append(f"+ {b}: the bias, added to each slot once after the multiply-adds: "
                         f"{name[-1].lower()} = {f'{name} x' if slots else f'x @ {name}'} + {b}")
            data[b] = _texts(bias)
        out.append(Section(f"weights/{name}", f"{name} ({len(m)} x {len(m[0])}, {head.layout} "
                           "layout)", cols, rows, notes, data))
    out[-1].notes.append("slots layout: q = W_Q x, one line per output slot" if slots else
                         "rows layout: q = x @ W_Q, one line per input number")
    return out


def neuron_layer(flat_weights: list, inputs: list, width: int) -> list:
    """A row of bias-free neurons: neuron s returns ``sum_m w[s*D + m] x[m]``.

    The same flat weights as a projection matrix in the slots layout give the
    same numbers; :func:`project` reports that cross-check.

    >>> neuron_layer([1, 2, 3, 4], [1, 1], 2)
    [3, 7]
    """
    d = len(inputs)
    return [sum(flat_weights[s * d + m] * inputs[m] for m in range(d)) for s in range(width)]


def _neurons_agree(trace: Trace, tokens) -> bool:
    """The bias-free-neuron cross-check of ``tokens``' projections (on integers when it can)."""
    head = trace.head
    xs = [trace.x[i] for i in tokens]
    x_ints = common_denominator(xs) if xs else None
    same = True
    for name, part in (("W_Q", "queries"), ("W_K", "keys"), ("W_V", "values")):
        got = {i: trace.vector(part, i) for i in tokens}
        m = head.weights(name, "slots")
        w_ints = common_denominator(m)
        bias = head.bias("b_" + name[-1])
        if bias is not None:    # the neurons read the bias-free part of each projection
            got = {i: [v - c for v, c in zip(got[i], bias)] for i in tokens}
        ints = x_ints is not None and w_ints is not None     # integers, times a denominator
        w, den, inputs = (w_ints[0], w_ints[1] * x_ints[1], x_ints[0]) if ints else (m, 1, xs)
        flat = [e for line in w for e in line]
        for i, x in zip(tokens, inputs):
            same &= neuron_layer(flat, x, len(m)) == [v * den for v in got[i]]
    return same


def project(t: Tables) -> Section:
    """Each token's query, key and value, and the bias-free-neuron cross-check."""
    trace, view, head, n = t.trace, t.view, t.head, t.n
    toks = view.rows(n)
    qw, vw = view.width(head.d_k), view.width(head.d_v)

    def line(i: int) -> list:
        return [str(i + 1), vector(trace.vector("queries", i), qw),
                vector(trace.vector("keys", i), qw), vector(trace.vector("values", i), vw)]
    checked = list(toks[:NEURON_TOKENS])
    same = _neurons_agree(trace, checked)
    mults = head.d_k * head.d_model
    which = "" if len(checked) == n else f" (tokens {span_text(checked)} of {n} checked)"
    given = [b for b in ("b_Q", "b_K", "b_V") if head.bias(b) is not None]
    notes = [
        f"one projection of one token: {plural(mults, 'multiplication')} and "
        f"{plural(head.d_k * (head.d_model - 1), 'addition')} "
        f"({plural(mults, 'multiply-add')})",
        f"the projection equals a row of {'neurons' if head.biases else 'bias-free neurons'} "
        f"fed the same flat weights{', plus the biases' if head.biases else ''}: "
        f"the same numbers: {'true' if same else 'false'}{which}",
    ]
    if head.biases:
        notes.insert(1, f"+ {', '.join(given)}: each bias is added once per slot after the "
                        "multiply-adds (an addition, not a multiply-add); the + bias row shows "
                        "them (- for none)")
    notes += shown_note("choose tokens with --queries" + _COLUMNS * bool(qw or vw),
                        ("tokens", toks, n), (qw or vw) and f"the first {qw or vw} numbers of "
                                                           "each vector")

    data = {name: LazyRows.over(toks, lambda i, name=name: _texts(trace.vector(name, i)))
            for name in ("queries", "keys", "values")} | {"neurons_agree": same}
    rows = LazyRows.over(toks, line)
    if head.biases:     # a + bias row: b_Q, b_K, b_V under query, key, value (- for none)
        last = ["+ bias"] + ["-" if head.bias(b) is None else vector(head.bias(b), w)
                             for b, w in (("b_Q", qw), ("b_K", qw), ("b_V", vw))]
        rows = LazyRows(len(toks) + 1, lambda k: line(toks[k]) if k < len(toks) else last)
        data["biases"] = {b: None if head.bias(b) is None else _texts(head.bias(b))
                          for b in ("b_Q", "b_K", "b_V")}
    return Section("project", "Projections: query, key and value of each token",
                   ["token", "query", "key", "value"], rows, notes, data)


def _score_rows(trace: Trace, grid: Grid, scale: Scaler, places: int | None) -> LazyRows:
    """Rows ``[query, cell for each key shown]`` of the grid's raw scores through ``scale``
    (``-inf`` where hidden); ``places`` None: the exact values alone, hidden ones None (JSON
    data)."""
    keys, every = grid.keys, len(grid.keys) == trace.n
    symbolic = trace.engine == "symbolic"

    def line(i: int) -> list:
        if symbolic:          # sympy scores: each cell as sympy writes it
            raw = trace.raw_score_row(i)
            cells = [None if raw[j] is None else scale.exact(raw[j]) if places is None
                     else scale.text(raw[j], places) for j in keys]
        else:
            ints, den = trace.raw_score_ints(i)
            cells = scale.row(ints if every else [ints[j] for j in keys], den, places)
        if places is None:
            return cells
        return [str(i + 1)] + ["-inf" if c is None else c for c in cells]
    return LazyRows.over(grid.toks, line)


def square(t: Tables) -> list[Section]:
    """Raw scores (queries x keys) and scaled scores, with the divisor stated.

    ``places``: the decimals of values that are not exact (an irrational
    scaled score, a rational whose decimal does not terminate).
    """
    trace, places, head = t.trace, t.places, t.head
    grid = Grid(t.n, t.view)
    mask = " (causal: -inf above the diagonal)" if head.causal else ""
    raw = Scaler(None)
    out = [grid_section(grid, "square/raw", f"Raw scores: queries[i] . keys[j]{mask}",
                        _score_rows(trace, grid, raw, places), [],
                        {"raw_scores": _score_rows(trace, grid, raw, None)})]
    window = head.policy.window
    if window is not None:
        left, right = ("any" if w is None else w for w in window)
        out[0].notes.insert(0, f"sliding window (left, right) = ({left}, {right}): the query at "
                               f"position p sees keys p - {left} .. p + {right}, its own key "
                               "included; -inf where hidden")
    d2 = head.divisor_squared
    if d2 is None:
        out[0].notes.append("divisor: none (unscaled); the shares read the raw scores")
        return out
    scale = Scaler(d2)
    out.append(grid_section(grid, "square/scaled", f"Scaled scores: raw / {divisor_text(d2)}",
                            _score_rows(trace, grid, scale, places),
                            [f"divisor: {divisor_words(head, places)}"],
                            {"divisor": divisor_text(d2),
                             "scaled_scores": _score_rows(trace, grid, scale, None)}))
    return out


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

    grid, unit = Grid(n, View()), Scaler(None)
    raw_sec = grid_section(
        grid, "compare/raw", "Raw self-match (no projections): x[i] . x[j]",
        _score_rows(raw, grid, unit, places),
        [f"divisor for the raw shares: {divisor_words(raw_head, places)}",
         "x[i] . x[i] is a sum of squares, so without projections a token tends to match "
         "itself best"],
        {"raw_scores": _score_rows(raw, grid, unit, None),
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


#: every table, in walkthrough order: (mode, when it is shown (None: always), its builder);
#: a builder reads a :class:`Tables` and returns a Section or a list of them
TABLES = (
    ("row", None, row),
    ("weights", None, weights),
    ("project", None, project),
    ("square", None, square),
    *(("square", shown, make) for shown, make in STAGES),
    ("square", lambda t: getattr(t.example, "compare_raw", False),
     lambda t: raw_match(t.example, t.trace, t.places)),
    ("scores", None, scores),
    ("scores", lambda t: t.trace.dropout_keep is not None, dropout),
    ("scores", lambda t: t.lse is not None, lse),
    ("scores", None, outputs),
    ("scores", None, in_out),
    ("scores", None, macs),
)


def build(mode: str, example, trace: Trace, places: int = 4, *,
          closed_forms: bool = True, view: View | None = None,
          lse: str | None = None) -> list[Section]:
    """The sections of one mode (``row``, ``weights``, ``project``, ``square``, ``scores``,
    or ``walkthrough``: all five in order): the :data:`TABLES` of that mode shown for this
    trace, built from one :class:`Tables`.

    ``square`` adds the raw self-match (:func:`raw_match`) for an example with
    ``compare_raw``.  ``view`` (default: everything) chooses the tokens and
    keys shown; ``closed_forms`` adds the shares' and outputs' closed forms
    (as text) to the scores' data.  A modified head adds its stages to
    ``square`` and its dropout weights to ``scores``; ``lse`` (``"e"`` or
    ``"2"``; default the example's ``lse``) adds each row's log-sum-exp
    (:mod:`exactattn.present.modifier_tables`).
    """
    check_choice(mode, "mode", MODES + ("walkthrough",))
    t = Tables(example, trace, places, view, closed_forms=closed_forms, lse=lse)
    out: list[Section] = []
    for m, shown, make in TABLES:
        if mode in (m, "walkthrough") and (shown is None or shown(t)):
            made = make(t)
            out += made if isinstance(made, list) else [made]
    return out


def explain(trace: Trace, query: int, key: int, places: int = 4) -> Section:
    """The raw score of ``query`` against ``key`` (1-based) written out term by term.

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> explain(attend_example(ex), 2, 1).rows[0][1]
    '0×0 + 3×1 + 1/2×1/4 + 0×1/2 = 25/8 = 3.125'
    """
    check_row(query, trace.n, "query"), check_row(key, trace.n, "key")
    q, k = trace.vector("queries", query - 1), trace.vector("keys", key - 1)

    def factor(v):
        text = exact_text(v)
        return f"({text})" if v < 0 else text
    terms = " + ".join(f"{factor(a)}×{factor(b)}" for a, b in zip(q, k))
    (value,), = score([q], [k], lambda i: range(1))[0]   # a masked pair too: the kernel's sum
    value = Fraction(value)
    text = f"{terms} = {with_decimal(value, places)}"
    notes = []
    d2 = trace.head.divisor_squared
    if d2 is not None:
        notes.append(f"divided by {divisor_text(d2)}: {Scaler(d2).text(value, places)}")
    if trace.raw_score_row(query - 1)[key - 1] is None:
        notes.append("this pair is masked (causal): the head never computes it, and its "
                     "scaled score counts as -inf")
    return Section("explain", f"Score of query {query} against key {key}",
                   ["pair", "terms"], [[f"q{query}.k{key}", text]], notes,
                   {"value": exact_text(value)})
