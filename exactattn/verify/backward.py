"""The backward check: an implementation's dQ, dK and dV against the exact gradients, in ULPs.

:func:`verify_backward` rounds the problem and an upstream gradient ``dO``
to the dtype, runs the implementation's backward pass on those floats
(:mod:`~exactattn.verify.backward_impls`), computes the exact gradients of
the same floats (:mod:`exactattn.gradients`: one block per batch and
key/value head, so grouped query heads add into the dK and dV they share),
rounds each exact entry correctly to the dtype and judges every entry with
the forward check's one comparison (:func:`~exactattn.verify.compare.judge`):
ULPs between the result and the correctly rounded exact value, ULPs at the
size of the terms the entry adds up, relative error; NaN or infinity where
the exact value is finite is a hard failure, and so is an implementation that
raises.

dQ and dK are sums that cancel (every row of dS sums to 0), so a tiny entry
of them is judged by its error at the terms: the plain ULP count of an entry
near 0 says nothing about the kernel.

The call's modifiers that exact gradients take come along: sinks, ALiBi (each
problem head its model head's slope), windows and query offsets, dropout with
the problem's keep-mask (:func:`exactattn.gradients.block_inputs`).  For
float32 the exact entries are rounded from the certified float64 enclosures
(:mod:`exactattn.gradients.floats`) where those decide them.
:func:`search_backward` is the forward search scored by this check.

>>> from exactattn.verify.problem import Problem
>>> p = Problem.from_arrays([[0], [1]], [[0], [1]], [[1], [3]])
>>> report = verify_backward("numpy", p, dtype="float64", d_out=[[1], [1]])
>>> report.passed, [e.index for e in report.entries][:2]
(True, [('dQ', 0, 0, 0, 0), ('dQ', 0, 0, 1, 0)])
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from ..call import Policy
from ..digits import tighten
from ..errors import InputError, ShapeError, shorten
from ..options import check_whole
from .adapter import make_call
from .backward_impls import load_backward
from .check import Entry, Report, check_request
from .compare import judge
from .formats import default_max_ulps, float_format, round_ball
from .problem import Problem
from .reference import Reference

__all__ = ["BackwardEntry", "GRADS", "backward_tolerance", "exact_gradients", "random_d_out",
           "search_backward", "verify_backward"]

#: the gradients a backward check compares, in report order
GRADS = ("dQ", "dK", "dV")


class BackwardEntry(Entry):
    """One gradient entry compared; ``index`` is ``(gradient, b, h, i, c)``; ``reference``
    holds the :class:`ExactGradients`."""

    @property
    def exact(self):
        """The exact gradient entry as a :class:`~exactattn.gradients.GradValue`."""
        return self.reference.value(*self.index)


class ExactGradients:
    """The exact gradients of every head of a problem: one block per (batch, key/value head)."""

    def __init__(self, problem: Problem, policy: Policy, d_out: np.ndarray):
        from ..gradients import Gradients, block_inputs, check_policy
        check_policy(policy)
        sh = problem.shape
        self.shape = sh
        self.policy = policy
        d2 = policy.divisor_squared_for(sh["E"])
        L, S = sh["L"], sh["S"]
        self.heads = {g: [h for h in range(sh["H_q"]) if policy.kv_head(h, sh["H_q"],
                                                                         sh["H_kv"]) == g]
                      for g in range(sh["H_kv"])}
        self.blocks = {}
        for b in range(sh["B"]):
            for g, hs in self.heads.items():
                queries, dO, keep, offsets, factors = [], [], [], [], []
                for h in hs:       # problem head h is model head policy.head + h (ALiBi)
                    hp = policy if policy.alibi is None else policy.replace(head=policy.head + h)
                    drop = None if problem.dropout_keep is None else problem.dropout_keep[b, h]
                    block = block_inputs(hp, L, S, problem.block_mask(b, h), drop)
                    queries += problem.query[b, h].tolist()
                    dO += d_out[b, h].tolist()
                    keep.append(block["keep"])
                    offsets += block["offsets"] or [None] * L
                    factors += block["factors"] or [[1] * S] * L
                self.blocks[(b, g)] = Gradients(
                    queries, problem.key[b, g].tolist(), problem.value[b, g].tolist(), dO,
                    keep=np.concatenate(keep), offsets=offsets, divisor_squared=d2,
                    empty_row=policy.empty_row, sink=policy.sink,
                    factors=None if problem.dropout_keep is None else factors)

    def locate(self, name: str, b: int, h: int, i: int, c: int):
        """(block, row, column) of one entry (h is the query head for dQ, else the kv head)."""
        if name == "dQ":
            g = self.policy.kv_head(h, self.shape["H_q"], self.shape["H_kv"])
            return self.blocks[(b, g)], self.heads[g].index(h) * self.shape["L"] + i, c
        return self.blocks[(b, h)], i, c

    def value(self, name: str, b: int, h: int, i: int, c: int):
        block, row, col = self.locate(name, b, h, i, c)
        return block.value(name, row, col)

    def shape_of(self, name: str) -> tuple:
        sh = self.shape
        return {"dQ": (sh["B"], sh["H_q"], sh["L"], sh["E"]),
                "dK": (sh["B"], sh["H_kv"], sh["S"], sh["E"]),
                "dV": (sh["B"], sh["H_kv"], sh["S"], sh["E_v"])}[name]

    def rounded(self, name: str, dtype, prec: int):
        """``(floats, balls, magnitudes)`` of one gradient, correctly rounded to ``dtype``.

        Whole blocks are enclosed at ``prec`` bits, then at twice that
        (:func:`~exactattn.digits.tighten`); what is left (exact zeros, ties,
        stragglers) is rounded entry by entry from its exact value
        (:meth:`Reference.round_exact <exactattn.verify.reference.Reference.round_exact>`).
        """
        fmt = float_format(dtype)
        shape = self.shape_of(name)
        rounded = np.empty(shape)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b, h in np.ndindex(*shape[:2]):
            block, start, _ = self.locate(name, b, h, 0, 0)
            mags[b, h] = block.magnitudes()[name][start:start + shape[2]]
            todo = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
            if fmt.name == "float32":
                todo = self._from_floats(block, name, start, shape, (b, h), rounded, balls)
            if not todo:
                continue

            def attempt(p):
                nonlocal todo
                mat = block.balls(p)[name]
                left = []
                for i, c in todo:
                    if block.atom_nan((name, start + i, c)):
                        rounded[b, h, i, c] = math.nan
                        continue
                    f = round_ball(mat[start + i, c], fmt, p)
                    if f is None:
                        left.append((i, c))
                        continue
                    rounded[b, h, i, c], balls[b, h, i, c] = f, mat[start + i, c]
                todo = left
                return True if not todo else None
            tighten(attempt, prec, max_prec=2 * prec)
            for i, c in todo:      # exact zeros, ties and stragglers, one by one
                f, ball = Reference.round_exact(block.value(name, start + i, c), fmt, 4 * prec)
                rounded[b, h, i, c], balls[b, h, i, c] = f, ball
        return rounded, balls, mags


    @staticmethod
    def _from_floats(block, name, start, shape, at, rounded, balls) -> list:
        """Round to float32 from the certified float64 enclosures
        (:mod:`exactattn.gradients.floats`): an entry whose two ends (pushed one float64
        outwards) round to one float32 is that float32 (rounding is monotonic); returns the
        entries left (ends that differ, zeros of uncertain sign, NaN rows)."""
        from flint import arb
        got = block.enclosures()
        cells = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
        if got is None:
            return cells
        m, r = (a[start:start + shape[2]] for a in got[name])
        with np.errstate(all="ignore"):
            lo = np.nextafter(np.nextafter(m - r, -np.inf), -np.inf)
            hi = np.nextafter(np.nextafter(m + r, np.inf), np.inf)
            f_lo, f_hi = lo.astype(np.float32), hi.astype(np.float32)
        ok = (f_lo == f_hi) & np.isfinite(f_lo) & (np.signbit(f_lo) == np.signbit(f_hi))
        rows = np.array([block.atom_nan((name, start + i, 0)) for i in range(shape[2])])
        ok &= ~rows[:, None]
        left = []
        for i, c in cells:
            if ok[i, c]:
                rounded[at + (i, c)] = float(f_lo[i, c])
                balls[at + (i, c)] = arb(float(m[i, c]), float(r[i, c]))
            else:
                left.append((i, c))
        return left


def exact_gradients(problem: Problem, policy: Policy | None, d_out) -> ExactGradients:
    """The exact dQ, dK, dV of a problem given ``d_out`` (B x H_q x L x E_v, or the problem's rank)."""
    return ExactGradients(problem, problem.policy_for(policy), _d_out_array(problem, d_out))


def _d_out_array(problem: Problem, d_out) -> np.ndarray:
    from ..exact import to_exact
    sh = problem.shape
    want = (sh["B"], sh["H_q"], sh["L"], sh["E_v"])
    arr = np.array(d_out, dtype=object)
    if arr.size != math.prod(want) or arr.shape[-2:] != want[-2:]:
        raise ShapeError(f"d_out must be {' x '.join(map(str, want[4 - problem.rank:]))} like "
                         f"the output (got {' x '.join(map(str, arr.shape))})")
    flat = [to_exact(v.item() if isinstance(v, np.generic) else v, name="d_out", floats="exact")
            for v in arr.reshape(-1)]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(want)


def random_d_out(problem: Problem, seed: int = 0) -> np.ndarray:
    """A standard-normal upstream gradient of the output's shape (numpy ``default_rng(seed)``)."""
    check_whole(seed, "seed", low=0)
    sh = problem.shape
    rng = np.random.default_rng(seed + 1)
    out = rng.standard_normal((sh["B"], sh["H_q"], sh["L"], sh["E_v"]))
    return out.reshape(out.shape[4 - problem.rank:]) if problem.rank < 4 else out


def backward_tolerance(dtype: str, problem: Problem, max_score: float) -> int:
    """The default tolerance: the forward's (:func:`default_max_ulps`) with ``max(L, S)`` keys.

    A backward entry adds up one more product and sum of length L or S than an
    output does (``dK = dS^T Q`` runs over the queries), and nothing else.
    """
    sh = problem.shape
    return default_max_ulps(dtype, max(sh["L"], sh["S"]), sh["E"], max_score)


def _round_d_out(d_out: np.ndarray, dtype: str) -> np.ndarray:
    """``d_out`` rounded to ``dtype`` (its exact values).

    Raises:
        InputError: an entry overflows the dtype.
    """
    from .formats import round_to_format
    fmt = float_format(dtype)
    flat = []
    for v in d_out.reshape(-1):
        f = round_to_format(v, fmt)
        if math.isinf(f):
            raise InputError(f"d_out must fit in {fmt.name} (got {shorten(str(v))}, which "
                             "overflows)")
        flat.append(Fraction(f))
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(d_out.shape)


def verify_backward(impl, problem: Problem, policy: Policy | None = None,
                    dtype: str = "float32", *, d_out=None, seed: int = 0,
                    max_ulps: int | None = None, prec: int = 96, arrays: str = "numpy") -> Report:
    """Run ``impl``'s backward on ``problem`` in ``dtype``; compare dQ, dK, dV with the exact ones.

    ``d_out`` (the output's shape) defaults to :func:`random_d_out` of
    ``seed``; it is rounded to the dtype like the inputs.  Entries are
    :class:`BackwardEntry` (index ``(gradient, b, h, i, c)``), in the order
    dQ, dK, dV.  The tolerance defaults to :func:`backward_tolerance`.

    Raises:
        InputError: an unknown dtype, one the implementation does not run, a
            scale that is 0 or infinity in the dtype, inputs past the limits.
        ShapeError: gradients of the wrong shape, a ``d_out`` of the wrong shape.

    Reference: Dao et al. 2022 (FlashAttention), Algorithm 4, for the backward pass.
    """
    from ..gradients import check_policy
    impl = load_backward(impl, arrays=arrays)
    fmt, policy = check_request(impl, problem, check_policy(policy or Policy()), dtype, max_ulps,
                                runs=3)
    rounded_problem, moved = problem.rounded(dtype)
    dO = _round_d_out(_d_out_array(problem, random_d_out(problem, seed) if d_out is None
                                   else d_out), dtype)
    call = make_call(rounded_problem, policy, dtype)
    grad_in = dO.astype(np.float64)
    grad_in = grad_in.reshape(grad_in.shape[4 - problem.rank:])
    ref = Reference(rounded_problem, policy)      # refuses a non-finite entry a query sees
    exact = ExactGradients(ref.exact_problem, policy, dO)
    shapes = {name: exact.shape_of(name) for name in GRADS}
    t0 = time.perf_counter()
    raised = None
    try:
        got = impl(call, grad_in)
    except Exception as e:         # ImplRaised, or any failure of the backward under test
        from .adapter import ImplRaised
        if not isinstance(e, ImplRaised):
            raise
        got, raised = None, e.line
    t1 = time.perf_counter()
    arrays_got = {}
    for k, name in enumerate(GRADS):
        if raised is not None:
            arrays_got[name] = np.full(shapes[name], math.nan)
            continue
        a = np.asarray(got[k], dtype=np.float64)
        want = shapes[name]
        if a.size != math.prod(want) or a.shape[-2:] != want[-2:]:
            raise ShapeError(f"{impl.name}'s {name} must be "
                             f"{' x '.join(map(str, want[4 - problem.rank:]))} "
                             f"(got {' x '.join(map(str, a.shape))})")
        arrays_got[name] = a.reshape(want)
    tol = backward_tolerance(dtype, rounded_problem, ref.max_abs_exponent()) \
        if max_ulps is None else max_ulps
    prec = max(prec, fmt.precision + 64)
    exact_rounded = {name: exact.rounded(name, fmt, prec) for name in GRADS}
    t2 = time.perf_counter()
    entries, off_format = [], 0
    for name in GRADS:
        rounded, balls, mags = exact_rounded[name]
        for idx in np.ndindex(*shapes[name]):
            g, r = float(arrays_got[name][idx]), float(rounded[idx])
            index = (name, *idx)
            if raised is not None:
                entries.append(BackwardEntry(index, r, g, None, None, "hard", exact))
                continue
            j = judge(g, r, balls[idx], float(mags[idx]), fmt,
                      lambda idx=idx, name=name: exact.value(name, *idx), tol)
            off_format += j.off_format
            entries.append(BackwardEntry(index, r, g, j.ulps, j.rel, j.status, exact,
                                         j.terms_ulps))
    notes = [f"upstream gradient dO: {'given' if d_out is not None else f'standard normal, seed {seed}'}"
             f", rounded to {dtype}"]
    if raised is not None:
        notes.append(f"hard failure: {impl.name} raised {raised}; every gradient counts as "
                     "failed")
    if off_format:
        notes.append(f"gradients that were not {dtype} values: {off_format} of {len(entries)}; "
                     f"they were rounded to {dtype} before counting ULPs")
    t3 = time.perf_counter()
    return Report(impl.name, dtype, policy, rounded_problem, entries, tol, moved, ref,
                  {"impl": t1 - t0, "exact": t2 - t1, "compare": t3 - t2}, notes, raised=raised)


def search_backward(impl, dtype: str = "float32", policy: Policy | None = None, *,
                    examples: int = 100, seed: int = 0, max_size: int = 4, measure: str = "ulps",
                    max_ulps: int | None = None, arrays: str = "numpy"):
    """The input whose dQ, dK or dV ``impl`` gets most wrong, found and shrunk by Hypothesis.

    The forward search (:func:`exactattn.verify.search.search`: its inputs,
    its two runs, its limits and scores) with every drawn problem scored by
    :func:`verify_backward` instead of the forward check; the upstream gradient
    of a problem is :func:`random_d_out` of ``seed`` (so the shrunk reproducer
    runs again with ``--spec FILE --backward --seed SEED``).  Returns a
    :class:`~exactattn.verify.search.SearchResult` whose report is a backward report.

    Raises:
        InputError: as :func:`~exactattn.verify.search.search` and :func:`verify_backward`.
    """
    from .search import search
    impl = load_backward(impl, arrays=arrays)
    fmt = float_format(dtype)
    if dtype not in impl.dtypes:
        raise InputError(f"dtype must be one of {', '.join(impl.dtypes)} for {impl.name} "
                         f"(got {dtype!r}){impl.dtype_hint(dtype)}")
    from ..gradients import check_policy
    check_policy(policy or Policy())

    def check(problem: Problem) -> Report:
        return verify_backward(impl, problem, policy, fmt.name, seed=seed, max_ulps=max_ulps)
    return search(impl, dtype, policy, examples=examples, seed=seed, max_size=max_size,
                  measure=measure, max_ulps=max_ulps, check=check)
