"""Walkthrough tables of a modified head: RoPE, soft-capping, ALiBi, logits, dropout, log-sum-exp.

A head whose :class:`~exactattn.call.policy.Policy` carries today's modifiers gets
these tables besides the plain ones (:mod:`exactattn.present.tables`,
:mod:`exactattn.present.score_tables`), each value read from the trace:

* ``square/rope``: the raw scores after rotating queries and keys by their
  positions (:meth:`~exactattn.engines.trace.Trace.rotated_score`);
* ``square/capped``: ``cap * tanh(scaled / cap)``, before biases and masks;
* ``square/alibi``: the ALiBi bias of every visible pair, with the head's
  exact slope (``1/sqrt(2)`` for head 9 of 12);
* ``square/logits``: what the softmax reads, when it differs from the stage
  shown last (ALiBi, or RoPE without soft-capping);
* ``scores/dropout``: the weights after dropout (``share * keep / (1 - p)``),
  whose rows no longer sum to 1;
* ``scores/lse``: each row's log-sum-exp, closed form and certified digits,
  on request.

Every table says which kind of value it holds (:data:`KINDS`):
exact rational, exact algebraic or certified transcendental (digits
correctly rounded from enclosures; readers see such cells marked ``~``).
The sink's share is a column of ``scores/shares``; windows and causal rules
hide cells (``-inf``) as in the plain tables.

>>> from fractions import Fraction
>>> from exactattn.call.policy import Policy
>>> from exactattn.engines.head import Head, attend
>>> from exactattn.call.modifiers import Alibi
>>> h = Head([[1]], [[1]], [[1]], divisor=None)
>>> t = attend(h.with_policy(h.policy.replace(alibi=Alibi(12), head=8)), [[0], [1]])
>>> from exactattn.present.tables import build
>>> bias = build("square", None, t)[1]
>>> bias.title, bias.rows[1]
('ALiBi biases: -m (p_i - j), slope m = 1/sqrt(2)', ['2', '-1/sqrt(2) ~ -0.7071', '0'])
"""

from __future__ import annotations

from fractions import Fraction

from .cells import certified_cell, exact_text, value_cell, with_decimal
from ..call.modifiers import dropout_factors
from ..numbers.reals import Surd, real_decimal
from .render import Cell, Section
from .stream import Grid, LazyRows, shown_note

#: the kinds of value a table names: what is exact and what is certified
KINDS = ("exact rational", "exact algebraic", "certified transcendental")


def real_kind(value) -> str:
    """Which kind of value ``value`` is (one of :data:`KINDS`).

    A ``Fraction`` (or an exact ratio that is rational) is exact rational; a
    :class:`~exactattn.numbers.reals.Surd` (``1/sqrt(2)``, ``2^(1/4)``) exact
    algebraic; anything else (soft-capped or rotated scores, shares and
    log-sum-exps of a row that are not rational) transcendental, its digits
    certified from enclosures.

    >>> from exactattn.numbers.reals import softcap, two_power
    >>> real_kind(Fraction(1, 2)), real_kind(two_power(Fraction(1, 2))), real_kind(softcap(Fraction(1), Fraction(1)))
    ('exact rational', 'exact algebraic', 'certified transcendental')
    """
    if isinstance(value, (int, Fraction)):
        return KINDS[0]
    if isinstance(value, Surd) and value.rational() is None:
        return KINDS[2] if value.transcendental else KINDS[1]
    rational = getattr(value, "rational", None)
    return KINDS[0] if rational is not None and rational() is not None else KINDS[2]


def real_exact(value) -> str | None:
    """The exact text of a rational, algebraic or certified value (its closed form); None stays None.

    >>> from exactattn.numbers.reals import two_power
    >>> real_exact(Fraction(-1, 4)), real_exact(-two_power(Fraction(-1, 2)))
    ('-1/4', '-1/sqrt(2)')
    """
    if value is None:
        return None
    q = value.rational() if isinstance(value, Surd) else Fraction(value)
    return exact_text(q) if q is not None else value.text()


def real_cell(value, places: int) -> str:
    """The cell of a rational, algebraic or certified value (``-inf`` for None: hidden).

    Rationals read as :func:`with_decimal` does (``-1/2 = -0.5``); algebraic
    values as their closed form and certified decimal (``-1/sqrt(2) ~
    -0.7071``); certified transcendental values as their decimal, which
    readers see marked ``~`` (not exact).

    >>> from exactattn.numbers.reals import softcap, two_power
    >>> real_cell(Fraction(-1, 2), 4), real_cell(-two_power(Fraction(-1, 2)), 4)
    ('-1/2 = -0.5', '-1/sqrt(2) ~ -0.7071')
    >>> c = real_cell(softcap(Fraction(2), Fraction(1)), 4); (str(c), c.reader)
    ('0.9640', '~0.9640')
    """
    if value is None:
        return "-inf"
    if isinstance(value, Surd) and value.transcendental:
        dec = value.decimal(places)
        return Cell(dec, "~" + dec)
    if isinstance(value, Surd):
        q = value.rational()
        return with_decimal(q, places) if q is not None else \
            f"{value.text()} ~ {value.decimal(places)}"
    return with_decimal(Fraction(value), places)


