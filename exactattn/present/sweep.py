"""Sweeps: one row's shares as the divisor runs, and the counted cost as the row grows.

* :func:`divisor_sweep` (the page's divisor slider): the shares of one query
  row, ``softmax(raw / divisor)``, at divisors from small to large, between
  the two limits, which are computed exactly from the raw scores:

  - divisor -> 0: all the share goes to the largest raw score; keys tied at
    the maximum split it equally (1/k each for k tied keys);
  - divisor -> infinity: the shares flatten to 1/n over the n visible keys.

* :func:`length_sweep` (the length slider): the same head at several row
  lengths n, each run through the pencil engine, whose counters are
  incremented inside the loops.  Projections grow linearly in n, scores and
  mixing quadratically; the per-token and per-pair figures are the counts
  divided by n and by the number of visible pairs, never a formula passed off
  as a count.

Exactness: shares are read from each divisor's trace through its bulk
certified path (:meth:`~exactattn.engines.trace.Trace.share_decimals`, correctly
rounded); text and Markdown mark exact shares as exact (``masked``, ``1/2 =
0.5``).  The limits and the cost figures are exact rationals.

Limits (each a one-line error): at most :data:`MAX_DIVISORS` (100) divisors,
each from 1e-1000 to 1e1000 (:data:`MAX_DIVISOR_DIGITS`); row lengths from 1 to
:data:`MAX_LENGTH` (256).  Within them a sweep takes well under a second: tiny
and huge divisors are certified on arb balls, never through the Fraction that
exp(-10**1000) would need.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the divisor sqrt(d_k), and the
O(n^2 d) cost of self-attention in sec. 4).

>>> from exactattn.examples import chronicle
>>> sec = divisor_sweep(chronicle(), 2, divisors=["1", "2"])[0]
>>> sec.rows[0]
['-> 0 (limit)', '1', '0', '0', '0', '1 at key 1']
>>> sec.rows[2]
["2 (the head's)", '0.5800', '0.1216', '0.1769', '0.1216', '0.5800 at key 1']
>>> sec.rows[-1]
['-> infinity (limit)', '1/4', '1/4', '1/4', '1/4', '1/4 at key 1, 2, 3, 4']
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..call.policy import divisor_text, parse_divisor
from ..errors import InputError, shorten
from ..numbers.exact import rational_sqrt
from ..options import check_whole_list
from .cells import at_keys, exact_text, value_cell
from .render import Section

DEFAULT_DIVISORS = ("1/8", "1/4", "1/2", "1", "2", "4", "8", "32", "128")
DEFAULT_LENGTHS = (4, 8, 16, 32, 64)
#: the pencil engine counts every multiply-add in Python loops; keep it to this many tokens
MAX_LENGTH = 256
#: the most divisors in one sweep (one table row each)
MAX_DIVISORS = 100
#: a divisor's square must have a numerator and a denominator of at most 10**2000, i.e.
#: divisors from 1e-1000 to 1e1000 written with at most about 1000 digits, so that the
#: exact closed forms stay printable (a few thousand characters) and quick to build
MAX_DIVISOR_DIGITS = 1000


def _in_range(divisor_squared: Fraction) -> bool:
    bound = 10 ** (2 * MAX_DIVISOR_DIGITS)
    return max(divisor_squared.numerator, divisor_squared.denominator) <= bound


def parse_divisors(text, name: str = "divisors") -> list[tuple[str, Fraction]]:
    """Divisors from ``"1/2,1,sqrt(2),4"`` (or a list): (label, divisor squared), ascending.

    Each is a positive exact number or ``sqrt(q)`` (see
    :func:`exactattn.call.policy.parse_divisor`) from 1e-1000 to 1e1000 (its square's
    numerator and denominator at most 10^2000); repeats are dropped; at most
    :data:`MAX_DIVISORS`.  ``name`` is how the caller's user spells the
    argument (``--divisors`` on the command line).

    >>> parse_divisors("4, 1/2, sqrt(2)")
    [('1/2', Fraction(1, 4)), ('sqrt(2)', Fraction(2, 1)), ('4', Fraction(16, 1))]
    >>> parse_divisors("1,none")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: divisors must be positive numbers or sqrt(q) from 1e-1000 to 1e1000, comma-separated, such as 1/2,1,2,4 (got 'none')
    """
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else \
        [str(p).strip() for p in text]
    if not parts or not all(parts):
        raise InputError(f"{name} must be a comma-separated list such as 1/2,1,2,4 "
                         f"(got {shorten(text, quote=True)})")
    if len(parts) > MAX_DIVISORS:
        raise InputError(f"{name} must list at most {MAX_DIVISORS} divisors (got {len(parts)}); "
                         "a few per power of ten show the whole sweep")
    out: dict[Fraction, str] = {}
    for p in parts:
        try:
            sq = parse_divisor(p)
        except InputError:
            sq = None
        if sq is None or not _in_range(sq):
            raise InputError(f"{name} must be positive numbers or sqrt(q) from 1e-1000 to "
                             f"1e1000, comma-separated, such as 1/2,1,2,4 (got {shorten(p, quote=True)})")
        out.setdefault(sq, p)
    return [(label, sq) for sq, label in sorted(out.items())]


def parse_lengths(text, name: str = "lengths") -> list[int]:
    """Row lengths from ``"4,8,16"`` (or a list): integers from 1 to MAX_LENGTH, ascending.

    ``name`` is how the caller's user spells the argument.

    >>> parse_lengths("8,4")
    [4, 8]
    >>> parse_lengths("4,x")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: lengths must be a comma-separated list of integers from 1 to 256 such as 4,8,16,32 (got '4,x')
    """
    try:
        values = check_whole_list(text, name, high=MAX_LENGTH, most=None)
    except InputError:
        raise InputError(f"{name} must be a comma-separated list of integers from 1 to "
                         f"{MAX_LENGTH} such as 4,8,16,32 (got {shorten(text, quote=True)})") from None
    return sorted(set(values))


def check_row(row, n: int, name: str = "row") -> int:
    """A query number from 1 to n (1-based), else InputError naming ``name``.

    >>> check_row(2, 4)
    2
    >>> check_row(5, 4, "--row")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: --row must be a token number from 1 to 4 (got 5)
    """
    if isinstance(row, bool) or not isinstance(row, int) or not 1 <= row <= n:
        raise InputError(f"{name} must be a token number from 1 to {n} (got "
                         f"{shorten(row, quote=True)})")
    return row


def with_divisor(head, divisor_squared: Fraction | None):
    """The same head with the scores divided by sqrt(``divisor_squared``) (None: not divided)."""
    return head.with_policy(head.policy.replace(divisor_squared=divisor_squared))


def _closed_text(expr, divisor_squared: Fraction) -> str:
    """A closed form as text.  sympy's default printer orders the terms of a sum by
    evaluating them, which takes seconds for exp(10**1000); past 10**60 the terms are
    printed in sympy's own (deterministic) order instead."""
    import sympy
    small = max(divisor_squared.numerator, divisor_squared.denominator) <= 10 ** 60
    return sympy.sstr(expr, order=None if small else "none")


