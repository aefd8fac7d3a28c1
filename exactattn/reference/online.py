"""Online softmax: one row of shares computed block by block with a running maximum, exactly.

FlashAttention and every KV-cache decoder never hold a whole row of scores:
they read the keys in blocks and keep three running quantities, the maximum
``m`` of the raw scores seen so far, the normaliser ``l = sum_j exp((r_j - m)/s)``
and the unnormalised output ``acc = sum_j exp((r_j - m)/s) values[j]``.  When a
block raises the maximum from ``m`` to ``m'`` both are rescaled by
``exp((m - m')/s)``; at the end ``outputs = acc / l``.  Here ``s`` is the divisor
``sqrt(D)`` (``D`` rational, as in :mod:`exactattn.numbers.softmax`).

Exactness: the running sums are kept in the representation of
:mod:`exactattn.numbers.softmax`, a map from gap ``g = r_j - m`` to an exact
coefficient, so ``sum_g c_g exp(g/s)`` is held exactly and rescaling by
``exp((m - m')/s)`` is an exact shift of every gap by ``m - m'``.  Nothing is
rounded, so the result equals the one-pass :class:`~exactattn.numbers.softmax.SoftmaxRow`
*exactly*, for every way of cutting the row into blocks, and a test compares
the two term by term.

A masked key is ``None`` (minus infinity).  A block whose keys are all masked
leaves the running state untouched: the running maximum starts at "nothing
seen" (``None``), never at a number called minus infinity, so the
``-inf - (-inf)`` that turns a float kernel's row into NaN cannot arise
(see the ``blockwise`` case: scores ``(-inf, -inf, 0, 0)``, values
``(9, 9, 1, 3)``, blocks of 2 give shares ``(0, 0, 1/2, 1/2)`` and output 2).

Split-KV (flash-decoding) merges: :func:`split_rows` gives each key block's
own exact row (only that block's keys; the sink counted in exactly one place,
``sink_at``: the merge step by default, or one block) and the one-pass row;
:func:`merge` combines per-block pairs ``(output, lse)`` exactly, ``lse =
log(sum_b exp(lse_b) [+ exp(sink)])`` and ``output = sum_b exp(lse_b - lse)
output_b``, as an :class:`~exactattn.numbers.softmax.ExpRatio` over one merged row, so
it is compared with the one-pass output exactly
(:func:`exactattn.verify.split.check_split_merge` checks a kernel's pairs).

Reference: Milakov & Gimelshein 2018, "Online normalizer calculation for
softmax"; Dao et al. 2022, "FlashAttention", algorithm 1; Dao, Haziza, Massa
and Sizov 2023, "Flash-Decoding for long-context inference" for the split
merge; Vaswani et al. 2017, sec. 3.2.1 for the softmax itself.

>>> from fractions import Fraction as F
>>> res = online_softmax([None, None, F(0), F(0)], None, [[9], [9], [1], [3]], blocks=2)
>>> [s.exact() for s in res.shares()]
[Fraction(0, 1), Fraction(0, 1), Fraction(1, 2), Fraction(1, 2)]
>>> res.outputs[0].exact()
Fraction(2, 1)
>>> res.rescales
0
>>> res.equals_one_pass()
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Iterator, Sequence

from ..call.policy import EMPTY_ROWS, Policy
from ..options import check_choice
from ..errors import InputError, ShapeError, shorten
from .logits import softmax_row
from ..numbers.lse import LogSumExp
from ..numbers.softmax import ExpRatio, SoftmaxRow

__all__ = ["merge", "split_rows"]


def all_splits(n: int) -> Iterator[list[int]]:
    """Every way of cutting a row of ``n`` keys into consecutive blocks: 2**(n-1) block-length lists.

    >>> list(all_splits(3))
    [[3], [1, 2], [2, 1], [1, 1, 1]]
    >>> all_splits(0)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: n must be a positive integer (got 0)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"n must be a positive integer (got {shorten(n, quote=True)})")

    def gen():
        for k in range(n):
            for cuts in combinations(range(1, n), k):
                edges = (0, *cuts, n)
                yield [b - a for a, b in zip(edges, edges[1:])]
    return gen()


