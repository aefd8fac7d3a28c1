"""Property checks for attention: exactattn's own exactly, anyone's float code within a stated tolerance.

Each ``check_*`` function takes an attention function and one input, runs the
function as often as the property needs, and returns quietly when the
property holds or raises :class:`PropertyFailure` (an ``AssertionError``)
with a readable report: the property, the function, the input and the rows
that broke it.  :mod:`exactattn.strategies` draws the inputs, so the same
generators property-test exactattn and a user's own kernel.

An input is one head's :class:`~exactattn.call.Call` (checked there, once):
queries, keys, values, an explicit :class:`~exactattn.call.policy.Mask` and a
:class:`~exactattn.call.policy.Policy` (the scale, the causal rule and its
alignment, the empty-row answer, the modifiers), such as
``Call(queries, keys, values, mask_rows, policy=...)`` or
``Call.of_head(head, x)`` builds.

The attention-function interface
--------------------------------
::

    fn(queries, keys, values, *, mask=None, scale=None) -> outputs

``queries`` is n_q x d_k, ``keys`` n_k x d_k, ``values`` n_k x d_v and the
result n_q x d_v, with ``outputs[i] = sum_j softmax_j(scale * queries[i] .
keys[j] + mask[i][j]) values[j]`` (Vaswani et al. 2017, sec. 3.2.1).
``scale=None`` means the default 1/sqrt(d_k), as in PyTorch's
``scaled_dot_product_attention``.  How the arguments arrive is set by
wrapping ``fn`` in an :class:`Implementation`; a bare callable is a float
function with the defaults:

* float functions (the default) get numpy ``float64`` arrays (``dtype=`` for
  ``float32``/``float16``; ``convert=torch.from_numpy`` hands a PyTorch
  function tensors), ``scale`` as a float, and the mask as a boolean array
  with True = attend (``mask_as="bool_keep"``, SDPA's ``attn_mask``),
  True = ignore (``"bool_drop"``) or an additive float array with ``-inf``
  (``"additive"``).  The causal rule arrives folded into the mask, in that
  form.  The result may be anything ``numpy.asarray`` reads, or a tensor.
* exact functions (``exact=True``) get lists of ``Fraction``, ``scale`` as a
  ``Fraction`` or a sympy ``1/sqrt(q)``, the :class:`~exactattn.call.policy.Mask`
  itself, and must return ``Fraction`` or
  :class:`~exactattn.numbers.softmax.ExpRatio` entries.  :func:`reference` (the
  softmax of :mod:`exactattn.numbers.softmax`) and :func:`attend_as_function`
  (:func:`exactattn.attend`'s pencil engine) are the two exact functions
  shipped; every check on them is exact.

Shares are read from any such function by passing the identity matrix as the
values (``outputs = shares @ I``), so a function that returns only its
outputs can still be checked row by row.

How float results are compared
------------------------------
A float result ``got`` passes against an exact value ``want`` when
``|got - want| <= atol + rtol * M``, where ``M`` is the largest ``|value|``
in that output column (1 for shares), and two float results of the same
function agree when they differ by at most twice that.  ``want`` is the
nearest float of the exact value's certified decimal.  Unless given, rtol
and atol come from the dtype the function returned, or the input ``dtype``
when that is coarser (:data:`TOLERANCES`): 1e-12 for float64, 1e-5/1e-6 for
float32, 1e-2/1e-3 for float16 and 2e-2/1e-2 for bfloat16.  NaN or infinity
where the exact value is finite always fails.  A masked share must be
exactly ``0.0`` in every dtype (``exp(-inf)`` is 0 in IEEE arithmetic), and a
visible share must be positive.

Exactness: against the exact functions nothing is rounded.  Exact values are
compared as :class:`~exactattn.numbers.softmax.ExpRatio` values: by
Lindemann-Weierstrass a sum of exponentials with distinct exponents is zero
only when every coefficient is zero, and a non-zero one's sign is decided
from ``arb`` enclosures tightened until they exclude 0.

A function that raises fails the property it was called for: the report
names the exception in one line, and the exception is chained, so Hypothesis
shrinks the input as for any other failure.

One checker stack: the checks are thin layers on :mod:`exactattn.verify`.
The exact values are :class:`exactattn.verify.Reference`'s; a float function
is called by :class:`exactattn.verify.adapter.FunctionImpl` (``mask``
convention) and compared by :mod:`exactattn.verify.compare` (rtol/atol mode).

Modules: :mod:`~exactattn.properties.inputs` (building and reading the input,
the exact functions, the failure text), :mod:`~exactattn.properties.checks`
(calling a function, comparing its results, the checks of one run and of two,
and those of exactattn itself: its head engine, its cost counts, its online
softmax) and :mod:`~exactattn.properties.rules` (which property holds under which modifier:
the one table :func:`check_all` and docs/modifiers.md read).

>>> from exactattn import Call
>>> inp = Call([[0], [1]], [[0], [1]], [[1], [3]], policy=Policy(scale=1))
>>> check_rows_sum_to_one(reference, inp)      # exact: the shares sum to 1, not 0.9999
>>> def unnormalised(queries, keys, values, *, mask=None, scale=None):
...     import numpy as np
...     return np.exp(queries @ keys.T) @ values
>>> check_rows_sum_to_one(unnormalised, inp)
Traceback (most recent call last):
...
exactattn.properties.PropertyFailure: property failed: every row of shares sums to exactly 1
  function: unnormalised (float; rtol=1e-12, atol=1e-12 from float64; |got - exact| <= atol + rtol*M)
  input: Call([[0], [1]], [[0], [1]], [[1], [3]], policy=Policy(scale='1'))
  row 0: shares [1.0, 1.0] sum to 2.0, want 1
  row 1: shares [1.0, 2.718281828459045] sum to 3.718281828459045, want 1
"""

from ..call.policy import MASK_KINDS, Mask, Policy
from .checks import (MASK_FORMS, TOLERANCES, Implementation, check_all, check_bias_cancels,
                     check_causal_first_output, check_cost, check_identical_queries,
                     check_identical_tokens, check_key_bias_cancels, check_key_permutation,
                     check_masked_entries_absent, check_masked_entries_ignored,
                     check_masked_nonfinite_ignored, check_matches_reference,
                     check_online_softmax, check_outputs_within_values, check_query_permutation,
                     check_rows_sum_below_one, check_rows_sum_to_one, check_share_support,
                     check_shift_invariance, check_value_bias_shifts)
from .inputs import PropertyFailure, attend_as_function, reference
from .rules import OPT_IN, PROPERTIES, holds

__all__ = ["Implementation", "PropertyFailure", "attend_as_function",
           "check_all", "check_bias_cancels", "check_causal_first_output", "check_cost",
           "check_identical_queries", "check_identical_tokens", "check_key_bias_cancels",
           "check_key_permutation", "check_masked_entries_absent",
           "check_masked_entries_ignored", "check_masked_nonfinite_ignored",
           "check_matches_reference", "check_online_softmax", "check_outputs_within_values",
           "check_query_permutation", "check_rows_sum_to_one", "check_share_support",
           "check_shift_invariance", "check_value_bias_shifts", "reference"]
