"""The FLOP-counter audit: the derived count of each call, each counter's figure, a verdict.

For every call of :mod:`~exactattn.cost.audit_calls` the audit derives the
multiply-adds of each stage from the loop nests
(:func:`~exactattn.cost.derivation.derive_call`; checked against a counted run,
:func:`~exactattn.cost.counting.count_call`) and the operations a counter
might add besides them: the full square a dense kernel computes under a
causal or band mask, the batch of the query alone (a matmul counter that
reads the first operand's shape), and elementwise operations (the softmax,
the scaling, an additive mask, biases).  :func:`verdict` then explains a
counter's figure by the fewest departures from the exact count: ``matches``,
or a list of findings such as ``full_square``, ``omits_attention``,
``batch_factor``, ``softmax``.  A figure nothing explains is
``unexplained``.  Presentation is in :mod:`~exactattn.cost.audit_report`.

Units: MACs; a reading in FLOPs is held against 2 x MACs.

>>> L = ledger(call("sdpa_bottom_right"))
>>> L.macs["total"], L.dense["total"], 2 * L.dense["total"]
(816, 960, 1920)
>>> verdict(L, 1920, 2).findings
('full_square',)
>>> verdict(ledger(call("matmul_broadcast_query")), 160, 1).findings
('batch_factor_scores',)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from ..errors import InputError
from .audit_calls import AUDIT_CALLS, AuditCall, call
from .counting import count_call
from .derivation import derive_call

__all__ = ["ERRORS", "EXTRAS", "Audit", "Ledger", "Verdict", "audit", "explanations", "ledger",
           "verdict"]

#: the elementwise operations a counter may add to the multiply-adds, in the order tried
EXTRAS = ("softmax", "bias", "bias_once", "scale", "mask")
#: findings that are errors (the rest are conventions: what else a counter chose to count)
ERRORS = ("omits_attention", "omits_linear", "batch_factor", "batch_factor_scores",
          "attention_twice", "bias_once", "unexplained", "fails")


@dataclass(frozen=True)
class Ledger:
    """The derived figures of one call.

    ``macs``: MACs per stage and ``total`` (the loops over visible pairs);
    ``counted``: the same, counted by running the call; ``dense``: scores and
    mix over the full L x S square (no causal rule, no mask); ``query_batch``:
    scores and mix at the query's own batch; ``softmax_ops``: what a float
    softmax over the visible keys takes (k exponentials, k - 1 additions, k
    divisions for a row of k keys); ``extras``: the size of each elementwise
    operation of :data:`EXTRAS` the call's implementation runs (0 if none).
    """

    call: AuditCall
    macs: dict
    counted: dict
    dense: dict
    query_batch: dict
    softmax_ops: dict
    extras: dict

    @property
    def linear(self) -> int:
        return self.macs.get("projections", 0) + self.macs.get("out_projection", 0)

    @property
    def same(self) -> bool:
        """The derived figures equal the counted ones."""
        return self.macs == self.counted


def ledger(c: AuditCall) -> Ledger:
    """Derive (and count) the figures of audit call ``c``."""
    s = c.shape
    macs = derive_call(s)
    dense_shape = dataclasses.replace(s, policy=s.policy.replace(causal=False), mask=None)
    dense = derive_call(dense_shape)
    ones = (1,) * len(s.key[:-3])
    query_batch = derive_call(dataclasses.replace(s, key=ones + s.key[-3:],
                                                  value=ones + s.value[-3:]))
    B, H, Hkv = s.batch_size, s.heads, s.kv_heads
    keep = s.policy.keep(s.queries, s.keys, s.mask)
    pairs, rows = B * H * int(keep.sum()), B * H * int(keep.any(axis=1).sum())
    scores = B * H * dense_shape.pairs()
    width = (H * s.d_k, Hkv * s.d_k, Hkv * s.d_v)
    out = s.d_model if s.out_projection else 0
    extras = dict.fromkeys(EXTRAS, 0)
    if "softmax" in c.ops:
        extras["softmax"] = scores
    if "scale_scores" in c.ops:
        extras["scale"] = scores
    if "scale_queries" in c.ops:
        extras["scale"] = B * s.queries * H * s.d_k
    if "mask_add" in c.ops:
        extras["mask"] = scores
    if c.bias:
        extras["bias"] = B * (s.queries * width[0] + s.keys * (width[1] + width[2])
                              + s.queries * out)
        extras["bias_once"] = sum(width) + out
    return Ledger(c, macs, count_call(s).macs, dense, query_batch,
                  {"exp": pairs, "add": pairs - rows, "div": pairs}, extras)


@dataclass(frozen=True)
class Verdict:
    """A counter's figure against the derived count.

    ``expected``: the derived total in the reading's unit (MACs, or 2 x MACs
    for FLOPs); ``findings``: ``("matches",)`` or the departures that explain
    the figure; ``factor``: the batch factor when a finding is one;
    ``alternatives``: other explanations of the same figure with as few
    departures (the figure alone cannot tell them apart).
    """

    figure: int | None
    expected: int
    findings: tuple
    factor: Fraction | None = None
    error: str | None = None
    alternatives: tuple = ()

    @property
    def is_error(self) -> bool:
        """Some finding is an error (not a convention)."""
        return any(f in ERRORS for f in self.findings)


def _attention(L: Ledger) -> list[tuple[str | None, int]]:
    exact = L.macs["scores"] + L.macs["mix"]
    options = [(None, exact), ("full_square", L.dense["scores"] + L.dense["mix"]),
               ("batch_factor", L.query_batch["scores"] + L.query_batch["mix"]),
               ("batch_factor_scores", L.query_batch["scores"] + L.macs["mix"]),
               ("attention_twice", 2 * exact), ("omits_attention", 0)]
    seen, out = set(), []
    for name, value in options:   # a departure that changes nothing is no departure
        if value not in seen:
            seen.add(value)
            out.append((name, value))
    return out


def _linear(L: Ledger) -> list[tuple[str | None, int]]:
    return [(None, L.linear)] + ([("omits_linear", 0)] if L.linear else [])


def explanations(L: Ledger, per_mac: int) -> list[tuple[int, tuple]]:
    """Every total a counter could reach by departing from the derived count, with its
    findings: ``[(total, findings), ...]`` in the order :func:`verdict` tries them.

    Tried: the scores and mix exact, over the full square, at the query's
    batch (both products, or the scores only), twice (with the softmax, when
    it is counted), or left out; the linear stages as they are or left out;
    any of :data:`EXTRAS` added once.  Totals are in the reading's unit (``per_mac`` operations per MAC,
    the extras one each).
    """
    extras = [(k, v) for k, v in L.extras.items() if v]
    out = []
    for att, a in _attention(L):
        for lin, b in _linear(L):
            for size in range(len(extras) + 1):
                for chosen in combinations(extras, size):
                    names = tuple(e for e, _ in chosen)
                    total = per_mac * (a + b) + sum(v for _, v in chosen)
                    if att == "attention_twice" and "softmax" in names:
                        total += L.extras["softmax"]   # the softmax went twice too
                    out.append((total, tuple(f for f in (att, lin) if f) + names))
    return out


def verdict(L: Ledger, figure, per_mac: int, error: str | None = None) -> Verdict:
    """Explain ``figure`` (a reading of ``per_mac`` operations per multiply-add) by the
    fewest departures from the derived count (:func:`explanations`; a doubled
    attention counts as two; ties go to the first tried, and the other
    explanations of the same figure are kept as ``alternatives``).  No figure (``error`` set) gives ``fails`` (or
    ``not_installed``); nothing that fits, ``unexplained``.

    >>> L = ledger(call("mha"))
    >>> verdict(L, 2 * 4480 + 128, 2).findings, verdict(L, 3200, 1).findings
    (('softmax',), ('omits_attention',))
    >>> verdict(L, 0, 1).findings, verdict(L, 4481, 1).findings
    (('omits_attention', 'omits_linear'), ('unexplained',))
    """
    expected = per_mac * L.macs["total"]
    if figure is None:
        error = error or "no figure"
        return Verdict(None, expected, ("not_installed" if error.startswith("not installed")
                                        else "fails",), error=error)
    if figure == expected:
        return Verdict(figure, expected, ("matches",))
    fits = [f for total, f in explanations(L, per_mac) if total == figure]
    if not fits:
        return Verdict(figure, expected, ("unexplained",))
    least = min(map(_cost, fits))
    best, *others = [f for f in fits if _cost(f) == least]
    alternatives: list = []
    for f in others:   # a different story, not the same count under another name
        if _kind(f, L) != _kind(best, L) and _kind(f, L) not in map(lambda a: _kind(a, L),
                                                                     alternatives):
            alternatives.append(f)
    factor = None
    if "batch_factor" in best or "batch_factor_scores" in best:
        factor = Fraction(L.query_batch["scores"], L.macs["scores"])
    return Verdict(figure, expected, best, factor, alternatives=tuple(alternatives))


def _cost(findings: tuple) -> int:
    """Departures, a doubled attention counting two (a hook and the calls under it)."""
    return len(findings) + ("attention_twice" in findings)


def _kind(findings: tuple, L: Ledger) -> tuple:
    """Findings with the per-score extras (softmax, scaling, mask: one per score each) told
    apart only by their size."""
    return tuple(sorted(str(L.extras[f]) if f in ("softmax", "scale", "mask") else f
                        for f in findings))


@dataclass(frozen=True)
class Audit:
    """Everything the audit table shows.

    ``ledgers``: one :class:`Ledger` per call; ``counters``: the counter
    keys run; ``cells``: ``{(call, counter, unit): Verdict}``; ``kernels``:
    ``{call: torch kernel}``; ``versions``: installed versions (None: not
    installed); ``details``: ``{(call, counter): (skipped op, ...)}``.
    """

    ledgers: list
    counters: list
    cells: dict
    kernels: dict
    versions: dict
    details: dict


def audit(counters=None, calls=None, jobs: int = 2) -> Audit:
    """Derive every call, run each installed counter on it, and judge each figure.

    Args:
        counters: counter keys (:data:`~exactattn.cost.counters.COUNTERS`;
            default all; an empty list runs none: the derived side only).
        calls: call keys (default all of :data:`AUDIT_CALLS`).
        jobs: counters run at once, each in its own interpreter.

    Raises:
        InputError: an unknown counter or call.
    """
    from .counters import COUNTERS, counter, measure_all, versions
    chosen = [c.key for c in COUNTERS] if counters is None else [counter(k).key for k in counters]
    picked = list(AUDIT_CALLS) if calls is None else [call(k) for k in calls]
    if not picked:
        raise InputError("calls must name at least one call (got none)")
    ledgers = [ledger(c) for c in picked]
    measured = measure_all(chosen, [c.key for c in picked], jobs) if chosen else {}
    cells, details = {}, {}
    for L in ledgers:
        for key in chosen:
            m = measured[(key, L.call.key)]
            if m.details:
                details[(L.call.key, key)] = m.details
            for unit, per_mac in counter(key).readings:
                figure = None if m.figures is None else m.figures.get(unit)
                cells[(L.call.key, key, unit)] = verdict(L, figure, per_mac, m.error)
    kernels = {k: m.figures["kernel"] for (c, k), m in measured.items()
               if c == "kernel" and m.figures}
    return Audit(ledgers, chosen, cells, kernels, versions(), details)
