"""The check: run an implementation, compare every output with the exact one, in ULPs.

:func:`verify` rounds the problem to the dtype, hands the implementation those
floats, computes the exact answer of the same floats (:class:`Reference`) and
compares each output with the exact value correctly rounded to the dtype.
The ULP error is the number of floats of the dtype between the two (0 =
correctly rounded; +0 and -0 are one float).  NaN or infinity where the exact
value is finite is a hard failure, never a skip; so is a finite value where
the policy's exact answer is NaN, and so is an implementation that raises.

>>> from exactattn.verify.problem import Problem
>>> p = Problem.from_arrays([[0], [0]], [[0], [0]], [[1], [3]])
>>> report = verify("numpy", p, dtype="float64")
>>> [e.exact.decimal(4) for e in report.entries], report.summary()["max_ulps"], report.passed
(['2.0000', '2.0000'], 0, True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..call import DEFAULT_SCALE, Policy, float_scale
from ..errors import InputError, ShapeError, shorten
from ..options import check_whole
from .compare import judge
from .formats import FORMATS, FloatFormat, default_max_ulps, float_format, round_to_format
from .impls import ImplRaised, load_impl, make_call
from .limits import check_work
from .problem import Problem
from .reference import Reference

__all__ = ["Entry", "Report", "check_scale", "verify"]


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

    @property
    def exact(self):
        """The exact output as an :class:`~exactattn.softmax.ExpRatio`."""
        b, h, i, c = self.index
        return self.reference.output(b, h, i, c)


@dataclass
class Report:
    """The result of :func:`verify`: every output compared, a summary, the cost and timings.

    ``raised`` is the implementation's exception in one line (``"ValueError:
    ..."``) when it raised instead of answering; every entry is then a hard
    failure.  ``seconds`` holds wall-clock timings (``impl``, ``exact``,
    ``compare``); reports print them only when asked.
    """

    impl: str
    dtype: str
    policy: Policy
    problem: Problem
    entries: list
    max_ulps: int
    moved_inputs: int
    reference: Reference
    seconds: dict
    notes: list = field(default_factory=list)
    flops: dict | None = None
    raised: str | None = None

    @property
    def passed(self) -> bool:
        return all(e.status == "ok" for e in self.entries)

    def failures(self) -> list:
        return [e for e in self.entries if e.status != "ok"]

    def summary(self) -> dict:
        """count, max/mean/median ULPs, max ULPs at the terms, max relative error, over, hard."""
        ulps = [e.ulps for e in self.entries if e.ulps is not None]
        rels = [e.rel for e in self.entries if e.rel is not None]
        terms = [e.terms_ulps for e in self.entries if e.terms_ulps is not None
                 and e.status != "hard"]
        return {"dtype": self.dtype, "count": len(self.entries),
                "max_ulps": max(ulps) if ulps else None,
                "mean_ulps": (sum(ulps) / len(ulps)) if ulps else None,
                "median_ulps": sorted(ulps)[(len(ulps) - 1) // 2] if ulps else None,
                "max_terms_ulps": max(terms) if terms else None,
                "max_rel": max(rels) if rels else None,
                "over": sum(e.status == "over" for e in self.entries),
                "hard": sum(e.status == "hard" for e in self.entries)}

    def worst(self, k: int = 5) -> list:
        """Hard failures first, then the k largest ULP errors (ties in index order)."""
        def key(e):
            return (e.status != "hard", -(e.ulps if e.ulps is not None else 0))
        return sorted(self.entries, key=key)[:k]

    def derived_macs(self) -> tuple[int, int] | None:
        """Scores and mix MACs from :func:`exactattn.cost.derive_at` (no mask only), else None."""
        if self.problem.mask is not None:
            return None
        from ..cost import derive_at
        sh, pol = self.problem.shape, self.policy
        kwargs = {"alignment": pol.alignment} if pol.causal else {}
        try:
            got = derive_at(sh["L"], 1, sh["E"], sh["E_v"], causal=pol.causal, keys=sh["S"],
                            heads=sh["H_q"], **kwargs)
        except InputError:
            return None
        return sh["B"] * got["scores"], sh["B"] * got["mix"]


def _float_bounds(fmt: FloatFormat) -> tuple[Fraction, Fraction]:
    """``(h, T)``: values up to h round to 0 in ``fmt``, values from T on round to infinity."""
    p = fmt.precision
    return (Fraction(2) ** (fmt.emin - p),
            Fraction(2 ** (p + 1) - 1) * Fraction(2) ** (fmt.emax - p))


def check_scale(policy: Policy, dtype: str | FloatFormat) -> None:
    """Refuse a scale that is 0 or infinity as the implementation is handed it in ``dtype``.

    The implementation gets the float64 nearest ``1/sqrt(D)``
    (:func:`~exactattn.call.float_scale`), cast to its dtype; a scale that
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
    D = policy.scale
    if D == DEFAULT_SCALE or D is None:
        return
    lo, hi = _float_bounds(FORMATS["float64"])
    if D <= 1 / (hi * hi):           # 1/sqrt(D) >= hi: infinity in float64
        got = "inf"
    elif D >= 1 / (lo * lo):         # 1/sqrt(D) <= lo: 0 in float64
        got = "0"
    else:
        s = round_to_format(Fraction(float_scale(D)), fmt)
        got = "inf" if math.isinf(s) else "0" if s == 0 else None
    if got is not None:
        raise InputError(f"scale must round to a finite non-zero {fmt.name} (got "
                         f"{shorten(policy.scale_text())}, which rounds to {got} in {fmt.name}); "
                         f"an implementation would multiply every score by {got}: rescale the "
                         "query or key instead")


