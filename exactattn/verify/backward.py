"""The backward check: an implementation's dQ, dK and dV against the exact gradients, in ULPs.

:func:`verify_backward` rounds the problem and an upstream gradient ``dO``
to the dtype, runs the implementation's backward pass on those floats
(:mod:`~exactattn.verify.backward_impls`), computes the exact gradients of
the same floats (:meth:`Reference.gradients <exactattn.reference.reference.Reference.gradients>`: one block per batch and
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

Every modifier of the call comes along: sinks, ALiBi (each problem head its
model head's slope), windows and query offsets, dropout with the problem's
keep-mask (read by :class:`~exactattn.reference.Reference`), soft-caps and RoPE (their
gradients certified from enclosures: ``dS`` times ``1 - tanh^2(s / cap)``, the
rotations undone).  With ``lse`` the implementation also returns each row's
natural log-sum-exp, and its backward gets an upstream ``dlse`` (``dS_ij += P_ij
dlse_i``).  A backward that returns ``dsink`` too (with a sink) has it judged
(one entry per batch and query head: the sum over its rows).  Gradients of the
wrong shape fail every entry, as a raise does.  For
float32 the exact entries are rounded from the certified float64 enclosures
(:mod:`exactattn.reference.floats`) where those decide them.
:func:`search_backward` is the forward search scored by this check.

>>> from exactattn.call import Call
>>> c = Call([[0], [1]], [[0], [1]], [[1], [3]])
>>> report = verify_backward("numpy", c, dtype="float64", d_out=[[1], [1]])
>>> report.passed, [e.index for e in report.entries][:2]
(True, [('dQ', 0, 0, 0, 0), ('dQ', 0, 0, 1, 0)])
"""

from __future__ import annotations

import functools
import time
from types import SimpleNamespace

import numpy as np

from ..call.policy import Policy
from ..errors import InputError, ShapeError, shorten
from ..options import check_whole
from .adapter import check_dtype, make_call, read_answer
from .backward_impls import load_backward
from .check import Entry, Report, attempt, check_request, judge_entries, tolerance
from .compare import Comparison, failures_first
from ..numbers.formats import FORMATS, float_format
from ..call.inputs import Call, reshaped, rounded_entries
from ..reference.reference import Reference
from ..reference.backward import ExactGradients, d_out_array

__all__ = ["search_backward", "verify_backward"]

#: the gradients a backward check compares, in report order (and ``dsink`` when returned)
GRADS = ("dQ", "dK", "dV")


class BackwardEntry(Entry):
    """One gradient entry compared; ``index`` is ``(gradient, b, h, i, c)``; ``reference``
    holds the :class:`ExactGradients`."""

    @property
    def exact(self):
        """The exact gradient entry as a :class:`~exactattn.numbers.ratio.ExpRatio`."""
        return self.reference.value(*self.index)


def random_d_out(problem: Call, seed: int = 0, lse: bool = False) -> np.ndarray:
    """A standard-normal upstream gradient of the output's shape (numpy ``default_rng(seed +
    1)``), or with ``lse`` of the rows' log-sum-exps (``default_rng(seed + 2)``)."""
    check_whole(seed, "seed", low=0)
    sh = problem.shape
    rng = np.random.default_rng(seed + 1 + lse)
    out = rng.standard_normal((sh["B"], sh["H_q"], sh["L"]) + (() if lse else (sh["E_v"],)))
    keep = problem.rank - lse
    return out.reshape(out.shape[out.ndim - keep:]) if keep < out.ndim else out


