"""Search with Hypothesis for the input an implementation gets most wrong, and shrink it.

Inputs: B in 1..max_batch, H_q in 1..max_heads, H_kv a divisor of H_q (the
policy's GQA map, ``interleave`` or ``tile``, says which key/value head each
query head reads; H_kv = H_q for an implementation that cannot be handed
grouped heads), L, S, E in 1..max_size, E_v in 1..2, entries k/8 for integers
|k| <= 64 (floats of every dtype, so nothing is rounded), and, for an
implementation that takes a mask, no mask or a mask of the policy's kind in
one of the broadcast shapes :data:`MASK_FORMS` (handed over in that shape,
:meth:`~exactattn.call.Call.mask_given`).  ``heads`` and ``kv_heads`` fix
H_q and H_kv instead of drawing them.  A single head (B = H_q = H_kv = 1
without a 4-D mask) is drawn as L x E arrays.

A first run steers towards large errors with ``hypothesis.target``; a second
run with the same seed fails on an input that is as bad, so Hypothesis
shrinks it (fewer batches, heads and tokens, narrower heads, no mask or a
smaller one, smaller numbers).  As bad means: a hard failure (NaN or
infinity where the exact value is finite, or the implementation raising;
scored 2**63) when the first run found one; else, when the first run found
an input the check fails, any input it fails (so the shape shrinks to the
smallest failing one, whose error may be smaller than the largest seen);
else an input scoring at least the largest score.  Write the result as a
spec file with :func:`exactattn.call.spec.problem_text`: it holds the
shape, the mask in its shape and the policy (the GQA map too).

Limits (:mod:`~exactattn.call.limits`): ``max_size`` at most
:data:`~exactattn.call.limits.MAX_SEARCH_SIZE`; the whole search is
estimated first and refused past
:data:`~exactattn.call.limits.MAX_SECONDS`; shrinking stops after
:data:`~exactattn.call.limits.SHRINK_TRIES` tries
(:data:`~exactattn.call.limits.PASSING_SHRINK_TRIES` when no drawn input failed) with the
smallest reproducer found so far (``result.stopped``).

Nothing is written to disk: no example database, and Hypothesis's cache of
the constants it reads from local modules goes to a temporary directory,
removed when the search ends (Hypothesis would write ``.hypothesis/`` into the
current directory).
"""

from __future__ import annotations

import math
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

from ..call.policy import Policy
from ..options import check_choice, check_whole
from .check import Report, check_scale, verify
from ..numbers.formats import float_format
from .impls import load_impl
from .probes import PROBES, check_probes
from ..call.limits import PASSING_SHRINK_TRIES, SHRINK_TRIES, check_search
from ..call.inputs import Call, object_array
from ..errors import InputError

#: the score of a hard failure: above any ULP count
HARD_SCORE = float(2 ** 63)
#: the mask shapes a search draws (None: no mask), simplest first, so that shrinking
#: ends at no mask or the plainest shape that still fails: SDPA's broadcastable forms
MASK_FORMS = (None, "L,S", "1,1,L,S", "1,1,1,S", "B,1,1,S", "B,1,L,S", "B,H,L,S")


def mask_form_shape(form: str, B: int, H: int, L: int, S: int) -> tuple:
    """The shape of a mask form of :data:`MASK_FORMS` for B batches, H query heads, L x S.

    >>> mask_form_shape("B,1,1,S", 2, 4, 3, 5), mask_form_shape("L,S", 2, 4, 3, 5)
    ((2, 1, 1, 5), (3, 5))
    """
    sizes = {"B": B, "H": H, "L": L, "S": S, "1": 1}
    return tuple(sizes[d] for d in form.split(","))


