"""Every head of every layer of a real model run, exactly, against what the model computed.

For one layer of a :class:`~exactattn.models.run.ModelRun`:

1. **the verdict**: the attention operation on the model's own float32 q, k, v
   (its projections, each float read as its exact binary value), evaluated by the
   one exact reference (:class:`~exactattn.reference.reference.Reference`) under the
   layer's policy (causal, GQA, RoPE: the rotation is applied exactly), against the
   model's probabilities and head outputs, per head, by verify's comparison and verify's
   default *rule* (:func:`~exactattn.numbers.formats.default_max_ulps`: the rule verify falls
   back to, stricter than the per-output proved bound that is verify's default tolerance, so a
   head over here may still pass ``exactattn verify``).  The shares
   are outputs too: each value matrix is followed by the n x n identity.  A head is over
   its tolerance when an entry is over on both ULP counts, or NaN/inf (:attr:`HeadCheck.over`);
2. **the drift**, reported and not judged: the model's float q, k, v against the exact
   projections ``x W + b`` of the layer's input (integer matrix products over powers of
   two, :func:`projection_drift`), and its head outputs before and after ``W_O`` against the exact
   chain from x (:attr:`HeadCheck.chain`, :attr:`LayerCheck.projected`:
   ``concat(heads) W_O + b_O`` enclosed by one ``arb_mat`` product; an entry's exact value,
   when a ball does not decide it, is the :class:`~exactattn.engines.layer.LayerValue` of
   :func:`~exactattn.engines.layer.out_project`);
3. every entry judged and certified to ``places`` decimals from ``arb`` balls of a whole
   head (:func:`~exactattn.reference.enclose.block_balls`): verify's bulk decision
   (:func:`~exactattn.verify.compare.decide`) on float64 enclosures of the balls decides
   almost every entry, with the counts :func:`~exactattn.verify.compare.judge` gives; the
   judge takes the rest and every entry that may hold a group's largest error.  A
   certified decimal comes from the enclosure where it decides the rounding with a proved
   margin (:func:`~exactattn.reference.floats.round_balls`), else from
   :func:`~exactattn.numbers.digits.certify`.

The terms of a probability are the row's shares (they add up to 1): its
error at the terms is in ULPs of 1.  The terms of a head output are
``shares_ij |values_jc|``; of an output after ``W_O``, ``|W_O[d][a d_v + c]|
|head_a[i][c]|`` and ``|b_O[d]|``.

Errors: :class:`~exactattn.errors.InputError` from the pieces (weights that
are not there, a model without probabilities asked for them).

Reference: multi-head attention, Vaswani et al. 2017, sec. 3.2.2; the ULP
counts and the budget are verify's (:mod:`exactattn.verify.compare`,
:func:`~exactattn.numbers.formats.default_max_ulps`), made for one attention call on
given queries, keys and values: the verdict's case exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from types import SimpleNamespace

import numpy as np

from ..call.inputs import Call, float_ints
from ..numbers.bulk import exact_matmul
from ..numbers.digits import certify, round_fraction, working_precision
from ..errors import InputError
from ..engines.layer import LayerValue, out_project
from ..verify.check import Entry, bulk_judged, tolerance
from ..verify.compare import Comparison, decide, enclosures
from ..numbers.formats import (float_format, round_array, round_enclosed, round_enclosures,
                               round_to_format, ulp_indices)
from ..reference.enclose import block_balls
from ..reference.floats import round_balls
from ..reference.reference import Reference
from .presets import layer_arrays, preset

#: the model's dtype: every comparison counts ULPs of float32
DTYPE = "float32"
#: bits of the enclosures every entry is first judged and certified from
PREC = 96


def _worst(entry) -> tuple:
    """A group's order of its worst entry: hard failures, then the most ULPs, then the
    larger error at the terms (ties: the first)."""
    return (entry.status != "hard", -(entry.ulps or 0), -(entry.terms_ulps or 0))


def _entry(idx, rounded, got, ulps, rel, status, terms=None) -> Entry:
    """A group's entry (a hard failure's rel: None)."""
    return Entry(idx, rounded, got, ulps, None if status == "hard" else rel, status, None, terms)


def judge_group(got, balls, mags, exact, fmt, budget: int, places: int, keep: bool) -> Comparison:
    """One group judged into a :class:`~exactattn.verify.compare.Comparison` (its worst entry
    kept, with ``misses``, ``decimals`` when ``keep``, ``worst_exact`` and ``budget``): the
    model's floats ``got`` (a float64 array) against exact values
    enclosed by ``balls`` (``arb``, at :data:`PREC` bits), their terms of size ``mags``,
    ``exact(*cell)`` the value itself.  Verify's bulk judging
    (:func:`~exactattn.verify.check.bulk_judged`: :func:`~exactattn.verify.compare.decide` on
    float64 enclosures of the balls) gives each entry it decides as ok the counts
    :func:`~exactattn.verify.compare.judge` would; every other entry, and every entry within
    2^-6 of a maximum (``near_max``), is judged by it.  The certified decimals at ``places``: from the enclosures
    where they decide the rounding (:func:`~exactattn.reference.floats.round_balls`), else
    :func:`~exactattn.numbers.digits.certify`."""
    mid, rad = enclosures(balls)
    rounded, same = round_enclosures(mid, rad, fmt)
    for k in np.flatnonzero(~same).tolist():       # not decided there: from the ball, or exactly
        cell = tuple(map(int, np.unravel_index(k, got.shape)))
        rounded[cell] = round_enclosed(balls[cell], fmt, PREC, partial(exact, *cell), 2 * PREC)[0]
    found = bulk_judged(got, (mid, rad, mags), balls, fmt, budget, SimpleNamespace(output=exact),
                        0, rounded=rounded, found=Comparison(1, _worst, budget=budget),
                        entry=_entry, near_max=2.0 ** -6)[0]
    at, undecided = round_balls(mid, rad, places)
    own, own_open = round_balls(got, 0 * got, places)
    open_ = undecided | own_open
    misses, decimals = int(((at != own) & ~open_).sum()), {}
    for k in (range(got.size) if keep else np.flatnonzero(open_).tolist()):
        cell, ball = tuple(map(int, np.unravel_index(k, got.shape))), balls.flat[k]
        certified = at.flat[k]
        if undecided.flat[k]:
            try:
                certified = certify(lambda p: ball if p <= PREC else exact(*cell).ball(p), places)
            except InputError:      # on a boundary past every enclosure: the exact value
                certified = exact(*cell).decimal(places)
        decimals[cell], g = certified, float(got.flat[k])
        if open_.flat[k]:          # the float as printed (ties to even, no -0.0000)
            misses += not math.isfinite(g) or round_fraction(Fraction(g), places) != certified
    found.misses, found.decimals = misses, decimals if keep else None
    worst = found.worst[0]
    found.worst_exact = significant(exact(*worst.index), worst.got)
    return found


def significant(value, near: float, digits: int = 9) -> str:
    """An exact value (``.decimal(places)``) certified to about ``digits`` significant digits,
    the places chosen from ``near`` (a float close to it).

    >>> from fractions import Fraction
    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> significant(SoftmaxRow([Fraction(1), Fraction(0)], None).share(1), 0.27)  # 1/(1 + e)
    '0.268941421'
    """
    if not near or not math.isfinite(near):
        return value.decimal(digits)
    lead = math.floor(math.log10(abs(near)))
    return value.decimal(min(50, max(0, digits - 1 - lead)))


@dataclass
class HeadCheck:
    """One head of a layer, judged on the model's own q, k, v: its probabilities (None when the
    model returned none) and outputs; ``chain``: its outputs against the exact chain from the
    layer input (the model's float projections' drift included), not judged."""

    head: int
    probs: Comparison | None
    outputs: Comparison
    chain: Comparison | None = None

    @property
    def over(self) -> bool:
        """True when an entry of the head's attention operation is over its tolerance."""
        return any(w is not None and (w.over or w.hard) for w in (self.probs, self.outputs))