def verify_backward(impl, call: Call, dtype: str = "float32", *, d_out=None, seed: int = 0,
                    max_ulps: int | None = None, prec: int = 96, arrays: str = "numpy",
                    lse: str | None = None) -> Report:
    """Run ``impl``'s backward on ``call`` in ``dtype``; compare dQ, dK, dV with the exact ones.

    ``d_out`` (the output's shape) defaults to :func:`random_d_out` of
    ``seed``; it is rounded to the dtype like the inputs (with ``lse="e"``, the rows'
    ``dlse`` too: :func:`random_d_out` with ``lse``, handed after ``d_out``).  Entries are
    :class:`BackwardEntry` (index ``(gradient, b, h, i, c)``), in the order
    dQ, dK, dV; the report's worst put failures first
    (:func:`~exactattn.verify.compare.failures_first`).  The tolerance
    defaults to the forward's rule (:func:`~exactattn.verify.check.tolerance`) with
    ``max(L, S)`` keys: a backward entry adds up one more product and sum of length L or S.

    Raises:
        InputError: an unknown dtype, one the implementation does not run, a
            scale that is 0 or infinity in the dtype, inputs past the limits, a base-2 lse.
        ShapeError: a ``d_out`` of the wrong shape.

    Reference: Dao et al. 2022 (FlashAttention), Algorithm 4, for the backward pass.
    """
    if lse not in (None, "e"):
        raise InputError(f"lse must be 'e' for a backward check (got {lse!r}); a base-2 "
                         "log-sum-exp's gradient carries 1/ln 2: check the natural one")
    impl = load_backward(impl, arrays=arrays)
    check_request(impl, call, dtype, max_ulps, runs=3)
    rounded_problem, moved = call.rounded(dtype)
    dO = rounded_entries(d_out_array(call, random_d_out(call, seed) if d_out is None
                                     else d_out), dtype, "d_out")[0]
    float_call = make_call(rounded_problem, dtype, lse)
    dl = None if lse is None else rounded_entries(
        d_out_array(call, random_d_out(call, seed, lse=True), "d_lse"), dtype, "d_lse")[0]
    grad_in = [g.astype(np.float64).reshape(g.shape[4 - call.rank:]) for g in (dO, dl)
               if g is not None]
    ref = Reference(rounded_problem)      # refuses a non-finite entry a query sees
    exact = ref.gradients(dO, dl)
    t0 = time.perf_counter()
    got, raised = attempt(impl, float_call, *grad_in)
    t1 = time.perf_counter()
    note = (f"upstream gradient dO: {'given' if d_out is not None else f'standard normal, seed {seed}'}"
            f"{'' if dl is None else ' (dlse too)'}, rounded to {dtype}")
    return _report(impl.name, rounded_problem, ref, exact, got, dtype, max_ulps, prec,
                   moved=moved, raised=raised, note=note, impl_seconds=t1 - t0)


def verify_gradients(call: Call, grads, d_out, dtype: str | None = None, *,
                     max_ulps: int | None = None, prec: int = 96, d_lse=None) -> Report:
    """Judge gradients a float backward already returned against the exact dQ, dK, dV of ``call``.

    :func:`verify_backward` without running anything and without rounding:
    the call's entries and ``d_out`` are taken as they are (a float32
    array's entries read as their exact binary values), and every entry is
    judged as :func:`verify_backward` judges it (the same default tolerance).

    Args:
        grads: ``(dq, dk, dv)``, shaped like query, key and value in the call's
            rank: numpy arrays, torch tensors (bfloat16 included) or anything
            ``numpy.asarray`` reads, all of one float dtype; with a sink, ``(dq, dk,
            dv, dsink)`` has dsink judged too (one per batch and query head).
        d_out: the upstream gradient, shaped like the output (read exactly).
        d_lse: None, or the upstream gradient of the rows' natural log-sum-exps.
        dtype: the dtype the entries are judged in; default: the gradients' own.

    Raises:
        InputError: gradients of different dtypes or of a dtype that is not a
            float format, a problem past the limits.
        ShapeError: a ``d_out`` of the wrong shape.

    >>> from exactattn.call import Call
    >>> c = Call([[0], [1]], [[0], [1]], [[1], [3]])   # query 0 sees shares 1/2, 1/2; dO_1 = 0
    >>> r = verify_gradients(c, ([[0.5], [0.0]], [[0.0], [0.0]], [[0.5], [0.5]]), [[1], [0]])
    >>> r.dtype, r.passed, [str(e.exact.exact()) for e in r.entries]
    ('float64', True, ['1/2', '0', '0', '0', '1/2', '1/2'])

    Reference: Dao et al. 2022 (FlashAttention), Algorithm 4, for the backward pass.
    """
    if not isinstance(grads, (tuple, list)) or len(grads) not in (3, 4):
        raise ShapeError(f"grads must be (dq, dk, dv), three arrays (got "
                         f"{shorten(type(grads).__name__)}); pass the three gradients in order")
    answers = [read_answer(g, name) for g, name in zip(grads, GRADS + ("dsink",))]
    dtypes = [a.dtype for a in answers]
    if dtype is None:
        if len(set(dtypes)) != 1:
            raise InputError(f"dQ, dK and dV must be of one dtype (got {', '.join(dtypes)}); "
                             "pass the gradients as the backward returned them")
        dtype = dtypes[0]
    if dtype not in FORMATS:
        raise InputError(f"the gradients must be float64, float32, float16 or bfloat16 arrays "
                         f"(got dtype {shorten(str(dtype))}); pass the backward's own arrays")
    check_request(None, call, dtype, max_ulps, runs=3)
    ref = Reference(call)          # refuses a non-finite entry a query sees
    d_out, d_lse = (read_answer(d, n).values if hasattr(d, "detach") or hasattr(d, "__array__")
                    else d for d, n in ((d_out, "d_out"), (d_lse, "d_lse")))   # exact floats
    exact = ref.gradients(d_out, d_lse)                  # read (and shapes checked) there
    return _report("gradients", call, ref, exact, [a.values for a in answers], dtype,
                   max_ulps, prec, note="upstream gradient dO: given, read exactly")