#: a row's log-sum-exp closed form is written out up to this many distinct terms
LSE_TERMS = 16
#: ... and printed in a table cell up to this many characters (JSON always has it)
LSE_WIDTH = 72
_CERTIFIED = ("~: certified transcendental, the digits correctly rounded from arb enclosures "
              "(no tolerance)")


def _positions(trace) -> list[str]:
    """A note on where the queries sit, when a query offset or alignment moves them."""
    p0 = trace.policy.query_position(0, trace.n, trace.n)
    if p0 == 0:
        return []
    return [f"positions: key j (numbered from 1) sits at position j - 1, query i at "
            f"p_i = i - 1 + {p0}"]


def grid_section(grid: Grid, name: str, title: str, rows, notes: list, data: dict,
                 more: tuple = ()) -> Section:
    """The one builder of the square tables: a query column and the grid's keys (then the
    ``more`` columns), ``rows`` built when written, ``notes`` then the grid's cut note."""
    return Section(name, title, grid.cols + list(more), rows, notes + grid.shown, data)


def _rope(trace, grid: Grid, places: int):
    rope = trace.policy.rope
    scaled = {} if rope.scaling is None else {"scaling": rope.scaling.to_dict()}
    return ("Rotated scores (RoPE): queries[i] . keys[j] after rotating both by their positions",
            lambda i: [trace.rotated_score(i, j) for j in range(grid.n)],
            [f"RoPE: theta = {rope.theta}, {rope.layout} layout; a pair of entries turns by "
             "position * theta^(-2k/d_k) (Su et al. 2021, sec. 3.4)" + (
                 f"; frequencies scaled: {rope.scaling.text()}" if scaled else ""),
             "kind: exact rational where the angle is 0 (the query's own position), certified "
             "transcendental elsewhere (cos and sin of rational multiples)", _CERTIFIED,
             "the softmax reads these rotated scores, not the raw ones above"]
            + _positions(trace), True, dict(theta=str(rope.theta), layout=rope.layout, **scaled))


def _capped(trace, grid: Grid, places: int):
    cap = trace.policy.softcap
    return (f"Capped scores: {cap}*tanh(scaled / "
            f"{cap if cap.denominator == 1 else f'({cap})'}) (soft-capping, before "
            "biases and masks)", lambda i: trace.logit_row(i, "capped"),
            ["kind: certified transcendental (tanh of a nonzero exact score; tanh(0) = 0 "
             "exactly); tanh is injective, so equal scaled scores give exactly equal capped "
             "scores", _CERTIFIED,
             "capped before the mask: a hidden key stays -inf (weight 0)"], True,
            dict(cap=str(cap)))


def _alibi(trace, grid: Grid, places: int):
    policy = trace.policy
    alibi, h = policy.alibi, policy.head
    slope = alibi.slope(h)
    kind = real_kind(slope)
    slope_text = real_exact(slope)
    if kind != KINDS[0]:
        slope_text += f" ~ {real_decimal(slope, places)}"
    notes = [f"head {h} of {alibi.heads} ({alibi.form} form): slope m = {slope_text}, {kind}; "
             "slopes from the head count as in Press et al. 2022 (sec. 3) and the authors' code",
             f"kind: every bias is {kind} (the slope times a whole number)",
             "the bias is added to the scaled (or capped) score; -inf where the key is hidden"]
    return (f"ALiBi biases: {alibi.formula('p_i')}, slope m = {real_exact(slope)}",
            lambda i: [trace.alibi_bias(i, j) for j in range(grid.n)],
            notes + _positions(trace), False,
            dict(heads=alibi.heads, head=h, form=alibi.form, slope=real_exact(slope), kind=kind))


def _logits(trace, grid: Grid, places: int):
    policy = trace.policy
    sink, cert = policy.sink, policy.softcap is not None or policy.rope is not None
    steps = ("capped " if policy.softcap is not None else "") + \
        ("rotated" if policy.rope is not None else "scaled") + " score" + \
        (" + ALiBi bias" if policy.alibi is not None else "")
    return (f"Logits: what the softmax reads ({steps})", lambda i: trace.logit_row(i, "logit"),
            (["kind of each value: exact rational, exact algebraic (an irrational slope or "
              "divisor) or certified transcendental (capped or rotated)", _CERTIFIED] if cert
             else ["kind of each value: exact rational, or exact algebraic (an irrational slope "
                   "or divisor: its closed form ~ its certified decimal)"])
            + ([f"the sink's logit {sink} joins every row's softmax and carries no value"]
               if sink is not None else []), True,
            {} if sink is None else {"sink": real_exact(sink)})


