"""Search with Hypothesis for the input an implementation gets most wrong, and shrink it.

Inputs: L, S, E in 1..max_size, E_v in 1..2, entries k/8 for integers
|k| <= 64 (floats of every dtype, so nothing is rounded).  A first run steers
towards large errors with ``hypothesis.target``; a second run with the same
seed fails on any input scoring at least as much, so Hypothesis shrinks it
(fewer tokens, narrower heads, smaller numbers).  A hard failure (NaN or
infinity where the exact value is finite, or the implementation raising)
scores 2**63.  Write the result as a spec file with
:func:`exactattn.call.spec.problem_text`.

Limits (:mod:`~exactattn.call.limits`): ``max_size`` at most
:data:`~exactattn.call.limits.MAX_SEARCH_SIZE`; the whole search is
estimated first and refused past
:data:`~exactattn.call.limits.MAX_SECONDS`; shrinking stops after
:data:`~exactattn.call.limits.SHRINK_TRIES` tries with the smallest
reproducer found so far (``result.stopped``).

Nothing is written to disk: no example database, and Hypothesis's cache of
the constants it reads from local modules goes to a temporary directory,
removed when the search ends (Hypothesis would write ``.hypothesis/`` into the
current directory).
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

from ..call.policy import Policy
from ..options import check_choice, check_whole
from .check import Report, check_scale, check_sink, verify
from ..numbers.formats import float_format
from .impls import load_impl
from ..call.limits import SHRINK_TRIES, check_search
from ..call.inputs import Call

__all__ = ["HARD_SCORE", "SearchResult", "search"]

#: the score of a hard failure: above any ULP count
HARD_SCORE = float(2 ** 63)


@dataclass
class SearchResult:
    """The worst input a search found, shrunk: the problem, its report, and the score searched on.

    ``stopped`` is True when shrinking was cut off after ``shrink_tries``
    tries (:data:`~exactattn.call.limits.SHRINK_TRIES`): ``call`` is then
    the smallest reproducer found by then.
    """

    call: Call
    report: Report
    score: float
    measure: str
    examples: int
    unshrunk_score: float
    stopped: bool = False
    shrink_tries: int = 0


class _Found(Exception):
    """Raised by the second run on an input scoring at least the best: Hypothesis shrinks it."""


class _Enough(BaseException):
    """Raised once shrinking has had its tries; a BaseException, so Hypothesis lets it through."""


@contextmanager
def _scratch_storage():
    """Point Hypothesis's storage (its constants cache) at a temporary directory for a while."""
    from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
    try:
        before = storage_directory(intent_to_write=False).home_directory
    except TypeError:        # Hypothesis before 6.131: the home directory itself
        before = storage_directory()
    with tempfile.TemporaryDirectory(prefix="exactattn-search-") as scratch:
        set_hypothesis_home_dir(scratch)
        try:
            yield
        finally:
            set_hypothesis_home_dir(before)


def _score(report: Report, measure: str) -> float:
    found = report.found          # the report's one Comparison
    if found.hard:
        return HARD_SCORE
    worst = found.max_ulps if measure == "ulps" else found.max_terms
    return 0.0 if worst is None else float(worst)


def search(impl, dtype: str = "float32", policy: Policy | None = None, *, examples: int = 100,
           seed: int = 0, max_size: int = 4, measure: str = "ulps",
           max_ulps: int | None = None, check=None) -> SearchResult:
    """Search with Hypothesis for the input with the largest error, and shrink it to a small reproducer.

    A first run of ``examples`` inputs steers towards large errors (score:
    the largest ULP error, ``measure="ulps"``, or the largest error at the
    terms' magnitude, ``"terms"``); a second run with the same seed fails on
    any input scoring at least that much, so Hypothesis shrinks it.

    Shrinking stops after :data:`~exactattn.call.limits.SHRINK_TRIES`
    tries (``result.stopped``); nothing is written to disk.

    ``check`` (optional) scores a drawn problem instead of :func:`verify`: a
    function ``problem -> Report`` (the backward search,
    :func:`exactattn.verify.backward.search_backward`, passes its own); ``impl``
    is then used only for its ``name``.

    Raises:
        InputError: a bad ``examples``, ``max_size``, ``seed`` or ``measure``;
            ``max_size`` over :data:`~exactattn.call.limits.MAX_SEARCH_SIZE`,
            or a search estimated to take over
            :data:`~exactattn.call.limits.MAX_SECONDS`; a scale that is 0
            or infinity in ``dtype``.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    check_whole(examples, "examples")
    check_whole(max_size, "max_size")
    check_whole(seed, "seed", low=0)
    check_choice(measure, "measure", ("ulps", "terms"))
    check_search(examples, max_size)
    impl = load_impl(impl) if check is None else impl
    float_format(dtype)
    policy = policy or Policy()
    check_scale(policy, dtype)
    check_sink(policy)
    entry = st.integers(-64, 64).map(lambda k: Fraction(k, 8))

    def matrix(draw, rows, cols):
        return draw(st.lists(st.lists(entry, min_size=cols, max_size=cols),
                             min_size=rows, max_size=rows))

    @st.composite
    def problems(draw):
        L, S, E = (draw(st.integers(1, max_size)) for _ in range(3))
        Ev = draw(st.integers(1, 2))
        return Call(matrix(draw, L, E), matrix(draw, S, E), matrix(draw, S, Ev), policy=policy,
                    name=f"search worst case ({impl.name.split(' ')[0]}, {dtype})")

    cache: dict = {}

    def score(p: Call):
        key = p.key_of()
        if key not in cache:
            r = verify(impl, p, dtype, max_ulps=max_ulps) if check is None else check(p)
            cache[key] = (_score(r, measure), r)
        return cache[key]

    common = dict(database=None, deadline=None, derandomize=False, verbosity=Verbosity.quiet,
                  suppress_health_check=list(HealthCheck), max_examples=examples)
    best = {"score": -1.0, "problem": None}

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target], **common)
    @given(problems())
    def explore(p):
        s = score(p)[0]
        target(s, label=measure)
        if s > best["score"]:
            best.update(score=s, problem=p)

    last: dict = {}
    tries = {"n": 0, "shrinking": False}

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target, Phase.shrink], **common)
    @given(problems())
    def shrink(p):
        if tries["shrinking"]:
            tries["n"] += 1
            if tries["n"] > SHRINK_TRIES:
                raise _Enough()
        s = score(p)[0]
        target(s, label=measure)
        if s >= best["score"]:
            last["problem"] = p
            tries["shrinking"] = True
            raise _Found()

    with _scratch_storage():
        explore()
        try:
            shrink()
        except (_Found, _Enough):
            pass
        except BaseExceptionGroup as group:  # several distinct failures: still ours
            if group.subgroup(_Found) is None or \
                    group.subgroup(lambda e: not isinstance(e, _Found)):
                raise
    final = last.get("problem") or best["problem"]
    s, report = score(final)
    stopped = tries["n"] > SHRINK_TRIES
    return SearchResult(final, report, s, measure, examples, best["score"], stopped,
                        min(tries["n"], SHRINK_TRIES))
