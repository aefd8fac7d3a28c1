"""The backward passes ``exactattn verify --backward`` checks: torch autograd, numpy, your own.

Each takes one :class:`~exactattn.verify.adapter.FloatCall` and the upstream
gradient ``d_out`` (same rank and dtype as the output) and returns
``(dq, dk, dv)`` shaped like query, key and value:

* ``torch``: autograd through ``scaled_dot_product_attention`` on the CPU
  (:meth:`TorchImpl.attend <exactattn.verify.impls.TorchImpl.attend>`, the
  same call the forward check makes), any of the four dtypes;
* ``numpy`` / ``numpy-naive``: a float reference backward in numpy (float64,
  float32, float16): the softmax with the row maximum subtracted (``numpy``)
  or without (``numpy-naive``), the modifiers of the forward ``numpy``
  (ALiBi bias, windows, the sink as one more column of the softmax, dropout
  factors ``M = keep / (1 - p)`` on the weights ``W = P M``), then ``dV = W^T
  dO``, ``dP = M (dO V^T)``, ``D = rowsum(dO * O)``, ``dS = P (dP - D)``,
  ``dQ = scale dS K``, ``dK = scale dS^T Q``; grouped heads add their dK and
  dV into the key/value head they read.  A row with no visible key (and no
  sink) is 0/0 = NaN, as in the forward;
* ``module:function``: ``f(query, key, value, grad_out, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)`` returning ``(dq, dk, dv)``,
  called through :class:`~exactattn.verify.adapter.FunctionImpl`'s argument
  rules (``alignment``, ``gqa`` and ``dtype`` when its signature takes them).

>>> import numpy as np
>>> from exactattn.call.policy import Policy
>>> from exactattn.verify.adapter import make_call
>>> from exactattn.call import Call
>>> call = make_call(Call([[0], [0]], [[0], [0]], [[1], [3]]), "float64")
>>> dq, dk, dv = NumpyBackward()(call, np.array([[1.0], [1.0]]))
>>> dv.tolist(), dq.tolist()
([[1.0], [1.0]], [[0.0], [0.0]])
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, shorten
from .adapter import NUMPY_DTYPES, FloatCall, FunctionImpl, ImplRaised, read_answer
from .impls import TorchImpl, dropout_weights, float_logits, load_impl

__all__ = ["BACKWARD_IMPLS", "BackwardImpl", "FunctionBackward", "NumpyBackward",
           "TorchBackward", "load_backward"]

BACKWARD_IMPLS = ("numpy", "numpy-naive", "torch")


class BackwardImpl:
    """A backward pass under test: ``impl(call, d_out) -> (dq, dk, dv)``; ``name`` and ``dtypes``."""

    name = "backward"
    dtypes: tuple = ("float64", "float32", "float16", "bfloat16")

    def dtype_hint(self, dtype: str) -> str:
        return ""

    def __call__(self, call: FloatCall, d_out: np.ndarray):  # pragma: no cover - abstract
        raise NotImplementedError


class TorchBackward(BackwardImpl):
    """Autograd of PyTorch's ``scaled_dot_product_attention`` on the CPU.

    Raises:
        InputError: torch is not installed.
    """

    def __init__(self):
        self.forward = TorchImpl()
        self.name = self.forward.name.replace("(CPU)", "backward (CPU autograd)")

    def __call__(self, call: FloatCall, d_out: np.ndarray):
        import torch
        dt = getattr(torch, call.dtype)
        q, k, v = (torch.from_numpy(np.ascontiguousarray(a)).to(dt).requires_grad_(True)
                   for a in (call.query, call.key, call.value))
        out = self.forward.attend(call, q, k, v)
        try:
            out.backward(torch.from_numpy(np.ascontiguousarray(d_out)).to(dt))
        except Exception as e:       # a backward this build does not run
            raise ImplRaised(e) from e
        return tuple(t.grad.to(torch.float64).numpy() for t in (q, k, v))


class NumpyBackward(BackwardImpl):
    """The float reference backward in numpy (float64, float32, float16).

    Args:
        naive: exponentiate the scores as they are (no row maximum subtracted).
    """

    dtypes = ("float64", "float32", "float16")

    def __init__(self, naive: bool = False):
        self.naive = naive
        self.name = "numpy-naive backward" if naive else "numpy backward"

    def dtype_hint(self, dtype: str) -> str:
        return "; numpy has no bfloat16, use --impl torch for it" if dtype == "bfloat16" else ""

    def __call__(self, call: FloatCall, d_out: np.ndarray):
        if call.dtype not in self.dtypes:
            raise InputError(f"dtype must be float64, float32 or float16 for {self.name} "
                             f"(got {call.dtype!r})")
        dt = NUMPY_DTYPES[call.dtype]
        q, k0, v0, do = (a.astype(dt) for a in (call.query, call.key, call.value, d_out))
        k, v, idx = k0, v0, None
        if q.ndim >= 3:
            idx = call.kv_index()
            k, v = k0[..., idx, :, :], v0[..., idx, :, :]
        E = q.shape[-1]
        scale = dt(1) / np.sqrt(dt(E)) if call.scale is None else dt(call.scale)
        with np.errstate(all="ignore"):
            s, seen = float_logits(call, q, k, scale, dt)
            if seen is not None:
                unseen = ~np.any(seen, axis=-2)[..., :, None]     # keys no query sees
                v, k = np.where(unseen, dt(0), v), np.where(unseen, dt(0), k)
            if not self.naive:
                s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            p = e / e.sum(axis=-1, keepdims=True)
            if call.sink is not None:
                p = p[..., :-1]
            factors = None if call.dropout_p is None else dropout_weights(call, dt)
            w = p if factors is None else p * factors
            o = w @ v
            dv = np.swapaxes(w, -1, -2) @ do
            dp = do @ np.swapaxes(v, -1, -2)
            if factors is not None:
                dp = dp * factors
            dd = (do * o).sum(axis=-1, keepdims=True)
            ds = p * (dp - dd)
            dq = (ds @ k) * scale
            dk = (np.swapaxes(ds, -1, -2) @ q) * scale
        if idx is not None:
            dk, dv = _fold_heads(dk, k0.shape, idx, dt), _fold_heads(dv, v0.shape, idx, dt)
        return dq.astype(dt), dk.astype(dt), dv.astype(dt)


def _fold_heads(g: np.ndarray, shape, idx: list[int], dt) -> np.ndarray:
    """Per-query-head gradients added into the key/value head each reads (in order)."""
    out = np.zeros(shape, dtype=dt)
    for h, kv in enumerate(idx):
        out[..., kv, :, :] += g[..., h, :, :]
    return out


class FunctionBackward(FunctionImpl, BackwardImpl):
    """Your backward: ``f(query, key, value, grad_out, **call arguments) -> (dq, dk, dv)``.

    Arguments as :class:`~exactattn.verify.adapter.FunctionImpl` in the
    ``sdpa`` convention; ``grad_out`` comes fourth, converted like the others.

    >>> FunctionBackward(lambda q, k, v, g: (q, k, v), name="same").name
    'same'
    """

    def __call__(self, call: FloatCall, d_out: np.ndarray):
        conv = self._converter(call.dtype)
        kwargs = self._arguments(call)
        try:
            args = [conv(a) for a in (call.query, call.key, call.value, d_out)]
            kwargs = {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
            got = self.fn(*args, **kwargs)
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                raise TypeError(f"a backward must return (dq, dk, dv) (got "
                                f"{shorten(type(got).__name__)})")
            return tuple(read_answer(g, self.name).values for g in got)
        except Exception as e:      # the function under test failed on this input
            raise ImplRaised(e) from e


def load_backward(impl, *, arrays: str = "numpy") -> BackwardImpl:
    """A :class:`BackwardImpl` from ``numpy``, ``numpy-naive``, ``torch``, ``module:function`` or a callable.

    Raises:
        InputError: an unknown name, a function that cannot be loaded.

    >>> load_backward("numpy").name
    'numpy backward'
    """
    if isinstance(impl, BackwardImpl):
        return impl
    if impl == "numpy":
        return NumpyBackward()
    if impl == "numpy-naive":
        return NumpyBackward(naive=True)
    if impl == "torch":
        return TorchBackward()
    if callable(impl):
        return FunctionBackward(impl, arrays=arrays)
    got = load_impl(impl, arrays=arrays)      # module:function, with its checks and messages
    if not isinstance(got, FunctionImpl):
        raise InputError(f"impl must be a backward function (got {shorten(got.name)})")
    return FunctionBackward(got.fn, arrays=arrays, name=got.name)
