"""The FLOP-counter audit: the derived count of each call, each counter's figure, a verdict,
and the tables in words.

For every call of :data:`~exactattn.audit.counters.AUDIT_CALLS` :func:`ledger`
derives the multiply-adds of each stage from the loop nests
(:func:`~exactattn.cost.derivation.derive_call`; checked against a counted run,
:func:`~exactattn.cost.counting.count_call`) and the operations a counter
might add besides them: the full square a dense kernel computes under a
causal or band mask, the batch of the query alone (a matmul counter that
reads the first operand's shape), and elementwise operations (the softmax,
the scaling, an additive mask, biases).  :func:`verdict` then explains a
counter's figure by the fewest departures from the exact count: ``matches``,
or a list of findings such as ``full_square``, ``omits_attention``,
``batch_factor``, ``softmax``.  A figure nothing explains is
``unexplained``.  Units: MACs; a reading in FLOPs is held against 2 x MACs.

:func:`audit_sections` runs each counter on every call
(:mod:`~exactattn.audit.counters`, each in its own interpreter), judges each
figure and puts it all in one
:class:`~exactattn.present.render.Section` (``cost/audit``): the call, the torch
kernel that ran it, the derived MACs / FLOPs of each stage, the operations of a
float softmax (counted separately), and each counter's figure with its verdict.

:func:`judge_figure` judges one reported figure for one of torch's SDPA entry
points (:data:`JUDGE_CALLS`: the dispatcher ``sdpa``, or a backend forced with
``sdpa_kernel``: ``flash``, ``mem_efficient``, ``math``) on operands of shape
B x H x L x E (query), B x H_kv x S x E (key) and B x H_kv x S x E_v (value),
built as an :class:`~exactattn.audit.counters.AuditCall` and judged by the same
:func:`ledger` and :func:`verdict`; :func:`judge_sections` is its ``cost/judge``
table.  Only the exact count is right (exit 0 on the command line); a figure a
convention gives (the full square, n^2/2 under the causal rule) is named as a
convention, an error as an error.  Forward: B H P (E + E_v) MACs for P visible
pairs a head.  Backward: ``flash`` and ``mem_efficient`` (and ``sdpa``, whose
fused kernels they are) recompute the scores, then run dP, dS K, dS^T Q and
P^T dO: B H P (3E + 2E_v) MACs; ``math`` keeps P from the forward:
B H P (2E + 2E_v) (Dao et al. 2022, alg. 4; torch's registered SDPA backward
formula counts the five products).

>>> from exactattn.audit.counters import call
>>> L = ledger(call("sdpa_bottom_right"))
>>> L.macs["total"], L.dense["total"], 2 * L.dense["total"]
(816, 960, 1920)
>>> verdict(L, 1920, 2).findings
('full_square',)
>>> verdict(ledger(call("matmul_broadcast_query")), 160, 1).findings
('batch_factor_scores',)
>>> j = judge_figure(25920, "sdpa", (2, 5, 9, 9, 4))
>>> j.expected, j.findings
(12960, ('attention_twice',))
>>> judge_figure(384, "flash", (1, 2, 6, 6, 4)).findings
('layout_swap',)
>>> verdict_text(Verdict(1920, 1632, ("full_square",)))
'1920: full square'
>>> verdict_text(Verdict(80, 240, ("batch_factor",), factor=Fraction(1, 3)))
'80: batch x1/3'
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from itertools import chain, combinations, product

from ..call.policy import ALIGNMENTS
from ..cost.counting import count_call
from ..cost.derivation import derive_call
from ..cost.sizes import MAX_SIZE, CallShape, policy_of
from ..errors import InputError
from ..numbers.digits import round_fraction
from ..options import check_choice, check_whole
from ..present.render import Section
from .counters import AUDIT_CALLS, COUNTERS, AuditCall, counter, measure_all, versions

#: the elementwise operations a counter may add to the multiply-adds, in the order tried
EXTRAS = ("softmax", "bias", "bias_once", "scale", "mask")
#: findings that are errors (the rest are conventions: what else a counter chose to count)
ERRORS = ("omits_attention", "omits_linear", "batch_factor", "batch_factor_scores",
          "attention_twice", "bias_once", "scores_only", "mix_only", "one_product",
          "layout_swap", "image_layout", "kv_heads", "macs_as_flops", "unexplained", "fails")
#: how each pass weighs the scores-shaped (width E) and mix-shaped (width E_v) products:
#: the forward runs each once; a backward runs dQ = dS K and dK = dS^T Q (E) and
#: dV = P^T dO and dP = dO V^T (E_v), and a fused kernel (flash, mem_efficient) recomputes
#: the scores Q K^T first (Dao et al. 2022, alg. 4)
PASSES = {"forward": (1, 1), "backward": (3, 2), "backward_autograd": (2, 2)}


@dataclass(frozen=True)
class Ledger:
    """The derived figures of one call.

    ``macs``: MACs per stage and ``total`` (the loops over visible pairs);
    ``counted``: the same, counted by running the call; ``dense``: scores and
    mix over the full L x S square (no causal rule, no mask); ``softmax_ops``: what a float
    softmax over the visible keys takes (k exponentials, k - 1 additions, k
    divisions for a row of k keys); ``extras``: the size of each elementwise
    operation of :data:`EXTRAS` the call's implementation runs (0 if none).
    """

    call: AuditCall
    macs: dict
    counted: dict
    dense: dict
    softmax_ops: dict
    extras: dict

    @property
    def linear(self) -> int:
        return self.macs.get("projections", 0) + self.macs.get("out_projection", 0)

    @property
    def same(self) -> bool:
        """The derived figures equal the counted ones."""
        return self.macs == self.counted


def ledger(c: AuditCall, count_limit: int | None = None) -> Ledger:
    """Derive (and count) the figures of audit call ``c``.

    ``count_limit``: count by running the call only when its derived total is at most
    this many MACs (None: always); a call not counted has ``counted`` None.
    """
    s = c.shape
    macs = derive_call(s)
    dense_shape = dataclasses.replace(s, policy=s.policy.replace(causal=False), mask=None)
    dense = derive_call(dense_shape)
    B, H, Hkv = s.batch_size, s.heads, s.kv_heads
    # keys seen per row (by rows: no L x S array for a long call without a mask)
    seen = [len(s.policy.visible_keys(i, s.queries, s.keys)) for i in range(s.queries)] \
        if s.mask is None else s.policy.keep(s.queries, s.keys, s.mask).sum(axis=1).tolist()
    pairs, rows = B * H * sum(seen), B * H * sum(1 for k in seen if k)
    scores = B * H * dense_shape.pairs()
    width = (H * s.d_k, Hkv * s.d_k, Hkv * s.d_v)
    out = s.d_model if s.out_projection else 0
    extras = dict.fromkeys(EXTRAS, 0)
    for op, extra, size in (("softmax", "softmax", scores), ("scale_scores", "scale", scores),
                            ("scale_queries", "scale", B * s.queries * H * s.d_k),
                            ("mask_add", "mask", scores)):
        extras[extra] = size if op in c.ops else extras[extra]
    if c.bias:
        extras["bias"] = B * (s.queries * width[0] + s.keys * (width[1] + width[2])
                              + s.queries * out)
        extras["bias_once"] = sum(width) + out
    counted = count_call(s).macs if count_limit is None or macs["total"] <= count_limit \
        else None
    return Ledger(c, macs, counted, dense, {"exp": pairs, "add": pairs - rows, "div": pairs},
                  extras)


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
    #: the :class:`Ledger` judged against, the pass (``forward``, or a backward of
    #: :data:`PASSES`) and the reading's unit: 2 operations per MAC (FLOPs) or 1 (MACs)
    ledger: Ledger | None = field(default=None, compare=False, repr=False)
    pass_: str = "forward"
    per_mac: int = 2

    @property
    def right(self) -> bool:
        """The figure is the exact count."""
        return self.findings == ("matches",)

    @property
    def is_error(self) -> bool:
        """Some finding is an error (not a convention)."""
        return any(f in ERRORS for f in self.findings)


#: each way of counting the scores and the mix, the exact count first: finding -> (the pairs
#: of all heads, the scores' width, the mix's width), in the sizes' names (B the broadcast
#: batch, B_q the query's, P the visible pairs a head); a 4-d (B, H, L, E) operand is also
#: read as (B, S, H, D) (``layout_swap``) and as an image block (B, C, H, W) (``image_layout``)
FORMS = {None: ("B x H x P", "E", "E_v"), "full_square": ("B x H x L x S", "E", "E_v"),
         "causal_half": ("B x H x (L x S / 2)", "E", "E_v"),
         "batch_factor": ("B_q x H x P", "E", "E_v"),
         "batch_factor_scores": ("H x P", "B_q x E", "B x E_v"),
         "attention_twice": ("2 x B x H x P", "E", "E_v"), "one_product": ("B x H x P", "E", "0"),
         "scores_only": ("B x H x P", "E", "0"), "mix_only": ("B x H x P", "0", "E_v"),
         "layout_swap": ("B x L x H x H_kv", "E", "E_v"),
         "image_layout": ("B x L x E x S", "H x E", "H_kv x E_v"),
         "kv_heads": ("B x H_kv x P", "E", "E_v"), "omits_attention": ("0", "E", "E_v")}


def _sizes(s: CallShape) -> dict:
    """The values of :data:`FORMS`' names for call ``s``."""
    return dict(s.shape, H=s.heads, B_q=math.prod(s.query[:-3]), P=s.pairs())