def _run(impl, call):
    """The implementation's outputs, or the exception it raised, in one line."""
    try:
        return impl(call), None
    except ImplRaised as e:
        return None, e.line


def verify(impl, problem: Problem, policy: Policy | None = None, dtype: str = "float32", *,
           max_ulps: int | None = None, prec: int = 96) -> Report:
    """Run ``impl`` on ``problem`` in ``dtype`` and compare every output with the exact one.

    The problem's entries are first rounded to ``dtype`` (counted in
    ``report.moved_inputs``); the implementation and the exact reference both
    see those floats.  An output passes when it is a number within
    ``max_ulps`` ULPs (default :func:`default_max_ulps`) of the correctly
    rounded exact value; NaN or infinity where the exact value is finite is a
    hard failure, and an implementation that raises fails every output hard
    (``report.raised`` says what it raised).

    Args:
        impl: an :class:`~exactattn.verify.impls.Impl`, a callable, or a name
            (``numpy``, ``numpy-naive``, ``torch``, ``module:function``).
        policy: the answer checked against (default :class:`Policy`, PyTorch's).
            A problem with a mask is read under its own ``mask_kind``.
        dtype: ``float64``, ``float32``, ``float16`` or ``bfloat16``.

    Raises:
        InputError: an unknown dtype, a dtype the implementation does not
            run, a scale that is 0 or infinity in the dtype
            (:func:`check_scale`), inputs that overflow the dtype, a problem
            estimated to take over :data:`~exactattn.verify.limits.MAX_SECONDS`
            (:func:`~exactattn.verify.limits.check_work`).
        ShapeError: the implementation returned the wrong shape.

    Reference: Vaswani et al. 2017, sec. 3.2.1.
    """
    impl = load_impl(impl)
    fmt = float_format(dtype)
    policy = policy or Policy()
    if problem.mask is not None and problem.mask_kind != policy.mask_kind:
        policy = policy.replace(mask_kind=problem.mask_kind)
    if dtype not in impl.dtypes:
        raise InputError(f"dtype must be one of {', '.join(impl.dtypes)} for {impl.name} "
                         f"(got {dtype!r}){impl.dtype_hint(dtype)}")
    if max_ulps is not None:
        check_whole(max_ulps, "max_ulps", low=0)
    check_scale(policy, fmt)
    check_work(problem.shape, "problem", "check a smaller problem: fewer tokens, heads or a "
               "narrower head")
    from flint import arb  # noqa: F401  (loaded before the clocks start: timings are the work's)
    rounded_problem, moved = problem.rounded(dtype)
    sh = rounded_problem.shape
    want = (sh["B"], sh["H_q"], sh["L"], sh["E_v"])
    call = make_call(rounded_problem, policy, dtype)
    t0 = time.perf_counter()
    out, raised = _run(impl, call)
    t1 = time.perf_counter()
    if raised is None:
        try:
            got = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError):
            raise ShapeError(f"{impl.name}'s output must be an array of numbers "
                             f"(got {shorten(type(out).__name__)})") from None
        if got.size != math.prod(want) or got.shape[-2:] != want[-2:]:
            raise ShapeError(f"{impl.name}'s output must be "
                             f"{' x '.join(map(str, want[4 - problem.rank:]))} "
                             f"(got {' x '.join(map(str, got.shape))})")
        got = got.reshape(want)
    else:
        got = np.full(want, math.nan)
    ref = Reference(rounded_problem, policy)
    tol = default_max_ulps(dtype, sh["S"], sh["E"], ref.max_abs_exponent()) \
        if max_ulps is None else max_ulps
    rounded, balls, mags = ref.rounded_outputs(dtype, prec=prec)
    t2 = time.perf_counter()
    entries, off_format = [], 0
    for idx in np.ndindex(*want):
        g, r = float(got[idx]), float(rounded[idx])
        if raised is not None:
            entries.append(Entry(idx, r, g, None, None, "hard", ref))
            continue
        j = judge(g, r, balls[idx], float(mags[idx]), fmt, lambda: ref.output(*idx), tol)
        off_format += j.off_format
        entries.append(Entry(idx, r, g, j.ulps, j.rel, j.status, ref, j.terms_ulps))
    notes = []
    if raised is not None:
        notes.append(f"hard failure: {impl.name} raised {raised}; every output counts as failed")
    if off_format:
        notes.append(f"outputs that were not {dtype} values: {off_format} of {len(entries)}; "
                     f"they were rounded to {dtype} before counting ULPs")
    t3 = time.perf_counter()
    return Report(impl.name, dtype, policy, rounded_problem, entries, tol, moved, ref,
                  {"impl": t1 - t0, "exact": t2 - t1, "compare": t3 - t2}, notes,
                  raised=raised)