@dataclass
class SearchResult:
    """The worst input a search found, shrunk: the problem, its report, and the score searched on.

    ``stopped`` is True when shrinking was cut off after ``shrink_tries``
    tries (:data:`~exactattn.call.limits.SHRINK_TRIES`; ``PASSING_SHRINK_TRIES`` when the goal
    is ``worst``): ``call`` is then
    the smallest reproducer found by then.  ``goal`` says what was shrunk:
    ``hard`` (the smallest hard failure), ``fail`` (the smallest input the
    check fails; ``score`` may be below ``unshrunk_score``, the largest seen)
    or ``worst`` (nothing failed: the smallest input scoring at least the
    largest score).
    """

    call: Call
    report: Report
    score: float
    measure: str
    examples: int
    unshrunk_score: float
    stopped: bool = False
    shrink_tries: int = 0
    goal: str = "worst"


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
           max_ulps: int | None = None, check=None, max_batch: int = 2, max_heads: int = 4,
           heads: int | None = None, kv_heads: int | None = None,
           masks: bool | None = None, probes=PROBES) -> SearchResult:
    """Search with Hypothesis for the input with the largest error, and shrink it to a small reproducer.

    A first run of ``examples`` inputs steers towards large errors (score:
    the largest ULP error, ``measure="ulps"``, or the largest error at the
    terms' magnitude, ``"terms"``); a second run with the same seed fails on
    an input as bad (the module's rule: a hard failure, a failing input, or
    one scoring at least as much), so Hypothesis shrinks it.

    Shapes: B up to ``max_batch``, H_q up to ``max_heads`` (or ``heads``),
    H_kv a divisor of H_q (or ``kv_heads``; H_q when ``impl.takes_gqa`` is
    False), L, S, E up to ``max_size``; a mask of the policy's kind in one of
    :data:`MASK_FORMS` when ``masks`` (default: when ``impl.takes_mask``).

    Shrinking stops after :data:`~exactattn.call.limits.SHRINK_TRIES`
    tries (:data:`~exactattn.call.limits.PASSING_SHRINK_TRIES` when no drawn input failed;
    ``result.stopped``); nothing is written to disk.

    ``check`` (optional) scores a drawn problem instead of :func:`verify`: a
    function ``problem -> Report`` (the backward search,
    :func:`exactattn.verify.backward.search_backward`, passes its own); ``impl``
    is then used only for its ``name``, ``takes_mask`` and ``takes_gqa``.

    ``probes`` are the derived inputs every drawn input also runs
    (:mod:`~exactattn.verify.probes`; ``"none"`` or ``()``: none), as in
    :func:`verify`: an input whose probe fails is a failing input.

    Raises:
        InputError: a bad ``examples``, ``max_size``, ``max_batch``,
            ``max_heads``, ``heads``, ``kv_heads``, ``seed``, ``measure`` or ``probes``;
            a bound over :data:`~exactattn.call.limits.MAX_SEARCH_SIZE`,
            or a search estimated to take over
            :data:`~exactattn.call.limits.MAX_SECONDS`; ``heads`` not a
            multiple of ``kv_heads``; a scale that is 0 or infinity in ``dtype``.

    >>> res = search("numpy", "float64", examples=3, max_size=1, max_batch=1, max_heads=1,
    ...              masks=False)
    >>> res.report.passed, res.call.shape["B"], res.goal, res.call.mask
    (True, 1, 'worst', None)
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    for name, v in (("examples", examples), ("max_size", max_size), ("max_batch", max_batch),
                    ("max_heads", max_heads), ("heads", 1 if heads is None else heads),
                    ("kv_heads", 1 if kv_heads is None else kv_heads)):
        check_whole(v, name)
    check_whole(seed, "seed", low=0)
    check_choice(measure, "measure", ("ulps", "terms"))
    probes = check_probes(probes)
    if kv_heads is not None and heads is None:
        raise InputError(f"kv_heads must come with heads (got kv_heads={kv_heads} alone)")
    if heads is not None and kv_heads is not None and heads % kv_heads:
        raise InputError(f"heads must be a multiple of kv_heads (got {heads} and {kv_heads})")
    impl = load_impl(impl) if check is None else impl
    masks = getattr(impl, "takes_mask", True) if masks is None else bool(masks)
    grouped = getattr(impl, "takes_gqa", True)
    top_heads = max_heads if heads is None else heads
    check_search(examples, max_size, max_batch=max_batch, max_heads=top_heads, masks=masks)
    float_format(dtype)
    policy = policy or Policy()
    check_scale(policy, dtype)
    entry = st.integers(-64, 64).map(lambda k: Fraction(k, 8))
    forms = MASK_FORMS if masks else (None,)

    layouts = [(hq, hkv) for hq in range(1, top_heads + 1) for hkv in range(1, hq + 1)
               if hq % hkv == 0 and (heads is None or hq == heads) and (kv_heads is None or hkv == kv_heads)
               and (grouped or hkv == hq)]
    top = (max_batch, top_heads, max_size)    # every array is drawn at its largest, then cut

    def block(draw, cols):
        shape = top + (cols,)
        flat = draw(st.lists(entry, min_size=math.prod(shape), max_size=math.prod(shape)))
        return object_array(flat, shape)

    @st.composite
    def problems(draw):
        B = draw(st.integers(1, max_batch))
        Hq, Hkv = draw(st.sampled_from(layouts))      # simplest first: shrinks to fewer heads
        L, S, E = (draw(st.integers(1, max_size)) for _ in range(3))
        Ev = draw(st.integers(1, 2))
        form = draw(st.sampled_from(forms))
        # every entry keeps its place when a size shrinks, so Hypothesis can cut batches,
        # heads, tokens and columns one at a time and the rest of the input stays as it was
        q, k, v = (block(draw, cols) for cols in (max_size, max_size, 2))
        mask = None
        if form is not None:
            flags = draw(st.lists(st.booleans(), min_size=math.prod(top) * max_size,
                                  max_size=math.prod(top) * max_size))
            shape = mask_form_shape(form, B, Hq, L, S)
            cut = tuple(slice(0, n) for n in (1,) * (4 - len(shape)) + shape)
            kind = policy.mask_kind        # the drawn flags say which keys are hidden
            mask = object_array([not h for h in flags] if kind == "bool_keep" else flags
                                if kind == "bool_drop" else ["-inf" if h else 0 for h in flags],
                                top + (max_size,))
            mask = mask[cut].reshape(shape)
        q, k, v = q[:B, :Hq, :L, :E], k[:B, :Hkv, :S, :E], v[:B, :Hkv, :S, :Ev]
        if B == Hq == Hkv == 1 and (mask is None or mask.ndim <= 2):   # one head: L x E
            q, k, v = q[0, 0], k[0, 0], v[0, 0]
        return Call(q, k, v, mask, policy=policy,
                    name=f"search worst case ({impl.name.split(' ')[0]}, {dtype})")

    cache: dict = {}

    def score(p: Call):
        key = p.key_of()
        if key not in cache:
            r = verify(impl, p, dtype, max_ulps=max_ulps, probes=probes) if check is None \
                else check(p)
            cache[key] = (_score(r, measure), r)
        return cache[key]

    common = dict(database=None, deadline=None, derandomize=False, verbosity=Verbosity.quiet,
                  suppress_health_check=list(HealthCheck), max_examples=examples)
    best = {"score": -1.0, "problem": None, "failed": False}

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target], **common)
    @given(problems())
    def explore(p):
        s, r = score(p)
        target(s, label=measure)
        best["failed"] = best["failed"] or not r.passed
        if s > best["score"]:
            best.update(score=s, problem=p)

    last: dict = {}
    tries = {"n": 0, "shrinking": False, "limit": SHRINK_TRIES, "goal": "worst"}

    def as_bad(s: float, r) -> bool:
        if tries["goal"] == "hard":
            return s >= HARD_SCORE
        if tries["goal"] == "fail":
            return not r.passed
        return s >= best["score"]

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target, Phase.shrink], **common)
    @given(problems())
    def shrink(p):
        if tries["shrinking"]:
            tries["n"] += 1
            if tries["n"] > tries["limit"]:
                raise _Enough()
        s, r = score(p)
        target(s, label=measure)
        if as_bad(s, r):
            last["problem"] = p
            tries["shrinking"] = True
            raise _Found()

    with _scratch_storage():
        explore()
        tries["goal"] = "hard" if best["score"] >= HARD_SCORE else \
            "fail" if best["failed"] else "worst"
        if tries["goal"] == "worst":
            tries["limit"] = PASSING_SHRINK_TRIES
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
    return SearchResult(final, report, s, measure, examples, best["score"],
                        tries["n"] > tries["limit"], min(tries["n"], tries["limit"]), tries["goal"])
