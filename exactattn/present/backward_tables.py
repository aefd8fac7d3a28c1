"""The backward pass of a worked example as tables to check by hand (``exactattn backward``).

For a head, its tokens and a stated upstream gradient ``dO`` (the gradient of
a loss w.r.t. the outputs; by default that of "the sum of the last output
column", ``dO_i = (0, ..., 0, 1)``), the tables follow the backward pass step
by step (Dao et al. 2022, FlashAttention, Algorithm 4; Vaswani et al. 2017,
sec. 3.2.1), each from the one before:

1. ``dO`` and the shares ``P`` of the forward pass;
2. ``dP = dO V^T`` (exact rationals; times the dropout factors under dropout);
3. ``D_i = sum_j P_ij dP_ij = dO_i . O_i``;
4. ``dS = P * (dP - D)`` with each row's sum (0 exactly; the sink's column in);
5. ``dQ = scale dS K``, ``dK = scale dS^T Q``, ``dV = P^T dO``;
6. the weight gradients ``dW = sum_i (dQ|dK|dV)_i x_i^T`` and the bias gradients.

Every number is exact or certified (:mod:`exactattn.gradients`): a rational
prints as a fraction with its decimal, anything else as its correctly rounded
decimal; the closed forms (rational functions of ``t = exp(...)``) of ``D``
and ``dS`` follow in their own table, and JSON carries every entry's closed form.
This module presents; it computes nothing.

>>> from exactattn.examples import chronicle
>>> from exactattn.gradients import head_gradients
>>> ex = chronicle()
>>> secs = backward_sections(ex, head_gradients(ex.head, ex.x, [[0, 0, 0, 1]] * 4), 4)
>>> [s.name for s in secs][:4]
['backward/d_out', 'backward/shares', 'backward/dP', 'backward/D']
>>> secs[4].rows[1]
['2', '-0.0513', '-0.0108', '0.0728', '-0.0108', '0 (exact)']
"""

from __future__ import annotations

from ..call.policy import divisor_text
from .cells import value_cell, vector
from .render import Section


def _matrix(name: str, title: str, values, decimals, key: str, first: str, notes: list,
            data: dict, more=()) -> Section:
    """One table of the backward: a matrix of values (1-based row labels, exact ones marked),
    then the ``more`` columns (``(header, cells)``: the sink's, a row sum)."""
    header = [first] + [f"{key} {c + 1}" for c in range(len(values[0]))]
    rows = [[str(i + 1)] + [value_cell(v, d) for v, d in zip(vals, decs)]
            for i, (vals, decs) in enumerate(zip(values, decimals))]
    for column, cells in more:
        header.append(column)
        for r, c in zip(rows, cells):
            r.append(c)
    return Section(f"backward/{name}", title, header, rows, notes, data)


def _texts(values) -> list:
    return [[v.text() for v in r] for r in values]


def _over(value, gen: str) -> str:
    """A value over the generators, their ``where`` left to the table's note (which says it once)."""
    return value.text(style="generators").removesuffix(f" where {gen}")