def block_lengths(blocks, n: int) -> list[int]:
    """The block lengths of a row of n keys: from a block size or a list of lengths (checked).

    >>> block_lengths(2, 5), block_lengths([1, 4], 5)
    ([2, 2, 1], [1, 4])
    """
    if isinstance(blocks, int) and not isinstance(blocks, bool):   # a bool: not iterable either
        if blocks < 1:
            raise InputError(f"blocks must be a positive block size (got {shorten(blocks, quote=True)})")
        return [min(blocks, n - a) for a in range(0, n, blocks)]
    try:
        lengths = list(blocks)
    except TypeError:
        raise InputError(
            f"blocks must be a positive integer or a list of block lengths "
            f"(got {shorten(blocks, quote=True)})") from None
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in lengths):
        raise InputError(f"blocks must hold positive integers (got {shorten(blocks, quote=True)})")
    if sum(lengths) != n:
        raise InputError(
            f"blocks must add up to the row length {n} (got {shorten(blocks, quote=True)}, "
            f"adding to {sum(lengths)})")
    return lengths


@dataclass(repr=False)
class OnlineResult:
    """What the online pass produced: the final state, the outputs and its counters.

    Attributes:
        row: a :class:`~exactattn.numbers.softmax.SoftmaxRow` whose maximum and
            normaliser (``max_raw``, ``counts``) are the online pass's final
            running state (built from one score per counted key), so
            :class:`~exactattn.numbers.softmax.ExpRatio` can print, certify and
            compare the outputs.
        outputs: one :class:`~exactattn.numbers.softmax.ExpRatio` per column of
            ``values`` (``acc / l`` at the end of the pass).
        blocks: the block lengths used.
        rescales: how many times a block raised the running maximum (each one
            rescales ``l`` and ``acc`` by ``exp((m - m')/s)``).
        raw, divisor_squared, values, empty_row: the inputs.
    """

    row: SoftmaxRow
    outputs: list[ExpRatio]
    blocks: list[int]
    rescales: int
    raw: list
    divisor_squared: Fraction | None
    values: list[list]
    empty_row: str

    def shares(self) -> list[ExpRatio]:
        """The shares, ``exp((r_j - m)/s) / l`` with the final running state.

        When ``values`` was the identity (the default) these are also the outputs.
        """
        row = self.row
        if row.empty:
            return row.shares()
        return [ExpRatio({} if r is None else {r - row.max_raw: Fraction(1)}, row)
                for r in self.raw]

    def one_pass(self) -> tuple[SoftmaxRow, list[ExpRatio]]:
        """The same row computed in one pass (:class:`SoftmaxRow`), with its outputs."""
        ref = SoftmaxRow(self.raw, self.divisor_squared, self.empty_row)
        cols = len(self.values[0]) if self.values else 0
        return ref, [ref.combine([v[c] for v in self.values]) for c in range(cols)]

    def equals_one_pass(self) -> bool:
        """True when maximum, normaliser and every output numerator equal the one-pass ones term by term.

        By Lindemann-Weierstrass, two such ratios over the same normaliser are
        equal exactly when their coefficient maps are equal, so this is a
        proof of equality, not a numerical comparison.
        """
        ref, outs = self.one_pass()
        return (ref.max_raw == self.row.max_raw and ref.counts == self.row.counts
                and ref.empty == self.row.empty
                and all(a.numerators == b.numerators for a, b in zip(outs, self.outputs))
                and all(a.numerators == ref.share(j).numerators
                        for j, a in enumerate(self.shares())))

    def __repr__(self) -> str:
        return (f"OnlineResult(blocks={self.blocks}, rescales={self.rescales}, "
                f"max_raw={self.row.max_raw}, normaliser={self.row.counts})")


