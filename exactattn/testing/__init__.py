"""Test helpers: attention kernels' outputs against the exact answer, published tables in CI.

:func:`assert_attention_close` is the assertion for a kernel's test suite,
in place of "compare to a float32 reference within a fudge factor": it takes
the output a test already has and SDPA's own arguments, computes the exact
answer of exactly those inputs and fails unless every output is within the
tolerance of ``exactattn verify``, in ULPs of the output's dtype, with the
worst entries in the message.  :func:`assert_attention_grads_close` does the
same for dQ, dK and dV::

    # test_my_kernel.py
    from exactattn.testing import assert_attention_close

    def test_my_kernel_bfloat16():
        q, k, v = (torch.randn(2, 4, 64, 32, dtype=torch.bfloat16) for _ in range(3))
        assert_attention_close(my_attention(q, k, v, is_causal=True), q, k, v, is_causal=True)

:func:`assert_typed_equal` is the equality the test suite means by "exact":
equal values of the same type at every level (``Fraction(1)``, ``1``,
``1.0`` and ``True`` are all told apart), with the path to the first
difference in the message.

:func:`assert_table` audits every table of a page (Markdown, CSV, LaTeX,
JSON or HTML) against what it is computed from and fails with the cell-by-cell
report when a printed digit is not the right one::

    # test_tables.py in a course repository
    from exactattn.testing import assert_table

    def test_lesson_3_tables():
        assert_table("lessons/3-attention.md", spec="lessons/3-head.json")

>>> import tempfile, os
>>> page = "Scores\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0 | 0 |\\n\\n" \\
...        "Shares\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0.5 | 0.3 |\\n"
>>> with tempfile.TemporaryDirectory() as d:
...     path = os.path.join(d, "page.md")
...     _ = open(path, "w").write(page)
...     assert_table(path)
Traceback (most recent call last):
...
AssertionError: page.md: 1 of 2 cells not right (1 wrong)
...
q1   k2      shares[1][2]  0.3      wrong    0.5 ...
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..options import check_whole
from ..verify.identify import identify

if TYPE_CHECKING:
    from ..audit import Audit

__all__ = ["assert_attention_close", "assert_attention_grads_close", "assert_table",
           "assert_typed_equal", "identify"]


def assert_attention_close(actual, query, key, value, *, attn_mask=None, dropout_p=0.0,
                           is_causal: bool = False, scale=None, enable_gqa: bool = False,
                           max_ulps: int | None = None, worst: int = 5, score_mod=None,
                           mask_mod=None, accumulation: str = "float32", invariance=None,
                           **policy):
    """Raise ``AssertionError`` unless ``actual`` is the attention of ``query``, ``key``,
    ``value`` within the tolerance, in ULPs of ``actual``'s dtype; else return the report.

    With ``score_mod`` or ``mask_mod`` (FlexAttention's: ``score_mod(score, b, h, q_idx,
    kv_idx)``, ``mask_mod(b, h, q_idx, kv_idx) -> bool``, callables or ``module:function``
    text), pass ``actual=None``: torch's ``flex_attention`` runs your functions on the inputs,
    in the query's dtype, and its outputs are judged against the exact answer of the policy
    the other keywords describe (``softcap="30"`` for a soft-capping score_mod), as ``exactattn
    verify --impl flex --score-mod`` does, probes included.

    The arguments are those of ``torch.nn.functional.scaled_dot_product_attention``
    (read by :meth:`Call.from_sdpa <exactattn.call.inputs.Call.from_sdpa>`):
    query L x E, H_q x L x E or B x H_q x L x E; key and value ... x S x E and
    ... x S x E_v; ``actual`` ... x H_q x L x E_v.  Numpy arrays, torch tensors
    (bfloat16 included) or anything ``numpy.asarray`` reads (jax arrays; a
    list of Python floats is float64, so its output is judged in float64).  The
    inputs are the exact inputs: a float's entries are its exact binary value,
    never rounded, so inputs of another dtype than ``actual`` are fine.

    * ``attn_mask``: booleans (True = attend) or additive numbers (``-inf`` hides),
      broadcastable to B x H_q x L x S; ``is_causal``: top-left, as SDPA.
    * ``dropout_p``: 0 only (SDPA's keep-mask is random); a dropout is
      ``dropout="1/10"`` with the kernel's keep-mask ``dropout_keep``.
    * ``scale``: None for ``1/sqrt(E)`` exactly; a float is the exact value of
      that float (what the kernel was handed).
    * ``enable_gqa``: query head h reads key/value head ``h // (H_q / H_kv)``.
    * ``policy``: modifiers by their :class:`~exactattn.call.policy.Policy`
      names (``softcap``, ``sink``, ``window``, ``alibi``, ``rope``,
      ``query_offset``, ``alignment``, ``empty_row``, ``gqa``, ``dropout`` with
      ``dropout_keep``, ``head``: :data:`~exactattn.call.inputs.SDPA_POLICY_KEYS`),
      exact numbers (``softcap="30"``, ``sink=0``).
    * ``accumulation``: what the kernel accumulates in (``float32``, the default, or
      ``float16``/``bfloat16``/``float64``).  By default each output's tolerance is the
      proved error of a correct kernel of ``actual``'s dtype accumulating in it
      (:func:`~exactattn.verify.check.proved_tolerance`: products, sums, ``exp`` and the
      division rounded there, online softmax or a split-KV merge allowed, the weights
      rounded to the dtype before they meet the values), in ULPs at the size of the terms
      the output adds up; with RoPE, ALiBi or dropout it is
      :func:`~exactattn.numbers.formats.default_max_ulps`.
    * ``max_ulps``: a tolerance of your own instead: an output passes when its ULP count
      from the exact value correctly rounded to the dtype, or its error in ULPs at the
      size of the terms, is within it.  NaN or infinity where the exact value is finite
      always fails.
    * ``worst``: how many failing entries the message shows.
    * ``invariance``: the kernel (a function in SDPA's convention, or a name ``exactattn
      verify --impl`` takes): it is rerun on the same rows inside other batches, with padded
      keys and queries and, when it takes ``num_splits``, with 1, 2 and 4 splits
      (:func:`~exactattn.verify.invariance.check_invariance`), and the assertion fails unless
      every run's outputs are bitwise those of the first and within the tolerance.

    The judge is :func:`exactattn.verify.check.verify_outputs` (that of
    ``exactattn verify``).  Reference: Vaswani et al. 2017, sec. 3.2.1.

    Returns:
        The :class:`~exactattn.verify.check.Report` (``.entries``, ``.summary()``).

    Raises:
        AssertionError: an output outside the tolerance.  The message: one
            line (k of N outputs outside the tolerance, the rule), then the
            worst entries: index in ``actual``, the exact value certified, the
            exact value correctly rounded to the dtype, the value got, ULPs,
            ULPs at the terms, status.
        InputError: a keyword that is not one of the above (named), bad shapes or
            entries, ``actual`` of a dtype that is not float64, float32, float16 or
            bfloat16; one line.

    >>> import numpy as np
    >>> q, k, v = np.zeros((2, 1)), np.zeros((2, 1)), np.array([[1.0], [3.0]])
    >>> assert_attention_close(np.float32([[2], [2]]), q, k, v).summary()["max_ulps"]
    0
    >>> assert_attention_close(np.float32([[1], [3]]), q, k, v, is_causal=True)  # row 1: (1 + 3)/2
    Traceback (most recent call last):
    ...
    AssertionError: actual: 1 of 2 outputs outside the tolerance in float32 (tolerance per output, ...
    ...
    [1, 0]  2.0000000000e+00   2                 3       4194304  4194304.00  0.5         over
    ...
    """
    __tracebackhide__ = True      # pytest shows the message, not this frame
    from ..call import Call
    from ..call.inputs import sdpa_floats
    from ..present.stream import progress
    from ..verify.adapter import read_answer
    from ..verify.check import verify, verify_outputs
    check_whole(worst, "worst", low=1)
    sdpa = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa, **policy)
    if score_mod is not None or mask_mod is not None:     # torch's flex_attention runs them
        from ..verify.impls import FlexImpl
        call = Call.from_sdpa(query, key, value, **sdpa)
        if actual is not None:
            raise InputError("actual must be None with score_mod or mask_mod (got an output); "
                             "FlexAttention computes the output from your functions")
        report = verify(FlexImpl(score_mod=score_mod, mask_mod=mask_mod), call,
                        read_answer(query, "query").dtype, max_ulps=max_ulps,
                        accumulation=accumulation)
    elif actual is None:
        Call.from_sdpa(query, key, value, **sdpa)      # bad inputs are named first
        raise InputError("actual must be the kernel's output (got None); pass the output, or "
                         "score_mod=/mask_mod= to run them in FlexAttention")
    else:
        report = verify_outputs(lambda: Call.from_sdpa(query, key, value, **sdpa), actual,
                                floats=sdpa_floats(query, key, value, **sdpa),
                                max_ulps=max_ulps, name="actual", accumulation=accumulation,
                                each=lambda heads, n:
                                progress(heads, n, "exactattn: heads judged", "head"))
    if not report.passed:
        raise AssertionError(_failure_text(report, "outputs", worst))
    if invariance is not None:
        from ..verify.invariance import check_invariance
        inv = check_invariance(invariance, Call.from_sdpa(query, key, value, **sdpa), report.dtype,
                               max_ulps=max_ulps, accumulation=accumulation,
                               arrays="torch" if hasattr(query, "detach") else "numpy")
        if not inv.passed:
            raise AssertionError(f"{inv.impl}: {inv.verdict()}; " + "; ".join(
                f"{r.label}: {'NaN' if r.ulps is None else r.ulps} ULPs from the first run"
                for r in inv.done if not r.same or not r.report.passed))
    return report


def assert_attention_grads_close(actual_grads, query, key, value, grad_out, *, attn_mask=None,
                                 dropout_p=0.0, is_causal: bool = False, scale=None,
                                 enable_gqa: bool = False, max_ulps: int | None = None, worst: int = 5,
                                 grad_lse=None, **policy):
    """Raise ``AssertionError`` unless ``actual_grads = (dq, dk, dv)`` are the gradients of
    the attention of ``query``, ``key``, ``value`` against the upstream gradient ``grad_out``,
    within the tolerance in ULPs of their dtype; else return the report.

    ``dq`` is shaped like ``query``, ``dk`` like ``key``, ``dv`` like ``value``,
    ``grad_out`` like the output (... x H_q x L x E_v), all read exactly;
    the three gradients must be of one dtype (that of the backward pass:
    ``q.grad``, ``k.grad``, ``v.grad`` after ``out.backward(grad_out)``); with a
    ``sink``, ``(dq, dk, dv, dsink)`` has dsink judged too (one per batch and query
    head); ``grad_lse`` (... x H_q x L) is the upstream gradient of the rows' natural
    log-sum-exps when the forward returned them.  Every other argument is
    :func:`assert_attention_close`'s (soft-caps and RoPE included: their gradients
    are certified from enclosures).  The tolerance defaults
    to the forward's rule (:func:`~exactattn.verify.check.default_tolerance`) with
    ``max(L, S)`` keys; grouped query heads add into the dK and dV they share.
    The judge is :func:`exactattn.verify.backward.verify_gradients`.
    Reference: Dao et al. 2022 (FlashAttention), Algorithm 4.

    Returns:
        The :class:`~exactattn.verify.check.Report`; entries indexed
        ``(gradient, b, h, i, c)``.

    Raises:
        AssertionError: a gradient entry outside the tolerance; the message as
            :func:`assert_attention_close`'s, each index naming its gradient
            (``dV[1, 0]``).
        InputError: as :func:`assert_attention_close`.

    >>> import numpy as np
    >>> q, k, v = np.zeros((2, 1)), np.zeros((2, 1)), np.array([[1.0], [3.0]])
    >>> grads = (np.zeros((2, 1)), np.zeros((2, 1)), np.full((2, 1), 0.5))   # dV = P^T dO
    >>> assert_attention_grads_close(grads, q, k, v, [[1.0], [0.0]]).passed
    True
    """
    __tracebackhide__ = True
    from ..call import Call
    from ..call.inputs import rectangular
    from ..verify.backward import verify_gradients
    check_whole(worst, "worst", low=1)
    if not hasattr(grad_out, "detach"):
        rectangular(grad_out, "grad_out")          # a ragged list, named
    call = Call.from_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa, **policy)
    report = verify_gradients(call, actual_grads, grad_out, max_ulps=max_ulps, d_lse=grad_lse)
    if not report.passed:
        raise AssertionError(_failure_text(report, "gradient entries", worst))
    return report


def _failure_text(report, what: str, worst: int) -> str:
    """The message of a failed assertion: the summary line, then the worst entries' table."""
    from ..present.render import render
    from .report import failure_section, failure_summary
    return failure_summary(report, what) + "\n\n" + render([failure_section(report, worst)])


def assert_table(path: str | Path, spec=None, quantity=None, **options) -> Audit:
    """Audit the tables of the file at ``path``; raise ``AssertionError`` unless every printed
    number is right.

    ``spec`` (a head spec file) or ``example=`` (a built-in example) is what
    the tables are computed from; with neither, the file's table of printed
    scores (``scores=N``, ``divisor=``).  ``quantity`` is what the tables
    print (one, or one per audited table; default: read from their titles).
    Other options: those of :func:`exactattn.audit.audit` (``which``,
    ``rows``, ``no_scale``, ``ties``, ``fmt``).

    Returns the :class:`~exactattn.audit.Audit` when every cell is right.

    Raises:
        AssertionError: a cell is not right; the message is the report of the
            cells that are not (row, column, printed, verdict, right value,
            exact value) and the count per verdict.
        InputError: the file or the spec cannot be read, or no table can be judged.
    """
    __tracebackhide__ = True      # pytest shows the report, not this frame
    from ..audit import audit
    from ..audit.report import report_text, summary_line
    result = audit(path, spec=spec, quantity=quantity, **options)
    if not result.clean:
        line = summary_line(result).replace("audit: ", "", 1)
        raise AssertionError(f"{Path(path).name}: {line}\n\n"
                             + report_text(result, only_not_right=True))
    return result


def assert_typed_equal(actual, expected, *, ordered: bool = False) -> None:
    """Raise ``AssertionError`` unless ``actual`` equals ``expected`` with the same type at
    every level.

    Lists, tuples and dicts are compared element by element: the same container
    type, the same length (or the same keys, each key of the same type), then
    every element, recursively.  ``ordered=True`` also asks for the keys of
    every dict in the same order.  Numpy arrays need the same dtype and shape
    and equal elements (an object array's elements typed-equal, one by one).
    Any other value is a leaf: ``type(a) is type(b) and a == b``, where a NaN
    float equals a NaN float of the same type.

    >>> from fractions import Fraction
    >>> assert_typed_equal({"a": [Fraction(1, 2), 3]}, {"a": [Fraction(1, 2), 3]})
    >>> assert_typed_equal([1, (Fraction(1, 2),)], [1, (0.5,)])
    Traceback (most recent call last):
    ...
    AssertionError: at [1][0]: Fraction(1, 2) (Fraction) != 0.5 (float)

    Raises:
        AssertionError: the message names the path of the first difference
            (``at [1]['k']: ...``) and both sides there, with their types.
    """
    __tracebackhide__ = True      # pytest shows the message, not the recursion
    difference = _first_difference(actual, expected, "", ordered)
    if difference is not None:
        raise AssertionError(difference)


def _show(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def _at(path: str, what: str) -> str:
    return f"at {path}: {what}" if path else what


def _first_difference(a, b, path: str, ordered: bool) -> str | None:
    """The message for the first place ``a`` and ``b`` differ, or None."""
    if type(a) is not type(b):
        return _at(path, f"{_show(a)} != {_show(b)}")
    if isinstance(b, dict):
        return _dict_difference(a, b, path, ordered)
    if isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return _at(path, f"{type(a).__name__} of length {len(a)} != "
                             f"{type(b).__name__} of length {len(b)}")
        return _first(((x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))), ordered)
    if isinstance(b, np.ndarray):
        return _array_difference(a, b, path, ordered)
    if isinstance(a, (float, np.floating)) and math.isnan(a) and math.isnan(b):
        return None     # a NaN float equals a NaN float of its own type
    if not a == b:
        return _at(path, f"{_show(a)} != {_show(b)}")
    return None


def _dict_difference(a: dict, b: dict, path: str, ordered: bool) -> str | None:
    if a.keys() != b.keys():
        missing = [k for k in b if k not in a]
        extra = [k for k in a if k not in b]
        parts = ([f"missing keys {missing!r}"] if missing else []) \
            + ([f"unexpected keys {extra!r}"] if extra else [])
        return _at(path, "dict keys differ: " + ", ".join(parts))
    if ordered and list(a) != list(b):
        return _at(path, f"dict keys in order {list(a)!r} != {list(b)!r}")
    keys_of_a = {k: k for k in a}           # each key as ``a`` has it (1 == 1.0 == True)
    for k, v in b.items():
        if type(keys_of_a[k]) is not type(k):
            return _at(path, f"key {_show(keys_of_a[k])} != key {_show(k)}")
        found = _first_difference(a[k], v, f"{path}[{k!r}]", ordered)
        if found is not None:
            return found
    return None


def _array_difference(a: np.ndarray, b: np.ndarray, path: str, ordered: bool) -> str | None:
    if a.dtype != b.dtype:
        return _at(path, f"array of dtype {a.dtype} != array of dtype {b.dtype}")
    if a.shape != b.shape:
        return _at(path, f"array of shape {a.shape} != array of shape {b.shape}")
    if a.dtype != object and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        return None                 # the quick answer; element by element finds the place
    return _first(((a[i], b[i], f"{path}[{', '.join(map(str, i))}]" if i else path)
                   for i in np.ndindex(a.shape)), ordered)


def _first(pairs, ordered: bool) -> str | None:
    """The first difference of the ``(a, b, path)`` triples, in order, or None."""
    return next(filter(None, (_first_difference(*t, ordered) for t in pairs)), None)