def _value(text: str, sizes: dict) -> tuple[str, Fraction | int]:
    """``text`` (a formula in :data:`FORMS`' names) with ``sizes`` put in, and its value."""
    numbers = re.sub(r"\b(H_kv|E_v|B_q|B|H|L|S|E|P)\b", lambda m: str(sizes[m.group(1)]), text)
    return numbers, eval(numbers.replace(" x ", " * ").replace("/ 2", "/ Fraction(2)"),
                         {"Fraction": Fraction, "__builtins__": {}})


def _attention(L: Ledger) -> list[tuple[str | None, int, int]]:
    """The ways of counting the scores and the mix (:data:`FORMS`) that apply to the call:
    ``(finding, scores MACs, mix MACs)``, the exact count first."""
    m, s = L.macs, L.call.shape
    sizes = _sizes(s)
    skip = {"scores_only", "mix_only"} if m["scores"] == m["mix"] else {"one_product"}
    skip |= set() if s.policy.causal else {"causal_half"}
    skip |= set() if s.kv_heads != s.heads else {"kv_heads"}
    if s.d_model is not None or not len(s.query) == len(s.key) == 4:
        skip |= {"layout_swap", "image_layout"}
    exact, out, seen = m["scores"] + m["mix"], [], set()
    for name, (pairs, we, wv) in FORMS.items():   # a departure that changes nothing is none
        a, b = (_value(f"{pairs} x {w}", sizes)[1] for w in (we, wv))
        if name not in skip and (name is None or a + b != exact) and (a, b) not in seen:
            seen.add((a, b))
            out.append((name, a, b))
    return out