@dataclass
class LayerCheck:
    """One layer: its heads, the outputs after ``W_O`` (``projected``, from the exact chain),
    the ULP budget of the heads' verdict (the exact chain's: its groups' own), the drift of
    the model's projections (``drift``: ``{"q": Comparison, "k": ..., "v": ...}``,
    :func:`projection_drift`), time."""

    layer: int
    heads: list[HeadCheck]
    projected: Comparison
    budget: int
    seconds: float
    n: int
    drift: dict = field(default_factory=dict)

    @property
    def certified(self) -> int:
        """How many entries were certified and compared."""
        return sum(g.count for h in self.heads for g in (h.probs, h.outputs, h.chain) if g) + \
            self.projected.count

    @property
    def over(self) -> int:
        """How many heads are over their tolerance on the model's own inputs."""
        return sum(h.over for h in self.heads)


def projection_drift(got, exact, fmt) -> Comparison:
    """How far the model's float projection ``got`` is from the exact one (``Fraction``
    entries) correctly rounded: each entry's ULPs (of ``fmt``) counted in a
    :class:`~exactattn.verify.compare.Comparison` (``max_ulps``; ``histogram[0]`` the entries
    that are that correct rounding).  The rounding decided by verify's
    :func:`~exactattn.verify.compare.decide` on the entry's nearest float64 (``float`` of a
    ``Fraction`` rounds correctly: the exact value lies between its two neighbours), else
    exactly."""
    near, g = np.array([float(q) for q in exact.ravel().tolist()]), got.ravel().astype(np.float64)
    status, rounded, *_ = decide(g, near, 0 * near, 1 + 0 * near, fmt, 1 << 62)
    for k in np.flatnonzero(status == 3).tolist():      # not decided there: exactly
        rounded[k] = round_to_format(exact.flat[k], fmt)
    ulps = np.abs(ulp_indices(g, fmt)[0] - ulp_indices(rounded, fmt)[0])
    found = Comparison(keep=0)
    found.add_many(np.arange(ulps.size), ulps, None, None, None)
    return found


