"""The split-merge checker: a kernel's per-block (output, LSE) pairs and their merge, against exact rows.

Flash-decoding and split-KV kernels cut one query's keys into blocks, return
for each block its output ``o_b`` (the softmax over that block's keys only,
times the values) and its log-sum-exp ``lse_b``, and merge them::

    lse = log(sum_b exp(lse_b) [+ exp(sink)])      output = sum_b exp(lse_b - lse) o_b

:func:`check_split_merge` checks every block's pair against the block's own
exact row (:func:`exactattn.reference.online.split_rows`, the one composition, only
that block's keys) and the merged pair against the one-pass row.  The sink is
counted in exactly one place: at the merge (``sink_at="merge"``, the
default) or in one block (``sink_at=b``); counting it in every block is the
classic split-KV bug (``attention-sink`` case: ``(3e+1)/(e+3)`` instead of
``(3e+1)/(e+2)``).  A block with no visible key must give ``lse = -inf`` and
output 0; the merge must skip it (``exp(-inf) * NaN`` is NaN).

Pairs are floats of ``dtype`` (compared in ULPs by
:func:`exactattn.verify.compare.judge` with the exact value correctly
rounded) or exact (:class:`~exactattn.numbers.softmax.ExpRatio` outputs with the
:class:`~exactattn.numbers.lse.LogSumExp` of the same row, compared exactly).  The
kernel's merged pair is checked when given; otherwise its pairs are merged
here (exactly for exact pairs; in float64, skipping ``-inf`` blocks, for
floats) and that merge is checked.

>>> from fractions import Fraction as F
>>> import math
>>> res = check_split_merge([None, None, F(0), F(0)], None, [[9], [9], [1], [3]], 2,
...                         [([0.0], -math.inf), ([2.0], math.log(2))], dtype="float64")
>>> res.passed, res.merged.out[0].exact.rational()
(True, Fraction(2, 1))
>>> bad = check_split_merge([None, None, F(0), F(0)], None, [[9], [9], [1], [3]], 2,
...                         [([math.nan], -math.inf), ([2.0], math.log(2))],
...                         merged=([math.nan], math.log(2)), dtype="float64")
>>> [(f.where, f.what, f.compared.status) for f in bad.failures()]
[('block 0 [0, 2)', 'output 0', 'hard'), ('merged', 'output 0', 'hard')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from ..call.policy import Policy
from ..errors import InputError, ShapeError
from ..numbers.lse import LogSumExp
from ..reference.online import merge, split_rows
from ..numbers.softmax import ExpRatio
from .compare import judge
from ..numbers.formats import round_value
from ..numbers.formats import default_max_ulps, float_format

__all__ = ["Compared", "Failure", "PairCheck", "SplitMerge", "check_split_merge"]


@dataclass
class Compared:
    """One value compared: ``exact`` (an ExpRatio or LogSumExp), ``got`` and the verdict.

    ``status`` is ``ok``, ``over`` (floats past the tolerance; ``ulps`` says
    how far), ``hard`` (NaN or infinity where the exact value is finite, or
    the reverse) or ``differs`` (an exact value that is not the exact one).
    """

    exact: object
    got: object
    status: str
    ulps: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class PairCheck:
    """A block's (or the merge's) pair: each output column and the lse, compared."""

    where: str
    out: list
    lse: Compared


@dataclass
class Failure:
    """``where`` (``block 1 [2, 4)`` or ``merged``), ``what`` (``output c`` or ``lse``), the comparison."""

    where: str
    what: str
    compared: Compared


@dataclass
class SplitMerge:
    """Every block's pair and the merged pair, checked; ``sink_at`` says where the sink counts."""

    blocks: list
    merged: PairCheck
    sink_at: object
    lengths: list
    merged_here: bool
    max_ulps: int | None = None
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures()

    def failures(self) -> list[Failure]:
        out = []
        for pair in self.blocks + [self.merged]:
            out += [Failure(pair.where, f"output {c}", x) for c, x in enumerate(pair.out)
                    if not x.ok]
            if not pair.lse.ok:
                out.append(Failure(pair.where, "lse", pair.lse))
        return out


def _exact_compare(exact, got) -> Compared:
    if isinstance(exact, LogSumExp):
        if not isinstance(got, LogSumExp):
            raise InputError(f"an exact pair's lse must be a LogSumExp (got {type(got).__name__})")
        return Compared(exact, got, "ok" if exact == got else "differs")
    if not isinstance(got, (ExpRatio, Fraction, int)) or isinstance(got, bool):
        raise InputError(f"an exact pair's output must be an ExpRatio or a Fraction (got "
                         f"{type(got).__name__})")
    return Compared(exact, got, "ok" if exact == got else "differs")


