"""Every head of every layer of a real model run, exactly, against what the model computed.

For one layer of a :class:`~exactattn.models.run.ModelRun`:

1. **the verdict**: the attention operation on the model's own float32 q, k, v
   (its projections, each float read as its exact binary value by
   :func:`~exactattn.numbers.exact.to_matrix` with ``floats="exact"``), evaluated by the
   one exact reference (:class:`~exactattn.reference.reference.Reference`) under the
   layer's policy (causal, GQA, RoPE: the rotation is applied exactly), against the
   model's probabilities and head outputs, per head, by verify's one comparison
   (:func:`~exactattn.verify.compare.judge`) and verify's default tolerance
   (:func:`~exactattn.numbers.formats.default_max_ulps`).  A head is over its tolerance
   when an entry is over on both ULP counts, or NaN/inf (:attr:`HeadCheck.over`);
2. **the drift**, reported and not judged: the model's float q, k, v against the exact
   projections ``x W + b`` of the layer's input (:class:`Drift`), and its head outputs
   before and after ``W_O`` against the exact chain from x (:attr:`HeadCheck.chain`,
   :attr:`LayerCheck.projected`: ``concat(heads) W_O + b_O`` enclosed by one ``arb_mat``
   product; an entry's exact value, when a ball does not decide it, is the
   :class:`~exactattn.engines.layer.LayerValue` of :func:`~exactattn.engines.layer.out_project`);
3. every entry certified to ``places`` decimals (:func:`~exactattn.numbers.digits.certify`
   on the same enclosures).

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
from typing import Callable

import numpy as np

from ..numbers.digits import certify, working_precision
from ..errors import InputError
from ..engines.head import attend
from ..numbers.exact import common_denominator, to_matrix
from ..engines.layer import LayerValue, out_project
from ..verify.check import Entry, tolerance
from ..verify.compare import Comparison, judge
from ..numbers.formats import float_format, round_enclosed, round_to_format, ulps_between
from ..call.inputs import Call
from ..call.policy import Policy
from ..reference.reference import Reference
from .weights import exact_matrix

__all__ = ["DTYPE", "Drift", "GroupCheck", "HeadCheck", "LayerCheck", "PREC", "check_layer",
           "check_layers", "default_jobs", "significant"]

#: the model's dtype: every comparison counts ULPs of float32
DTYPE = "float32"
#: bits of the enclosures every entry is first judged and certified from
PREC = 96


def _most_ulps(entry) -> tuple:
    """A group's worst entry: a hard failure, else the most ULPs, then the most at the terms."""
    return (entry.status != "hard", -(entry.ulps or 0), -(entry.terms_ulps or 0))


