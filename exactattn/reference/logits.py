"""From raw scores to the softmax row of one query, under every modifier of the call model.

The one order of operations (FlashAttention 2's, and Gemma 2's)::

    raw score q.k  [RoPE: q and k rotated first]
      -> divided by sqrt(D)                      (Policy.scale)
      -> cap * tanh(x / cap)                     (Policy.softcap)
      -> + ALiBi bias + additive mask offset     (Policy.alibi, Mask)
      -> hidden keys dropped                     (Policy.visible_keys, Mask: by the caller)
      -> softmax, with the sink in the normaliser (Policy.sink)
      -> weights times keep / (1 - p)            (Policy.dropout, keep-mask)

A plain call (no soft-cap, ALiBi or RoPE) takes the rational fast path of
:class:`~exactattn.numbers.softmax.SoftmaxRow`; otherwise the logits are
:class:`~exactattn.numbers.reals.Surd` values in one canonical form (exact algebraic,
or certified over the cosine, sine and tanh atoms of rotary and soft-capped
scores, so equal logits are equal forms) and the row is built by
:meth:`SoftmaxRow.of_logits`.

>>> from fractions import Fraction as F
>>> from exactattn.call.policy import Policy
>>> row = softmax_row([F(1), F(0)], None, Policy(sink=F(0)), 0, 1, 2)
>>> [s.decimal(4) for s in row.shares()], row.sink_share().text()
(['0.5761', '0.2119'], '1/(2 + exp(1))')
>>> from exactattn.call.modifiers import dropout_factors
>>> dropout_factors(F(1, 3), [True, False, True])
[Fraction(3, 2), Fraction(0, 1), Fraction(3, 2)]
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..options import check_choice
from ..call.modifiers import row_offsets
from ..call.policy import Policy
from ..numbers.exact import rational_sqrt
from ..numbers.reals import Surd, gain_parts, softcap, trig
from ..numbers.softmax import SoftmaxRow

__all__ = ["softmax_row"]


def scaled_logit(raw, divisor_squared: Fraction | None):
    """``raw / sqrt(D)`` exactly: a ``Fraction``, or a ``Surd`` (an irrational divisor, a rotary score)."""
    if raw is None or divisor_squared is None:
        return raw
    root = rational_sqrt(divisor_squared)
    if isinstance(raw, Surd):
        return raw * (1 / root) if root is not None else raw.over_sqrt(divisor_squared)
    if root is not None:
        return raw / root
    return Surd(0, ((divisor_squared, raw),))


def softmax_row(raw: Sequence, divisor_squared: Fraction | None, policy: Policy, i: int,
                n_queries: int, n_keys: int, *, offsets: Sequence | None = None) -> SoftmaxRow:
    """The softmax row of query i under ``policy``.

    Args:
        raw: the row's raw scores (``Fraction``, or a rotary ``Surd`` for RoPE), None
            where the key is hidden (visibility is applied by the caller, from
            ``policy.visible_keys`` and the mask).
        divisor_squared: ``D`` (scores divided by sqrt(D)), or None.
        policy: the call (soft-cap, ALiBi with ``policy.head``, sink, empty rows).
        i, n_queries, n_keys: the query's index and the call's sizes (positions
            for ALiBi come from ``policy.query_position``).
        offsets: an additive mask's rationals for this row, or None.
    """
    rotary = any(isinstance(r, Surd) for r in raw)
    if policy.softcap is None and policy.alibi is None and not rotary:
        return SoftmaxRow(raw, divisor_squared, policy.empty_row, offsets, sink=policy.sink)
    logits = logit_row(raw, divisor_squared, policy, i, n_queries, n_keys, offsets=offsets)
    return SoftmaxRow.of_logits(logits, policy.empty_row, sink=policy.sink)


#: the stages of :func:`logit_row`, in the order they are applied
LOGIT_STAGES = ("scaled", "capped", "logit")


def logit_row(raw: Sequence, divisor_squared: Fraction | None, policy: Policy, i: int,
              n_queries: int, n_keys: int, *, offsets: Sequence | None = None,
              stage: str = "logit") -> list:
    """Row i's values after a stage of the one composition (None where a key is hidden).

    ``stage``: ``scaled`` (raw / sqrt(D)), ``capped`` (then the soft-cap, when
    set) or ``logit`` (then + ALiBi bias + additive offset: what the softmax
    reads).  Values are ``Fraction`` or :class:`~exactattn.numbers.reals.Surd` (algebraic, or
    over cosine, sine and tanh atoms).

    >>> from exactattn.call.modifiers import Alibi
    >>> logit_row([Fraction(1), Fraction(0)], None, Policy(alibi=Alibi(8), query_offset=1), 0, 1, 2)
    [Fraction(1, 2), Fraction(0, 1)]
    """
    check_choice(stage, "stage", LOGIT_STAGES)
    scaled = [scaled_logit(r, divisor_squared) for r in raw]
    if stage == "scaled":
        return scaled
    added = row_offsets(policy, i, n_queries, n_keys, offsets) if stage == "logit" else None
    return modified_row(scaled, policy, added, softcap)


def modified_row(scaled: Sequence, policy: Policy, added: Sequence | None, cap) -> list:
    """The one order after the scaling, over any context: each seen scaled score soft-capped
    (``cap(x, policy.softcap)``: :func:`~exactattn.numbers.reals.softcap` on exact forms,
    :func:`~exactattn.numbers.reals.softcap_ball` on ``arb`` balls), then ``added[j]`` (the
    ALiBi bias, and the additive offset where the context adds it here) added; a hidden key
    (None) stays None."""
    out = []
    for j, x in enumerate(scaled):
        if x is not None and policy.softcap is not None:
            x = cap(x, policy.softcap)
        if x is not None and added is not None and added[j]:
            x = x + added[j]
        out.append(x)
    return out


def rope_row(query: Sequence[Fraction], key, cols, policy: Policy, i: int, n_queries: int,
             n_keys: int) -> list:
    """Row i's rotary raw scores (:func:`rope_score`) over the keys ``cols``, None elsewhere:
    query i at ``policy.query_position(i, n_queries, n_keys)``, key j (``key(j)``, its exact
    entries) at j, under ``policy.rope`` bound to the call (:meth:`Rope.for_call
    <exactattn.call.modifiers.Rope.for_call>`: a dynamic scaling's length)."""
    rope = policy.rope.for_call(policy, n_queries, n_keys)
    at, row = policy.query_position(i, n_queries, n_keys), [None] * n_keys
    for j in cols:
        row[j] = rope_score(query, key(j), rope, at, j)
    return row


def rope_score(query: Sequence[Fraction], key: Sequence[Fraction], rope, query_position: int,
               key_position: int):
    """The raw score of a rotated query and key, exactly, in canonical form.

    With pairs ``(a, b)`` rotating by ``pos * w`` (``w = theta^e``), the
    score is ``sum (q_a k_a + q_b k_b) cos(phi) + (q_b k_a - q_a k_b) sin(phi)``
    with ``phi = (key_position - query_position) * w``: a function of the
    relative position only (Su et al. 2021, sec. 3.4.2).  Each angle is reduced
    (:func:`~exactattn.numbers.reals.power_form`: ``10 * 10000^(-1/4) = 1``) and its sign
    folded (``cos`` is even, ``sin`` odd), so equal scores are equal forms; a
    rational score (angle 0) is a ``Fraction``.

    >>> from exactattn.call.modifiers import Rope
    >>> rope_score([Fraction(1), Fraction(0)], [Fraction(1), Fraction(0)], Rope(), 3, 3)
    Fraction(1, 1)
    >>> rope_score([Fraction(1), Fraction(0)], [Fraction(1), Fraction(0)], Rope(), 1, 0).decimal(6)
    '0.540302'
    >>> a = rope_score([Fraction(1), Fraction(0)], [Fraction(1), Fraction(-1)], Rope(), 1, 0)
    >>> a.text(), a == rope_score([Fraction(1), Fraction(0)], [Fraction(1), Fraction(1)], Rope(), 1, 2)
    ('cos(1) - sin(1)', True)
    """
    delta = key_position - query_position
    pairs = rope.frequencies(len(query))
    r = 2 * len(pairs)                  # a partial rotary's unturned entries add plainly
    p, terms = Fraction(sum(query[a] * key[a] for a in range(r, len(query)))), {}
    g, gain = gain_parts(rope.gain)     # yarn's attention factor squared: the rotated part's
    for a, b, w in pairs:
        c = g * Fraction(query[a] * key[a] + query[b] * key[b])
        s = g * Fraction(query[b] * key[a] - query[a] * key[b])
        if not (c or s):
            continue
        for fn, coefficient in (("cos", c), ("sin", s)):
            if coefficient:
                sign, atom = trig(fn, delta, w, gain)
                if atom is None:
                    p += sign * coefficient
                else:           # pairs at one angle (theta = 1, say) add up
                    terms[atom] = terms.get(atom, 0) + sign * coefficient
    terms = {atom: x for atom, x in terms.items() if x}
    return Surd.merged(p, tuple(terms.items())) if terms else p
