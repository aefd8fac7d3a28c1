"""Every number the page can show, computed and certified before the page is written.

:func:`page_numbers` runs each sentence's head at every divisor stop and keeps
what the page shows for its query row: the shares (certified decimals, exact
values marked, from :meth:`~exactattn.engines.trace.Trace.share_decimals`), the output
(:meth:`~exactattn.engines.trace.Trace.output_decimals`), the exact raw scores, the
keys with the largest share, and the exact limits (the equal share 1/n as the
divisor grows; the tied maximum as it shrinks; :func:`exactattn.present.sweep.divisor_limits`).
The length stops come from the cost module (:func:`exactattn.cost.rows.cost_rows`):
derived from the pencil engine's loop nests, the formula checked equal to the
MACs counted by running a head of the same sizes through those loops at n = 16
(:data:`COUNTED_AT`; a stop at or below it is counted too); the number of scores in
the n x n table is the number of visible pairs :meth:`Policy.pairs
<exactattn.call.policy.Policy.pairs>` counts.

Everything here is text (certified decimals, exact rationals, whole numbers
with thousands separators) or exact rationals kept for the picture
(:mod:`exactattn.page.picture`); nothing is a binary float.

Divisor stops: the square roots of 2^-6 .. 2^14, i.e. 1/8 to 128, each
sqrt(2) times the one before (evenly spaced on a log scale; sqrt(2) =
sqrt(d_k) of the bank head is one of them), plus each head's own divisor
when it is not among them, plus ``none`` (the scores not divided).

>>> from exactattn.examples import bank_river
>>> nums = page_numbers([bank_river()])
>>> s = nums.sentences[0]
>>> s.at[nums.own_key]["shares"], s.at[nums.own_key]["output"]
(['0.1941', '0.2764', '0.2764', '0.2530'], ['0.1382', '0.6044'])
>>> s.equal, [stop.label for stop in nums.stops][:3]
('1/4 = 0.25', ['1/8', 'sqrt(1/32)', '1/4'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from ..call.policy import divisor_text
from ..present.cells import divisor_words, exact_text, value_cell, with_decimal
from ..numbers.digits import check_places, round_fraction
from ..errors import InputError, shorten
from ..engines.head import attend
from ..present.render import reader_text
from ..present.sweep import check_row, divisor_limits, with_divisor

#: the divisors squared of the slider's stops: 2^-6 .. 2^14 (divisors 1/8 .. 128, each
#: sqrt(2) times the one before)
DIVISOR_SQUARES = tuple(Fraction(2) ** k for k in range(-6, 15))
#: the length slider's stops: n doubles from 1,000 to 16,000 tokens
LENGTHS = (1000, 2000, 4000, 8000, 16000)
#: the length at which the head is run through the counted loops to check the formula (a
#: count at n = 1,000 takes a second; the formula is the same function of n)
COUNTED_AT = 16
#: at most this many sentences (the switch) and tokens per sentence (the picture, the table)
MAX_SENTENCES = 8
MAX_TOKENS = 64
#: a built-in example that brings its companion sentence onto the same page
COMPANIONS = {"bank-river": "bank-loan", "bank-loan": "bank-river"}
#: the side of the score square at the longest length stop, in pixels
SQUARE = 160
#: the key of the "none" stop (scores not divided)
NONE = "none"


@dataclass(frozen=True)
class Stop:
    """One divisor stop: ``key`` (the slider's value, or ``none``), the divisor squared
    (None: not divided), its ``label`` (``sqrt(2)``), its ``words`` (``sqrt(2) ~ 1.4142``,
    certified) and whether it is a head's own divisor."""

    key: str
    divisor_squared: Fraction | None
    label: str
    words: str
    own: bool


@dataclass
class Sentence:
    """What the page shows of one sentence: its query row at every stop (``at[key]``).

    ``at[key]`` holds ``shares`` (reader texts: ``0.2764``, ``1/4 = 0.25``,
    ``masked``), ``decimals`` (the certified decimals alone), ``output``
    (certified decimals, one per value column) and ``largest`` (0-based keys
    with the largest share).  ``x``, ``query`` and ``values`` are exact
    rationals for the picture (``query`` None unless d_k = 2, ``values`` None
    unless d_v = 2).
    """

    title: str
    words: list[str]
    label: str                 # the switch's name for the sentence (River), else the name
    query: int                 # 0-based query row
    raw: list[str]             # exact raw scores (``masked`` for a hidden key)
    equal: str                 # the equal share 1/m over the m visible keys, exact
    equal_decimal: str         # ... rounded to the page's places (where its line is drawn)
    visible: int
    small_limit: list[str]     # exact shares as the divisor -> 0
    slot_names: list[str]
    causal: bool
    x: list[list[Fraction]]
    query_vector: list[Fraction] | None
    values: list[list[Fraction]] | None
    at: dict = field(default_factory=dict)


@dataclass
class PageNumbers:
    """The sentences, the divisor stops (``none`` last), the length rows and the settings."""

    sentences: list[Sentence]
    stops: list[Stop]
    lengths: list[dict]
    places: int
    own_key: str
    length_note: str


def with_companions(names: Sequence[str]) -> list[str]:
    """The example names with each bank sentence's companion added after it (once).

    >>> with_companions(["bank-river"]), with_companions(["bank-loan", "tiny"])
    (['bank-river', 'bank-loan'], ['bank-loan', 'bank-river', 'tiny'])
    """
    out: list[str] = []
    for name in names:
        for n in (name, COMPANIONS.get(name)):
            if n is not None and n not in out and (n == name or n not in names):
                out.append(n)
    return out


def check_sentences(examples) -> None:
    """Refuse what the page cannot draw: not 1..8 sentences, d_model other than 2, over
    64 tokens (one-line :class:`~exactattn.errors.InputError`)."""
    if not 1 <= len(examples) <= MAX_SENTENCES:
        raise InputError(f"the page must have 1 to {MAX_SENTENCES} sentences (got "
                         f"{len(examples)}); name fewer with --example and --spec")
    for ex in examples:
        name = shorten(ex.name, quote=True)
        if ex.head.d_model != 2:
            raise InputError(f"sentence {name} must have d_model = 2 for the page's picture "
                             f"(got {ex.head.d_model}); use bank-river, bank-loan, tiny or a "
                             "--spec whose tokens have two numbers each")
        if len(ex.x) > MAX_TOKENS:
            raise InputError(f"sentence {name} must have at most {MAX_TOKENS} tokens for the "
                             f"page (got {len(ex.x)}); cut the sentence")


def divisor_stops(examples) -> list[Stop]:
    """The slider's stops (ascending; keys ``0``, ``1``, ...) and ``none`` last.

    The stops are :data:`DIVISOR_SQUARES` plus each head's own divisor when it
    is not among them; a stop that is some head's own is marked ``own``.

    >>> from exactattn.examples import bank_river
    >>> [(s.key, s.label, s.own) for s in divisor_stops([bank_river()])][6:9]
    [('6', '1', False), ('7', 'sqrt(2)', True), ('8', '2', False)]
    """
    own = {ex.head.divisor_squared for ex in examples}
    squares = sorted(set(DIVISOR_SQUARES) | {d for d in own if d is not None})
    template = examples[0].head
    stops = []
    for k, d2 in enumerate(squares + [None]):
        head = with_divisor(template, d2)
        words = "none: the scores are not divided" if d2 is None else divisor_words(head)
        words = words.replace(" (irrational: scaled scores stay exact)", "")
        if d2 is not None and d2 in own:
            words += " (the head's own)"
        stops.append(Stop(NONE if d2 is None else str(k), d2, divisor_text(d2), words,
                          d2 in own))
    return stops


def _sentence(ex, stops: list[Stop], places: int, row: int | None) -> Sentence:
    head = ex.head
    n = len(ex.x)
    i = check_row(ex.focus + 1 if row is None else row, n, "--row") - 1
    base = attend(head, ex.x)
    raw = base.raw_score_row(i)
    small, large = divisor_limits(raw)
    equal = max(large)          # 1/m on each of the m visible keys
    s = Sentence(
        title=ex.title or ex.name, label=ex.label or ex.name,
        words=[t.text for t in ex.tokens[:n]] + [f"token {j + 1}" for j in
                                                  range(len(ex.tokens), n)],
        query=i, raw=["masked" if r is None else exact_text(r) for r in raw],
        equal=with_decimal(equal, places), equal_decimal=round_fraction(equal, places),
        visible=equal.denominator, small_limit=[exact_text(q) for q in small],
        slot_names=list(ex.slot_names) or ["x1", "x2"], causal=head.causal,
        x=[list(r) for r in ex.x],
        query_vector=list(base.queries[i]) if head.d_k == 2 else None,
        values=[list(r) for r in base.values] if head.d_v == 2 else None)
    for stop in stops:
        trace = attend(with_divisor(head, stop.divisor_squared), ex.x)
        decimals = trace.share_decimals(places)[i]
        shares = [reader_text(value_cell(trace.share(i, j), decimals[j], raw[j] is None))
                  for j in range(n)]
        s.at[stop.key] = {"shares": shares, "decimals": decimals,
                          "output": trace.output_decimals(places)[i],
                          "largest": trace.row(i).largest(),
                          "sums_to_one": trace.row_sums_to_one(i)}
    return s


def length_numbers(head, lengths: Sequence[int] = LENGTHS) -> tuple[list[dict], str]:
    """The length slider's rows and a note on how they were obtained.

    Each row: ``n``, ``scores`` (visible pairs, i.e. entries of the score
    table: n^2 without a causal mask), MACs of ``score_macs``, ``mix_macs``,
    ``projection_macs`` and ``total``, ``ratio`` (total over the row before,
    4 places, correctly rounded; ``""`` for the first), ``score_ratio`` (exact),
    ``counted`` (True: counted by running the head; False: derived), ``side`` (the
    score square's side in pixels, :data:`SQUARE` at the longest stop).  The head is
    run at :data:`COUNTED_AT` tokens and at every stop of no more MACs than a head without
    a causal mask has there; the note says where.

    >>> rows, note = length_numbers(__import__("exactattn").Head(*[[[1, 0], [0, 1]]] * 3),
    ...                             [8, 2000])
    >>> [(r["n"], r["scores"], r["counted"], r["score_ratio"]) for r in rows]
    [('8', '64', True, ''), ('2,000', '4,000,000', False, '62500')]
    >>> note.split(" by ")[0]
    'counted at n = 8, 16'
    """
    from ..cost.rows import cost_rows
    causal, n = head.causal, COUNTED_AT
    limit = n * head.d_model * (2 * head.d_k + head.d_v) + n * n * (head.d_k + head.d_v)
    costs = cost_rows(sorted({n, *lengths}), head.d_model, head.d_k, head.d_v, causal=causal,
                      count_limit=limit, solve=False)
    rows, prev = [], None
    for r in (r for r in costs.rows if r.tokens in lengths):
        f = r.figures
        pairs = head.policy.pairs(r.tokens, r.tokens)
        rows.append({
            "n": f"{r.tokens:,}", "scores": f"{pairs:,}", "score_macs": f"{f['scores']:,}",
            "mix_macs": f"{f['mix']:,}", "projection_macs": f"{f['projections']:,}",
            "total": f"{f['total']:,}",
            "ratio": "" if prev is None else round_fraction(Fraction(f["total"],
                                                                     prev["total"]), 4),
            "score_ratio": "" if prev is None else with_decimal(Fraction(f["scores"],
                                                                         prev["scores"]), 4),
            "counted": r.counted,
            "side": round_fraction(Fraction(SQUARE * r.tokens, max(lengths)), 1)})
        prev = f
    counted = [f"{r.tokens:,}" for r in costs.rows if r.counted]
    check = costs.check
    if counted and check is not None:
        note = (f"counted at n = {', '.join(counted)} by running a head of these sizes "
                f"(d_model = {head.d_model}, d_k = {head.d_k}, d_v = {head.d_v}) through the "
                "pencil engine's loops; at every stop above, derived from the same loop nests "
                f"(sympy sums; scores + mixing = {check.pairs}), the formula "
                f"checked equal to the count at n = {check.n:,} "
                f"({'the same' if check.same else 'NOT the same'})")
    else:
        note = "derived from the pencil engine's loop nests (sympy sums)"
    return rows, note


def page_numbers(examples, *, places: int = 4, row: int | None = None,
                 lengths: Sequence[int] = LENGTHS) -> PageNumbers:
    """Every number of the page for ``examples`` (one sentence each), certified.

    ``row`` (1-based) picks the query row of every sentence (default each
    example's focus token); ``places`` the decimal places of shares and outputs.

    Raises:
        InputError: see :func:`check_sentences`; ``row`` outside a sentence;
            ``places`` outside 0..50.
    """
    check_places(places)
    examples = list(examples)
    check_sentences(examples)
    stops = divisor_stops(examples)
    sentences = [_sentence(ex, stops, places, row) for ex in examples]
    own = examples[0].head.divisor_squared
    own_key = next(s.key for s in stops if s.divisor_squared == own)
    length_rows, note = length_numbers(examples[0].head, lengths)
    return PageNumbers(sentences, stops, length_rows, places, own_key, note)