def _float_compare(exact, got: float, fmt, tol: int, magnitude: float) -> Compared:
    got = float(got)
    if isinstance(exact, LogSumExp) and (exact.neg_inf or exact.row.nan):
        ok = got == -math.inf if exact.neg_inf else math.isnan(got)
        return Compared(exact, got, "ok" if ok else "hard", 0 if ok else None)
    if isinstance(exact, ExpRatio) and exact.row.nan:
        return Compared(exact, got, "ok" if math.isnan(got) else "hard")
    rounded, ball = round_value(exact, fmt, 128)
    j = judge(got, rounded, ball, magnitude, fmt, lambda: exact, tol)
    return Compared(exact, got, j.status, j.ulps)


def _float_merge(pairs, sink) -> tuple[list[float], float]:
    """The textbook merge in float64, skipping blocks with ``lse = -inf``."""
    lses = [float(l) for _, l in pairs] + ([float(sink)] if sink is not None else [])
    live = [x for x in lses if x != -math.inf]
    if not live:
        return [0.0] * len(pairs[0][0]), -math.inf
    top = max(live)
    lse = top + math.log(math.fsum(math.exp(x - top) for x in live))
    cols = len(pairs[0][0])
    out = [math.fsum(math.exp(float(l) - lse) * float(o[c]) for o, l in pairs if l != -math.inf)
           for c in range(cols)]
    return out, lse


def check_split_merge(raw: Sequence, divisor_squared: Fraction | None, values, blocks,
                      pairs: Sequence, *, merged=None, policy: Policy | None = None,
                      i: int = 0, n_queries: int = 1, offsets: Sequence | None = None,
                      sink_at="merge", dtype: str = "float32",
                      max_ulps: int | None = None) -> SplitMerge:
    """Check a kernel's per-block ``(output, lse)`` pairs and their merge against exact rows.

    Shapes: ``raw`` n raw scores of one query (None = hidden); ``values``
    n x d_v; ``blocks`` a block size or block lengths adding up to n;
    ``pairs[b] = (outputs_b, lse_b)`` with d_v outputs; ``merged`` the
    kernel's ``(outputs, lse)`` or None (then the pairs are merged here).
    ``policy`` supplies the sink, soft-cap, ALiBi (query i of
    ``n_queries``) and ``empty_row`` of the one-pass row; lse values are in
    natural-log units.

    Raises:
        ShapeError: pairs that do not match the blocks or the values.
        InputError: bad blocks, ``sink_at``, dtype; mixed exact and float pairs.
    """
    policy = policy or Policy()
    values = [list(v) for v in values]
    lengths, rows, full = split_rows(raw, divisor_squared, blocks, policy=policy, i=i,
                                     n_queries=n_queries, offsets=offsets, sink_at=sink_at)
    if len(pairs) != len(lengths):
        raise ShapeError(f"pairs must have one (output, lse) per block, {len(lengths)} (got "
                         f"{len(pairs)})")
    d_v = len(values[0])
    if len(values) != len(full) or any(len(o) != d_v for o, _ in pairs):
        raise ShapeError(f"values must be {len(full)} x d_v and each block output d_v = {d_v} "
                         "long")
    exact = isinstance(pairs[0][1], LogSumExp)
    cols = list(zip(*values))
    block_out = [[r.combine(list(col)) for col in cols] for r in rows]
    sink = policy.sink if sink_at == "merge" else None
    merged_here = merged is None
    if exact:
        def compare(e, g, mag=1.0):
            return _exact_compare(e, g)
        tol = None
        if merged is None:
            merged = merge(pairs, sink)
    else:
        fmt = float_format(dtype)
        scale = max([float(abs(x)) for r in values for x in r] + [1.0])
        tol = max_ulps if max_ulps is not None else default_max_ulps(dtype, len(full), 1)

        def compare(e, g, mag=scale):
            return _float_compare(e, g, fmt, tol, mag)
        if merged is None:
            merged = _float_merge(pairs, sink)
    checks = []
    start = 0
    for b, (row, (outs, lse)) in enumerate(zip(rows, pairs)):
        exact_lse = LogSumExp(row)
        mag = max(1.0, abs(float(exact_lse.decimal(6)))) if not exact_lse.neg_inf else 1.0
        checks.append(PairCheck(f"block {b} [{start}, {start + lengths[b]})",
                                [compare(e, g) for e, g in zip(block_out[b], outs)],
                                compare(exact_lse, lse, mag)))
        start += lengths[b]
    full_lse = LogSumExp(full)
    full_out = [full.combine(list(col)) for col in cols]
    mag = max(1.0, abs(float(full_lse.decimal(6)))) if not (full_lse.neg_inf or full.nan) else 1.0
    m = PairCheck("merged", [compare(e, g) for e, g in zip(full_out, merged[0])],
                  compare(full_lse, merged[1], mag))
    return SplitMerge(checks, m, sink_at, lengths, merged_here, tol)