def divisor_limits(raw: Sequence[Fraction | None]) -> tuple[list[Fraction], list[Fraction]]:
    """The exact shares of a row in the two limits: (divisor -> 0, divisor -> infinity).

    ``raw`` holds the row's raw scores (None for a masked key).  As the
    divisor shrinks, the shares go to 1/k on each of the k keys at the
    maximum and 0 elsewhere; as it grows, to 1/m on each of the m visible keys.

    >>> divisor_limits([Fraction(1), Fraction(3), Fraction(3), None])
    ([Fraction(0, 1), Fraction(1, 2), Fraction(1, 2), Fraction(0, 1)], [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3), Fraction(0, 1)])
    """
    visible = [r for r in raw if r is not None]
    if not visible:
        raise InputError("row must have at least one visible key (got every key masked)")
    top = max(visible)
    k = visible.count(top)
    small = [Fraction(1, k) if r is not None and r == top else Fraction(0) for r in raw]
    large = [Fraction(1, len(visible)) if r is not None else Fraction(0) for r in raw]
    return small, large


def divisor_sweep(example, row: int | None = None, *, divisors=None, places: int = 4,
                  closed_forms: bool = True) -> list[Section]:
    """The shares of query ``row`` (1-based; default the example's focus) at each divisor.

    ``divisors`` default to :data:`DEFAULT_DIVISORS` plus the head's own
    divisor; the head's own is tagged wherever it appears.  Each divisor runs
    the head through :func:`~exactattn.engines.head.attend` and reads the row from the
    trace's bulk certified shares.

    Shapes: one row of n shares per divisor, plus the two limit rows.

    Exactness: the shares are certified decimals; with ``closed_forms``
    ``data`` also holds each share's exact closed form (sympy; what JSON
    prints).  Tiny and huge divisors (down to 1e-1000 and up to 1e1000) cost
    no more than ordinary ones: the certified rounding works on arb balls,
    never on the Fraction exp(-10**1000) would need.

    Raises:
        InputError: ``row`` outside 1..n, a bad divisor (see
            :func:`parse_divisors`), ``places`` outside 0..50.
    """
    from ..numbers.digits import check_places
    from ..engines.head import attend
    check_places(places)
    head, n = example.head, len(example.x)
    row = check_row(example.focus + 1 if row is None else row, n)
    own = head.divisor_squared
    own_in_range = own is not None and _in_range(own)
    if divisors is None:
        divisors = list(DEFAULT_DIVISORS)
        if own_in_range:
            divisors.append(f"sqrt({exact_text(own)})")
    chosen = parse_divisors(divisors)
    raw = attend(head, example.x).raw_score_row(row - 1)    # the same at every divisor
    small, large = ([exact_text(q) for q in limit] for limit in divisor_limits(raw))
    cols = ["divisor"] + [f"key {j + 1}" for j in range(n)] + ["largest"]

    def limit_row(label, cells, where):
        return [label] + cells + [at_keys(cells[where[0]], where)]
    visible = [j for j in range(n) if raw[j] is not None]
    rows = [limit_row("-> 0 (limit)", small, [j for j in visible if small[j] != "0"])]
    data = []
    for label, sq in chosen:
        trace = attend(with_divisor(head, sq), example.x)
        decimals = trace.share_decimals(places)[row - 1]
        cells = [value_cell(trace.share(row - 1, j), decimals[j], raw[j] is None)
                 for j in range(n)]
        if sq == own and label.startswith("sqrt("):
            root = rational_sqrt(sq)
            label = label if root is None else exact_text(root)
        tag = shorten(label) + (" (the head's)" if sq == own else "")
        top = trace.row(row - 1).largest()
        rows.append([tag] + cells + [at_keys(cells[top[0]], top)])
        entry = {"divisor": label, "divisor_squared": exact_text(sq),
                 "shares_decimal": decimals}
        if closed_forms:
            entry["shares_exact"] = [_closed_text(trace.share(row - 1, j).closed_form(), sq)
                                     for j in range(n)]
        data.append(entry)
    rows.append(limit_row("-> infinity (limit)", large, visible))
    raw_texts = [None if r is None else exact_text(r) for r in raw]
    if own is None:
        own_note = "the head itself has no divisor"
    elif not own_in_range:
        own_note = ("the head's own divisor lies outside 1e-1000 to 1e1000 and is left out of "
                    "the sweep")
    else:
        own_text = divisor_text(own)
        own_note = f"the head's own divisor: {own_text}" + \
            ("" if own_text.startswith("sqrt(") else f" = sqrt({exact_text(own)})")
    notes = [
        f"query {row} of {example.name}: raw scores ({', '.join(t or '-inf' for t in raw_texts)})",
        "shares = softmax(raw / divisor); as the divisor shrinks they concentrate on the "
        "largest raw score (tied keys split it equally), as it grows they flatten to 1/n "
        "over the visible keys",
        f"shares at {places} certified places; the limit rows are exact",
        own_note,
    ]
    return [Section("sweep/divisor", f"Shares of query {row} as the divisor grows", cols, rows,
                    notes, {"query": row, "raw": raw_texts,
                            "limit_small": small, "limit_large": large,
                            "divisors": data})]


