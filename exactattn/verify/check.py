"""The check: run an implementation, compare every output with the exact one, in ULPs.

:func:`verify` rounds the call's inputs to the dtype, hands the implementation those
floats, computes the exact answer of the same floats (:class:`Reference`) and
compares each output with the exact value correctly rounded to the dtype.
The ULP error is the number of floats of the dtype between the two (0 =
correctly rounded; +0 and -0 are one float).  NaN or infinity where the exact
value is finite is a hard failure, never a skip; so is a finite value where
the policy's exact answer is NaN, and so is an implementation that raises.

>>> from exactattn.call import Call
>>> report = verify("numpy", Call([[0], [0]], [[0], [0]], [[1], [3]]), dtype="float64")
>>> [e.exact.decimal(4) for e in report.entries], report.summary()["max_ulps"], report.passed
(['2.0000', '2.0000'], 0, True)
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import SimpleNamespace

import numpy as np

from ..call.policy import DEFAULT_SCALE, Policy, float_scale
from ..numbers.digits import MAX_PREC
from ..numbers.lse import check_base
from ..errors import InputError, ShapeError, shorten
from ..options import check_choice, check_whole
from .compare import Comparison, decide, enclosures, judge, ulp_unit
from ..numbers.formats import (DTYPES, FORMATS, FloatFormat, default_max_ulps, float_format,
                               round_to_format)
from .adapter import ask, check_dtype, read_answer
from .probes import PROBES, Probe, check_probes, probe_values
from .impls import load_impl, make_call
from ..call.limits import check_work
from ..call.inputs import Call, call_floats, reshaped
from ..reference.reference import Reference

__all__ = ["verify", "verify_outputs"]

#: the largest |sink| a check takes: float16's largest finite value, so the sink the float
#: kernel is handed is finite in every dtype, and the exact outputs (about exp(score - sink))
#: stay within a few ten thousand binary orders of magnitude, which rounding resolves quickly
MAX_SINK = 65504


@dataclass
class Entry:
    """One output compared: where, the correctly rounded exact value, the implementation's, the error.

    ``ulps`` counts floats between ``got`` and the correctly rounded exact
    value; ``terms_ulps`` measures ``|got - exact|`` in ULPs at the size of
    the terms the output adds up, ``sum_j shares_ij |value_jc|`` (they agree
    unless values of both signs cancel).  ``rel`` is ``|got - exact| /
    |exact|`` (0.0 when ``got`` is the exact value).  ``status`` is ``ok``
    (either count within the tolerance), ``over`` or ``hard`` (NaN or
    infinity where the exact value is finite and rounds to a finite float, a
    number where the policy's exact answer is NaN, or the implementation raised).
    """

    index: tuple
    rounded: float
    got: float
    ulps: int | None
    rel: float | None
    status: str
    reference: "Reference" = field(repr=False, default=None)
    terms_ulps: float | None = None
    lse_base: str | None = None
    #: the entry's own tolerance in ULPs at the terms (:func:`proved_tolerance`), else None
    tolerance: int | None = None

    @property
    def exact(self):
        """The exact output as an :class:`~exactattn.numbers.softmax.ExpRatio` (for an lse entry,
        ``index = (b, h, i)``, the row's :class:`~exactattn.numbers.lse.LogSumExp`)."""
        return self.reference.output(*self.index) if self.lse_base is None else \
            self.reference.lse(*self.index, self.lse_base)


@dataclass
class Report:
    """The result of :func:`verify`: every output compared, a summary, the cost and timings.

    ``found`` holds every output's :class:`Entry` (:attr:`entries`, in index
    order) in a :class:`~exactattn.verify.compare.Comparison`.  ``raised`` is
    the implementation's exception in one line (``"ValueError: ..."``) when it
    raised instead of answering; every entry is then a hard failure.
    ``lse_found`` (with ``lse`` the base, ``e`` or ``2``)
    compares the implementation's log-sum-exp per row, index ``(b, h, i)``.
    ``seconds`` holds wall-clock timings (``impl``, ``exact``, ``compare``);
    reports print them only when asked.
    """

    impl: str
    dtype: str
    policy: Policy
    call: Call
    found: Comparison
    max_ulps: int
    moved_inputs: int
    reference: Reference
    seconds: dict
    notes: list = field(default_factory=list)
    flops: dict | None = None
    raised: str | None = None
    lse: str | None = None
    lse_found: Comparison = field(default_factory=lambda: Comparison(None))
    #: the probes run (:class:`ProbeRun`), in :data:`~exactattn.verify.probes.PROBES` order
    probes: list = field(default_factory=list)
    #: the outputs' tolerance when it is per entry (:func:`proved_tolerance`), in words;
    #: ``max_ulps`` is then the probes' and the log-sum-exp's
    bound: str | None = None
    #: rows whose errors no correct kernel makes (:func:`~exactattn.reference.bound._row_excess`
    #: above 1): ``((b, h, i), excess)``, the largest first
    rows_past: list = field(default_factory=list)

    @property
    def entries(self) -> list:
        return self.found.kept

    @property
    def passed(self) -> bool:
        return self.found.passed and self.lse_found.passed and not self.rows_past and \
            all(p.passed for p in self.probes)

    def summary(self) -> dict:
        """dtype, count, max/mean/median ULPs, max ULPs at the terms, max relative error, over,
        hard (:meth:`Comparison.summary <exactattn.verify.compare.Comparison.summary>`)."""
        return {"dtype": self.dtype, **self.found.summary()}

    def derived_macs(self) -> tuple[int, int] | None:
        """Scores and mix MACs of the whole call from :func:`exactattn.cost.derive_call` (no
        mask only), else None."""
        if self.call.mask is not None:
            return None
        from ..cost import CallShape, derive_call
        try:
            got = derive_call(CallShape.of_call(self.call))
        except InputError:
            return None
        return got["scores"], got["mix"]


def check_request(impl, call: Call, dtype: str, max_ulps: int | None, *,
                  runs: int = 1) -> tuple[FloatFormat, Policy]:
    """What every check (forward or backward) refuses before it runs anything: a dtype the
    implementation lacks (``impl`` None: outputs already computed), a bad ``max_ulps``, a
    scale the dtype can't hold, too much work.

    Returns the dtype's format and the call's policy.
    """
    fmt = float_format(dtype)
    policy = call.policy
    if impl is not None:
        check_dtype(impl, dtype)
    if max_ulps is not None:
        check_whole(max_ulps, "max_ulps", low=0)
    check_scale(policy, fmt)
    check_work(call.shape, "problem", "check a smaller problem: fewer tokens, heads or a "
               "narrower head", runs=runs)
    from flint import arb  # noqa: F401  (loaded before the clocks start: timings are the work's)
    return fmt, policy


def check_scale(policy: Policy, dtype: str | FloatFormat) -> None:
    """Refuse a scale that is 0 or infinity as the implementation is handed it in ``dtype``, then
    a sink or soft-cap no float kernel is handed (:func:`check_sink`).

    The implementation gets the float64 nearest ``1/sqrt(D)``
    (:func:`~exactattn.call.policy.float_scale`), cast to its dtype; a scale that
    rounds to 0 or to infinity there turns every score into 0 or NaN, so
    there is nothing to check.  Decided exactly (no float is formed first).

    Raises:
        InputError: the scale rounds to 0 or infinity in float64 or in ``dtype``.

    >>> check_scale(Policy(scale="1e300"), "float32")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: scale must round to a finite non-zero float32 (got 1000000000000000000000000000000000000000…, which rounds to inf in float32); an implementation would multiply every score by inf: rescale the query or key instead
    """
    fmt = float_format(dtype)
    D = policy.divisor_squared
    lo, hi = Fraction(1, 2 ** 1075), Fraction(2 ** 1024 - 2 ** 970)    # float64: 0 to lo, inf
    # 1/sqrt(D) >= hi: infinity in float64; 1/sqrt(D) <= lo: 0 in float64
    s = 1.0 if D in (DEFAULT_SCALE, None) else math.inf if D <= 1 / (hi * hi) else 0.0 \
        if D >= 1 / (lo * lo) else round_to_format(Fraction(float_scale(D)), fmt)
    got = "inf" if math.isinf(s) else "0" if s == 0 else None
    if got is not None:
        raise InputError(f"scale must round to a finite non-zero {fmt.name} (got "
                         f"{shorten(policy.scale_text())}, which rounds to {got} in {fmt.name}); "
                         f"an implementation would multiply every score by {got}: rescale the "
                         "query or key instead")
    check_sink(policy)


def check_sink(policy: Policy, name: str = "sink", softcap_name: str = "softcap") -> None:
    """Refuse a sink past :data:`MAX_SINK` in magnitude, or a soft-cap past it (``name`` and
    ``softcap_name`` name them in the messages).

    A float kernel is handed the sink in its dtype (float16 holds at most
    65504; float64 nothing past about 1.8e308), and the exact outputs, about
    ``exp(score - sink)``, would have to be rounded from numbers tens of
    billions of binary orders of magnitude small.  Decided exactly.

    >>> check_sink(Policy(sink="1e20"), "--sink")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: --sink must be from -65504 to 65504 to be checked against a float kernel (got 100000000000000000000); float16 holds no larger sink: pass one within that range
    """
    s = policy.sink
    if s is not None and abs(s) > MAX_SINK:
        raise InputError(f"{name} must be from -{MAX_SINK} to {MAX_SINK} to be checked against "
                         f"a float kernel (got {shorten(str(s))}); float16 holds no larger sink: "
                         "pass one within that range")
    cap = policy.softcap                  # handed to the kernel as a float, like the sink
    if cap is not None and cap > MAX_SINK:
        raise InputError(f"{softcap_name} must be at most {MAX_SINK} to be "
                         f"checked against a float kernel (got {shorten(str(cap))}); float16 "
                         "holds no larger cap, and one that large barely moves a score: leave it out")


def logit_bound(top: float, policy: Policy) -> float:
    """The largest logit size the default tolerance reads, for a call of ``policy`` whose
    largest |logit| over visible pairs is ``top`` (scaled score, soft-cap, ALiBi, additive
    mask offset: :meth:`Reference.max_abs_exponent`), raised to the sink when the sink is larger.

    The bound (first order, ``u`` half an ULP): a kernel subtracts the row's shift
    ``m = max(logits, sink)`` and ``exp(x - m)`` picks up a relative error of
    ``|x - m| u`` from the subtraction, plus ``|sink| u`` on the sink's weight when the
    sink is rounded into the dtype.  With ``T`` the largest |logit| of a pair:

    * no sink, or a sink ``s <= 0``: ``m`` is the largest logit, or ``s`` when every logit
      is below it (then ``|s| <= T``), so ``|x - m| <= 2T``: ``T`` ULPs, the term without a
      sink.  The sink's own weight share is at most ``exp(s - m)``, and
      ``exp(s - m) (|s| + m - s) <= T + 2/e`` half-ULPs: a negative sink (-200) moves no
      output more than the logits do, so it does not loosen the tolerance.
    * a sink ``s > T``: ``m = s`` and ``|x - m| <= T + s``; with the sink's rounding
      (``s`` half-ULPs) that is about ``s + T/2`` ULPs, so the term is ``s`` (the sqrt
      term of :func:`default_max_ulps` covers the rest).

    Soft-capped logits are bounded by the cap (they enter as capped), but ``cap * tanh(s /
    cap)`` rounds three more times, each an error of about the capped logit's size in
    half-ULPs (``tanh'`` is at most 1, and ``|s| sech^2(s / cap) <= cap``): under a soft-cap
    the bound is three times the largest capped logit.  Otherwise, without a positive sink, the
    bound is :meth:`Reference.max_abs_exponent` unchanged.

    >>> [logit_bound(1.0, Policy(scale="none", sink=s)) for s in ("40", "-200")]
    [40.0, 1.0]
    """
    if policy.softcap is not None:  # s / cap, tanh and cap * t: three more roundings
        top = 3 * top
    if policy.sink is not None and policy.sink > 0:
        top = max(top, float(policy.sink))     # within MAX_SINK: a finite float
    return top


def default_tolerance(dtype: str, n_keys: int, d_k: int, top: float, policy: Policy) -> int:
    """The default rule, put together once for every check (forward, bulk, backward with
    ``max(L, S)`` keys, split-merge, row blocks):
    :func:`~exactattn.numbers.formats.default_max_ulps` with ``n_keys`` keys, ``d_k`` and the
    logit bound (:func:`logit_bound`) of a call of ``policy`` whose largest |logit| is ``top``."""
    return default_max_ulps(dtype, n_keys, d_k, logit_bound(top, policy))


def tolerance(ref: Reference, dtype: str, max_ulps: int | None = None, keys: int | None = None) -> int:
    """The ULP tolerance of a check of ``ref`` in ``dtype``: ``max_ulps`` when given, else
    :func:`default_tolerance` with ``keys`` keys (default the call's S: a forward check), its
    d_k and its largest |logit|.

    >>> from exactattn.call import Call
    >>> ref = Reference(Call.from_scores([[0, 1]], policy=Policy(scale="none")))
    >>> tolerance(ref, "float32"), tolerance(ref, "float32", 3)
    (9, 3)
    """
    return max_ulps if max_ulps is not None else \
        default_tolerance(dtype, keys or ref.S, ref.E, ref.max_abs_exponent(), ref.policy)


def proved_tolerance(floats: tuple, dtype: str, accumulation: str = "float32",
                     fallback: int | None = None, enclosed: tuple | None = None):
    """``(max_ulps, words)``: per output (B x H_q x L x E_v int64), the error a correct
    kernel may make in ULPs at the size of the terms, rounded up, or None with why not.

    The kernel (:func:`~exactattn.reference.bound.kernel_arithmetic`): outputs in ``dtype``,
    every product, sum, ``exp``, ``tanh`` and quotient rounded in ``accumulation`` (online
    softmax and split-KV merges allowed), the weights rounded to ``dtype`` before they meet
    the values; its error is at most the module bound of :mod:`exactattn.reference.bound`
    in that arithmetic, ``rad``, and the output's own rounding adds half a ULP:
    ``max_ulps = ceil(rad (1 + 2^-20) / unit + 1/2)``, ``unit`` the ULP of ``dtype`` at the
    terms' magnitude (its lower binade where float64 leaves it in doubt).  Where the bound
    does not hold (``eta`` past 1/8: a coarse ``accumulation`` over many keys) the entry
    takes ``fallback`` (the default rule, :func:`tolerance`; None: every float).
    ``floats``: :func:`~exactattn.call.inputs.sdpa_floats`'; ``enclosed``: the kernel's
    ``(rad, mag)`` where the caller's own pass of the enclosure took its arithmetic too.

    >>> from exactattn.call.inputs import sdpa_floats
    >>> q, k, v = np.zeros((2, 1)), np.zeros((2, 1)), np.array([[1.0], [3.0]])
    >>> proved_tolerance(sdpa_floats(q, k, v), "float16")[0].ravel().tolist()
    [2, 2]
    """
    from ..numbers.formats import ulp_index
    from ..reference.bound import enclose_outputs, kernel_arithmetic, supported
    _check_accumulation(accumulation)
    q, k, v, policy, keep, offsets, _ = floats
    why = supported(policy.replace(softcap=None))
    if why is not None:
        return None, f"no proved bound with {why} yet"
    fmt, arith = float_format(dtype), kernel_arithmetic(dtype, accumulation)
    most = min(2 * ulp_index(math.inf, fmt), 1 << 62)     # every float of the format
    if fallback is not None and fallback > most:      # every float64: the default rule alone
        return None, "no proved bound where the default rule allows every float"
    rad, mag = enclosed if enclosed and enclosed[0] is not None else \
        enclose_outputs(q, k, v, policy, keep, offsets, arith=arith)[1:3]
    with np.errstate(invalid="ignore", over="ignore"):
        unit = ulp_unit(mag * (1 - 2.0 ** -30), fmt)
        t = np.ceil(rad * (1 + 2.0 ** -20) / unit + 0.5)
    void = int((~(np.isfinite(t) & (t < most))).sum())
    tol = np.where(np.isfinite(t) & (t < most), t, most if fallback is None else fallback)
    tol = tol.astype(np.int64)
    acc = dtype if fmt.precision > float_format(accumulation).precision else accumulation
    how = f"accumulating in {acc}" if arith.store == 0 else \
        f"storing its scores and weights in {acc}, summing in float32"
    rest = "every float allowed" if fallback is None else f"the default rule, {fallback} ULPs"
    words = (f"per output, the proved error of a correct {dtype} kernel {how} "
             f"(P rounded to {dtype}), in ULPs at the terms: {tol.min()}"
             + (f" to {tol.max()}" if tol.max() != tol.min() else "")
             + (f"; no bound for {void} outputs ({rest})" if void else ""))
    return tol, words


def attempt(run, *args) -> tuple:
    """``(run(*args), None)``, or ``(None, what the kernel raised, in one line)``: a kernel's
    failure as :func:`~exactattn.verify.adapter.ask` reads it, for every check (forward, its
    probes, the backward, split-merge, row blocks)."""
    answer, _, why, _ = ask(run, *args)
    return answer, why or None


def answered(want: tuple, rank: int, name: str, run, *args, lse: bool = True,
             on: str = "") -> tuple:
    """``(output, lse, None)``: the answer of ``run(*args)`` in shape ``want`` (B x H_q x L x
    E_v, the lse B x H_q x L; None unless ``lse``) from the call's ``rank``, or ``(None, None,
    why)``: what the kernel ``name`` raised, or its answer of the wrong shape (a failure of the
    kernel on this input, not a bad input; ``on`` ends the shapes' names): the forward's, its
    probes' and split-merge's one reading of an answer."""
    answer, why = attempt(run, *args)
    try:
        if why is None:
            return (reshaped(answer.values, want, rank, f"{name}'s output{on}"),
                    reshaped(answer.lse, want[:3], rank - 1, f"{name}'s lse{on}", tail=False)
                    if lse else None, None)
    except ShapeError as e:
        why = f"an answer of the wrong shape: {e}"
    return None, None, why


def verify(impl, call: Call, dtype: str = "float32", *,
           max_ulps: int | None = None, prec: int = 96, lse: str | None = None,
           reference: Reference | None = None, probes=PROBES,
           accumulation: str = "float32") -> Report:
    """Run ``impl`` on ``call`` in ``dtype`` and compare every output with the exact one.

    The call is checked under its own policy (modifiers included: sink, ALiBi,
    soft-cap, window, query offset, RoPE, dropout with the call's
    ``dropout_keep``).  The call's entries are first rounded to ``dtype`` (counted in
    ``report.moved_inputs``); the implementation and the exact reference both
    see those floats.  An output passes when it is a number within its
    tolerance of the correctly rounded exact value: by default the proved error of a
    correct kernel that accumulates in ``accumulation`` (:func:`proved_tolerance`, in
    ULPs at the size of the terms; :func:`default_max_ulps` for RoPE, ALiBi and dropout,
    the probes and the log-sum-exp), else ``max_ulps`` ULPs by either count; NaN or
    infinity where the exact value is finite is a hard failure, and an implementation
    that raises fails every output hard (``report.raised`` says what it raised).

    Args:
        impl: an :class:`~exactattn.verify.impls.Impl`, a callable, or a name
            (``numpy``, ``numpy-naive``, ``torch``, ``module:function``).
        dtype: ``float64``, ``float32``, ``float16`` or ``bfloat16``.
        lse: ``"e"`` or ``"2"``: the implementation returns ``(output, lse)``
            and each row's log-sum-exp is checked too (``-inf`` for a row
            with no key must be exactly ``-inf``).
        probes: the derived inputs also run (:mod:`~exactattn.verify.probes`: values all
            ones, identity columns, ``|values|``; default all, ``()`` or ``"none"`` for
            none), each judged on the plain ULP count (identity shares with an allowance
            for their gap; ``report.probes``); the report passes only when every probe does.

    Raises:
        InputError: an unknown dtype, an unknown probe, a dtype the implementation does not
            run, a scale that is 0 or infinity in the dtype
            (:func:`check_scale`), inputs that overflow the dtype, a problem
            estimated to take over :data:`~exactattn.call.limits.MAX_SECONDS`
            (:func:`~exactattn.call.limits.check_work`), an ``inf``/``nan``
            key or value that a query sees (named: ``key[1][0]``), an ``lse``
            asked for that the implementation does not return, a ``reference``
            whose call is not ``call`` or whose inputs move in ``dtype``.
        ShapeError: the implementation returned the wrong shape.

    ``reference`` (``Reference(call)``) is the exact answer computed once and
    shared by every check of the same call: each backend, and each dtype in
    which the call's entries are already floats (nothing moves when rounded);
    its enclosures are kept, so a second dtype of the same working precision
    only rounds them.

    Reference: Vaswani et al. 2017, sec. 3.2.1.
    """
    impl = load_impl(impl)
    check_request(impl, call, dtype, max_ulps)
    if lse is not None:
        lse = check_base(lse, "lse")
    probes = check_probes(probes)
    rounded_call, moved = call.rounded(dtype)
    sh = rounded_call.shape
    want = (sh["B"], sh["H_q"], sh["L"], sh["E_v"])
    if reference is not None and (reference.call is not call or moved):
        raise InputError(f"reference must be Reference(call) of a call whose entries are "
                         f"{dtype} floats (got {'another call' if reference.call is not call else f'{moved} entries that move in {dtype}'}); "
                         "leave reference out to compute the exact answer of the rounded call")
    # a new Reference refuses non-finite numbers a query sees
    ref = Reference(rounded_call) if reference is None else reference
    t0 = time.perf_counter()
    got, got_lse, raised = answered(want, call.rank, impl.name, impl.answer,
                                    make_call(rounded_call, dtype, lse), lse=lse is not None)
    t1 = time.perf_counter()
    return _report(impl.name, rounded_call, ref, got, dtype, max_ulps, prec, moved=moved,
                   raised=raised, lse=lse, got_lse=got_lse, impl_seconds=t1 - t0,
                   run_probes=lambda tol, acc, floats=None: _probe_runs(
                       impl, rounded_call, probes, dtype, tol, prec, want, lse, acc, floats),
                   accumulation=accumulation)


def verify_outputs(call, got, dtype: str | None = None, *, max_ulps: int | None = None,
                   prec: int = 96, name: str = "outputs", accumulation: str = "float32",
                   floats: tuple | None = None, each=None) -> Report:
    """Judge outputs a float kernel already returned against the exact answer of ``call``.

    :func:`verify` without running anything and without rounding: the call's
    entries are the kernel's inputs as they are (a float32 array's entries
    read as their exact binary values; inputs of another dtype than the
    outputs are fine), and every output is judged as :func:`verify` judges it
    (:func:`~exactattn.verify.compare.judge`, the default tolerance
    :func:`proved_tolerance` for a kernel accumulating in ``accumulation``).  It runs no probes
    (:mod:`~exactattn.verify.probes`): there is no kernel to hand the probes'
    values to, only the outputs the caller already has (``report.probes`` is
    empty); :func:`verify` runs them.

    ``call`` may be a function that builds the :class:`Call`: with ``floats``, its inputs as
    float64 arrays (:func:`~exactattn.call.inputs.sdpa_floats`), it is called only when the
    bulk judge (:func:`bulk_report`, ``each`` its progress) leaves it something to do.

    Args:
        call: the exact inputs and policy (shapes as :class:`~exactattn.call.Call`).
        got: the outputs, ... x H_q x L x E_v in the call's rank: a numpy array,
            a torch tensor (bfloat16 included) or anything ``numpy.asarray`` reads.
        dtype: the dtype the outputs are judged in; default: ``got``'s own
            (float64, float32, float16 or bfloat16).
        name: how the report names the outputs.

    Raises:
        InputError: ``got`` of a dtype that is not a float format (named), a
            bad ``max_ulps``, a problem past the limits, an ``inf``/``nan`` a
            query sees.
        ShapeError: ``got`` of the wrong shape.

    >>> from exactattn.call import Call
    >>> c = Call([[0], [0]], [[0], [0]], [[1], [3]])
    >>> r = verify_outputs(c, np.array([[2.0], [2.0]], dtype=np.float32))
    >>> r.dtype, r.passed, r.summary()["max_ulps"]
    ('float32', True, 0)
    """
    answer = read_answer(got, name)
    dtype = answer.dtype if dtype is None else dtype
    if dtype not in FORMATS:
        raise InputError(f"{name} must be an array of float64, float32, float16 or bfloat16 "
                         f"(got dtype {shorten(str(dtype))}); compare the kernel's own output "
                         "array, not a converted copy")
    if floats is not None:
        q, v, rank = floats[0], floats[2], floats[6]
        values = reshaped(answer.values, (*q.shape[:3], v.shape[3]), rank, name)
        report = bulk_report(name, values, floats, dtype, max_ulps, call, each=each,
                             accumulation=accumulation)
        if report is not None:
            return report
    call = call if isinstance(call, Call) else call()
    check_request(None, call, dtype, max_ulps)
    sh = call.shape
    ref = Reference(call)            # refuses non-finite numbers a query sees
    values = reshaped(answer.values, (sh["B"], sh["H_q"], sh["L"], sh["E_v"]), call.rank,
                      name)
    return _report(name, call, ref, values, dtype, max_ulps, prec, accumulation=accumulation)


class Deferred:
    """A :class:`Call` or :class:`Reference` built on first use: a report the bulk judge
    decided reads neither unless an entry is left to the exact path or its exact value is asked.
    Built past :data:`~exactattn.call.limits.MAX_INPUTS` (the bulk judge already took the
    shape; what is asked of it here is a few entries: a failure's message, a tie)."""

    def __init__(self, make):
        self._make, self._value = make, None

    def built(self):        # a method, not a property: an AttributeError it raises stays its own
        if self._value is None:
            from ..call import limits
            with limits.lifted():
                self._value = self._make()
        return self._value

    def __getattr__(self, name):
        return getattr(self.built(), name)


def bulk_report(name: str, got, floats: tuple, dtype: str, max_ulps: int | None, make_call,
                prec: int = 96, ref: Reference | None = None, each=None,
                accumulation: str = "float32") -> Report | None:
    """:func:`verify_outputs`' report decided from float64 enclosures of the exact outputs
    (:func:`exactattn.reference.bound.enclose_outputs`, :func:`~exactattn.verify.compare.decide`),
    or None where they do not apply (a format of more than 24 bits, a policy the bound does
    not take, a row with no bound, a default tolerance the enclosure of ``max |logit|`` does
    not decide).

    ``got``: the outputs, float64 B x H_q x L x E_v; ``floats``: :func:`~exactattn.call.inputs.sdpa_floats`'
    ``(query, key, value, policy, keep, offsets, rank)``; ``make_call()`` builds the exact
    :class:`Call`, only when an entry is left to the exact path or the report's call is read.
    Entries the enclosures decide get the status, ULP count and errors :func:`judge` would
    give; the rest are judged by it on the exact values (``report.notes`` counts them).
    ``each(heads, total)`` wraps the loop over the heads (a caller's progress bar)."""
    from ..reference.bound import RowBalls, enclose_outputs, supported
    q, k, v, policy, keep, offsets, _ = floats
    fmt = float_format(dtype)
    if fmt.precision > 24 or supported(policy) is not None:
        return None
    check_scale(policy, fmt)      # and the sink: before the float64 enclosure reads them as floats
    t0 = time.perf_counter()
    arith = _with_kernel(dtype, accumulation, max_ulps)
    mid, rad, mag, top, *excess = enclose_outputs(
        q, k, v, policy, keep, offsets, *(() if each is None else (each,)), arith=arith,
        got=got if isinstance(arith, tuple) else None, fmt=fmt)
    rad, kernel = rad if isinstance(rad, tuple) else (rad, None)
    if top is None:
        return None
    if max_ulps is None:
        tol, low = (default_tolerance(dtype, k.shape[2], q.shape[3], t, policy) for t in top[::-1])
        if tol != low:
            return None
        each_tol, bound = proved_tolerance(floats, dtype, accumulation, tol, (kernel, mag))
    else:
        tol = each_tol = check_whole(max_ulps, "max_ulps", low=0)
        bound = None
    each_tol = tol if each_tol is None else each_tol
    t1 = time.perf_counter()
    call = Deferred(make_call)
    ref = Deferred(lambda: Reference(call.built())) if ref is None else ref
    rows = RowBalls(q, k, v, policy, keep, offsets)
    found, left = bulk_judged(got, (mid, rad, mag), rows, fmt, each_tol, ref, prec)
    notes = _output_notes(found, dtype) + ([
        f"outputs left to the exact path: {left} of {found.count} (the rest decided "
        "from float64 enclosures with a proved error bound)"] if left else [])
    past = sorted(((tuple(int(x) for x in i), float(excess[0][tuple(i)]))
                   for i in np.argwhere(excess[0] > 1)), key=lambda r: -r[1]) if excess else []
    if past:
        notes.append(f"rows no correct {dtype} kernel gives: {len(past)} of {excess[0].size}; "
                     f"the worst, b,h,i = {','.join(map(str, past[0][0]))}, is off along its own "
                     f"direction {past[0][1]:.3g} times what a correct kernel's weight errors, "
                     "shared by the row's value columns, allow (weights rounded coarser than "
                     f"{dtype} do this, as does any error common to a row's columns)")
    t2 = time.perf_counter()
    return Report(name, dtype, policy, call, found, tol, 0, ref,
                  {"impl": 0.0, "exact": t1 - t0, "compare": t2 - t1}, notes,
                  bound=bound if max_ulps is None and each_tol is not tol else None,
                  rows_past=past)


def _check_accumulation(accumulation: str | None):
    """Refuse an ``accumulation`` that is not a float format (None: not asked), on every path."""
    return None if accumulation is None else check_choice(accumulation, "accumulation", DTYPES)


def _with_kernel(dtype: str, accumulation: str | None, max_ulps=None):
    """The arithmetics of one pass of the enclosure: float64's, and a correct kernel's when a
    proved tolerance is wanted (``accumulation`` given, no ``max_ulps``)."""
    from ..reference.bound import FLOAT64, kernel_arithmetic
    _check_accumulation(accumulation)
    if accumulation is None or max_ulps is not None:
        return FLOAT64
    return FLOAT64, kernel_arithmetic(dtype, accumulation)


def bulk_judged(got, enclosed: tuple, rows, fmt: FloatFormat, tol, ref, prec: int, *,
                at_terms: bool = True, column: int = 0, known=None, rounded=None,
                found: Comparison | None = None, entry=None, decided: bool = True,
                lse: bool = False, near_max: float | None = None) -> tuple:
    """``(found, left)``: the outputs ``got`` (float64, B x H_q x L x w) judged from their
    enclosures ``enclosed = (mid, rad, mag)`` (:func:`~exactattn.verify.compare.decide`), the
    entries they leave open (``left`` of them) enclosed again in ``arb`` by ``rows`` (a
    :class:`~exactattn.reference.bound.RowBalls` whose value columns ``column..`` these are)
    and judged by :func:`judge` (``at_terms``, ``known``, ``tol`` an int or an array of
    ``got``'s shape); ``ref.output`` only where a tie or an exact float needs the exact value.

    With ``rounded`` (the exact values correctly rounded, ``got``'s shape; ``rows`` the
    ``arb`` balls of every column, ``mag`` exact): :func:`judge_entries`' rule, every entry
    not found ok at once judged by :func:`judge` (None for ``got``: every entry hard).  The
    entries are added to ``found`` (default: a new ``Comparison(None)``), each made by
    ``entry(idx, rounded, got, ulps, rel, status, terms_ulps)`` (default: an :class:`Entry`
    on ``ref``).  With ``rounded`` and not ``decided``, every entry is judged by :func:`judge`
    (its errors measured in ``arb``, not from the float64 enclosures: the row blocks' rule;
    ``lse``: log-sum-exps, as :func:`judge` takes them).  With ``rounded`` and ``near_max``,
    the entries decided at once whose error (relative, at the terms, or at the terms among the
    most ULPs) is within ``near_max`` of the group's largest are judged by :func:`judge` too, so
    a group's figures are the judge's own (a model check's rule)."""
    from ..numbers.formats import round_ball
    mid, rad, mag = enclosed
    raised, exact = got is None, rounded is not None
    got = np.full(mid.shape, math.nan) if raised else got
    shape, flat_got, flat_mag = got.shape, got.reshape(-1), mag.reshape(-1)
    tols, found = np.broadcast_to(tol, shape), Comparison(None) if found is None else found
    start = found.count
    if entry is None:
        def entry(idx, *args):
            return Entry(idx, *args[:5], ref, *args[5:],
                         tolerance=int(tols[idx]) if np.ndim(tol) else None)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # mag within 3 eta + 2u <= 4 rad/mag; judge_entries': exact, a tolerance capped at 2^62
        slack = 0.0 if exact else \
            np.where(mag > 0, np.maximum(4 * rad / np.where(mag > 0, mag, 1.0), 2.0 ** -30), 0.0)
        cap = np.asarray(tol, dtype=object) if exact else tol      # no object copy when fast
        cap = np.where(cap > 1 << 62, 1 << 62, cap).astype(np.int64) if exact else cap
        status, near, ulps, rel, terms = (a.reshape(-1) for a in
                                          decide(got, mid, rad, mag, fmt, cap, at_terms, slack))
    rounded = near if rounded is None else rounded.reshape(-1)
    sharp = (status == 0) & decided
    if exact:
        status[~sharp] = 2 if raised else 3
    elif sharp.any():      # a rough entry that may hold a summary's maximum: judged exactly
        top_rel, top_terms = rel[sharp].max(), terms[sharp].max()
        status[(status == 4) & ((rel >= top_rel) | (terms >= top_terms))] = 3
    else:
        status[status == 4] = 3
    undecided = np.flatnonzero(status == 3)

    def at(p):        # an entry's index in rows' value columns
        *lead, c = (int(x) for x in np.unravel_index(p, shape))
        return (*lead, c + column)
    balls = rows if exact else rows.balls([at(p) for p in undecided])

    def judged(p):
        idx, g, r = tuple(int(i) for i in np.unravel_index(p, shape)), float(flat_got[p]), \
            float(rounded[p])
        j = None
        if status[p] == 1:
            e = entry(idx, r, g, int(ulps[p]), float(rel[p]), "over", float(terms[p]))
        elif status[p] == 2:
            e = entry(idx, r, g, None, math.inf if math.isinf(g) else None, "hard")
        else:
            ball, m = balls[at(p)], float(flat_mag[p])
            r = r if exact else round_ball(ball, fmt, rows.prec)
            k = None if r is None or known is None else known(r)
            if r is None:       # a tie or an exact float: the exact value decides
                r, ball = Reference.round_exact(ref.output(*idx), fmt, max(prec, 128))

            def exact_value(idx=idx, k=k):
                return k if k is not None else ref.output(*idx)
            j = judge(g, r, ball, m, fmt, exact_value, int(tols[idx]), at_terms=at_terms, lse=lse)
            e = entry(idx, r, g, j.ulps, j.rel, j.status, j.terms_ulps)
        return p, e, j
    done = [judged(p) for p in np.flatnonzero((status != 0) & (status != 4)).tolist()]
    if near_max is not None:
        # decide's errors are known to about 2^-9 of themselves: an entry within ``near_max`` of
        # a maximum (or of the top error at the terms among the most ULPs) is judged too
        for p, e, _ in done:      # the judge's figures (-1 or NaN: none)
            ulps[p] = -1 if e.ulps is None else min(e.ulps, 1 << 62)
            rel[p] = math.nan if e.rel is None or e.status == "hard" else e.rel
            terms[p] = math.nan if e.terms_ulps is None else e.terms_ulps
        close = np.zeros_like(sharp)
        for size in (rel, terms, np.where(ulps == ulps.max(), terms, np.nan)):   # NaN: none
            close |= (size > 0) & (size >= np.fmax.reduce(size, initial=0.0) * (1 - near_max))
        status[close & sharp] = 3
        done += [judged(p) for p in np.flatnonzero(close & sharp).tolist()]
    ok = np.flatnonzero((status == 0) | (status == 4))

    def make(i, p=ok):     # a rough entry's errors are below what float64 resolves: None
        k, sharp_ = p[i], status[p[i]] == 0
        return entry(tuple(int(x) for x in np.unravel_index(k, shape)), float(rounded[k]),
                     float(flat_got[k]), int(ulps[k]), float(rel[k]) if sharp_ else None, "ok",
                     float(terms[k]) if sharp_ else None)
    found.add_many(ok + start, ulps[ok], rel[ok], terms[ok], make)
    for p, e, j in done:
        found.add(e, j, position=start + p)
    return found, len(undecided)


def _output_notes(found: Comparison, dtype: str) -> list:
    """The notes of outputs that were not floats of ``dtype``, or on an undecided midpoint."""
    notes = []
    if found.off_format:
        notes.append(f"outputs that were not {dtype} values: {found.off_format} of "
                     f"{found.count}; they were rounded to {dtype} before counting ULPs")
    if found.undecided:
        notes.append(f"outputs on an undecided {dtype} midpoint: {found.undecided} of "
                     f"{found.count}; their enclosures still held the midpoint of two {dtype} "
                     f"neighbours at {MAX_PREC} bits, so either neighbour counts as the exact "
                     "rounding")
    return notes


def _report(name: str, call: Call, ref: Reference, got, dtype: str, max_ulps: int | None,
            prec: int, *, moved: int = 0, raised: str | None = None, lse: str | None = None,
            got_lse=None, impl_seconds: float = 0.0, run_probes=None,
            accumulation: str = "float32") -> Report:
    """The report of outputs ``got`` (B x H_q x L x E_v float64; None when the
    implementation raised: every output a hard failure) against ``ref``, the exact answer
    of ``call``, of :func:`verify` and :func:`verify_outputs`: decided from float64
    enclosures where they apply (:func:`bulk_report`; no log-sum-exp asked), else the
    outputs judged by :func:`judge_entries`, the notes, the log-sum-exp (``lse``,
    ``got_lse``); and the probes (``run_probes(tol, accumulation, floats)`` gives the probe
    runs and their seconds, proved tolerances when ``accumulation`` is not None, judged on
    float64 enclosures where the call's ``floats`` are given; None: no probes)."""
    no_probes = ([], {"impl": 0.0, "exact": 0.0})
    floats = None if got is None else call_floats(call)
    report = None if floats is None or lse is not None else bulk_report(
        name, got, floats, dtype, max_ulps, lambda: call, prec, ref=ref, accumulation=accumulation)
    if report is not None:
        probed, spent = no_probes if run_probes is None else run_probes(
            report.max_ulps, None if report.bound is None else accumulation, floats)
        seconds = {"impl": impl_seconds + spent["impl"], "exact": report.seconds["exact"] +
                   spent["exact"], "compare": report.seconds["compare"]}
        return replace(report, moved_inputs=moved, probes=probed, seconds=seconds)
    fmt = float_format(dtype)
    t1 = time.perf_counter()
    tol = tolerance(ref, dtype, max_ulps)
    _check_accumulation(accumulation)
    each, bound = (None, None) if floats is None or max_ulps is not None else \
        proved_tolerance(floats, dtype, accumulation, tol)
    rounded, balls, mags = ref.rounded_outputs(dtype, prec=prec)
    t2 = time.perf_counter()
    found = judge_entries(got, (rounded, balls, mags), ref, fmt, tol if each is None else each)
    probed, probe_seconds = no_probes if run_probes is None else \
        run_probes(tol, None if each is None else accumulation)
    notes = []
    if raised is not None:
        notes.append(f"hard failure: {name} raised {raised}; every output counts as failed")
    notes += _output_notes(found, dtype)
    lse_found = Comparison(None)
    if lse is not None:         # every row's log-sum-exp against the exact one, as column 0
        r, balls = (a[..., None] for a in ref.rounded_lse(dtype, lse, prec=prec))
        top = logit_bound(ref.max_abs_exponent(), ref.policy)
        judge_entries(None if got_lse is None else got_lse[..., None],
                      (r, balls, np.maximum(np.abs(r), top if math.isfinite(top) else np.abs(r))),
                      SimpleNamespace(output=lambda b, h, i, _: ref.lse(b, h, i, lse)), fmt, tol,
                      found=lse_found, decided=False, lse=True,
                      entry=lambda idx, r, g, u, rel, st, t=None: Entry(idx[:3], r, g, u, rel, st,
                                                                        ref, t, lse))
    t3 = time.perf_counter()
    return Report(name, dtype, call.policy, call, found, tol, moved, ref,
                  {"impl": impl_seconds + probe_seconds["impl"],
                   "exact": t2 - t1 + probe_seconds["exact"],
                   "compare": t3 - t2 - sum(probe_seconds.values())}, notes,
                  raised=raised, lse=lse, lse_found=lse_found, probes=probed,
                  bound=None if each is None else bound)


def judge_entries(got, exact: tuple, ref, fmt: FloatFormat, tol, **how) -> Comparison:
    """Every output of ``got`` (None: the implementation raised) judged against the correctly
    rounded exact values ``exact = (rounded, balls, magnitudes)`` (one shape);
    ``ref.output(b, h, i, c)`` gives an exact value; ``tol`` is an int, or an int array of
    that shape (each entry's own, its ``tolerance``): :func:`bulk_judged` on the balls'
    float64 enclosures, every entry they do not clear judged by :func:`judge` (``how``:
    :func:`bulk_judged`'s ``found``, ``entry``, ``decided``, ``lse``); the one judging loop of
    the forward's exact path, its log-sum-exp, the backward and the row blocks."""
    rounded, balls, mags = exact
    return bulk_judged(got, (*enclosures(balls), mags), balls, fmt, tol, ref, 0,
                       rounded=rounded, **how)[0]


@dataclass
class ProbeRun:
    """One probe (:mod:`~exactattn.verify.probes`) run through the implementation: the probe,
    its outputs judged on the plain ULP count (``found``; identity shares with their gap's
    allowance), and what the implementation raised."""

    probe: Probe
    found: Comparison
    raised: str | None = None

    @property
    def passed(self) -> bool:
        return self.found.passed


def _probe_tolerance(floats, values, dtype: str, accumulation: str | None, tol: int,
                     enclosed: tuple | None = None):
    """The probes' outputs' proved tolerance (:func:`proved_tolerance` of the call with the
    probes' values side by side), or None (``accumulation`` None: the default rule).  A
    probe's values are 0, 1 or ``|v|``: no output cancels, so its error at the terms is its
    plain ULP count (at the lower binade, as the tolerance counts it).  A probe output
    fails only past both this and the default rule: past the proof, it is no correct kernel
    of that arithmetic; within the default rule, a kernel summing in its own dtype passes."""
    if accumulation is None or floats is None:
        return None
    return proved_tolerance(floats[:2] + (values,) + floats[3:], dtype, accumulation, tol,
                            enclosed)[0]


def _probe_runs(impl, call: Call, probes: tuple, dtype: str, tol: int, prec: int, want: tuple,
                lse: str | None = None, accumulation: str | None = None,
                floats: tuple | None = None) -> tuple[list, dict]:
    """Every probe of ``call`` run through the implementation once and judged on the plain
    ULP count: ``tol``, identity shares with :func:`_share_allowance` more, each output
    within its proved tolerance instead where that is larger (an ``accumulation``); and the
    seconds the implementation and the exact side took.

    One loop judges every probe, on float64 enclosures of every probe's outputs side by side
    (:func:`_bulk_probes`) where the call's ``floats``
    (:func:`~exactattn.call.inputs.sdpa_floats`) are given and they decide it, else on one
    exact reference of every probe's values side by side (:func:`_exact_probes`: one set of
    exponentials for all of them).  An implementation that returns ``(output, lse)``
    (``lse`` given) is called the same way; the probes judge its outputs only (the
    log-sum-exp does not depend on the values)."""
    seconds = {"impl": 0.0, "exact": 0.0}
    if not probes:
        return [], seconds
    plist = probe_values(call, probes)
    joint = call.with_value(np.concatenate([p.value for p in plist], axis=3))   # side by side
    V = None if floats is None else joint.value.astype(np.float64)    # exact: 0, 1 or |v|
    got, raised = [], []
    for p, _, part in _parts(plist):
        fc = make_call(call.with_value(p.value), dtype, lse,
                       None if V is None else (floats[0], floats[1], V[part]))
        t = time.perf_counter()
        values, _, why = answered(want[:3] + (p.value.shape[3],), call.rank, impl.name,
                                  impl.answer, fc, lse=False, on=f" on the {p.label} probe")
        seconds["impl"] += time.perf_counter() - t
        got.append(values)
        raised.append(why)
    t = time.perf_counter()
    judges = None if V is None or any(raised) else \
        _bulk_probes(joint, floats, plist, V, dtype, tol, accumulation)
    allowance, proved, enclosed, rows, rounded, joint = judges or \
        _exact_probes(call, joint, plist, dtype, tol, prec, accumulation)
    runs = []
    for (p, column, part), g, why in zip(_parts(plist), got, raised):
        each = tol + allowance[part].astype(object if tol >> 62 else np.int64, copy=False) \
            if p.name == "identity" else tol      # past 2^62: Python ints, no overflow
        each = each if proved is None else np.maximum(proved[part], each)
        m, r, a = (x[part] for x in enclosed)
        if rounded is None and p.known(call.policy, 1.0) is not None:    # every output 1 or 0
            exact = np.where(np.abs(m - 1) <= r, 1.0, np.where(np.abs(m) <= r, 0.0, np.nan))
            m, r, a = (np.where(np.isnan(exact), x, y) for x, y in ((m, exact), (r, 0.0),
                                                                  (a, exact)))
        part_ref = SimpleNamespace(     # the probe's columns of the joint reference
            output=lambda b, h, i, c, column=column: joint.output(b, h, i, c + column))
        runs.append(ProbeRun(p, bulk_judged(
            g, (m, r, a), rows, float_format(dtype), each, part_ref, prec,
            at_terms=False, column=column, known=lambda x, p=p: p.known(call.policy, x),
            rounded=None if rounded is None else rounded[part])[0], why))
    seconds["exact"] += time.perf_counter() - t
    return runs, seconds


def _parts(plist) -> list:
    """``(probe, column, part)`` of every probe: where its columns start among every probe's
    values side by side, and the index of its columns there."""
    ends = itertools.accumulate(p.value.shape[3] for p in plist)
    return [(p, e - p.value.shape[3], np.s_[..., e - p.value.shape[3]:e])
            for p, e in zip(plist, ends)]


def _exact_probes(call: Call, joint: Call, plist: list, dtype: str, tol: int, prec: int,
                  accumulation: str | None) -> tuple:
    """``(allowance, proved, enclosed, balls, rounded, joint)`` for :func:`_probe_runs` from
    one exact reference ``joint`` of every probe's values side by side: the identity shares'
    allowance, the proved tolerance (or None), float64 enclosures ``(mid, rad, magnitudes)``
    of its ``arb`` ``balls`` and the outputs correctly rounded (:func:`bulk_judged` with
    ``rounded``: :func:`judge_entries`' rule)."""
    ref = Reference(joint)
    rounded, balls, mags = ref.rounded_outputs(dtype, prec=prec)
    allowance = _share_allowance(mags, ref).astype(object) \
        if any(p.name == "identity" for p in plist) else None     # object: a tol past int64
    proved = None if accumulation is None else \
        _probe_tolerance(call_floats(call), joint.value.astype(np.float64), dtype, accumulation, tol)
    return allowance, proved, (*enclosures(balls), mags), balls, rounded, ref


def _bulk_probes(joint: Call, floats: tuple, plist: list, V, dtype: str, tol: int,
                 accumulation: str | None) -> tuple | None:
    """:func:`_exact_probes`' ``(allowance, proved, enclosed, rows, None, joint)`` from
    float64 enclosures of every probe's outputs side by side (``V``: their values as
    float64; ``rows`` their :class:`~exactattn.reference.bound.RowBalls`), or None where they
    do not decide it (a row without a bound, an identity allowance the enclosure does not
    fix)."""
    from ..reference.bound import RowBalls, enclose_outputs
    q, k, _, policy, keep, offsets, _ = floats
    mid, rad, mag, top = enclose_outputs(q, k, V, policy, keep, offsets,
                                         arith=_with_kernel(dtype, accumulation))
    rad, kernel = rad if isinstance(rad, tuple) else (rad, None)
    if top is None:
        return None
    allowance, proved = None, _probe_tolerance(floats, V, dtype, accumulation, tol,
                                               (kernel, mag))
    if any(p.name == "identity" for p in plist):   # the allowance at both ends of the shares
        ends = [_share_allowance(np.where(rad == 0, mid, np.nextafter(mid + s * rad, s * np.inf)))
                for s in (-1, 1)]
        if any((ends[0][part] != ends[1][part]).any() for p, _, part in _parts(plist)
               if p.name == "identity"):
            return None
        allowance = ends[0]
    return allowance, proved, (mid, rad, mag), RowBalls(q, k, V, policy, keep, offsets), None, \
        Deferred(lambda: Reference(joint))


def _share_allowance(shares: np.ndarray, ref: Reference | None = None) -> np.ndarray:
    """The identity probe's allowance per share ``p``: ``ceil(2 ln(1 / p))`` ULPs, plus
    ``8 ceil(max |capped logit|)`` under a soft-cap.

    A share ``exp(x_j - m) / sum`` computed in floats is off, relatively, by the rounding of
    the difference ``x_j - m`` (about its gap ``g = ln(p_max / p)`` half-ULPs) and of ``x_j``
    itself (up to ``|m| + g`` more): about ``2 g`` ULPs past what the tolerance's logit term
    covers; ``ln(1 / p) = g + ln(1 / p_max)`` bounds the gap without finding each row's
    largest share (at most ``ln S`` more).  Under a soft-cap a float ``tanh`` is a few ULPs
    off, and ``cap * tanh``
    carries that times the cap into every logit (measured: up to 330 ULPs on shares of a
    correct float32 FlexAttention soft-cap at cap 30).  A row's largest shares keep close to
    the plain tolerance, so a normaliser off by a factor still fails.  ``shares``: the
    shares as float64 (B x H x L x columns; a non-positive one gets no allowance), of the
    call ``ref`` (None: no soft-cap)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        g = -np.log(shares)
    g = np.where(np.isfinite(g) & (g > 0), g, 0.0)
    cap = 0 if ref is None or ref.policy.softcap is None else \
        8 * math.ceil(ref.max_abs_exponent())
    return np.ceil(2 * g).astype(np.int64) + cap