def _passes(backward: str | None) -> list[tuple[str | None, int, int]]:
    """The pass counted (:data:`PASSES`) and its departure: a backward without the
    recomputation of the scores (``no_recompute``, backward = 2 x forward) or with it
    (``recompute``)."""
    if backward is None:
        return [(None, *PASSES["forward"])]
    check_choice(backward, "backward", ("backward", "backward_autograd"))
    other = "backward_autograd" if backward == "backward" else "backward"
    return [(None, *PASSES[backward]),
            ("no_recompute" if backward == "backward" else "recompute", *PASSES[other])]


def explanations(L: Ledger, per_mac: int, backward: str | None = None
                 ) -> list[tuple[int, tuple]]:
    """Every total a counter could reach by departing from the derived count, with its
    findings: ``[(total, findings), ...]`` in the order :func:`verdict` tries them.

    Tried: the scores and mix exact, over the full square, half the full square
    (causal), at the query's batch (both products, or the scores only), twice,
    one product alone, the (B, S, H, D) layout read as (B, H, S, D), a (B, H, L, E)
    operand read as an image block (B, C, H, W), at the key/value heads, or left out; the linear stages as they are or left out;
    any of :data:`EXTRAS` added once; a FLOP reading (``per_mac`` 2) also as
    the MACs (``macs_as_flops``).  ``backward`` (``backward``: a fused kernel's,
    the scores recomputed; ``backward_autograd``: the math path's) judges the
    backward pass instead (its products weighed by :data:`PASSES`, no
    extras, no linear stages).  Totals are in the reading's unit (``per_mac``
    operations per MAC, the extras one each).

    Raises:
        InputError: a backward of a call with projections.
    """
    if backward is not None and L.linear:
        raise InputError("backward must be left unset for a call with projections (got "
                         f"{backward!r}); the backward counts the attention alone")
    extras = [] if backward else [(k, v) for k, v in L.extras.items() if v]
    units = [(None, per_mac)] + ([("macs_as_flops", 1)] if per_mac == 2 else [])
    out = []
    for (unit, per), (pass_, ws, wm), (att, a, m), (lin, b) in product(
            units, _passes(backward), _attention(L),
            [(None, L.linear)] + [("omits_linear", 0)] * bool(L.linear)):
        if unit and not a + m + b:
            continue   # nothing counted: the unit changes nothing
        for chosen in chain.from_iterable(combinations(extras, k) for k in range(len(extras) + 1)):
            names = tuple(e for e, _ in chosen)
            total = per * (ws * a + wm * m + b) + sum(v for _, v in chosen)
            if att == "attention_twice" and "softmax" in names:
                total += L.extras["softmax"]   # the softmax went twice too
            out.append((total, tuple(f for f in (att, pass_, lin, unit) if f) + names))
    return out