def _projection(x, w, b, rows: bool):
    """``x W + b`` exactly (``Fraction`` entries), ``W`` as stored (``rows``: d_in x d_out,
    else nn.Linear's d_out x d_in), from integer products over powers of two, every float
    read as its binary value (:func:`~exactattn.blocks.inputs.float_ints`)."""
    X, xd = float_ints(x)
    W, wd = float_ints(w if rows else w.T)
    num, den = exact_matmul(X, W).astype(object), xd * wd
    if b is not None:
        B, bd = float_ints(b)
        num, den = num * bd + B.astype(object) * den, den * bd
    return np.array([Fraction(t, den) for t in num.ravel().tolist()],
                    dtype=object).reshape(num.shape)


def _reference(parts: list, policy, name: str, floats: str | None = None) -> Reference:
    """The one exact reference of the call whose queries, keys and values are the n x (heads
    d) arrays ``parts`` = ``[(array, heads)] * 3``, split into heads."""
    split = [a.reshape(len(a), h, -1).transpose(1, 0, 2)[None] for a, h in parts]
    return Reference(Call(*split, policy=policy, name=name, floats=floats))


def _balls(ref: Reference) -> tuple:
    """Every output of ``ref`` as an ``arb`` ball at :data:`PREC` bits and the size of its
    terms, H x L x E_v object and float64 arrays
    (:func:`~exactattn.reference.enclose.block_balls`)."""
    with working_precision(PREC):
        got = [block_balls(ref, 0, h, PREC, magnitudes=True) for h in range(ref.Hq)]
    return np.array([g[0] for g in got], dtype=object), np.array([g[2] for g in got])


def _projected(ref: Reference, balls, w_o, b_o, rows: bool, after, fmt, budget: int,
               places: int, keep: bool) -> Comparison:
    """``concat(heads) W_O + b_O`` enclosed by one arb_mat product, each entry judged."""
    from flint import arb, arb_mat, fmpq, fmpq_mat, fmpz_mat
    H, n, dv = ref.Hq, ref.L, ref.Ev
    heads = np.concatenate(list(balls), axis=1)                       # n x H d_v balls
    W = w_o if rows else w_o.T                                        # H d_v x d_model
    b = np.zeros(W.shape[1]) if b_o is None else b_o
    ints, den = float_ints(W)
    with working_precision(PREC):
        P = arb_mat(n, H * dv, heads.ravel().tolist()) * \
            arb_mat(fmpq_mat(fmpz_mat(ints.tolist())) * fmpq(1, den))
        P += arb_mat(n, len(b), [arb(float(e)) for e in b] * n)
    out = np.array(P.entries(), dtype=object).reshape(n, len(b))
    mags = np.abs(round_array(enclosures(heads)[0], fmt)) @ np.abs(W) + np.abs(b)   # sizes

    def exact(i, d):
        column, cd = float_ints(W[:, d])
        rows_ = [[[ref.output(0, h, i, c) for c in range(dv)]] for h in range(H)]
        return LayerValue(out_project(([column.tolist()], cd), rows_)[0][0][0],
                          Fraction(float(b[d])))
    return judge_group(after.astype(np.float64), out, mags, exact, fmt, budget, places,
                       keep)


