"""The ``scores`` tables: shares per row (sum, largest), outputs, one token in vs out, MACs.

Every share and output is read from the trace's bulk certified decimals
(:meth:`~exactattn.engines.trace.Trace.share_decimals`); rows are built as they are
written (:class:`~exactattn.present.stream.LazyRows`), so a head of 4096 tokens
streams its 16 million shares row by row.

* ``largest``: the keys of the largest share.  Correctly rounded decimals
  keep the order of the values, so the largest share is among the keys with
  the largest decimal; when several keys print that decimal, their exact
  scores decide (the largest share belongs to the largest scaled score).
* ``sum``: a row that sees a key sums to exactly 1 (its shares are its
  terms over their own sum, :meth:`~exactattn.numbers.softmax.SoftmaxRow.sum_is_one`);
  a row that sees none gives the empty-row policy's answer.
* JSON data: closed forms as text (:class:`~exactattn.present.cells.RowForms`): each row states
  its normaliser once and each share its numerator, ``share =
  numerator / normaliser``; outputs the same over the row's normaliser.

>>> from exactattn.examples import chronicle
>>> from exactattn.present.tables import attend_example, build
>>> ex = chronicle()
>>> shares = build("scores", ex, attend_example(ex))[0]
>>> shares.rows[1]
['2', '0.5800', '0.1216', '0.1769', '0.1216', 'exactly 1', '0.5800 at key 1']
>>> shares.data["closed_forms"][1]["normaliser"]
'2 + exp(3/8) + exp(25/16)'
"""

from __future__ import annotations

from .cells import (OUTPUT_TERMS, at_keys, certified_cell, divisor_words, exact_text,
                    value_cell, vector)
from ..errors import InputError
from .modifier_tables import grid_section
from .render import Section
from .stream import Grid, LazyRows, shown_note


def largest(trace, i: int, decimals: list[str]) -> list[int]:
    """The keys of row i's largest share, from its certified ``decimals`` and exact scores."""
    n = trace.n
    seen = trace.head.policy.visible_keys(i, n, n)
    if not len(seen) or trace.policy.modified:
        return trace.row(i).largest()      # the empty-row answer, or logits that are not scores
    part = decimals[seen.start:seen.stop]      # visible_keys: a contiguous range
    best = max(part)
    top = [seen.start + j for j, d in enumerate(part) if d == best]
    if len(top) > 1:
        ints, _ = trace.raw_score_ints(i)
        high = max(ints[j] for j in top)
        top = [j for j in top if ints[j] == high]
    return top


def _total(trace, i: int) -> str:
    n = trace.n
    if trace.policy.sink is not None:
        return "exactly 1 with the sink"
    if len(trace.head.policy.visible_keys(i, n, n)) or trace.row_sums_to_one(i):
        return "exactly 1"
    sm = trace.row(i)
    return "nan (no visible key)" if sm.nan else \
        "exactly 0 (no visible key)" if sm.empty else "not 1"


def _identical(trace) -> list[tuple[int, int]]:
    """Pairs (a, b), a < b, 0-based, of tokens with the same numbers and the same score row."""
    if trace.policy.alibi is not None or trace.policy.rope is not None:
        return []           # positions tell equal tokens apart
    xs = trace.x
    groups: dict[tuple, list[int]] = {}
    for i, x in enumerate(xs):     # a cheap first cut: equal tokens share their ends
        groups.setdefault((x[0], x[-1]) if x else (), []).append(i)
    pairs = []
    for members in groups.values():
        for k, a in enumerate(members):
            same = [b for b in members[k + 1:] if xs[b] == xs[a]]
            if same:
                raw = trace.raw_score_ints(a)
                pairs += [(a, b) for b in same if trace.raw_score_ints(b) == raw]
    return sorted(pairs)