def verdict(L: Ledger, figure, per_mac: int, error: str | None = None,
            backward: str | None = None) -> Verdict:
    """Explain ``figure`` (a reading of ``per_mac`` operations per multiply-add) by the
    fewest departures from the derived count (:func:`explanations`; a doubled
    attention counts as two; ties go to the first tried, and the other
    explanations of the same figure are kept as ``alternatives``).  No figure (``error`` set) gives ``fails`` (or
    ``not_installed``); nothing that fits, ``unexplained``.

    >>> from exactattn.audit.counters import call
    >>> L = ledger(call("mha"))
    >>> verdict(L, 2 * 4480 + 128, 2).findings, verdict(L, 3200, 1).findings
    (('softmax',), ('omits_attention',))
    >>> verdict(L, 0, 1).findings, verdict(L, 4481, 1).findings
    (('omits_attention', 'omits_linear'), ('unexplained',))
    """
    ws, wm = PASSES[backward or "forward"]
    judged = partial(Verdict, ledger=L, pass_=backward or "forward", per_mac=per_mac)
    expected = per_mac * (ws * L.macs["scores"] + wm * L.macs["mix"] + L.linear)
    if figure is None:
        error = error or "no figure"
        return judged(None, expected, ("not_installed" if error.startswith("not installed")
                                       else "fails",), error=error)
    if figure == expected:
        return judged(figure, expected, ("matches",))
    fits = [f for total, f in explanations(L, per_mac, backward) if total == figure]
    if not fits:
        return judged(figure, expected, ("unexplained",))
    least = min(map(_cost, fits))
    best = next(f for f in fits if _cost(f) == least)
    # other stories of the same figure, up to two departures (full square as MACs-as-FLOPs
    # is n^2/2 in FLOPs, always): named, never dropped
    others = sorted((f for f in fits if f != best and _cost(f) <= max(least, 2)), key=_cost)
    stories: dict = {}   # a different story, not the same count under another name: its first
    for f in others:
        stories.setdefault(_kind(f, L), f)
    by = [a for f, a, _ in _attention(L) if f in best and f in (
        "kv_heads", "batch_factor", "batch_factor_scores")]
    return judged(figure, expected, best, Fraction(by[0], L.macs["scores"]) if by else None,
                  alternatives=tuple(
            f for k, f in stories.items() if k != _kind(best, L)))


def _cost(findings: tuple) -> int:
    """Departures, a doubled attention counting two (a hook and the calls under it)."""
    return len(findings) + ("attention_twice" in findings)


def _kind(findings: tuple, L: Ledger) -> tuple:
    """Findings with the per-score extras (softmax, scaling, mask: one per score each) told
    apart only by their size."""
    return tuple(sorted(str(L.extras[f]) if f in ("softmax", "scale", "mask") else f
                        for f in findings))


#: the calls: (torch code, backward pass of :data:`PASSES`)
JUDGE_CALLS = {
    "sdpa": ("F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "flash": ("with sdpa_kernel(SDPBackend.FLASH_ATTENTION): "
              "F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "mem_efficient": ("with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION): "
                      "F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "math": ("with sdpa_kernel(SDPBackend.MATH): F.scaled_dot_product_attention(q, k, v{causal})",
             "backward_autograd"),
}
#: counted by running the call (not only derived) up to this many MACs
COUNT_LIMIT = 100_000


