"""The backward passes ``exactattn verify --backward`` checks: torch autograd, jax.vjp, numpy, your own.

Each takes one :class:`~exactattn.verify.adapter.FloatCall` and the upstream
gradient ``d_out`` (same rank and dtype as the output; for a call that returns
its log-sum-exp, ``d_lse`` too) and returns ``(dq, dk, dv)`` shaped like query,
key and value (and ``dsink`` after them, when it differentiates a sink):

* ``torch``: autograd through ``scaled_dot_product_attention`` on the CPU
  (:meth:`TorchImpl.backward <exactattn.verify.impls.TorchImpl.backward>`,
  through the same call the forward check makes; with ``d_lse``, of ``sum dO O + sum
  dlse lse`` through torch's composition), any of the four dtypes;
* ``jax``: ``jax.vjp`` of ``jax.nn.dot_product_attention`` on the CPU
  (:meth:`JaxImpl.backward <exactattn.verify.impls.JaxImpl.backward>`, the
  forward check's own call), float64, float32, bfloat16 or float16; no ``d_lse``
  (its log-sum-exp residual carries no gradient), nor for ``flex`` and ``flash-attn``;
* ``numpy`` / ``numpy-naive``: a float reference backward in numpy (float64,
  float32, float16), :meth:`NumpyImpl.backward
  <exactattn.verify.impls.NumpyImpl.backward>`: the forward's own pieces (the
  softmax with the row maximum subtracted, ``numpy``, or without,
  ``numpy-naive``; ALiBi bias, windows, the sink as one more column of the
  softmax, dropout factors ``M = keep / (1 - p)`` on the weights ``W = P
  M``), then ``dV = W^T dO``, ``dP = M (dO V^T)``, ``D = rowsum(dO * O)``,
  ``dS = P (dP - D)``, ``dQ = scale dS K``, ``dK = scale dS^T Q``; grouped
  heads add their dK and dV into the key/value head they read; ``dS`` times ``1 -
  tanh^2(s / cap)`` under a soft-cap, ``+ P dlse`` with ``d_lse``, and under RoPE q and k
  rotated, dQ and dK turned back by ``R^T``.  A row with
  no visible key (and no sink) is 0/0 = NaN, as in the forward;
* ``module:function``: ``f(query, key, value, grad_out, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)`` (``f(query, key, value,
  grad_out, grad_lse, ...)`` when the call returns its log-sum-exp, with
  ``return_lse=True`` when it takes that) returning ``(dq, dk, dv)`` or ``(dq,
  dk, dv, dsink)``,
  called through :class:`~exactattn.verify.adapter.FunctionImpl`'s argument
  rules (``alignment``, ``gqa`` and ``dtype`` when its signature takes them).

>>> import numpy as np
>>> from exactattn.call.policy import Policy
>>> from exactattn.verify.adapter import make_call
>>> from exactattn.call import Call
>>> call = make_call(Call([[0], [0]], [[0], [0]], [[1], [3]]), "float64")
>>> dq, dk, dv = load_backward("numpy")(call, np.array([[1.0], [1.0]]))
>>> dv.tolist(), dq.tolist()
([[1.0], [1.0]], [[0.0], [0.0]])
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, shorten
from .adapter import FloatCall, FunctionImpl, Impl, read_answer
from .impls import KERNELS, load_impl


class BackwardOf(Impl):
    """The backward of an implementation that has one (``impl.backward(call, d_out)``:
    :class:`~exactattn.verify.impls.NumpyImpl`, :class:`~exactattn.verify.impls.TorchImpl`),
    named by its ``backward_name``, with its dtypes: ``impl(call, d_out) -> (dq, dk, dv)``,
    as every backward under test (:class:`FunctionBackward` too)."""

    def __init__(self, impl):
        self.impl, self.dtypes = impl, impl.dtypes
        self.name = getattr(impl, "backward_name", f"{impl.name} backward")
        self.takes_mask, self.takes_gqa = impl.takes_mask, impl.takes_gqa

    def dtype_hint(self, dtype: str) -> str:
        return self.impl.dtype_hint(dtype)

    def __call__(self, call: FloatCall, d_out: np.ndarray, d_lse=None):
        row = KERNELS.get(getattr(self.impl, "kernel", None))   # its backward takes dlse?
        if d_lse is not None and not (row and row.lse_backward):
            raise InputError(f"{self.name} must be checked without lse (got one); it takes dO "
                             "only: check numpy's or torch's, or pass a module:function backward "
                             "f(query, key, value, grad_out, grad_lse, ...)")
        return self.impl.backward(call, d_out, *[d for d in [d_lse] if d is not None])


class FunctionBackward(FunctionImpl):
    """Your backward: ``f(query, key, value, grad_out, **call arguments) -> (dq, dk, dv)``.

    Arguments as :class:`~exactattn.verify.adapter.FunctionImpl` in the
    ``sdpa`` convention; ``grad_out`` comes fourth, converted like the others.

    >>> FunctionBackward(lambda q, k, v, g: (q, k, v), name="same").name
    'same'
    """

    def __call__(self, call: FloatCall, d_out: np.ndarray, d_lse=None):
        return self.answer(call, d_out, *[d for d in [d_lse] if d is not None], read=self._grads)

    def _grads(self, got) -> tuple:
        if not isinstance(got, (tuple, list)) or len(got) not in (3, 4):
            raise TypeError(f"a backward must return (dq, dk, dv) (got "
                            f"{shorten(type(got).__name__)})")
        return tuple(read_answer(g, self.name).values for g in got)


def load_backward(impl, *, arrays: str = "numpy") -> Impl:
    """A backward (:class:`BackwardOf`, :class:`FunctionBackward`) from ``numpy``,
    ``numpy-naive``, ``torch``, ``flex``, ``jax``, ``module:function``, a callable, or an
    :class:`~exactattn.verify.adapter.Impl` with a ``backward`` method.

    Raises:
        InputError: an unknown name, a function that cannot be loaded.

    >>> load_backward("numpy").name
    'numpy backward'
    """
    if isinstance(impl, (BackwardOf, FunctionBackward)):
        return impl
    if isinstance(impl, str) and impl in KERNELS:
        impl = load_impl(impl)
    if isinstance(impl, Impl) and hasattr(impl, "backward"):
        return BackwardOf(impl)
    if callable(impl):
        return FunctionBackward(impl, arrays=arrays)
    got = load_impl(impl, arrays=arrays)      # module:function, with its checks and messages
    if not isinstance(got, FunctionImpl):
        raise InputError(f"impl must be a backward function (got {shorten(got.name)})")
    return FunctionBackward(got.fn, arrays=arrays, name=got.name)