def scores(t) -> list[Section]:
    """``scores/shares``: the shares per row (sum, largest); a cut view adds ``scores/rows``,
    each query's sum and largest share.  ``t``: the :class:`~exactattn.present.tables.Tables`.

    ``closed_forms`` adds each row's closed forms to the data (what JSON prints), as text:
    no sympy.

    Raises:
        InputError: a symbolic trace (its shares have no largest key to name).
    """
    trace, view, places, n, head = t.trace, t.view, t.places, t.n, t.head
    if trace.engine == "symbolic":
        raise InputError("trace must come from a numeric engine for the scores table (got "
                         "symbolic); run attend with engine='pencil' or 'fast'")
    policy, share_dec = head.policy, trace.share_decimals(places)
    grid = Grid(n, view, " (sum and largest read every key)")
    toks, keys = grid.toks, grid.keys
    readers = view.readers

    spread: dict[int, bool] = {}

    def share_cell(i: int, j: int, seen) -> str:
        if not readers:
            return share_dec[i][j]
        if j in seen and not policy.modified:
            # two distinct scores in a row make each of its shares irrational
            # (Lindemann-Weierstrass): the reader's cell is the decimal, no exact row needed
            if i not in spread:
                ints = trace.raw_score_ints(i)[0]
                spread[i] = len({ints[k] for k in seen}) > 1
            if spread[i]:
                return share_dec[i][j]
        return value_cell(trace.share(i, j), share_dec[i][j], j not in seen)

    def largest_cell(i: int) -> str:
        top = largest(trace, i, share_dec[i])
        if not top:
            return "-"
        # fewer than every key: two distinct scores, so the share is irrational
        return at_keys(share_dec[i][top[0]] if len(top) < len(policy.visible_keys(i, n, n))
                       else share_cell(i, top[0], top), top)

    sink = policy.sink is not None

    def share_row(i: int) -> list[str]:
        seen = policy.visible_keys(i, n, n)
        return [str(i + 1)] + [share_cell(i, j, seen) for j in keys] + \
            ([certified_cell(trace.sink_share(i), places, readers)] if sink else []) + \
            [_total(trace, i), largest_cell(i)]

    notes = [f"divisor used for these shares: {divisor_words(head, places)}",
             f"shares at {places} certified places (correctly rounded); "
             "printed values may not add to 1 because of rounding"]
    if policy.modified:
        logits = policy.replace(dropout=None).modified      # a score field besides dropout
        notes.append(f"modifiers: {' '.join(f'{k}={v}' for k, v in policy.modifiers().items())}"
                     .replace("'", "") + ("; the shares are the softmax of the logits (square)"
                                          if logits else ""))
    if sink:
        notes.append(f"the sink (logit {policy.sink}) joins every row's normaliser and carries "
                     "no value: the keys' shares add up to 1 minus the sink's share")
    if policy.pairs(n, n) < n * n:
        notes.append("a masked key (one the query does not see) gets a share of exactly 0")
    for a, b in _identical(trace):
        notes.append(f"rows {a + 1} and {b + 1} are identical: tokens {a + 1} and {b + 1} carry "
                     "the same numbers (no positional information)")
    forms = t.forms
    data: dict = {}
    if forms is not None:
        data["formula"] = ("shares[i][j] = closed_forms[i].numerators[j] / "
                           "closed_forms[i].normaliser")
        data["closed_forms"] = LazyRows.over(toks, lambda i: {
            "normaliser": forms.normaliser(i), "numerators": grid.picked(forms.numerators(i))})
    data["shares_decimal"] = LazyRows.over(toks, lambda i: grid.picked(share_dec[i]))
    if sink:
        data["sink_shares"] = LazyRows.over(toks, lambda i: {
            "exact": trace.sink_share(i).text(), "decimal": trace.sink_share(i).decimal(places)})
    data["places"] = places
    sections = [grid_section(grid, "scores/shares", "Shares (attention weights): softmax of "
                             "each row", LazyRows.over(toks, share_row), notes, data,
                             ("sink",) * sink + ("sum", "largest"))]
    if view.corner:
        sections.append(Section(
            "scores/rows", "Each query: its sum and largest share", ["query", "sum", "largest"],
            LazyRows(n, lambda i: [str(i + 1), _total(trace, i), largest_cell(i)]),
            [f"all {n} queries; the largest share reads every key"], {}))
    return sections