def judge_figure(figure: int, call: str, shape: tuple, *, causal: bool = False,
                 alignment: str = "top_left", kv_heads: int | None = None,
                 backward: bool = False, unit: str = "flops") -> Verdict:
    """Judge ``figure`` (FLOPs, or MACs with ``unit="macs"``: 1 MAC = 2 FLOPs) for ``call``
    on ``shape`` = (B, H, L, S, E[, E_v]).

    Raises:
        InputError: a figure that is not a whole number from 0, an unknown call, a
            bad size; ShapeError: H not a multiple of ``kv_heads``.
    """
    if isinstance(figure, bool) or not isinstance(figure, int) or figure < 0:
        raise InputError(f"the FLOP figure must be a whole number from 0 (got {figure!r})")
    check_choice(call, "--call", tuple(JUDGE_CALLS))
    per_mac = 2 if check_choice(unit, "--unit", ("flops", "macs")) == "flops" else 1
    B, H, L, S, E, *rest = shape
    Ev = rest[0] if rest else E
    Hkv = H if kv_heads is None else check_whole(kv_heads, "--kv-heads", high=MAX_SIZE)
    if H % Hkv:
        fits = [k for k in range(1, H + 1) if H % k == 0]
        raise InputError(f"--kv-heads must divide the query heads H = {H} (got {Hkv}); pass "
                         f"one of {', '.join(map(str, fits[:8]))}")
    policy = policy_of(causal, alignment)
    s = CallShape((B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev), policy)
    code, bwd = JUDGE_CALLS[call]
    flag = "" if not causal else ", is_causal=True" if alignment == ALIGNMENTS[0] else \
        f", attn_mask=causal_lower_right({L}, {S})"
    ops = ("softmax", "scale_scores") if call == "math" else ("softmax",)
    c = AuditCall("judge", f"{call}, q {B}x{H}x{L}x{E}, k {B}x{Hkv}x{S}x{E}, "
                  f"v {B}x{Hkv}x{S}x{Ev}", "sdpa", s, code.format(causal=flag), ops=ops)
    return verdict(ledger(c, count_limit=COUNT_LIMIT), figure, per_mac,
                   backward=bwd if backward else None)


def formula(j: Verdict, findings: tuple) -> tuple[str, str, Fraction]:
    """The figure of ``findings`` (in the judged unit) as a formula in the sizes, with the numbers, and its value.

    >>> formula(judge_figure(384, "flash", (1, 2, 6, 6, 4)), ("layout_swap",))[:2]
    ('2 x B x L x H x H_kv x (E + E_v)', '2 x 1 x 6 x 2 x 2 x (4 + 4)')
    """
    pass_ = j.pass_
    if "no_recompute" in findings or "recompute" in findings:
        pass_ = "backward_autograd" if pass_ == "backward" else "backward"
    pairs, *widths = FORMS[next((f for f in findings if f in FORMS), None)]
    w = " + ".join(f"{k} x {e}" if k > 1 else e for k, e in zip(PASSES[pass_], widths)
                   if e != "0")
    w = w if " " not in w or w.count(" ") == 2 and "+" not in w else f"({w})"
    if not j.ledger.call.shape.policy.causal:
        pairs = pairs.replace("P", "L x S")
    unit = "1 x " if "macs_as_flops" in findings else "2 x " * (j.per_mac == 2)
    text = "0" if pairs == "0" else f"{unit}{pairs} x {w}"
    for f in ("softmax", "scale"):   # a doubled attention ran its softmax twice too
        if f in findings:
            text += " + 2 x B x H x L x S" if f == "softmax" and "attention_twice" in findings \
                else " + B x H x L x S"
    numbers, value = _value(text, _sizes(j.ledger.call.shape))
    return text, numbers, Fraction(value)