@dataclass
class GroupCheck(Comparison):
    """A group of entries (a head's probabilities, its outputs, ...) compared: a
    :class:`~exactattn.verify.compare.Comparison` that keeps the one worst entry.

    ``ulps``, ``terms_ulps``, ``rel``: the largest of each over the group's
    entries that are not hard failures (each may come from a different entry;
    0 when there is none); ``cell`` the entry with the most ULPs (ties: the
    larger error at the terms), where the model has ``got`` and the exact
    value is ``exact`` (certified, 9 significant digits, by :meth:`finish`).
    ``over``: entries over the ULP ``budget`` on both counts; ``hard``: NaN
    or infinity where the exact value is finite; ``misses``: entries whose
    float, printed to ``places`` decimals, differs from the certified decimal;
    ``decimals``: every entry's certified decimal by cell, when kept.
    """

    keep: int | None = 1
    rank: Callable = field(default=_most_ulps, repr=False)
    misses: int = 0
    budget: int = 0
    decimals: dict | None = None
    exact: str = ""
    _value: object = field(default=None, repr=False)

    @property
    def entries(self) -> int:
        return self.count

    @property
    def ulps(self) -> int:
        return 0 if self.max_ulps is None else self.max_ulps

    @property
    def terms_ulps(self) -> float:
        return 0.0 if self.max_terms is None else self.max_terms

    @property
    def rel(self) -> float:
        return 0.0 if self.max_rel is None else self.max_rel

    @property
    def cell(self) -> tuple | None:
        return self.worst[0].index if self.count else None

    @property
    def got(self) -> float | None:
        return self.worst[0].got if self.count else None

    def judged(self, cell: tuple, got: float, j, exact, certified: str, places: int) -> None:
        """One entry judged (``j``, a :class:`~exactattn.verify.compare.Judgement`)."""
        if self.decimals is not None:
            self.decimals[cell] = certified
        rel = None if j.status == "hard" else j.rel     # the largest over measured entries
        entry = Entry(cell, math.nan, got, j.ulps, rel, j.status, None, j.terms_ulps)
        if self.add(entry, j):            # the new worst: its exact value, for finish()
            self._value = exact
        if math.isfinite(got):
            printed = f"{got:.{places}f}"
            if printed.startswith("-") and not printed.strip("-0."):
                printed = printed[1:]           # -0.0000 is 0.0000
            self.misses += printed != certified
        else:
            self.misses += 1

    def finish(self) -> None:
        """Certify the worst entry's exact value to 9 significant digits."""
        if self._value is not None:
            self.exact = significant(self._value(), self.got)
            self._value = None          # the layer's exact reference is let go


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
    probs: GroupCheck | None
    outputs: GroupCheck
    chain: GroupCheck | None = None

    @property
    def over(self) -> bool:
        """True when an entry of the head's attention operation is over its tolerance."""
        return any(w is not None and (w.over or w.hard) for w in (self.probs, self.outputs))


@dataclass
class LayerCheck:
    """One layer: its heads, the outputs after ``W_O`` (``projected``, from the exact chain),
    the ULP budget of the heads' verdict (``chain_budget``: of the exact chain), the drift of
    the model's projections (``drift``: q, k, v), time."""

    layer: int
    heads: list[HeadCheck]
    projected: GroupCheck
    budget: int
    seconds: float
    n: int
    drift: list[Drift] = field(default_factory=list)
    chain_budget: int = 0

    @property
    def certified(self) -> int:
        """How many entries were certified and compared."""
        return sum((h.probs.entries if h.probs else 0) + h.outputs.entries +
                   (h.chain.entries if h.chain else 0)
                   for h in self.heads) + self.projected.entries

    @property
    def over(self) -> int:
        """How many heads are over their tolerance on the model's own inputs."""
        return sum(h.over for h in self.heads)


def _certified(ball, exact, places: int) -> str:
    """The correctly rounded decimal of a value enclosed by ``ball`` (at :data:`PREC` bits)."""
    try:
        return certify(lambda p: ball if p <= PREC else exact().ball(p), places)
    except InputError:          # on a boundary past every enclosure: the exact value decides
        return exact().decimal(places)


def _rounded(ball, exact, fmt) -> float:
    """The exact value rounded to ``fmt``, from its ball or, when that straddles, exactly."""
    return round_enclosed(ball, fmt, PREC, exact, 2 * PREC)[0]


def _exact_traces(layer, x) -> list:
    """The layer's heads projected exactly (fast engine): queries, keys, values, rationals."""
    plain = Policy()          # the projections alone: the policy enters in the Reference
    return [attend(h.with_policy(plain), x, engine="fast") for h in layer.heads]


def _exact_heads(layer, traces) -> Reference:
    """The exact projections of ``traces`` read into the one exact reference."""
    first = [layer.kv_of.index(g) for g in range(layer.n_kv_heads)]
    return Reference(Call([[t.queries for t in traces]], [[traces[a].keys for a in first]],
                          [[traces[a].values for a in first]], policy=layer.policy, name="layer"))


def _heads_of(a, parts: int, what: str) -> list:
    """A float array n x (parts d) as ``parts`` exact n x d matrices: each float read as its
    binary value (:func:`~exactattn.numbers.exact.to_matrix`, ``floats="exact"``)."""
    d = a.shape[1] // parts
    return [to_matrix(a[:, h * d:(h + 1) * d].astype("float64").tolist(),
                      name=f"the model's {what} of head {h}", floats="exact")
            for h in range(parts)]