def _stage(name: str, parts):
    """The builder of one score stage (``parts``: :func:`_rope` ...): a table of reals over
    the grid, with the sink's logit one more column of ``square/logits``; its JSON data the
    exact texts, the certified decimals (and with ``kinds``, each value's kind)."""
    def build(t) -> Section:
        grid, places = Grid(t.n, t.view), t.places
        title, row_of, notes, kinds, extra = parts(t.trace, grid, places)
        data = {"exact": grid.data(row_of, real_exact),
                "decimal": grid.data(row_of, lambda v: None if v is None else
                                     real_decimal(v, places))}
        if kinds:
            data["kind"] = grid.data(row_of, lambda v: None if v is None else real_kind(v))
        rows = grid.rows(row_of, lambda v: real_cell(v, places))
        sink = t.policy.sink if name == "square/logits" else None
        if sink is not None:          # the sink: one more logit in every row, with no value
            plain, text = rows, real_cell(sink, places)
            rows = LazyRows(len(plain), lambda k: plain[k] + [text])
        return grid_section(grid, name, title, rows, notes, data | extra,
                            ("sink",) if sink is not None else ())
    return build


#: the score stages a modified head adds after ``square/scaled``, in order: (when it is
#: shown, its builder)
STAGES = (
    (lambda t: t.policy.rope is not None, _stage("square/rope", _rope)),
    (lambda t: t.policy.softcap is not None, _stage("square/capped", _capped)),
    (lambda t: t.policy.alibi is not None, _stage("square/alibi", _alibi)),
    (lambda t: t.policy.alibi is not None or t.policy.sink is not None or
     (t.policy.rope is not None and t.policy.softcap is None), _stage("square/logits", _logits)),
)


def dropout(t) -> Section:
    """``scores/dropout``: the weights after dropout and each row's sum."""
    trace, places, grid, readers = t.trace, t.places, Grid(t.n, t.view), t.view.readers
    policy, keep = trace.policy, trace.dropout_keep
    p = policy.dropout
    dec = trace.dropped_decimals(places)

    def weight_cell(i: int, j: int) -> str:
        if not readers:
            return dec[i][j]
        if trace.raw_score_row(i)[j] is None:
            return Cell(dec[i][j], "masked")
        if not keep[i][j]:
            return Cell(dec[i][j], "dropped")
        return value_cell(trace.dropped_share(i, j), dec[i][j])

    def line(i: int) -> list:
        return [str(i + 1)] + [weight_cell(i, j) for j in grid.keys] + \
            [certified_cell(trace.dropped_sum(i), places, readers)]

    scale = dropout_factors(p, [True])[0]              # 1/(1 - p): the one dropout rule
    notes = [f"dropout p = {p}: a kept weight is the share times 1/(1 - p) = {scale}; a dropped "
             "key gets 0",
             "rows no longer sum to 1: each sums to (the sum of its kept shares) / (1 - p)",
             f"weights at {places} certified places (correctly rounded)"]
    data = {"p": str(p),
            "keep": grid.data(lambda i: keep[i], lambda v: v),
            "weights_decimal": grid.data(lambda i: dec[i], lambda v: v),
            "sums": LazyRows.over(grid.toks, lambda i: {
                "exact": trace.dropped_sum(i).text(),
                "decimal": trace.dropped_sum(i).decimal(places)})}
    return grid_section(grid, "scores/dropout", f"Weights after dropout: share * keep / "
                        f"(1 - {p})", LazyRows.over(grid.toks, line), notes, data, ("sum",))


def lse(t) -> Section:
    """``scores/lse``: each row's log-sum-exp in base ``t.lse`` (``"e"`` or ``"2"``)."""
    trace, places, n, base = t.trace, t.places, t.n, t.lse
    toks = t.view.rows(n)

    def parts(i: int) -> tuple[str | None, str, str]:
        value = trace.lse(i, base)
        d = value.decimal(places)
        kind = "-inf (no visible key)" if value.neg_inf else "nan (no visible key)" \
            if d == "nan" else real_kind(value.exact())    # None: certified transcendental
        return value.text() if len(value.row.counts) <= LSE_TERMS else None, d, kind

    def line(i: int) -> list:
        form, d, kind = parts(i)
        terms = len(trace.row(i).counts)
        if form is None or len(form) > LSE_WIDTH:
            form = f"log of {terms} terms (closed form in JSON)" if form is not None else \
                f"log of {terms} terms" if terms else "-inf"
        return [str(i + 1), form, d, kind]

    unit = "natural-log units (nats)" if base == "e" else "base 2 (bits)"
    notes = [f"lse_i = {'log' if base == 'e' else 'log2'}(sum_j exp(logit_ij)) over the keys "
             f"query i sees{' and the sink' if trace.policy.sink is not None else ''}: "
             f"{unit}; what fused kernels return beside the output",
             "kind: exact when the row is one key (its logit); otherwise transcendental "
             "(Lindemann-Weierstrass): the closed form is exact and the digits certified",
             f"values at {places} certified places; -inf for a row that sees no key",
             f"a row of more than {LSE_TERMS} distinct terms has no closed form written "
             "out (null in JSON)"]
    notes += shown_note("choose with --queries", ("queries", toks, n))
    data = {"base": base, "lse": LazyRows.over(toks, lambda i: dict(zip(
        ("closed_form", "decimal", "kind"), parts(i))))}
    return Section("scores/lse", f"Log-sum-exp of each row, in {unit}",
                   ["query", "log-sum-exp", "value", "kind"], LazyRows.over(toks, line),
                   notes, data)