#: each finding: (short text for a cell, what it means)
FINDINGS = {
    "matches": ("matches", "the derived count, exactly"),
    "full_square": ("full square", "counts all L x S query-key pairs where the causal rule or "
                    "the mask leaves fewer (what a dense kernel computes; the mask's "
                    "saving is lost)"),
    "omits_attention": ("omits attention", "leaves out the scores and the mix (an SDPA "
                        "kernel without a formula, or products it does not patch)"),
    "omits_linear": ("omits projections", "leaves out the projections and W_O"),
    "batch_factor": ("batch x{factor}", "scores and mix counted at the query's batch, not "
                     "the broadcast batch (a formula that reads the first operand's shape; "
                     "k = query batch / broadcast batch)"),
    "batch_factor_scores": ("scores batch x{factor}", "the scores product counted at the "
                            "query's batch (a matmul formula that reads the first operand; "
                            "k = query batch / broadcast batch)"),
    "attention_twice": ("attention twice", "scores, softmax and mix counted twice (a module "
                        "hook and the torch calls inside the module)"),
    "causal_half": ("n^2/2", "half the full L x S square under the causal rule (n^2/2, not "
                    "the n(n+1)/2 pairs a causal square keeps)"),
    "scores_only": ("scores only", "counts the scores product Q K^T alone, not the mix"),
    "mix_only": ("mix only", "counts the mix product P V alone, not the scores"),
    "one_product": ("one product", "counts one of the two products alone (the scores or the "
                    "mix: at E = E_v the figure cannot tell which)"),
    "layout_swap": ("layout swap", "reads operands laid out (B, S, H, D), as flash-attn and "
                    "xformers take them, as (B, H, S, D): the heads and the sequence trade "
                    "places"),
    "image_layout": ("(B, C, H, W) read", "reads each 4-d operand (B, H, L, E) as an image "
                     "block (B, C, H, W), as a vision block's formula does: the heads as "
                     "channels, a head's L x E entries as pixels, attention over the pixels"),
    "kv_heads": ("at KV heads x{factor}", "counts the H_kv key/value heads where every one "
                 "of the H_q query heads scores and mixes (GQA shares keys, not work)"),
    "macs_as_flops": ("MACs as FLOPs", "reports the multiply-adds as FLOPs (1 per "
                      "multiply-add, not 2)"),
    "no_recompute": ("no recompute", "a backward without the recomputation of the scores "
                     "that a fused kernel runs (backward = 2 x forward)"),
    "recompute": ("recompute", "a backward with a recomputation of the scores that the math "
                  "path does not run (it keeps P from the forward)"),
    "softmax": ("+softmax", "adds one operation per score for the softmax"),
    "bias": ("+bias", "adds the bias additions (one per output of each projection)"),
    "bias_once": ("+bias once", "adds each bias once per layer, not once per token"),
    "scale": ("+scaling", "adds the multiplications by the scale"),
    "mask": ("+mask", "adds one addition per score for the additive mask"),
    "unexplained": ("unexplained", "no departure tried gives this figure"),
    "fails": ("fails", "the counter raised an error on this call"),
    "not_installed": ("not installed", "the counter, or what the call needs (e.g. "
                                       "transformers), does not install or import here"),
}


def verdict_text(v: Verdict) -> str:
    """A cell: ``figure: finding, finding`` (``counts nothing`` when a layer gets 0)."""
    findings = list(v.findings)
    if {"omits_attention", "omits_linear"} <= set(findings):
        findings = ["counts nothing"] + [f for f in findings
                                         if f not in ("omits_attention", "omits_linear")]
    words = []
    for f in findings:
        short = FINDINGS[f][0] if f in FINDINGS else f
        if f == "unexplained" and v.expected:
            short += f" (x{round_fraction(Fraction(v.figure, v.expected), 2)})"
        words.append(short.format(factor="?" if v.factor is None else v.factor))  # 3, 1/3
    if v.figure is None:
        return ", ".join(words)
    figure = v.figure if isinstance(v.figure, int) else round(v.figure, 2)
    return f"{figure}: {', '.join(words)}"


def _versions(chosen: list, cells: dict, installed: dict) -> list[str]:
    parts, missing = [], []
    for key in chosen:
        c = counter(key)
        if all(v.findings == ("not_installed",) for (_, k, _), v in cells.items() if k == key):
            missing.append(c.name)
        else:
            parts.append(f"{c.name} {installed.get(c.distribution)} ({c.convention})")
    lines = ["counters run: " + ("; ".join(parts) if parts else "none")]
    if missing:
        lines.append("not installed (or not importable): " + ", ".join(missing))
    lines.append(f"torch {installed.get('torch')}, transformers "
                 f"{installed.get('transformers')} (BERT and GPT-2 built from small configs, "
                 "nothing downloaded)")
    return lines