def _report(name: str, problem: Call, ref: Reference, exact: ExactGradients, got,
            dtype: str, max_ulps: int | None, prec: int, *, moved: int = 0,
            raised: str | None = None, note: str = "", impl_seconds: float = 0.0) -> Report:
    """The report of gradients ``got`` (``(dq, dk, dv)`` float arrays in the problem's rank;
    None when the implementation raised: every entry a hard failure) against ``exact``:
    the one judging loop of :func:`verify_backward` and :func:`verify_gradients`."""
    fmt = float_format(dtype)
    grads = GRADS + (("dsink",) if raised is None and len(got) > 3 and problem.policy.sink
                     is not None else ())
    arrays_got = dict.fromkeys(grads)       # None: every entry a hard failure
    try:
        for k, grad in enumerate(grads if raised is None else ()):
            arrays_got[grad] = reshaped(np.asarray(got[k], dtype=np.float64), exact.shape_of(grad),
                                        problem.rank if k < 3 else 4, f"{name}'s {grad}",
                                        tail=k < 3)
    except ShapeError as e:          # a failure of this case, not a bad input
        arrays_got, raised = dict.fromkeys(grads), f"gradients of the wrong shape ({e})"
    t1 = time.perf_counter()
    tol = tolerance(ref, dtype, max_ulps, max(ref.L, ref.S))   # max(L, S): dK = dS^T Q adds over L
    prec = max(prec, fmt.precision + 64)
    exact_rounded = {grad: exact.rounded(grad, fmt, prec) for grad in grads}
    t2 = time.perf_counter()
    found = Comparison(None, failures_first)
    for grad in grads:
        def entry(idx, r, g, ulps, rel, status, terms=None, grad=grad):
            return BackwardEntry((grad, *idx), r, g, ulps, rel, status, exact, terms)
        judge_entries(arrays_got[grad], exact_rounded[grad],
                      SimpleNamespace(output=functools.partial(exact.value, grad)), fmt, tol,
                      found=found, entry=entry)
    notes = [note] if note else []
    if (problem.policy.softcap, problem.policy.rope) != (None, None):
        notes.append("soft-cap, RoPE: dQ_i = R_i^T scale sum_j dS_ij f_ij R_j k_j and dK "
                     "likewise, f = 1 - tanh^2(s / cap) (1 without a cap), R_p the rotation at "
                     "position p; certified from enclosures")
    if raised is not None:
        notes.append(f"hard failure: {name} raised {raised}; every gradient counts as "
                     "failed")
    if found.off_format:
        notes.append(f"gradients that were not {dtype} values: {found.off_format} of "
                     f"{found.count}; they were rounded to {dtype} before counting ULPs")
    t3 = time.perf_counter()
    return Report(name, dtype, problem.policy, problem, found, tol, moved, ref,
                  {"impl": impl_seconds, "exact": t2 - t1, "compare": t3 - t2}, notes,
                  raised=raised)


def search_backward(impl, dtype: str = "float32", policy: Policy | None = None, *,
                    examples: int = 100, seed: int = 0, max_size: int = 4, measure: str = "ulps",
                    max_ulps: int | None = None, arrays: str = "numpy", **shapes):
    """The input whose dQ, dK or dV ``impl`` gets most wrong, found and shrunk by Hypothesis.

    The forward search (:func:`exactattn.verify.search.search`: its inputs,
    its two runs, its limits, its shapes and scores: ``shapes`` are its
    ``max_batch``, ``max_heads``, ``heads``, ``kv_heads`` and ``masks``) with
    every drawn problem scored by
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
    check_dtype(impl, dtype)
    check = functools.partial(verify_backward, impl, dtype=fmt.name, seed=seed, max_ulps=max_ulps)
    return search(impl, dtype, policy, examples=examples, seed=seed, max_size=max_size,
                  measure=measure, max_ulps=max_ulps, check=check, **shapes)