def online_softmax(raw: Sequence[Fraction | None], divisor_squared: Fraction | None,
                   values: Sequence[Sequence[Fraction]] | None = None, *,
                   blocks: int | Sequence[int] = 1, empty_row: str = "zero") -> OnlineResult:
    """Softmax of one row read block by block: ``outputs = sum_j exp((r_j - m)/s) values[j] / l``.

    Shapes: ``raw`` has n entries (``Fraction``, or ``None`` for a masked key);
    ``values`` is n x d_v (default: the n x n identity, so the outputs are the
    shares themselves).

    Args:
        divisor_squared: ``D`` with the divisor ``s = sqrt(D)``; None for no scaling.
        blocks: a block size (every block that many keys, the last one
            shorter) or a list of block lengths adding up to n.
        empty_row: what a row with every key masked gives, as in
            :class:`~exactattn.numbers.softmax.SoftmaxRow` (``zero``, ``uniform``, ``nan``).

    Raises:
        InputError: bad ``blocks`` or ``empty_row``; a raw score that is not a
            ``Fraction``/int or None.
        ShapeError: ``values`` without one row per key, or ragged.

    Exactness: exact; equal term by term to the one-pass softmax for every split.

    >>> from fractions import Fraction as F
    >>> res = online_softmax([F(0), F(2), F(1)], None, blocks=[1, 2])
    >>> res.rescales                       # the second block raised the maximum from 0 to 2
    1
    >>> res.row.counts == SoftmaxRow([F(0), F(2), F(1)], None).counts
    True
    >>> online_softmax([F(0)], None, blocks=[2])
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: blocks must add up to the row length 1 (got [2], adding to 2)
    """
    check_choice(empty_row, "empty_row", EMPTY_ROWS)
    raw = list(raw)
    n = len(raw)
    if n == 0:
        raise ShapeError("raw must have at least one score (got none)")
    for j, r in enumerate(raw):
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, Fraction))):
            raise InputError(f"raw[{j}] must be a Fraction or None for a masked key "
                             f"(got {shorten(r, quote=True)})")
    raw = [None if r is None else Fraction(r) for r in raw]
    if values is None:
        values = [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]
    values = [list(v) for v in values]
    if len(values) != n:
        raise ShapeError(f"values must have one row per key, {n} (got {len(values)})")
    if len({len(v) for v in values}) != 1:
        raise ShapeError(f"values must have rows of equal length (got lengths {[len(v) for v in values]})")
    d_v = len(values[0])
    lengths = block_lengths(blocks, n)

    m: Fraction | None = None           # running maximum; None = nothing seen yet
    norm: dict[Fraction, int] = {}      # l   = sum_g norm[g] exp(g/s), gaps against m
    acc = [dict() for _ in range(d_v)]  # acc = sum_g acc[c][g] exp(g/s) per column c
    rescales = 0
    start = 0
    for length in lengths:
        block = range(start, start + length)
        start += length
        visible = [j for j in block if raw[j] is not None]
        if not visible:                  # an entirely masked block changes nothing
            continue
        block_max = max(raw[j] for j in visible)
        if m is None:
            m = block_max
        elif block_max > m:              # rescale by exp((m - m')/s): shift every gap
            shift = m - block_max
            norm = {g + shift: c for g, c in norm.items()}
            acc = [{g + shift: a for g, a in col.items()} for col in acc]
            m = block_max
            rescales += 1
        for j in visible:
            g = raw[j] - m
            norm[g] = norm.get(g, 0) + 1
            for c in range(d_v):
                acc[c][g] = acc[c].get(g, 0) + values[j][c]

    # the final running state as a row, built the public way from one score ``m + g`` per key
    # counted at gap g (a wrong state stays wrong, and equals_one_pass sees it); with nothing
    # seen, the input row itself and its empty-row answer
    row = SoftmaxRow(raw if m is None else [m + g for g, c in sorted(norm.items(), reverse=True)
                                            for _ in range(c)], divisor_squared, empty_row)
    outputs = [row.combine([v[c] for v in values]) if m is None else ExpRatio(acc[c], row)
               for c in range(d_v)]
    return OnlineResult(row, outputs, lengths, rescales, raw, divisor_squared, values, empty_row)