def _notes(ledgers: list, chosen: list, cells: dict, installed: dict, details: dict
           ) -> list[str]:
    notes = ["projections, scores, mix, W_O, total: derived MACs / FLOPs (FLOPs = 2 x MACs), "
             "from the loops over the visible pairs; each counter's cell is its figure in its "
             "own unit and a verdict; torch kernel: the aten op that ran the attention "
             "(flash_attention_for_cpu is aten::_scaled_dot_product_flash_attention_for_cpu)",
             "softmax: what a float softmax over the visible keys takes (k exponentials, "
             "k - 1 additions, k divisions for a row of k keys), never folded into the MACs",
             "derived = counted by running every call: "
             + ("true" if all(L.same for L in ledgers) else "FALSE: " + ", ".join(
                 L.call.key for L in ledgers if not L.same))]
    notes += _versions(chosen, cells, installed)
    used = {f for v in cells.values() for f in v.findings}
    for f, (short, meaning) in FINDINGS.items():
        if f in used:
            kind = "error" if f in ERRORS else "convention" if f not in (
                "matches", "not_installed") else ""
            short = short.format(factor="k")
            notes.append(f"{short}: {meaning}" + (f" ({kind})" if kind else ""))
    for (call, key, unit), v in cells.items():
        if v.findings == ("fails",):
            notes.append(f"{counter(key).name} on {call} ({unit}) fails: {v.error}")
        if v.alternatives:
            notes.append(f"{counter(key).name} on {call} ({unit}): also fits "
                         + "; ".join(", ".join(alt) for alt in v.alternatives))
    skipped: dict = {}
    for (call, key), ops in details.items():
        skipped.setdefault((key, ops), []).append(call)
    for (key, ops), calls in skipped.items():
        notes.append(f"{counter(key).name} skipped {', '.join(ops)} on {', '.join(calls)}")
    notes.append("calls:")
    notes += [f"  {L.call.key}: {L.call.title}; {L.call.code}" for L in ledgers]
    return notes


def audit_sections(counters=None) -> list:
    """The ``cost/audit`` table: every call of :data:`~exactattn.audit.counters.AUDIT_CALLS`
    derived, each installed counter run on it (two at once, each in its own interpreter) and
    each figure judged.

    Args:
        counters: counter keys (:data:`~exactattn.audit.counters.COUNTERS`;
            default all; an empty list runs none: the derived side only).

    Raises:
        InputError: an unknown counter.
    """
    chosen = [c.key for c in COUNTERS] if counters is None else [counter(k).key for k in counters]
    ledgers = [ledger(c) for c in AUDIT_CALLS]
    measured = measure_all(chosen, [c.key for c in AUDIT_CALLS]) if chosen else {}
    cells, details = {}, {}
    for L in ledgers:
        for key in chosen:
            m = measured[(key, L.call.key)]
            if m.details:
                details[(L.call.key, key)] = m.details
            for unit, per_mac in counter(key).readings:
                figure = None if m.figures is None else m.figures.get(unit)
                cells[(L.call.key, key, unit)] = verdict(L, figure, per_mac, m.error)
    kernels = {k: m.figures["kernel"] for (c, k), m in measured.items()    # when a counter ran
               if c == "kernel" and m.figures}
    installed = versions()
    stages = ("projections", "scores", "mix", "out_projection")
    cols = [(key, unit, f"{key} {unit}") for key in chosen for unit, _ in counter(key).readings]
    header = ["call"] + (["torch kernel"] if kernels else []) + \
        ["projections", "scores", "mix", "W_O", "total", "softmax (float)"] + [c[2] for c in cols]
    rows, data = [], []
    for L in ledgers:
        key = L.call.key
        ops = L.softmax_ops
        judged = {label: cells[(key, k, u)] for k, u, label in cols}
        rows.append([key] + ([(kernels.get(key) or "-").removeprefix("_scaled_dot_product_")]
                             if kernels else []) +
                    [f"{L.macs[s]} / {2 * L.macs[s]}" if s in L.macs else "-"
                     for s in stages + ("total",)] +
                    [f"exp {ops['exp']}, add {ops['add']}, div {ops['div']}"] +
                    [verdict_text(v) for v in judged.values()])
        data.append({
            "call": key, "title": L.call.title, "code": L.call.code,
            "kernel": kernels.get(key), "derived_macs": dict(L.macs),
            "counted_macs": dict(L.counted), "dense_macs": dict(L.dense),
            "softmax_ops": dict(ops),
            "counters": {label: {"figure": v.figure, "expected": v.expected,
                                 "findings": list(v.findings), "error": v.error}
                         for label, v in judged.items()}})
    title = "FLOP counters audited: each counter's figure against the derived count"
    return [Section("cost/audit", title, header, rows,
                    _notes(ledgers, chosen, cells, installed, details),
                    {"calls": data, "versions": installed, "counters": chosen,
                     "same": all(L.same for L in ledgers)})]