def _model_heads(layer, cap) -> Reference:
    """The attention operation on the model's own float q, k, v (its projections, before any
    rotary embedding: the policy applies it exactly), read exactly."""
    H, G = len(layer.heads), layer.n_kv_heads
    return Reference(Call([_heads_of(cap.q, H, "queries")], [_heads_of(cap.k, G, "keys")],
                          [_heads_of(cap.v, G, "values")], policy=layer.policy,
                          name="model inputs"))


@dataclass
class Drift:
    """How far the model's float projections are from the exact ones, for one of q, k, v:
    the most ULPs (of :data:`DTYPE`) between a model entry and the exact projection
    correctly rounded, and how many entries are not that correct rounding."""

    name: str
    entries: int
    ulps: int
    off: int


def _drift(name: str, got, exact_heads: list, fmt) -> Drift:
    width = len(exact_heads[0][0])
    ulps = off = count = 0
    for h, rows in enumerate(exact_heads):
        block = got[:, h * width:(h + 1) * width].tolist()
        for i, row in enumerate(rows):
            for c, q in enumerate(row):
                u = ulps_between(float(block[i][c]), round_to_format(q, fmt), fmt)
                ulps, off, count = max(ulps, u), off + (u != 0), count + 1
    return Drift(name, count, ulps, off)


def _probs(ref: Reference, h: int, probs, fmt, budget: int, places: int, keep: bool) -> GroupCheck:
    w = GroupCheck(budget=budget, decimals={} if keep else None)
    for i in range(ref.L):
        row = ref.row(0, h, i)
        balls = row.exp_balls(PREC)
        den = row.normaliser(PREC, balls)
        got_row = probs[i].tolist()
        for j, g in enumerate(row.gaps):
            def exact(row=row, j=j):
                return row.share(j)
            ball = exact().ball(PREC) if g is None else balls[g] / den
            got = got_row[j]
            jd = judge(got, _rounded(ball, exact, fmt), ball, 1.0, fmt, exact, budget)
            w.judged((i, j), got, jd, exact, _certified(ball, exact, places), places)
    return w


def _outputs(ref: Reference, h: int, got_block, rounded, balls, mags, fmt, budget: int,
             places: int, keep: bool) -> GroupCheck:
    w = GroupCheck(budget=budget, decimals={} if keep else None)
    for i in range(ref.L):
        for c in range(ref.Ev):
            def exact(i=i, c=c):
                return ref.output(0, h, i, c)
            got = float(got_block[i, c])
            ball = balls[i, c]
            jd = judge(got, rounded[i, c], ball, float(mags[i, c]), fmt, exact, budget)
            w.judged((i, c), got, jd, exact, _certified(ball, exact, places), places)
    return w


def _projected(layer, ref: Reference, rounded, balls, after, fmt, budget: int,
               places: int, keep: bool) -> GroupCheck:
    """``concat(heads) W_O + b_O`` enclosed by one arb_mat product, each entry judged."""
    from flint import arb, arb_mat, fmpq, fmpq_mat, fmpz_mat
    from ..numbers.exact import fmpq_of
    H, n, dv = ref.Hq, ref.L, ref.Ev
    heads = np.concatenate([balls[h] for h in range(H)], axis=1)      # n x H d_v balls
    W = layer.W_O                                                     # d_model x H d_v
    d_model = len(W)
    b = layer.b_O or [0] * d_model
    ints, den = common_denominator(W)
    P = arb_mat(n, H * dv, heads.ravel().tolist()) * \
        arb_mat(fmpq_mat(fmpz_mat(ints).transpose()) * fmpq(1, den))
    entries = P.entries()
    w64 = np.abs(np.array(ints, dtype=np.float64)) / float(den)    # sizes, a few digits
    mags = np.abs(np.concatenate([rounded[h] for h in range(H)], axis=1)) @ w64.T + \
        np.abs(np.array([float(e) for e in b]))
    w_ints = {}

    def exact(i, d):
        if d not in w_ints:
            w_ints[d] = common_denominator([W[d]])
        rows = [[[ref.output(0, h, i, c) for c in range(dv)]] for h in range(H)]
        terms = out_project(w_ints[d], rows)[0][0][0]
        return LayerValue(terms, b[d])
    w = GroupCheck(budget=budget, decimals={} if keep else None)
    for i in range(n):
        for d in range(d_model):
            ball = entries[i * d_model + d] + arb(fmpq_of(b[d]))
            got = float(after[i, d])

            def value(i=i, d=d):
                return exact(i, d)
            jd = judge(got, _rounded(ball, value, fmt), ball, float(mags[i, d]), fmt, value,
                       budget)
            w.judged((i, d), got, jd, value, _certified(ball, value, places), places)
    return w