# --------------------------------------------------------------------------- split-KV merges
def split_rows(raw: Sequence, divisor_squared: Fraction | None, blocks, *,
               policy: Policy | None = None, i: int = 0, n_queries: int = 1,
               offsets: Sequence | None = None, sink_at="merge"):
    """Each key block's own exact row, and the one-pass row, under ``policy``.

    Shapes: ``raw`` has n entries (``Fraction``, RoPE's certified scores, or
    None for a hidden key).  Block b's row sees only its own keys (the rest
    hidden) and goes through the one composition
    (:func:`exactattn.reference.logits.softmax_row`: soft-cap, ALiBi for query i of
    ``n_queries``, offsets); a block with no visible key is empty
    (``lse = -inf``, output 0), whatever the policy's ``empty_row``.  The
    sink is counted once: in the merge (``sink_at="merge"``, the default:
    no block row has it) or in block ``sink_at`` (an index).

    Returns:
        ``(lengths, rows, full)``: the block lengths, one
        :class:`~exactattn.numbers.softmax.SoftmaxRow` per block, the one-pass row.

    Raises:
        InputError: bad ``blocks`` or ``sink_at``.

    >>> from fractions import Fraction as F
    >>> lengths, rows, full = split_rows([F(1), F(0)], None, 1, policy=Policy(sink=F(0)))
    >>> [LogSumExp(r).decimal(4) for r in rows], LogSumExp(full).text()
    (['1.0000', '0.0000'], 'log(2 + exp(1))')
    """
    policy = policy or Policy()
    raw = list(raw)
    n = len(raw)
    lengths = block_lengths(blocks, n)
    if sink_at != "merge" and (isinstance(sink_at, bool) or not isinstance(sink_at, int)
                               or not 0 <= sink_at < len(lengths)):
        raise InputError(f"sink_at must be 'merge' or a block index from 0 to "
                         f"{len(lengths) - 1} (got {shorten(sink_at, quote=True)})")
    full = softmax_row(raw, divisor_squared, policy, i, n_queries, n, offsets=offsets)
    rows, start = [], 0
    for b, length in enumerate(lengths):
        part = [r if start <= j < start + length else None for j, r in enumerate(raw)]
        pol = policy.replace(empty_row="zero", sink=policy.sink if b == sink_at else None)
        rows.append(softmax_row(part, divisor_squared, pol, i, n_queries, n, offsets=offsets))
        start += length
    return lengths, rows, full


def merge(pairs: Sequence, sink=None) -> tuple[list[ExpRatio], LogSumExp]:
    """Merge exact per-block pairs ``(outputs, lse)`` into one row's outputs and log-sum-exp.

    ``pairs[b]`` is ``(outputs_b, lse_b)``: a list of
    :class:`~exactattn.numbers.softmax.ExpRatio` (one per value column) and the
    :class:`~exactattn.numbers.lse.LogSumExp` of the same row.  The merged normaliser
    is the sum of the blocks' (plus ``exp(sink)`` when given), the merged
    numerators the sum of ``outputs_b * exp(lse_b)``; both are held as one
    :class:`~exactattn.numbers.softmax.SoftmaxRow` of absolute exponents, so the
    result compares exactly with a one-pass row.

    Raises:
        InputError: an output over another row than its lse.

    >>> from fractions import Fraction as F
    >>> _, rows, full = split_rows([None, None, F(0), F(0)], None, 2)
    >>> pairs = [([r.combine([9, 9, 1, 3])], LogSumExp(r)) for r in rows]
    >>> outs, lse = merge(pairs)
    >>> outs[0].rational(), lse.text(), outs[0] == full.combine([9, 9, 1, 3])
    (Fraction(2, 1), 'log(2)', True)
    """
    logits: list = []
    where: list = []        # per block: {gap: index of its first logit}
    for b, (outs, lse) in enumerate(pairs):
        row = lse.row
        for o in outs:
            if o.row is not row and not o.row.same_normaliser(row):
                raise InputError(f"pairs[{b}] must hold outputs over the row of its lse "
                                 "(got an output of another row)")
        first = {}
        for g, c in row.counts.items():
            first[g] = len(logits)
            logits += [row.logit(g)] * c
        where.append(first)
    if sink is not None:
        logits.append(Fraction(sink))
    merged = SoftmaxRow.of_logits(logits)
    cols = len(pairs[0][0]) if pairs else 0
    outs = []
    for c in range(cols):
        num: dict = {}
        for (o, _), first in zip(pairs, where):
            for g, a in o[c].numerators.items():
                key = merged.gaps[first[g]]
                num[key] = num.get(key, 0) + a
        outs.append(ExpRatio(num, merged))
    return outs, LogSumExp(merged)