def outputs(t) -> Section:
    """``scores/outputs``: each token's output, mixed by its shares (or its weights after
    dropout), with their closed forms in the data."""
    trace, view, n, d_v, forms = t.trace, t.view, t.n, t.head.d_v, t.forms
    output_dec, toks, slots = trace.output_decimals(t.places), view.rows(n), view.part(d_v)

    def out_row(i: int) -> list[str]:
        return [str(i + 1)] + [value_cell(trace.output(i, c), output_dec[i][c]) if view.readers
                               else output_dec[i][c] for c in slots]
    cols = ["token"] + [f"out {c + 1}" for c in slots]
    notes = shown_note("choose tokens with --queries", ("tokens", toks, n),
                       ("columns", slots, d_v))
    if trace.dropout_keep is not None:
        notes.insert(0, "dropout: the outputs mix the values with the weights after dropout "
                        "(scores/dropout), not with the shares")
    data: dict = {}
    if forms is not None:
        data["formula"] = ("outputs[i][c] = closed_forms[i][c] / the normaliser of row i in "
                           f"scores/shares; a row of more than {OUTPUT_TERMS} distinct scores "
                           "has null: outputs[i][c] = sum_j shares[i][j] * values[j][c]")
        data["closed_forms"] = LazyRows.over(toks, forms.output_numerators)
        data["values"] = LazyRows(n, lambda j: [exact_text(v) for v in trace.values[j]])
    data["outputs_decimal"] = LazyRows.over(toks, lambda i: list(output_dec[i]))
    title = "Outputs: sum_j shares[i][j] * values[j]" if trace.dropout_keep is None else \
        "Outputs: sum_j weights[i][j] * values[j] (weights after dropout)"
    return Section("scores/outputs", title, cols, LazyRows.over(toks, out_row), notes, data)


def in_out(t) -> Section:
    """``scores/in-out``: the example's focus token in (x), its value and its output."""
    trace, view, output_dec = t.trace, t.view, t.trace.output_decimals(t.places)
    f = min(t.example.focus, trace.n - 1)
    d_v = trace.head.d_v
    width = view.width(d_v)
    shown = d_v if width is None else width     # entries past the vector's limit stay unread
    out = [value_cell(trace.output(f, c), output_dec[f][c], short=True)
           if view.readers and c < shown else output_dec[f][c] for c in range(d_v)]
    return Section(
        "scores/in-out", f"Token {f + 1} in and out", ["", "numbers"],
        [["in (x)", vector(trace.x[f], view.width(len(trace.x[f])))],
         ["value", vector(trace.vector("values", f), width)], ["out", vector(out, width)]],
        [], {"token": f + 1})


def macs(t) -> Section:
    """``scores/macs``: the multiply-adds this run took, counted in the loops."""
    trace = t.trace
    m = trace.macs
    if m is None:
        return Section("scores/macs", "Multiply-adds", ["stage", "MACs"], [],
                       [f"the {trace.engine} engine counts nothing; see `exactattn cost` for "
                        "the derived figures"], {})
    total = sum(m.values())
    notes = ["a multiply-add (MAC) is one multiplication and one addition; FLOPs = 2 x MACs"]
    if "rotation" in m:
        notes.append("RoPE: 2 d_k products per visible pair, besides the cos and sin of each "
                     "angle (certified, not MACs)")
    rows = [[label, str(m[key])] for label, key in _STAGES if key in m]
    return Section("scores/macs", "Multiply-adds this run took (counted in the loops)",
                   ["stage", "MACs"], rows + [["total", str(total)]], notes, dict(m, total=total))


#: the rows of scores/macs: (label, the stage's key in Trace.macs), in order
_STAGES = (("projections", "projections"), ("scores", "scores"), ("rotation (RoPE)", "rotation"),
           ("mixing", "mix"))
