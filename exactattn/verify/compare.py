"""Comparing a float result with the exact one: in ULPs of a dtype, or within rtol/atol.

One module, two modes, one rule for hard failures.

* ULPs (``exactattn verify``): :func:`judge` counts the floats of the dtype
  between the result and the correctly rounded exact value (0 = correctly
  rounded; +0 and -0 are one float), the error in ULPs at the size of the
  terms the output adds up (``sum_j shares_ij |value_jc|``) and the relative
  error ``|got - exact| / |exact|``; an entry passes when either count is
  within ``max_ulps``.
* a report of many entries (verify, its backward, row blocks, model checks):
  :class:`Comparison` counts them, keeps a histogram of their ULP errors,
  the largest errors and the worst few, and merges with another.
* rtol/atol (:mod:`exactattn.properties`): a :class:`Tolerance` passes
  ``got`` against an exact ``want`` when ``|got - want| <= atol + rtol * M``
  (``M`` the largest ``|value|`` of the output column, 1 for shares); two
  results of one function agree within twice that.  :func:`tolerance_for`
  takes rtol and atol from the dtype the function returned (:data:`TOLERANCES`).

Hard failures (:func:`hard`), in both modes: NaN or infinity where the exact
value is finite (and rounds to a finite float), and a number where the
policy's exact answer is NaN.

>>> tolerance_for("float32").describe()
'rtol=1e-05, atol=1e-06 from float32'
>>> within(0.7310586, Fraction(7310585786, 10**10), 1, tolerance_for("float32"))
True
>>> hard(float("nan"), 0.5), hard(float("inf"), float("inf")), hard(0.5, float("nan"))
(True, False, True)
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

from ..numbers.digits import MAX_PREC, tighten, working_precision
from ..errors import InputError
from ..numbers.exact import fmpq_of
from ..numbers.formats import (FloatFormat, round_enclosures, round_to_format, ulp_indices, ulp_unit,
                               ulps_between)

__all__ = ["decide", "judge"]

TOLERANCES = {  # dtype -> (rtol, atol)
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


def hard(got: float, want: float) -> bool:
    """A hard failure: NaN or infinity where ``want`` (the exact value, rounded) is not, or a number where it is NaN."""
    if math.isnan(want):
        return not math.isnan(got)
    return math.isnan(got) or (math.isinf(got) and got != want)


# --------------------------------------------------------------------------- rtol / atol
def check_tolerance(name: str, value) -> float | None:
    """An rtol or atol as given: None, or a non-negative finite number (as a float)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or not math.isfinite(value):
        raise InputError(f"{name} must be a non-negative finite number (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= atol + rtol * M``: the tolerance and where it came from (``dtype`` or given)."""

    rtol: float
    atol: float
    dtype: str = "float64"
    given: bool = False

    def bound(self, M) -> float:
        """How far a result may be from the exact value in a column of magnitude ``M``."""
        return self.atol + self.rtol * float(M)

    def describe(self) -> str:
        src = "given" if self.given else f"from {self.dtype}"
        return f"rtol={self.rtol:g}, atol={self.atol:g} {src}"


def tolerance_for(returned: str, requested: str = "float64", rtol: float | None = None,
                  atol: float | None = None) -> Tolerance:
    """The tolerance of a result returned in dtype ``returned`` from inputs in ``requested``.

    The looser of the two dtypes' :data:`TOLERANCES` (float32 inputs upcast
    to float64 still carry float32's rounding; an unknown dtype counts as
    float64); ``rtol``/``atol``, when given, replace the dtype's.

    Raises:
        InputError: a negative or non-finite ``rtol`` or ``atol``.

    >>> tolerance_for("float64", "float16")
    Tolerance(rtol=0.01, atol=0.001, dtype='float16', given=False)
    """
    rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
    default = TOLERANCES["float64"]
    if TOLERANCES.get(returned, default) < TOLERANCES.get(requested, default):
        returned = requested
    r, a = TOLERANCES.get(returned, default)
    return Tolerance(r if rtol is None else rtol, a if atol is None else atol, returned,
                     rtol is not None and atol is not None)


def within(got: float, want, M, tol: Tolerance) -> bool:
    """``got`` is within ``tol`` of the exact ``want`` (any exact number) in a column of size ``M``.

    Never on a hard failure (:func:`hard`); NaN where the exact answer is NaN passes.
    """
    w = float(want)
    if math.isnan(w):
        return math.isnan(got)
    return not hard(got, w) and abs(got - w) <= tol.bound(M)


# --------------------------------------------------------------------------- ULPs
#: a relative error below this prints as 0.0 (a float64 cannot hold it)
_TINY = Fraction(1, 2 ** 1100)


@dataclass(frozen=True)
class Judgement:
    """One output judged in ULPs: ``ok``, ``over`` or ``hard``, and the errors measured.

    ``ulps``: floats of the dtype between the result (rounded to the dtype
    when it was not one, ``off_format``) and the correctly rounded exact
    value; ``terms_ulps``: ``|got - exact|`` in ULPs at the terms' magnitude;
    ``rel``: ``|got - exact| / |exact|`` (0.0 when ``got`` is exact).  None
    where not measured (hard failures, NaN answers).  ``undecided``: the exact value
    may be the midpoint of the result and its neighbour, so both count as exact.
    """

    status: str
    ulps: int | None = None
    rel: float | None = None
    terms_ulps: float | None = None
    off_format: bool = False
    undecided: bool = False


def _arb():
    """python-flint's ``arb``, imported on first use (one lookup per entry after that)."""
    global _ARB
    if _ARB is None:
        from flint import arb
        _ARB = arb
    return _ARB


_ARB = None


def _error(got: float, ball, exact: Callable):
    """``got - exact`` and ``exact`` as ``arb`` balls tight enough for 3 significant digits.

    The block's ball is used when it is tight enough; else the exact value is
    enclosed again at doubled precision (:func:`tighten`) until the relative
    error is known to a thousandth of itself, or known to be below 2**-1100.
    ``got`` must differ from the exact value (see :func:`is_exact`).
    """
    arb = _arb()
    tiny = arb(fmpq_of(_TINY))

    def settled(x):
        err = arb(got) - x
        rel = abs(err / x)
        if rel.rad() * 1024 <= rel.mid() or rel < tiny:
            return err, x
        return None
    with working_precision(96):
        found = settled(ball)
    x = None if found else exact()      # an ExpRatio, or a known output's Fraction (1 on the
    if isinstance(x, Fraction):         # ones probe): that one is exact, no ball to tighten
        with working_precision(96):
            return settled(arb(fmpq_of(x))) or (arb(0), ball)
    return found or tighten(lambda p: settled(x.ball(p)), 128, max_prec=1 << 16) or (arb(0), ball)


def is_exact(got: float, ball, exact: Callable) -> bool:
    """True when ``got`` is the exact value itself (asked of ``exact()`` only when the
    enclosure ``ball`` allows it, so a rational output computed without error reads 0, not 2e-29)."""
    arb = _arb()
    if ball is None or not math.isfinite(got):
        return False
    with working_precision(96):
        if not ball.contains(arb(got)):
            return False
    try:
        return exact() == Fraction(got)
    except InputError:      # a certified value its enclosures cannot tell from got: not proven
        return False


def errors(got: float, ball, magnitude: float, fmt: FloatFormat,
           exact: Callable) -> tuple[float, float]:
    """``(relative error, error in ULPs at the terms)`` of ``got`` against the exact value.

    ``ball`` encloses the exact value, ``exact()`` gives it (an ``ExpRatio``)
    when the ball is not tight enough.  The relative error is ``|got - exact|
    / |exact|``; the error at the terms is ``|got - exact|`` in ULPs of the
    dtype at the terms' magnitude ``sum_j shares |values|``: equal to the
    plain ULP error, up to rounding, when no cancellation happens (all values
    of one sign); smaller when the output is a small difference of large
    terms, where the plain count says nothing about the kernel.  Both are 0.0
    when ``got`` is the exact value, infinite when it is not finite.
    """
    if not math.isfinite(got):
        return math.inf, math.inf
    if is_exact(got, ball, exact):
        return 0.0, 0.0
    if ball.rad() == 0 and ball.mid() == 0:      # the exact value is 0
        rel, size = math.inf, abs(got)
    else:
        err, x = _error(got, ball, exact)
        with working_precision(96):
            rel, size = float(abs(err / x).mid()), float(abs(err).mid())
    if magnitude <= 0:
        return rel, math.inf
    return rel, size / ulp_unit(magnitude, fmt)


def undecided_tie(got: float, rounded: float, ball, dtype) -> bool:
    """True when the exact value may be the midpoint of ``got`` and ``rounded`` (neighbours):
    ``ball`` (not a point) still holds that midpoint, so the rounding was not decided."""
    arb = _arb()
    if ball is None or not (math.isfinite(got) and math.isfinite(rounded)) or got == rounded \
            or ulps_between(got, rounded, dtype) != 1:
        return False
    mid = (Fraction(got) + Fraction(rounded)) / 2
    with working_precision(MAX_PREC):
        return ball.rad() != 0 and ball.contains(arb(fmpq_of(mid)))


def judge(got: float, rounded: float, ball, magnitude: float, fmt: FloatFormat,
          exact: Callable, max_ulps: int, *, at_terms: bool = True,
          lse: bool = False) -> Judgement:
    """One output against the exact value ``rounded`` to ``fmt`` (NaN: the policy's answer is NaN).

    ``ball`` encloses the exact value, ``exact()`` gives it, ``magnitude`` is
    the size of its terms.  Hard (:func:`hard`) before anything is counted;
    else ``ok`` when the ULP count or the count at the terms is within
    ``max_ulps``, ``over`` when neither is; with ``at_terms=False`` (a probe's entry,
    whose terms are all non-negative) the ULP count alone decides.  Where the exact value may be the midpoint
    of two floats (a rotary or soft-capped output no enclosure decided,
    :func:`undecided_tie`), either neighbour counts as the exact rounding
    (``undecided``).  With ``lse`` (a log-sum-exp), an exact ``-inf`` (a row of no key) or
    NaN must be met exactly: ok with 0 ULPs, else hard.

    >>> from flint import arb
    >>> from exactattn.numbers.formats import float_format
    >>> judge(0.5, 0.5, arb(0.5), 0.5, float_format("float32"), lambda: Fraction(1, 2), 4)
    Judgement(status='ok', ulps=0, rel=0.0, terms_ulps=0.0, off_format=False, undecided=False)
    """
    if lse and not math.isfinite(rounded):
        ok = got == rounded or math.isnan(got) and math.isnan(rounded)
        return Judgement("ok", 0) if ok else Judgement("hard")
    if math.isnan(rounded):
        return Judgement("ok" if math.isnan(got) else "hard")
    if hard(got, rounded):
        return Judgement("hard", rel=math.inf if math.isinf(got) else None)
    gf = round_to_format(Fraction(got), fmt) if math.isfinite(got) else got
    if undecided_tie(gf, rounded, ball, fmt):
        return Judgement("ok", 0, 0.0, 0.0, gf != got, undecided=True)
    u = ulps_between(gf, rounded, fmt)
    rel, t = errors(got, ball, magnitude, fmt, exact)
    ok = u <= max_ulps or (at_terms and t <= max_ulps)
    return Judgement("ok" if ok else "over", u, rel, t, gf != got)


def enclosures(balls) -> tuple:
    """``(mid, rad)``: float64 enclosures ``[mid - rad, mid + rad]`` of ``arb`` balls (an object
    array; None or not finite: ``rad`` inf), each holding its ball: the radius (a 30-bit
    magnitude, converted exactly) widened by 2^-40 and by 2^-1074, and the midpoint's
    rounding to float64 added unless it is a float64; a float64 point keeps ``rad`` 0."""
    import numpy as np
    from flint import arb
    flat = balls.reshape(-1).tolist()
    live = [b is not None and b.is_finite() for b in flat]
    mid = np.array([float(b.mid()) if f else 0.0 for b, f in zip(flat, live)])
    rad = np.array([float(b.rad()) if f else math.inf for b, f in zip(flat, live)])
    held = np.array([f and arb(m) == b.mid() for b, f, m in zip(flat, live, mid.tolist())], bool)
    rad = np.where(held & (rad == 0), 0.0, rad * (1 + 2.0 ** -40) + 2.0 ** -1074 +
                   np.where(held, 0.0, np.spacing(np.abs(mid))))
    return mid.reshape(balls.shape), rad.reshape(balls.shape)


def decide(got, mid, rad, magnitudes, fmt: FloatFormat, max_ulps, at_terms: bool = True,
           slack: float = 2.0 ** -30):
    """The verdicts :func:`judge` would give, decided from float64 enclosures ``[mid - rad,
    mid + rad]`` of the exact values (:func:`exactattn.reference.bound.enclose_outputs`).

    ``got``, ``mid``, ``rad``, ``magnitudes``: float64 arrays of one shape.  Returns
    ``(status, rounded, ulps, rel, terms_ulps)``: ``status`` 0 (ok), 1 (over), 2 (hard),
    3 (undecided: left to :func:`judge`) or 4 (ok on the ULP count, but the error is not known
    to 2^-10 of itself: ``rel`` and ``terms_ulps`` are upper bounds), the rest as :func:`judge`
    measures them where decided.  An entry is decided when both ends of its enclosure (rounded outwards) round to
    one float of ``fmt`` (that float is then the exact value correctly rounded), ``got`` is a
    float of ``fmt`` (or NaN/infinity: hard), its error is known to 2^-10 of itself (or the
    ULP count alone passes it: status 4), its magnitude's binade is certain, and the count at the terms is not within 2^-9 of
    ``max_ulps``.  With ``rad`` finite and these margins, :func:`judge` on the exact value
    gives the same status and ULP count (the count is exact; ``rel`` and ``terms_ulps``
    agree to three digits).  ``max_ulps``: an int or an int array of ``got``'s shape; with
    ``at_terms=False`` (a probe's entries) the ULP count alone decides, as in :func:`judge`.
    ``magnitudes`` are known within a factor ``1 +- slack`` (0: exact, as they are where
    ``rad`` is 0).
    """
    import numpy as np
    rounded, same = round_enclosures(mid, rad, fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        ig, g_ok = ulp_indices(got, fmt)
        ir, _ = ulp_indices(np.where(same, rounded, 0.0), fmt)
        ulps = np.abs(ig - ir)
        dist = np.abs(got - mid)
        sigma = rad + 2.0 ** -52 * dist + 2.0 ** -1074
        exact = (rad == 0) & (dist == 0)        # got is the exact value: no error at all
        known = (dist > sigma * 2.0 ** 10) & (np.abs(mid) > rad * 2.0 ** 10) | exact
        slack = np.where(rad == 0, 0.0, slack)      # rad 0: value and magnitude exact
        _, e_lo = np.frexp(magnitudes * (1 - slack))
        _, e_hi = np.frexp(magnitudes * (1 + slack))
        unit = ulp_unit(magnitudes * (1 + slack), fmt)
        positive = magnitudes > 0
        terms = np.where(exact, 0.0, np.where(positive, dist / unit, np.inf))
        rel = np.where(exact, 0.0, dist / np.where(known & ~exact, np.abs(mid), 1.0))
        ok = ulps <= max_ulps
        near = np.abs(terms - max_ulps) <= terms * 2.0 ** -9
        judged = same & g_ok & (e_lo == e_hi) & (ok | (known & ~near) | (not at_terms))
        if at_terms:
            ok |= terms <= max_ulps
        rough = judged & ~known
        # where the error is not known to 2^-10: its upper ends, for the summary's maxima
        rel = np.where(rough, (dist + sigma) / np.maximum(np.abs(mid) - rad, 2.0 ** -1074), rel)
        terms = np.where(rough & positive, (dist + sigma) / unit, terms)
    status = np.where(same & ~np.isfinite(got), 2, np.where(judged, np.where(ok, np.where(known, 0, 4), 1), 3))
    return status, rounded, ulps, rel, terms


# --------------------------------------------------------------------------- many entries
def worst_first(entry) -> tuple:
    """The default order of :attr:`Comparison.worst`: hard failures, then the most ULPs."""
    return (entry.status != "hard", -(entry.ulps or 0))


def failures_first(entry) -> tuple:
    """Hard failures, then entries over the tolerance (largest error at the terms first),
    then the most ULPs: a failing report shows its failures."""
    rank = {"hard": 0, "over": 1}.get(entry.status, 2)
    size = entry.terms_ulps if rank == 1 and entry.terms_ulps is not None else entry.ulps or 0
    return (rank, -size)


@dataclass
class Comparison:
    """Entries judged in ULPs (:func:`judge`), accumulated: the report of many outputs.

    An entry is anything with ``status``, ``ulps``, ``rel`` and ``terms_ulps``
    (a :class:`~exactattn.verify.check.Entry`).  Kept: ``count``, ``over``,
    ``hard``; a ``histogram`` of ULP counts (``{ulps: entries}``); ``max_rel``
    (every entry's) and ``max_terms`` (ULPs at the terms, hard failures left
    out), None until one is measured; from the judgements given with the
    entries, ``off_format`` and ``undecided``; and the ``keep`` worst entries
    in the order ``rank`` gives (:func:`worst_first`; ties: the one added
    first), every entry when ``keep`` is None.  :meth:`merge` folds in another
    comparison as if its entries were added after this one's.  A model check's group
    (:func:`~exactattn.models.check.judge_group`) also sets ``misses`` (entries whose float,
    printed to its ``places`` decimals, differs from the certified decimal), ``decimals``
    (every entry's certified decimal by index, when kept), ``worst_exact`` (the worst
    entry's exact value to 9 significant digits) and ``budget`` (its ULP budget).

    >>> c = Comparison(keep=2)
    >>> for s, u in [("ok", 1), ("over", 9), ("ok", 0), ("hard", None)]:
    ...     _ = c.add(Judgement(s, u))
    >>> [(e.status, e.ulps) for e in c.worst], c.summary()["median_ulps"], c.passed
    ([('hard', None), ('over', 9)], 1, False)
    """

    keep: int | None = 5
    rank: Callable = field(default=worst_first, repr=False)
    count: int = 0
    over: int = 0
    hard: int = 0
    histogram: Counter = field(default_factory=Counter)
    max_rel: float | None = None
    max_terms: float | None = None
    off_format: int = 0
    undecided: int = 0
    misses: int = 0
    decimals: dict | None = None
    worst_exact: str | None = None
    budget: int | None = None
    #: (rank, position, entry): in order added when keep is None, else worst first
    _kept: list = field(default_factory=list, repr=False)
    #: (positions, make) of entries counted by add_many, not built yet (keep None)
    _bulk: list = field(default_factory=list, repr=False)

    def add(self, entry, judgement: Judgement | None = None, position: int | None = None) -> bool:
        """Count one entry (and what its ``judgement`` found); True when it is kept.
        ``position`` orders it among the entries kept (default: the order added)."""
        self.count += 1
        self.over += entry.status == "over"
        self.hard += entry.status == "hard"
        if entry.ulps is not None:
            self.histogram[entry.ulps] += 1
        self.max_rel = _larger(self.max_rel, entry.rel)
        self.max_terms = _larger(self.max_terms, None if entry.status == "hard" else entry.terms_ulps)
        if judgement is not None:
            self.off_format += judgement.off_format
            self.undecided += judgement.undecided
        return self._offer((self.rank(entry), self.count - 1 if position is None else position,
                            entry))

    def add_many(self, positions, ulps, rel, terms, make) -> None:
        """Count entries judged ``ok`` at once (:func:`decide`): ``positions``, ``ulps``,
        ``rel``, ``terms`` arrays of one length (``rel`` and ``terms`` None: not measured);
        ``make(k)`` builds the k-th one's entry, called only for the entries kept (every one
        when ``keep`` is None, on first use)."""
        import numpy as np
        n = len(positions)
        if n == 0:
            return
        self.count += n
        self.histogram.update(dict(zip(*(a.tolist() for a in np.unique(ulps, return_counts=True)))))
        self.max_rel = _larger(self.max_rel, None if rel is None else float(np.max(rel)))
        self.max_terms = _larger(self.max_terms, None if terms is None else float(np.max(terms)))
        if self.keep is None:
            self._bulk.append((positions, make, ulps))
            return
        for k in np.lexsort((positions, -ulps))[:self.keep].tolist():
            e = make(k)
            self._offer((self.rank(e), int(positions[k]), e))

    def _settle(self) -> None:
        """The entries :meth:`add_many` left to build, built and kept in position order."""
        if self._bulk:
            for positions, make, _ in self._bulk:
                for k, p in enumerate(positions.tolist()):
                    e = make(k)
                    self._kept.append((self.rank(e), p, e))
            self._bulk.clear()
            self._kept.sort(key=_position)

    def merge(self, other: "Comparison") -> "Comparison":
        """Fold ``other`` in, its entries counted after this one's; returns the comparison."""
        start = self.count
        other._settle()
        for name in ("count", "over", "hard", "off_format", "undecided", "misses"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.histogram.update(other.histogram)
        self.max_rel = _larger(self.max_rel, other.max_rel)
        self.max_terms = _larger(self.max_terms, other.max_terms)
        for rank, at, e in sorted(other._kept, key=_position):
            self._offer((rank, start + at, e))
        return self

    def _offer(self, item: tuple) -> bool:
        kept = self._kept
        if self.keep is None:
            kept.append(item)
            return True
        if len(kept) >= self.keep and (not kept or not item[:2] < kept[-1][:2]):
            return False
        bisect.insort(kept, item, key=_order)
        del kept[self.keep:]
        return True

    @property
    def worst(self) -> list:
        """The entries kept, worst first."""
        self._settle()
        return [e for _, _, e in (sorted(self._kept, key=_order) if self.keep is None
                                  else self._kept)]

    @property
    def failures(self) -> list:
        """The entries kept that are not ok, in the order added (entries judged ok at once,
        :meth:`add_many`, are not built)."""
        return [e for _, _, e in sorted(self._kept, key=_position) if e.status != "ok"]

    def top(self, k: int) -> list:
        """:attr:`worst`'s first ``k``, building only the entries judged ok at once that can be
        among them (an ok entry ranks by its ULP count alone, under both ranks here)."""
        import numpy as np
        if self.keep is not None or not self._bulk or self.rank not in (worst_first, failures_first):
            return self.worst[:k]
        items = list(self._kept)
        for positions, make, ulps in self._bulk:
            for j in np.lexsort((positions, -ulps))[:k].tolist():
                e = make(j)
                items.append((self.rank(e), int(positions[j]), e))
        return [e for _, _, e in sorted(items, key=_order)[:k]]

    @property
    def kept(self) -> list:
        """The entries kept, in the order they were added (all of them when ``keep`` is None)."""
        self._settle()
        return [e for _, _, e in (self._kept if self.keep is None
                                  else sorted(self._kept, key=_position))]

    @property
    def passed(self) -> bool:
        return self.over == 0 and self.hard == 0

    @property
    def max_ulps(self) -> int | None:
        return max(self.histogram) if self.histogram else None

    def summary(self) -> dict:
        """count, max/mean/median ULPs, max ULPs at the terms, max relative error, over, hard."""
        h, ulps = self.histogram, sorted(self.histogram)
        total = sum(h.values())
        median = ulps[bisect.bisect_right(list(itertools.accumulate(h[u] for u in ulps)),
                                          (total - 1) // 2)] if total else None
        return {"count": self.count, "max_ulps": self.max_ulps,
                "mean_ulps": sum(u * n for u, n in h.items()) / total if total else None,
                "median_ulps": median, "max_terms_ulps": self.max_terms, "max_rel": self.max_rel,
                "over": self.over, "hard": self.hard}


def _larger(a, b):
    return b if a is None else a if b is None else max(a, b)


def _order(item: tuple) -> tuple:
    return item[:2]


def _position(item: tuple) -> int:
    return item[1]