def backward_sections(example, hg, places: int, *, closed_forms: bool = False) -> list[Section]:
    """The backward walkthrough of ``example`` from its :class:`HeadGradients` ``hg``.

    ``closed_forms``: put every entry's closed form in the tables' data (JSON).
    """
    g = hg.call
    n, S = g.R, g.S
    gen = g.terms.generator_text()

    def exact(values) -> dict:
        return {"exact": _texts(values)} if closed_forms else {}

    def sink(name: str) -> list:
        """The sink's column of ``name`` (none without a sink)."""
        values = [] if g.sink is None else [g.value(name, i, S) for i in range(n)]
        return [("sink", [value_cell(v, v.decimal(places)) for v in values])] * bool(values)
    P, dP, D, dS = g.P, g.dP, g.D, g.dS
    drop = "" if g.factors is None else " times the dropout factors keep / (1 - p)"
    sums = [g.row_sum(i) for i in range(n)]
    dS_notes = ["dS_ij = P_ij (dP_ij - D_i): the gradient w.r.t. the logits (and w.r.t. an "
                "additive mask or bias entry)"]
    if g.sink is not None:
        dS_notes.append(f"the sink's column is in the row sums; dL/dsink = -sum_i P_i,sink D_i = "
                        f"{g.dsink.decimal(places)}")
    forms = [[f"D_{i + 1}", _over(D[i], gen)] for i in range(n)]
    forms += [[f"dS_{i + 1},{j + 1}", _over(dS[i][j], gen)] for i in range(n) for j in range(S)
              if dS[i][j].nan or not dS[i][j].is_zero()]
    out = [
        Section("backward/d_out", "Upstream gradient dO (the loss's gradient w.r.t. the outputs)",
                ["token", "dO"], [[str(i + 1), vector(r)] for i, r in enumerate(g.d_out)],
                ["the loss is sum_i dO_i . O_i: its gradient w.r.t. O is dO"],
                {"d_out": [[str(x) for x in r] for r in g.d_out]}),
        _matrix("shares", f"Shares P (forward), {gen}", P, g.decimals("P", places), "key",
                "query", [f"every exponential is a power of {gen}"] + (
                    [] if g.sink is None else [f"the sink (logit {g.sink}) is one more column "
                                               "with value 0: it takes a share of every row"]),
                exact(P), sink("P")),
        _matrix("dP", f"dP = dO V^T{drop} (exact)", dP, g.decimals("dP", places), "key", "query",
                ["dP_ij = dO_i . v_j: what a unit more of share j would add to the loss"],
                {"exact": _texts(dP)}),
        Section("backward/D", "D_i = sum_j P_ij dP_ij = dO_i . O_i", ["query", "D_i"],
                [[str(i + 1), value_cell(v, d)] for i, (v, d) in
                 enumerate(zip(D, g.decimals("D", places)))],
                ["D_i is the loss's share-weighted mean of dP over row i"],
                {"exact": [v.text() for v in D]} if closed_forms else {}),
        _matrix("dS", "dS = P * (dP - D); every row sums to 0", dS, g.decimals("dS", places),
                "key", "query", dS_notes, exact(dS), sink("dS") + [("row sum", [
                    "0 (exact)" if not t.nan and t.is_zero() else t.decimal(places)
                    for t in sums])]),
        Section("backward/forms", "Closed forms of D and of the non-zero dS",
                ["value", "closed form"], forms, [f"{gen}; dS_ij = 0 where not listed"])]
    scale = [] if g.divisor_squared is None else \
        [f"the scale is 1/{divisor_text(g.divisor_squared)}"]
    for name, what in (("dQ", "dQ = scale dS K"), ("dK", "dK = scale dS^T Q"),
                       ("dV", "dV = P^T dO")):
        vals = g.matrix(name)
        out.append(_matrix(name, what, vals, g.decimals(name, places), "c", "token",
                           scale if name != "dV" else [], exact(vals)))
    for name in ("dW_Q", "dW_K", "dW_V"):
        vals = hg.matrix(name)
        out.append(_matrix(name, f"{name} = sum_i d{name[-1]}_i x_i^T ({hg.layout} layout)",
                           vals, hg.decimals(name, places), "x",
                           "slot" if hg.layout == "slots" else "input", [], exact(vals)))
    biases = [[name] + [value_cell(v, d) for v, d in zip(hg.matrix(name),
                                                         hg.decimals(name, places))]
              for name in ("db_Q", "db_K", "db_V")]
    width = max(len(r) for r in biases) - 1
    key_note = ("db_K = 0 exactly: the key bias cancels in the softmax" if g.sink is None else
                "db_K is not 0: the sink's logit does not move with the key bias")
    out.append(Section("backward/biases", "Bias gradients db = sum_i d(Q|K|V)_i",
                       ["bias"] + [f"slot {s + 1}" for s in range(width)],
                       [r + [""] * (width + 1 - len(r)) for r in biases],
                       [key_note, "db_V = sum_i dO_i over the rows that see a key" if g.sink is None
                        else "db_V = sum_i (1 - P_i,sink) dO_i: the sink's share carries no value"]))
    return out
