"""verify in row blocks: a float kernel's outputs against the exact ones, in ULPs, at any n.

The float implementation runs once, on the whole call (:func:`check_impl`:
a :class:`~exactattn.verify.adapter.FloatCall` of 1 x 1 x n x d arrays, so torch's
CPU ``scaled_dot_product_attention`` takes its flash kernel, O(n) memory; a window or a
query offset reaches it as an n x n mask, as in ``verify``).
Its n x d_v outputs are then compared block by block with the exact outputs,
each correctly rounded to the dtype: enclosed in bulk
(:func:`exactattn.numbers.bulk.block_bounds`) and rounded from the enclosure or,
where it straddles a rounding boundary, from the exact value
(:func:`~exactattn.numbers.formats.round_enclosed`).
The outputs are judged by :func:`exactattn.verify.check.judge_entries`, the one
judging loop ``verify`` uses (each entry by :func:`~exactattn.verify.compare.judge`, its
errors measured in ``arb``), with ``verify``'s tolerance: per output, the proved error
of a correct kernel accumulating in float32, in ULPs at the terms
(:func:`~exactattn.verify.check.proved_tolerance` over the block's rows, :func:`proved_block`),
and where no bound holds the default rule
(:func:`~exactattn.numbers.formats.default_max_ulps` of the largest |scaled
score|, found exactly in a first pass over the blocks).

A block hands back a summary (a :class:`~exactattn.verify.compare.Comparison`:
counts, a histogram of ULP errors, the largest errors, the worst entries),
never its entries, so a check of n = 131,072 holds O(n d) at the driver.
Results are the same for every block size and every engine (this process, 1
or 2 Dask workers).

>>> q = k = np.array([[0.0], [1.0]], dtype=np.float32)     # row 2: 1/(1+e), e/(1+e) of 1 and 3
>>> report = check_impl("numpy", q, k, np.array([[1.0], [3.0]]), "float32", rows=1,
...                     engine=Engine("none"))
>>> report.summary()["max_ulps"], report.passed, report.blocks
(0, True, 2)
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace

import numpy as np

from ..call.inputs import Call
from ..call.policy import SCORE_FIELDS, Policy
from ..errors import InputError
from ..numbers.digits import working_precision
from ..numbers.exact import binary64, fmpq_of
from ..numbers.formats import DTYPES, float_format, round_enclosed, round_value
from ..numbers.reals import atom_ball
from ..verify.check import (Entry, Report, attempt, default_tolerance, judge_entries,
                            proved_tolerance)
from ..verify.compare import Comparison
from .engine import Engine
from .rows import block, block_keep, numerators, score_top

#: dtypes a blocked check decides in bulk (the enclosures carry about 45 bits)
CHECK_DTYPES = ("float32", "float16", "bfloat16")
_PREC = 128


@dataclass
class BlockCheck(Comparison):
    """What one block (or several, merged) found: a :class:`Comparison` of its outputs
    (the worst kept as :class:`~exactattn.verify.check.Entry`, index ``(i, c)``) and how many
    were decided by the exact per-entry path (``fallbacks``)."""

    fallbacks: int = 0
    #: the least and the most of the proved per-output tolerances (None: one tolerance)
    proved: tuple | None = None

    def merge(self, other: "BlockCheck") -> "BlockCheck":
        super().merge(other)
        self.fallbacks += other.fallbacks
        if other.proved is not None:
            mine = self.proved or other.proved
            self.proved = (min(mine[0], other.proved[0]), max(mine[1], other.proved[1]))
        return self


def max_scaled_score(call, top: int) -> float:
    """``top / (q_den k_den)`` times the scale, rounded up to a float (a few digits; inf past
    float64)."""
    from flint import arb
    d2 = call.policy.divisor_squared_for(call.shape["E"])
    (_, qd), (_, kd), _ = numerators(call)
    with working_precision(64):
        x = arb(fmpq_of(top)) / arb(qd * kd)
        if d2 is not None:
            x *= atom_ball(d2)
        return float(x.upper())


def proved_block(call, r0: int, r1: int, dtype: str, fallback: int,
                 accumulation: str = "float32"):
    """Per output of rows r0 .. r1 - 1 ((r1 - r0) x d_v), verify's proved tolerance
    (:func:`~exactattn.verify.check.proved_tolerance`: the error a correct ``dtype`` kernel
    accumulating in ``accumulation`` may make, in ULPs at the terms), or None where the inputs are not
    binary floats (:func:`~exactattn.numbers.exact.binary64`, as ``verify`` asks).  Each row's bound reads its own scores and the call's n_k keys only, so it is
    the same for every block size and the same as ``verify``'s on the whole call;
    ``fallback`` (the default rule) where no bound holds."""
    (q, qd), k, v = numerators(call)
    floats = [binary64(a, d) for a, d in ((q[r0:r1], qd), k, v)]
    if any(f is None for f in floats):
        return None
    keep = block_keep(call, r0, r1, 0, call.shape["S"])         # the rows' own positions
    policy = call.policy.replace(causal=False, window=None, query_offset=None)
    return proved_tolerance((*(f[None, None] for f in floats), policy, keep[None, None], None,
                             2), dtype, accumulation, fallback=fallback)[0][0, 0]


def check_block(data, r0: int, r1: int, *, dtype: str, max_ulps: int, worst: int = 5,
                proved: bool = False, accumulation: str = "float32") -> BlockCheck:
    """Judge the outputs ``got[r0:r1]`` (``data = (call, got)``, got n_q x d_v float64)
    within ``max_ulps``, or with ``proved`` within :func:`proved_block`'s tolerances
    (``max_ulps`` where none holds).

    Reference: Vaswani et al. 2017, sec. 3.2.1; Ziv 1991 for the rounding.
    """
    from flint import arb, fmpq
    call, got = data
    fmt = float_format(dtype)
    tol = proved_block(call, r0, r1, dtype, max_ulps, accumulation) if proved else None
    c0, c1, b, exact_row, values = block(call, r0, r1, 62)
    shape = (1, 1, r1 - r0, call.shape["E_v"])
    rounded, balls, mags = np.full(shape, math.nan), np.full(shape, None, object), np.zeros(shape)
    if b is not None:
        v, vd = numerators(call)[2]
        with np.errstate(all="ignore"):
            mags[0, 0] = (b.lo.astype(np.float64) @ np.abs(v[c0:c1].astype(np.float64))) \
                / np.array(b.den_lo, dtype=np.float64) / float(vd)
    out = BlockCheck(worst)
    if tol is not None:
        out.proved = (int(tol.min()), int(tol.max()))

    def value(_b, _h, i, c):       # an exact output
        return exact_row(r0 + i).combine(values(r0 + i, c))
    for at in np.ndindex(*shape):
        row = exact_row(r0 + at[2]) if b is None or b.empty[at[2]] else None
        if row is None:
            with working_precision(_PREC):
                bounds = arb(fmpq(int(b.a_lo[at[2:]]), int(b.b_lo[at[2:]]))).union(
                    arb(fmpq(int(b.a_hi[at[2:]]), int(b.b_hi[at[2:]]))))
            rounded[at], balls[at] = round_enclosed(bounds, fmt, _PREC, partial(value, *at), _PREC)
            out.fallbacks += balls[at] is not bounds        # decided by the exact value
        elif not row.nan:      # the row's own answer (an empty row's too): entry by entry
            mags[at] = float(row.combine([abs(v) for v in values(r0 + at[2], at[3])]))
            rounded[at], balls[at] = round_value(value(*at), fmt, _PREC)
    return judge_entries(got[None, None, r0:r1], (rounded, balls, mags),
                         SimpleNamespace(output=value), fmt,
                         max_ulps if tol is None else tol[None, None], found=out, decided=False,
                         entry=lambda idx, *a: Entry((r0 + idx[2], idx[3]), *a[:5], None, *a[5:]))


def _block_top(data, r0: int, r1: int) -> int:
    return score_top(data[0], r0, r1)


def _shape(call) -> dict:
    """The sizes by the names verify's reports use."""
    return {k: call.shape[k] for k in ("L", "S", "E", "E_v")}