def _per(value: Fraction, unit: str) -> str:
    return f"{exact_text(value)} MAC{'' if value == 1 else 's'} per {unit}"


def length_sweep(example, lengths=DEFAULT_LENGTHS) -> list[Section]:
    """The multiply-adds the pencil engine counts for the example's head at each row length.

    The tokens are the example's rows repeated cyclically to length n (the
    counts do not depend on the numbers).  MACs: one multiplication and one
    addition; FLOPs = 2 x MACs.

    >>> from exactattn.examples import chronicle
    >>> sec = length_sweep(chronicle(), [4, 8])[0]
    >>> sec.rows[1]
    ['8', '384', '256', '256', '896', '48', '8', '2.80', '0.5714']
    """
    from ..numbers.digits import round_fraction
    from ..engines.head import attend
    ns = parse_lengths(lengths)
    head = example.head
    rows, data, prev, first_pass = [], [], None, None
    per_token, per_pair = set(), set()
    for n in ns:
        x = [example.x[i % len(example.x)] for i in range(n)]
        m = attend(head, x, engine="pencil").macs
        pairs = head.policy.pairs(n, n)
        quad = m["scores"] + m["mix"]
        total = m["projections"] + quad
        tok = Fraction(m["projections"], n)
        pair = Fraction(quad, pairs)
        per_token.add(tok)
        per_pair.add(pair)
        if first_pass is None and quad > m["projections"]:
            first_pass = n
        ratio = "" if prev is None else round_fraction(Fraction(total, prev), 2)
        rows.append([str(n), str(m["projections"]), str(m["scores"]), str(m["mix"]), str(total),
                     exact_text(tok), exact_text(pair), ratio,
                     round_fraction(Fraction(quad, total), 4)])
        data.append(dict(m, n=n, total=total, visible_pairs=pairs))
        prev = total
    causal = " (causal: n(n+1)/2 visible pairs)" if head.causal else ""
    notes = [
        f"counted by running the pencil engine at each n on {example.name}'s head "
        f"(d_model = {head.d_model}, d_k = {head.d_k}, d_v = {head.d_v}); tokens repeat the "
        "example's rows cyclically",
        "linear part: projections / n = "
        + (f"{_per(next(iter(per_token)), 'token')} at every n"
           if len(per_token) == 1 else "not constant"),
        f"quadratic part: (scores + mixing) / visible pairs{causal} = "
        + (f"{_per(next(iter(per_pair)), 'pair')} at every n"
           if len(per_pair) == 1 else "not constant"),
        ("among these lengths, scores + mixing first exceed the projections at "
         f"n = {first_pass}") if first_pass is not None else
        "among these lengths, the projections stay at or above scores + mixing",
        "a multiply-add (MAC) is one multiplication and one addition; FLOPs = 2 x MACs",
    ]
    return [Section("sweep/length", "Cost as the row grows (multiply-adds counted in the loops)",
                    ["n", "projections", "scores", "mixing", "total", "projections / n",
                     "(scores + mixing) / pair", "ratio to row above", "pair share"],
                    rows, notes, {"rows": data})]
