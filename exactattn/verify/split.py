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
>>> res.passed, res.value("merged", "output 0").exact.rational()
(True, Fraction(2, 1))
>>> bad = check_split_merge([None, None, F(0), F(0)], None, [[9], [9], [1], [3]], 2,
...                         [([math.nan], -math.inf), ([2.0], math.log(2))],
...                         merged=([math.nan], math.log(2)), dtype="float64")
>>> [(f.where, f.what, f.status) for f in bad.found.failures]
[('block 0 [0, 2)', 'output 0', 'hard'), ('merged', 'output 0', 'hard')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Sequence

import numpy as np

from ..call.policy import UNSUPPORTED, Policy
from ..errors import InputError, ShapeError, shorten
from ..numbers.lse import LogSumExp
from ..reference.online import block_lengths, merge, split_rows
from ..reference.reference import Reference
from ..numbers.softmax import ExpRatio
from .adapter import FunctionImpl, ImplRaised, read_answer
from .check import Entry, Report, answered, check_request, default_tolerance, tolerance
from .compare import Comparison, Judgement, failures_first, judge
from .impls import load_impl, make_call
from ..numbers.formats import float_format, round_value

__all__ = ["verify_split"]

class Value(Entry):
    """One value of a split-merge check: an :class:`~exactattn.verify.check.Entry` whose
    ``index`` ends ``(where, what)`` (``block 1 [2, 4)`` or ``merged``; ``output c`` or
    ``lse``) and whose ``reference`` is the exact value (an ExpRatio or LogSumExp).  Exact
    pairs have no ``rounded`` and no ULPs: a value that is not the exact one is ``over``."""

    exact = property(lambda self: self.reference)
    where = property(lambda self: self.index[-2])
    what = property(lambda self: self.index[-1])


@dataclass
class SplitMerge:
    """Every block's pair and the merged pair of one row, judged into ``found`` (a
    :class:`~exactattn.verify.compare.Comparison` of :class:`Value` entries, failures first:
    blocks in order, then the merge, each pair its outputs then its lse); ``merged_here``: the
    pairs were merged here; ``max_ulps`` is the tolerance (None: exact pairs)."""

    found: Comparison
    merged_here: bool
    max_ulps: int | None = None

    @property
    def passed(self) -> bool:
        return self.found.passed

    def value(self, where: str, what: str) -> Value:
        """The value ``what`` (``output c`` or ``lse``) of ``where`` (``block b [s, e)`` or
        ``merged``)."""
        return next(x for x in self.found.kept if x.index[-2:] == (where, what))


def _judged(exact, got, fmt, tol: int | None, magnitude: float) -> tuple:
    """``(rounded, judgement)`` of ``got`` against the exact value: in ULPs of ``fmt`` within
    ``tol`` (:func:`~exactattn.verify.compare.judge`; an lse of no key exactly ``-inf``), or
    exactly (``fmt`` None: equal, or NaN for NaN, else ``over``)."""
    lse = isinstance(exact, LogSumExp)
    if fmt is None:
        if lse and not isinstance(got, LogSumExp):
            raise InputError(f"an exact pair's lse must be a LogSumExp (got {type(got).__name__})")
        if not lse and (not isinstance(got, (ExpRatio, Fraction, int)) or isinstance(got, bool)):
            raise InputError(f"an exact pair's output must be an ExpRatio or a Fraction (got "
                             f"{type(got).__name__})")
        # NaN (an empty row under nan) is NaN's
        same = exact == got or exact.row.nan and getattr(getattr(got, "row", None), "nan", False)
        return None, Judgement("ok" if same else "over")
    rounded, ball = (math.nan, None) if exact.row.nan else (-math.inf, None) \
        if lse and exact.neg_inf else round_value(exact, fmt, 128)   # -inf: no key, no sink
    return float(rounded), judge(got, rounded, ball, magnitude, fmt, lambda: exact, tol, lse=lse)


def _float_merge(pairs, sink) -> tuple[list[float], float]:
    """The textbook merge in float64, skipping blocks with ``lse = -inf``."""
    lses = [float(l) for _, l in pairs] + ([float(sink)] if sink is not None else [])
    live = [x for x in lses if x != -math.inf]
    if not live:
        return [0.0] * len(pairs[0][0]), -math.inf
    top = max(live)
    lse = top + math.log(math.fsum(math.exp(x - top) for x in live))
    return [math.fsum(math.exp(float(l) - lse) * float(o[c]) for o, l in pairs if l != -math.inf)
            for c in range(len(pairs[0][0]))], lse


def check_split_merge(raw: Sequence, divisor_squared: Fraction | None, values, blocks,
                      pairs: Sequence, *, merged=None, policy: Policy | None = None,
                      i: int = 0, n_queries: int = 1, offsets: Sequence | None = None,
                      sink_at="merge", dtype: str = "float32",
                      max_ulps: int | None = None, raised=(), at: tuple = ()) -> SplitMerge:
    """Check a kernel's per-block ``(output, lse)`` pairs and their merge against exact rows.

    Shapes: ``raw`` n raw scores of one query (None = hidden); ``values``
    n x d_v; ``blocks`` a block size or block lengths adding up to n;
    ``pairs[b] = (outputs_b, lse_b)`` with d_v outputs; ``merged`` the
    kernel's ``(outputs, lse)`` or None (then the pairs are merged here; a row that sees no
    key and no sink is the policy's empty row, :meth:`~exactattn.call.policy.Policy.empty_share`).
    ``policy`` supplies the sink, soft-cap, ALiBi (query i of
    ``n_queries``) and ``empty_row`` of the one-pass row; lse values are in
    natural-log units.  ``raised`` names the places (``block b [s, e)``, ``merged``) whose
    producer raised: their values count as hard failures.  ``at`` starts every value's index
    (a row's ``(b, h, i)``).

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
    fmt = None if exact else float_format(dtype)
    top = max([abs(float(full.logit(g))) for g in full.gaps[:len(full)] if g is not None],
              default=0.0)
    if not exact and max_ulps is None:      # verify's default rule, d_k unknown: 1
        max_ulps = default_tolerance(dtype, len(full), 1, top, policy)
    merged_here = merged is None
    if merged_here and LogSumExp(full).neg_inf:     # no key, no sink: the policy's empty row
        share = policy.empty_share(len(full))
        merged = ([full.combine(list(c)) for c in cols], LogSumExp(full)) if exact else \
            ([math.nan if share is None else float(share * sum(c)) for c in cols],
             math.nan if share is None else -math.inf)        # NaN's lse is NaN, as verify's
    elif merged_here:
        sink = policy.sink if sink_at == "merge" else None
        merged = merge(pairs, sink) if exact else _float_merge(pairs, sink)
    found = Comparison(None, failures_first)

    def pair(where, row, outs, lse):        # a row's pair against the row's exact values
        exact_lse, seen = LogSumExp(row), any(g is not None for g in row.gaps[:len(row)])
        mag = 0.0 if exact_lse.neg_inf or row.nan else max(top, abs(float(exact_lse)))
        # magnitudes: the size of the terms sum_j p_j |v_j| (verify's), the lse's as verify's
        size = [float(row.combine([abs(x) for x in col])) if seen and not row.nan else 0.0
                for col in cols]
        for what, e, g, m in [*((f"output {c}", row.combine(list(col)), g, size[c])
                                for c, (col, g) in enumerate(zip(cols, outs))),
                              ("lse", exact_lse, lse, mag)]:
            g = g if exact else float(g)
            rounded, j = _judged(e, g, fmt, max_ulps, m)
            if where in raised:             # what should have produced it raised
                j = replace(j, status="hard", ulps=None)
            found.add(Value((*at, where, what), rounded, g, j.ulps, j.rel, j.status, e,
                            j.terms_ulps), j)
    start = 0
    for b, (row, (outs, lse)) in enumerate(zip(rows, pairs)):
        pair(f"block {b} [{start}, {start + lengths[b]})", row, outs, lse)
        start += lengths[b]
    pair("merged", full, *merged)
    return SplitMerge(found, merged_here, None if exact else max_ulps)


# --------------------------------------------------------------------------- a kernel's call
class FunctionMerge(FunctionImpl):
    """Your merge of partial states: ``merge(states, *, sink=None) -> (output, lse)``.

    ``states`` is a list with one ``(output, lse)`` per key block, in key
    order, as the partial function returned them: ``output`` ... x L x E_v in
    the checked dtype, ``lse`` ... x L (natural log, ``-inf`` for a row that
    sees no key of the block) in float32, or float64 for a float64 check (the
    dtype FlashAttention keeps its ``softmax_lse`` in); numpy arrays or torch
    tensors (``arrays``), as the partial function is handed its arguments.
    ``sink`` (a float) is passed only when the policy has a sink: the merge
    counts it once (``lse = log(sum_b exp(lse_b) + exp(sink))``).

    Raises:
        InputError: a merge without ``sink=`` for a call with a sink; a result
            that is not a pair (see :func:`~exactattn.verify.adapter.read_answer`).
        ImplRaised: the merge raised.

    >>> import numpy as np
    >>> m = FunctionMerge(lambda states: states[0], name="first")
    >>> out = m([(np.ones((1, 1)), np.zeros(1))], "float64")
    >>> out.values.tolist(), out.lse.tolist()
    ([[1.0]], [0.0])
    """

    def __call__(self, states, dtype: str, sink: float | None = None):
        kwargs = {}
        if sink is not None:
            if not self._takes("sink"):
                raise InputError(f"{self.name} must take sink= for this call (got a function "
                                 "without it); add the argument, the merge counts the sink once")
            kwargs["sink"] = sink
        outs = self._converter(dtype)
        lses = self._converter("float64" if dtype == "float64" else "float32")
        try:
            got = self.fn([(outs(o), lses(l)) for o, l in states], **kwargs)
        except Exception as e:      # the merge under test failed on this input
            raise ImplRaised(e) from e
        return read_answer(got, self.name, lse=True)


def load_merge(merge, *, arrays: str = "numpy") -> FunctionMerge:
    """A :class:`FunctionMerge` from a callable or a ``module:function`` name.

    Raises:
        InputError: a name that is not ``module:function``, a function that cannot be loaded.

    >>> load_merge("numpy")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: merge must be module:function, your merge of the blocks' (output, lse) states (got 'numpy')
    """
    if isinstance(merge, FunctionMerge):
        return merge
    if callable(merge):
        return FunctionMerge(merge, arrays=arrays)
    if not isinstance(merge, str) or ":" not in merge:
        raise InputError("merge must be module:function, your merge of the blocks' (output, "
                         f"lse) states (got {shorten(repr(merge))})")
    try:
        got = load_impl(merge, arrays=arrays)
    except InputError as e:          # load_impl's messages name the impl
        text = str(e)
        raise InputError("merge" + text[4:] if text.startswith("impl") else text) from None
    return FunctionMerge(got.fn, arrays=arrays, name=got.name)


def cut_lengths(cuts: Sequence[int], n: int) -> list[int]:
    """Block lengths of ``n`` keys cut before each key in ``cuts`` (increasing, 1 to n - 1).

    >>> cut_lengths([3, 5], 8)
    [3, 2, 3]
    >>> cut_lengths([3, 3], 8)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: splits must be increasing key positions from 1 to 7 (got 3,3); each block holds at least one key, e.g. 4 cuts 8 keys into [0, 4), [4, 8)
    """
    cuts = list(cuts)
    edges = [0, *cuts, n]
    if any(isinstance(c, bool) or not isinstance(c, int) for c in cuts) or \
            any(a >= b for a, b in zip(edges, edges[1:])):
        text = ",".join(map(str, cuts))
        if n < 2:
            raise InputError(f"splits must cut a row of at least 2 keys (got {text} for "
                             f"{n} key); check more keys")
        raise InputError(f"splits must be increasing key positions from 1 to {n - 1} (got "
                         f"{text}); each block holds at least one key, e.g. {n // 2} cuts "
                         f"{n} keys into [0, {n // 2}), [{n // 2}, {n})")
    return [b - a for a, b in zip(edges, edges[1:])]


@dataclass
class SplitReport(Report):
    """A split-merge check of a whole call: a :class:`~exactattn.verify.check.Report` whose
    ``found`` holds every row's values (index ``(b, h, i, where, what)``, rows in order,
    failures first), ``impl`` naming the partial function; ``merge`` names the merge (None:
    the states were merged here, in float64), ``lengths`` are the blocks, ``rows`` each row's
    :class:`SplitMerge` (index ``(b, h, i)``), and ``raised`` maps ``block b`` or ``merged``
    to what raised there (those values count as hard failures)."""

    merge: str | None = None
    lengths: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)

    def empty_blocks(self) -> tuple[int, int]:
        """``(rows with a block that sees no key, rows that see no key at all)``."""
        empty = [[x.exact.neg_inf for x in r.found.kept if x.what == "lse" and x.where != "merged"]
                 for r in self.rows.values()]
        return sum(map(any, empty)), sum(map(all, empty))


def verify_split(impl, call, dtype: str = "float32", blocks=None, *, merge=None,
                 max_ulps: int | None = None, arrays: str = "numpy") -> SplitReport:
    """Run ``impl`` on each key block of ``call``, merge the states, judge every row exactly.

    The split-KV (flash-decoding) contract: ``impl`` is an attention
    function that returns ``(output, lse)`` (``return_lse=True``, the same
    contract as ``verify(..., lse="e")``) and is called once per block of
    keys with the whole query, that block's keys and values and that block's
    columns of the mask (the causal rule, window and query offset folded in:
    booleans, True = attend, or additive floats), its own sink never (the
    sink is counted at the merge).  ``merge`` (a :class:`FunctionMerge`, a
    callable or ``module:function``) combines the states; without it they
    are merged here in float64 (skipping ``lse = -inf`` blocks), so only the
    blocks are under test.  Every row ``(b, h, i)`` is then checked by
    :func:`check_split_merge`: each block's pair against the block's own
    exact row and the merged pair against the exact one-pass row, under the
    call's policy (a row that sees no key at all is the policy's
    ``empty_row``: output 0 and ``lse = -inf`` under ``zero``).

    Shapes: ``call`` as :func:`~exactattn.verify.check.verify` takes it;
    ``blocks`` a block size or block lengths adding up to S.  The inputs
    are first rounded to ``dtype``; the tolerance defaults to verify's default rule
    (:func:`~exactattn.verify.check.default_tolerance` with S keys, d_k and the
    largest logit; not the proved per-output bound, which covers one-pass kernels).  Whatever ``impl`` or ``merge`` raises becomes a hard
    failure of what it should have produced (``report.raised``), and so does an answer of
    the wrong shape (the shapes named), as :func:`~exactattn.verify.check.verify` reads it.

    Raises:
        InputError: a policy with ALiBi, RoPE or dropout (a block's keys reach
            the function without their positions), bad ``blocks``, the
            refusals of :func:`~exactattn.verify.check.verify`.

    Reference: Dao, Haziza, Massa and Sizov 2023, "Flash-Decoding for long-context inference".

    >>> from exactattn.call import Call
    >>> c = Call([[1]], [[0], [1]], [[0], [1]], policy=Policy(scale="none"))
    >>> rep = verify_split("numpy", c, "float64", [1, 1])
    >>> rep.passed, rep.rows[0, 0, 0].value("merged", "output 0").exact.decimal(6)
    (True, '0.731059')
    """
    impl = load_impl(impl, arrays=arrays)
    merger = None if merge is None else load_merge(merge, arrays=arrays)
    bad = call.policy.unsupported("split")
    if bad:
        raise InputError(f"policy must have no {' or '.join(UNSUPPORTED['split'])} for a "
                         f"split-merge check (got {bad[0]}); a block's keys reach the function "
                         "without their positions: check the call without it")
    fmt, policy = check_request(impl, call, dtype, max_ulps, runs=2)
    rounded_call, moved = call.rounded(dtype)
    sh = rounded_call.shape
    lengths = block_lengths(blocks, sh["S"])
    ref = Reference(rounded_call)
    whole = make_call(rounded_call, dtype, "e")
    folded = whole.mask_in(None, fold=True) \
        if whole.attn_mask is not None or whole.policy.positional else None
    want = (sh["B"], sh["H_q"], sh["L"], sh["E_v"])
    rank = call.rank
    raised: dict = {}
    nan = np.full(want, math.nan), np.full(want[:3], math.nan)

    def state(where: str, name: str, run, on: str = ""):     # an (output, lse) or NaN
        *got, why = answered(want, rank, name, run, on=on)
        if why is None:
            return tuple(got)
        raised[where] = why
        return nan
    states, start = [], 0
    for b, n in enumerate(lengths):
        cut = np.s_[..., start:start + n, :]
        part = replace(whole, key=whole.key[cut], value=whole.value[cut],
                       attn_mask=None if folded is None else folded[cut[:-1]],
                       policy=whole.policy.replace(causal=False, window=None, query_offset=None,
                                                   sink=None, empty_row="zero"))
        where = f"block {b} [{start}, {start + n})"
        states.append(state(where, impl.name, lambda: impl.answer(part), f" on {where}"))
        start += n
    merged = None
    if merger is not None:
        if raised:
            raised["merged"] = "nothing: a block raised, so there was nothing to merge"
            merged = nan
        else:
            shaped = [(o.reshape(o.shape[4 - rank:]), l.reshape(l.shape[4 - rank:]))
                      for o, l in states]
            sink = None if policy.sink is None else float(policy.sink)
            merged = state("merged", merger.name, lambda: merger(shaped, dtype, sink))
    tol = tolerance(ref, dtype, max_ulps)
    dead = {*raised, "merged"} if raised else ()      # what raised produced nothing
    rows, found = {}, Comparison(None, failures_first)
    for b, h, i in np.ndindex(*want[:3]):
        pairs = [(o[b, h, i].tolist(), float(l[b, h, i])) for o, l in states]
        got = None if merged is None else (merged[0][b, h, i].tolist(), float(merged[1][b, h, i]))
        res = check_split_merge(ref.raw_row(b, h, i), ref.divisor_squared,
                                ref.exact_call.value[b, ref.kv(h)], lengths, pairs, merged=got,
                                policy=ref.head_policy(h), i=i, n_queries=sh["L"],
                                offsets=ref.offsets(b, h, i), dtype=dtype, max_ulps=tol,
                                raised=dead, at=(b, h, i))
        rows[b, h, i] = res
        found.merge(res.found)
    return SplitReport(impl.name, dtype, policy, rounded_call, found, tol, moved, ref, {},
                       raised=raised, merge=None if merger is None else merger.name,
                       lengths=lengths, rows=rows)