@dataclass
class BlockedReport(Report):
    """The result of a blocked check: a :class:`~exactattn.verify.check.Report` whose
    ``found`` is the merged :class:`BlockCheck` (``found.worst``: hard failures first, then
    the most ULPs, ties in row order; no call, no reference: the blocks hand back summaries),
    and how it ran: the call's ``shape``, ``blocks`` of ``rows`` rows on ``engine``."""

    shape: dict = field(default_factory=dict)
    blocks: int = 0
    rows: int = 0
    engine: str = ""


def check_outputs(call, got, dtype: str, *, impl: str = "impl",
                  max_ulps: int | None = None, memory: int = 4 * 2 ** 30,
                  rows: int | None = None, engine: Engine | None = None, worst: int = 5,
                  on_block=None, accumulation: str = "float32") -> BlockedReport:
    """Compare ``got`` (n_q x d_v floats of ``dtype``) with the exact outputs, in blocks.

    ``accumulation``: what a correct kernel accumulates in, for the proved bound (as
    :func:`~exactattn.verify.check.verify` reads it).  ``rows`` per block, or chosen from ``memory`` (bytes, the whole run) by
    :func:`~exactattn.blocks.memory.block_rows`; ``engine`` default: a new
    :class:`Engine` (a local Dask cluster), closed at the end.

    Raises:
        InputError: a dtype not in :data:`CHECK_DTYPES`, a memory budget too small, a
        modified call without ``max_ulps`` (the default tolerance reads plain scores only).
    """
    from ..options import check_choice
    from .certify import plan
    check_choice(dtype, "dtype", CHECK_DTYPES)
    check_choice(accumulation, "accumulation", DTYPES)
    sh = call.shape
    if max_ulps is None and call.policy.modified:
        raise InputError("max_ulps must be given for a blocked check of a modified call (got none: the "
                         "default tolerance reads plain scores only); pass max_ulps=, or use exactattn verify")
    with nullcontext(engine) if engine else Engine() as engine:     # a new one closed at the end
        spans = plan(call, engine, memory=memory, rows=rows, shares=False)
        t0 = time.perf_counter()       # got and the call scattered once, read by both passes
        data = (call, np.asarray(got, dtype=np.float64).reshape(sh["L"], sh["E_v"]))
        proved = max_ulps is None       # verify's rule: the proved bound, else the default
        if proved:
            top = max(engine.map(_block_top, data, spans), default=0)
            max_ulps = default_tolerance(dtype, sh["S"], sh["E"], max_scaled_score(call, top),
                                         call.policy)
        found = BlockCheck(worst)
        task = partial(check_block, dtype=dtype, max_ulps=max_ulps, worst=worst, proved=proved,
                       accumulation=accumulation)
        for part in engine.map(task, data, spans, on_block):     # in row order
            found.merge(part)
        seconds = {"exact": time.perf_counter() - t0}
        notes = [engine.note] if engine.note else []
        return BlockedReport(impl, dtype, call.policy, None, found, max_ulps, 0, None, seconds,
                             notes, shape=_shape(call), blocks=len(spans),
                             rows=rows or spans[0][1] - spans[0][0], engine=engine.describe())