def check_layer(run, index: int, places: int = 4, *, keep: bool = False) -> LayerCheck:
    """Layer ``index`` of ``run`` (a :class:`~exactattn.models.run.ModelRun`), every entry
    judged against the exact values and certified to ``places`` decimals (kept by cell in
    each :attr:`GroupCheck.decimals` when ``keep``).

    The verdict (:attr:`HeadCheck.probs`, :attr:`HeadCheck.outputs`) judges the attention
    operation on the model's own float q, k, v; the drift (:attr:`HeadCheck.chain`,
    :attr:`LayerCheck.projected`, :attr:`LayerCheck.drift`) compares the model with the exact
    chain from the layer's input x.

    Shapes: the run's layer holds x (n x d_model), q (n x H d_k), k (n x H_kv d_k),
    v (n x H_kv d_v), probabilities (H x n x n), the heads before ``W_O`` (n x H d_v) and
    after (n x d_model).
    """
    start = time.perf_counter()
    cap = run.layers[index]
    layer = run.layer(index)
    fmt = float_format(DTYPE)
    traces = _exact_traces(layer, exact_matrix(cap.x))
    first = [layer.kv_of.index(g) for g in range(layer.n_kv_heads)]
    drift = [_drift("q", cap.q, [t.queries for t in traces], fmt),
             _drift("k", cap.k, [traces[a].keys for a in first], fmt),
             _drift("v", cap.v, [traces[a].values for a in first], fmt)]
    model = _model_heads(layer, cap)
    chain = _exact_heads(layer, traces)
    dv = model.Ev
    with working_precision(PREC):
        budget, chain_budget = tolerance(model, DTYPE), tolerance(chain, DTYPE)
    m_rounded, m_balls, m_mags = model.rounded_outputs(DTYPE, prec=PREC)
    rounded, balls, mags = chain.rounded_outputs(DTYPE, prec=PREC)
    heads = []
    with working_precision(PREC):
        for h in range(model.Hq):
            got = cap.before[:, h * dv:(h + 1) * dv]
            probs = None if cap.probs is None else _probs(model, h, cap.probs[h], fmt, budget,
                                                          places, keep)
            outs = _outputs(model, h, got, m_rounded[0, h], m_balls[0, h], m_mags[0, h], fmt,
                            budget, places, keep)
            along = _outputs(chain, h, got, rounded[0, h], balls[0, h], mags[0, h], fmt,
                             chain_budget, places, keep)
            heads.append(HeadCheck(h, probs, outs, along))
        projected = _projected(layer, chain, rounded[0], balls[0], cap.after, fmt,
                               chain_budget, places, keep)
    for h in heads:
        for w in (h.probs, h.outputs, h.chain):
            if w is not None:
                w.finish()
    projected.finish()
    return LayerCheck(index, heads, projected, budget, time.perf_counter() - start, model.L,
                      drift, chain_budget)


def default_jobs(layers: int) -> int:
    """The processes :func:`check_layers` uses by default: one per CPU this process may run
    on, at most one per layer and at most 4 (each holds one layer's exact weights, ~0.7 GB
    for all-MiniLM-L6-v2)."""
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
    import multiprocessing
    count = len(run.layers)
    if jobs <= 1 or count == 1 or "fork" not in multiprocessing.get_all_start_methods():
        for k in range(count):
            yield check_layer(run, k, places)
        return
    _SHARED["run"] = (run, places)
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, count)) as pool:
            yield from pool.imap(_check_shared, range(count))
    finally:
        _SHARED.clear()