def check_layer(run, index: int, places: int = 4, *, keep: bool = False) -> LayerCheck:
    """Layer ``index`` of ``run`` (a :class:`~exactattn.models.run.ModelRun`), every entry
    judged against the exact values and certified to ``places`` decimals (kept by cell in
    each group's ``decimals`` when ``keep``).

    The verdict (:attr:`HeadCheck.probs`, :attr:`HeadCheck.outputs`) judges the attention
    operation on the model's own float q, k, v; the drift (:attr:`HeadCheck.chain`,
    :attr:`LayerCheck.projected`, :attr:`LayerCheck.drift`) compares the model with the exact
    chain from the layer's input x: its projections ``x W + b`` (integers over a power of
    two), the exact attention on them, ``W_O`` and ``b_O``.

    Shapes: the run's layer holds x (n x d_model), q (n x H d_k), k (n x H_kv d_k),
    v (n x H_kv d_v), probabilities (H x n x n), the heads before ``W_O`` (n x H d_v) and
    after (n x d_model).
    """
    start = time.perf_counter()
    cap, fmt, H, G = run.layers[index], float_format(DTYPE), run.heads, run.kv_heads
    rows = preset(run.arch)["layout"] == "rows"
    ws, bs, w_o, b_o = layer_arrays(run.tensors, run.arch, index)
    exact = [_projection(cap.x, w, b, rows) for w, b in zip(ws, bs)]
    drift = {name: projection_drift(got, e, fmt)
             for name, got, e in zip("qkv", (cap.q, cap.k, cap.v), exact)}
    n, dv = len(cap.x), cap.v.shape[1] // G
    v = cap.v if cap.probs is None else np.concatenate(     # shares: outputs on the identity
        [np.hstack([cap.v[:, g * dv:(g + 1) * dv], np.eye(n)]) for g in range(G)], axis=1)
    model = _reference([(cap.q, H), (cap.k, G), (v, G)], run.policy, "model inputs", "exact")
    chain = _reference(list(zip(exact, (H, G, G))), run.policy, "layer")
    with working_precision(PREC):
        budget, chain_budget = tolerance(model, DTYPE), tolerance(chain, DTYPE)
    (m_balls, m_mags), (balls, mags) = _balls(model), _balls(chain)
    heads = []
    for h in range(model.Hq):
        got = cap.before[:, h * dv:(h + 1) * dv].astype(np.float64)
        probs = None if cap.probs is None else judge_group(
            cap.probs[h].astype(np.float64), m_balls[h, :, dv:], np.ones((model.L, model.L)),
            partial(model.share, 0, h), fmt, budget, places, keep)
        outs, along = (judge_group(got, b[h, :, :dv], m[h, :, :dv], partial(ref.output, 0, h),
                                   fmt, tol, places, keep)
                       for ref, b, m, tol in ((model, m_balls, m_mags, budget),
                                              (chain, balls, mags, chain_budget)))
        heads.append(HeadCheck(h, probs, outs, along))
    projected = _projected(chain, balls, w_o, b_o, rows, cap.after, fmt, chain_budget, places,
                           keep)
    return LayerCheck(index, heads, projected, budget, time.perf_counter() - start, n, drift)


def default_jobs(layers: int) -> int:
    """The processes :func:`check_layers` uses by default: one per CPU this process may run
    on, at most one per layer and at most 4 (each a fork of the process that ran the
    model)."""
    import os
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, layers, 4))


#: the run a forked worker of :func:`check_layers` reads (set before the workers start)
_SHARED: dict = {}


def _check_shared(index: int) -> LayerCheck:
    run, places = _SHARED["run"]
    return check_layer(run, index, places)


def check_layers(run, places: int = 4, *, jobs: int = 1):
    """Every layer of ``run`` checked (:func:`check_layer`), in order, as an iterator.

    With ``jobs`` > 1 the layers are checked in that many forked processes
    (the same results, in the same order); where processes cannot be forked,
    one after another here.
    """
    from ..present.stream import forked_map
    _SHARED["run"] = (run, places)
    try:
        yield from forked_map(_check_shared, range(len(run.layers)), jobs)
    finally:
        _SHARED.clear()