def check_impl(impl, query, key, value, dtype: str = "float32", policy: Policy | None = None,
               **options) -> BlockedReport:
    """Run ``impl`` once on float arrays of ``dtype`` and check every output in blocks.

    Shapes: query n_q x d_k, key n_k x d_k, value n_k x d_v (numpy arrays,
    rounded to the dtype first, ties to even; handed over as 1 x 1 x n x d).
    ``options`` go to :func:`check_outputs`.

    ``policy``'s positions (causal rule, alignment, window, query offset) reach ``impl`` as
    ``verify`` hands them (:func:`~exactattn.verify.adapter.policy_call`), so the verdict is
    ``verify``'s on the same inputs.

    Raises:
        InputError: a dtype other than float32 and float16, a score modifier,
            a scale that is 0 or infinite in the dtype, a dtype the impl does not run.
    """
    from ..verify.adapter import check_dtype, policy_call
    from ..verify.check import check_scale
    from ..verify.impls import load_impl
    policy = policy or Policy()
    if dtype not in ("float32", "float16"):
        raise InputError(f"dtype must be float32 or float16 for a blocked check of an "
                         f"implementation (got {dtype!r}); check other dtypes with exactattn "
                         "verify")
    query, key, value = (np.asarray(a).astype(dtype) for a in (query, key, value))
    bad = policy.unsupported("sdpa")        # the capability table's row: score modifiers
    if bad:
        raise InputError(f"policy must have no {', '.join(SCORE_FIELDS)} for a blocked check of "
                         f"an implementation (got {', '.join(bad)}); check modified calls with "
                         "exactattn verify")
    impl = load_impl(impl)
    check_dtype(impl, dtype)
    check_scale(policy, dtype)
    exact = Call.from_floats(query, key, value, policy=policy)
    arrays = [np.asarray(a, dtype=np.float64)[None, None] for a in (query, key, value)]
    call = policy_call(*arrays, policy, dtype)     # positions as verify's; no score modifier
    t0 = time.perf_counter()
    got, raised = attempt(impl, call)
    t1 = time.perf_counter()
    if raised is not None:
        count = exact.shape["L"] * exact.shape["E_v"]
        found = BlockCheck(count=count, hard=count)
        return BlockedReport(impl.name, dtype, policy, None, found, 0, 0, None, {"impl": t1 - t0},
                             [f"hard failure: {impl.name} raised {raised}"], raised=raised,
                             shape=_shape(exact), engine="nothing ran")
    report = check_outputs(exact, np.asarray(got, dtype=np.float64), dtype, impl=impl.name,
                           **options)
    report.seconds["impl"] = t1 - t0
    return report