def judge_sections(figure: int, call: str, shape: tuple, **options) -> tuple[list, bool]:
    """The ``cost/judge`` table and whether the figure is right (see
    :func:`judge_figure`)."""
    v = judge_figure(figure, call, shape, **options)
    L_, s = v.ledger, v.ledger.call.shape
    unit = "FLOPs" if v.per_mac == 2 else "MACs"
    causal = s.policy.causal
    P, full = s.pairs(), s.queries * s.keys
    rows, data = [], []
    passes = ["forward"] + ([v.pass_, "backward_autograd" if v.pass_ == "backward"
                             else "backward"] if v.pass_ != "forward" else [])
    names = {"forward": "forward", "backward": "backward, scores recomputed (fused kernels)",
             "backward_autograd": "backward, P kept (math autograd, 2 x forward)"}
    ways = [("exact", "exactattn: the visible pairs", P)]
    if causal:
        ways += [("full_square", "full L x S square (torch's formula, PaLM, Megatron)", full),
                 ("causal_half", "L x S / 2 for causal (Kaplan et al., FlashAttention)",
                  Fraction(full, 2))]
    B, H = s.batch_size, s.heads
    for p in passes:
        ws, wm = PASSES[p]
        for key, who, pairs in ways:
            macs = B * H * pairs * (ws * s.d_k + wm * s.d_v)
            judged = p == (v.pass_ if options.get("backward") else "forward") and key == "exact"
            rows.append([names[p], who, str(pairs), str(macs), str(2 * macs),
                         "judged against" if judged else ""])
            data.append({"pass": p, "convention": key, "pairs_per_head": str(pairs),
                         "macs": str(macs), "flops": str(2 * macs), "judged": judged})
    sz = s.shape
    notes = [f"call: {call}: {L_.call.code}",
             f"shape: B {sz['B']}, H {sz['H_q']}, H_kv {sz['H_kv']}, L {sz['L']}, S {sz['S']}, "
             f"E {sz['E']}, E_v {sz['E_v']}" + (f"; causal ({s.policy.alignment}), P = {P} "
                                                "visible pairs a head" if causal else ""),
             f"reported: {figure} {unit} ({'backward' if options.get('backward') else 'forward'})"]
    explained = []
    if v.right:
        notes.append(f"verdict: right: {figure} is the exact count")
    elif v.findings == ("unexplained",):
        notes.append(f"verdict: wrong: {figure} is not {v.expected}, and no departure tried "
                     f"gives it (unexplained, x{float(Fraction(figure, v.expected)):.4g})")
    else:
        words = verdict_text(dataclasses.replace(v, figure=None))
        notes.append(f"verdict: wrong: {figure} is not {v.expected} (right: {v.expected}); "
                     f"{words}, {'an error' if v.is_error else 'a convention'}")
        for f in (v.findings, *v.alternatives):
            text, numbers, value = formula(v, f)
            if value != figure:   # the formula must reproduce the figure exactly
                raise AssertionError(f"formula {numbers} = {value}, not {figure}")
            meaning = "; ".join(FINDINGS[x][1] for x in f)
            head = "explanation" if f is v.findings else "also fits"
            notes.append(f"{head}: {text} = {numbers} = {figure} ({meaning})")
            explained.append({"findings": list(f), "formula": text, "numbers": numbers})
    if L_.counted is not None:
        notes.append("derived = counted by running the call: "
                     + ("true" if L_.same else "FALSE"))
    doc = {"call": call, "code": L_.call.code, "shape": sz, "causal": causal,
           "pass": v.pass_, "figure": figure, "expected": v.expected,
           "right": v.right, "findings": list(v.findings),
           "alternatives": [list(a) for a in v.alternatives], "explanations": explained,
           "conventions": data}
    title = f"{figure} {unit} judged for {call} on {sz['B']}x{sz['H_q']}x{sz['L']}x{sz['E']}"
    section = Section("cost/judge", title, ["pass", "convention", "pairs a head", "MACs",
                                             "FLOPs", ""], rows, notes, doc)
    return [section], v.right
