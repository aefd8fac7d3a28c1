"""Float attention implementations that ``exactattn verify`` checks out of the box.

Every implementation is called with one :class:`Call`: the arguments of
PyTorch's ``scaled_dot_product_attention`` (query, key, value, attn_mask,
is_causal, scale, enable_gqa) as float64 numpy arrays holding floats of the
checked dtype, plus the policy's ``alignment`` and ``gqa`` map for the
implementations that can be told them.  It returns the outputs (any array
``numpy.asarray`` reads), which must be floats of the dtype.

* ``numpy`` / ``numpy-naive``: ``softmax(scale * q k^T + mask) v`` in numpy
  float64, float32 (or float16), the softmax with the row maximum subtracted
  (``numpy``) or without (``numpy-naive``: ``exp`` overflows past 88.7 in
  float32 and the row turns into ``inf/inf = nan``).  A row with no visible
  key is 0/0 = NaN in both.
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention`` on the CPU
  in float64, float32, bfloat16 or float16 (optional extra ``torch``).
  ``top_left`` causal is ``is_causal=True``; ``bottom_right`` is
  ``attn_mask=causal_lower_right(L, S)``; with a mask as well the causal rule
  is folded into the mask.  GQA ``interleave`` is ``enable_gqa=True``;
  ``tile`` repeats the key/value heads before the call.
* ``module:function``: any function ``f(query, key, value, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)``; it is also handed
  ``alignment``, ``gqa`` and ``dtype`` when its signature takes them (or
  ``**kwargs``).  Arrays are numpy arrays of the dtype (``arrays="numpy"``,
  float64/float32/float16) or torch tensors (``arrays="torch"``, any dtype).
  A function without ``alignment`` is called with ``is_causal=True`` and so is
  checked as whatever alignment it implements.

Masks reach every implementation in SDPA's convention: boolean True =
attend (a ``bool_drop`` mask is inverted on the way) or additive floats
(``-inf`` hides).

>>> import numpy as np
>>> from exactattn.verify import Problem
>>> from exactattn.call import Policy
>>> call = make_call(Problem.from_arrays([[1]], [[100], [99]], [[1], [0]]), Policy(scale="none"),
...                  "float32")
>>> NumpyImpl(naive=True)(call).tolist(), NumpyImpl()(call).tolist()     # e/(e+1) = 0.7310585786...
([[nan]], [[0.7310585975646973]])
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import InputError
from .call import DEFAULT_SCALE, Policy

__all__ = ["Call", "FunctionImpl", "IMPLS", "Impl", "NumpyImpl", "TorchImpl", "load_impl",
           "make_call"]

_NUMPY_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


@dataclass
class Call:
    """One attention call in SDPA's terms, with the policy hints an implementation may honour.

    Shapes (the caller's rank: L x E, H x L x E or B x H x L x E): query
    ... x H_q x L x E; key ... x H_kv x S x E; value ... x H_kv x S x E_v;
    attn_mask None, or ... x L x S booleans (True = attend) or float64
    additive (``-inf`` hides).  ``scale`` None means the implementation's own
    default 1/sqrt(E).
    """

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    dtype: str
    scale: float | None = None
    is_causal: bool = False
    alignment: str = "top_left"
    attn_mask: np.ndarray | None = None
    gqa: str = "interleave"

    @property
    def enable_gqa(self) -> bool:
        return self.query.ndim >= 3 and self.query.shape[-3] != self.key.shape[-3]

    def causal_keep(self) -> np.ndarray:
        """L x S booleans of the causal rule under ``alignment`` (True = attend)."""
        L, S = self.query.shape[-2], self.key.shape[-2]
        offset = 0 if self.alignment == "top_left" else S - L
        return np.arange(S)[np.newaxis, :] <= np.arange(L)[:, np.newaxis] + offset

    def kv_index(self) -> list[int]:
        """For each query head, the key/value head it reads (``gqa`` map)."""
        if self.query.ndim < 3:
            return [0]
        hq, hkv = self.query.shape[-3], self.key.shape[-3]
        if self.gqa == "interleave":
            return [h // (hq // hkv) for h in range(hq)]
        return [h % hkv for h in range(hq)]


def _float_scale(d2) -> float:
    """The float64 nearest to 1/sqrt(D)."""
    import mpmath
    with mpmath.workprec(200):
        return float(1 / mpmath.sqrt(mpmath.mpf(d2.numerator) / d2.denominator))


def make_call(problem, policy: Policy, dtype: str) -> Call:
    """The :class:`Call` for a problem whose entries are floats of ``dtype``.

    The mask is handed over in SDPA's convention (``bool_drop`` inverted);
    the scale is None under the default policy, else the float64 nearest the
    exact scale.
    """
    rank = problem.rank
    q, k, v = (problem.floats(n) for n in ("query", "key", "value"))
    mask = None
    if problem.mask is not None:
        m = problem.mask
        kind = problem.mask_kind or policy.mask_kind
        if kind == "bool_keep":
            mask = m.astype(bool)
        elif kind == "bool_drop":
            mask = ~m.astype(bool)
        else:
            mask = np.vectorize(lambda x: -math.inf if x is None else float(x),
                                otypes=[np.float64])(m)
        if rank < 4:
            mask = mask.reshape(mask.shape[4 - rank:])
    scale = None if policy.scale == DEFAULT_SCALE else _float_scale(policy.scale)
    return Call(q, k, v, dtype, scale, policy.causal, policy.alignment, mask, policy.gqa)


class Impl:
    """An implementation under test: ``impl(call) -> outputs``; ``name`` and the ``dtypes`` it runs."""

    name = "impl"
    dtypes: tuple = ("float64", "float32", "float16", "bfloat16")

    def __call__(self, call: Call) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class NumpyImpl(Impl):
    """Attention in numpy float64/float32/float16: ``softmax(scale q k^T + mask) v``.

    Args:
        naive: exponentiate the scores as they are (no row maximum
            subtracted); the float32 ``exp`` overflows above 88.72.

    Shapes: as :class:`Call`; returns ... x H_q x L x E_v in the dtype.
    """

    dtypes = ("float64", "float32", "float16")

    def __init__(self, naive: bool = False):
        self.naive = naive
        self.name = "numpy-naive" if naive else "numpy"

    def __call__(self, call: Call) -> np.ndarray:
        if call.dtype not in self.dtypes:
            raise InputError(f"dtype must be float64, float32 or float16 for {self.name} "
                             f"(got {call.dtype!r})")
        dt = _NUMPY_DTYPES[call.dtype]
        q, k, v = (a.astype(dt) for a in (call.query, call.key, call.value))
        if q.ndim >= 3:
            idx = call.kv_index()
            k, v = k[..., idx, :, :], v[..., idx, :, :]
        E = q.shape[-1]
        scale = dt(1) / np.sqrt(dt(E)) if call.scale is None else dt(call.scale)
        with np.errstate(all="ignore"):
            s = (q @ np.swapaxes(k, -1, -2)) * scale          # ... x L x S
            if call.is_causal:
                s = np.where(call.causal_keep(), s, dt(-np.inf))
            if call.attn_mask is not None:
                if call.attn_mask.dtype == bool:
                    s = np.where(call.attn_mask, s, dt(-np.inf))
                else:
                    s = s + call.attn_mask.astype(dt)
            if not self.naive:
                s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            out = (e / e.sum(axis=-1, keepdims=True)) @ v
        return out.astype(dt)


class TorchImpl(Impl):
    """``torch.nn.functional.scaled_dot_product_attention`` on the CPU (any of the four dtypes).

    Args:
        lower_right_bias: express ``bottom_right`` causal attention as
            ``causal_lower_right(L, S)`` (default); False folds it into a
            boolean mask instead (``FlopCounterMode`` cannot trace the bias).

    Raises:
        InputError: torch is not installed (``pip install 'exactattn[torch]'``).
    """

    name = "torch"

    def __init__(self, *, lower_right_bias: bool = True):
        self.lower_right_bias = lower_right_bias
        try:
            import torch  # noqa: F401
        except ImportError:
            raise InputError("impl torch needs PyTorch (got none installed); "
                             "pip install 'exactattn[torch]'") from None
        import torch
        self.name = f"torch {torch.__version__} scaled_dot_product_attention (CPU)"

    def __call__(self, call: Call):
        import torch
        import torch.nn.functional as F
        dt = getattr(torch, call.dtype)
        q, k, v = (torch.from_numpy(np.ascontiguousarray(a)).to(dt)
                   for a in (call.query, call.key, call.value))
        kwargs: dict = {"scale": call.scale}
        if call.enable_gqa:
            if call.gqa == "interleave":
                kwargs["enable_gqa"] = True
            else:
                reps = q.shape[-3] // k.shape[-3]
                shape = [1] * k.dim()
                shape[-3] = reps
                k, v = k.repeat(*shape), v.repeat(*shape)
        mask = call.attn_mask
        if call.is_causal and mask is None and (call.alignment == "top_left"
                                                or self.lower_right_bias):
            if call.alignment == "top_left":
                kwargs["is_causal"] = True
            else:
                import warnings
                from torch.nn.attention.bias import causal_lower_right
                with warnings.catch_warnings():   # "NaNs when L > S": verify checks what it gives
                    warnings.simplefilter("ignore", UserWarning)
                    kwargs["attn_mask"] = causal_lower_right(q.shape[-2], k.shape[-2])
        elif mask is not None:
            if call.is_causal:   # SDPA takes one of the two: fold the causal rule into the mask
                keep = call.causal_keep()
                mask = (mask & keep) if mask.dtype == bool else np.where(keep, mask, -np.inf)
            t = torch.from_numpy(np.ascontiguousarray(mask))
            kwargs["attn_mask"] = t if mask.dtype == bool else t.to(dt)
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        return out.to(torch.float64).numpy()


class FunctionImpl(Impl):
    """Any function with SDPA's arguments, called with numpy arrays or torch tensors of the dtype.

    Raises:
        InputError: a call needs an argument (mask, causal, GQA) the function
            does not take; bfloat16 with ``arrays="numpy"``.

    >>> import numpy as np
    >>> def mean_of_values(query, key, value):
    ...     return np.repeat(value.mean(axis=-2, keepdims=True), query.shape[-2], axis=-2)
    >>> FunctionImpl(mean_of_values).name
    'mean_of_values'
    """

    def __init__(self, fn: Callable, *, arrays: str = "numpy", name: str | None = None):
        if arrays not in ("numpy", "torch"):
            raise InputError(f"arrays must be numpy or torch (got {arrays!r})")
        self.fn = fn
        self.arrays = arrays
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.dtypes = ("float64", "float32", "float16") if arrays == "numpy" else \
            ("float64", "float32", "float16", "bfloat16")
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        self.var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
        self.accepts = set(params)

    def _takes(self, name: str) -> bool:
        return self.var_kw or name in self.accepts

    def __call__(self, call: Call):
        if self.arrays == "numpy":
            if call.dtype not in _NUMPY_DTYPES:
                raise InputError(f"dtype must be float64, float32 or float16 for a numpy-array "
                                 f"impl (got {call.dtype!r}); use arrays='torch' for bfloat16")
            dt = _NUMPY_DTYPES[call.dtype]
            conv = (lambda a: a.astype(dt))
            mconv = (lambda m: m if m.dtype == bool else m.astype(dt))
        else:
            import torch
            dt = getattr(torch, call.dtype)
            conv = (lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dt))
            mconv = (lambda m: torch.from_numpy(np.ascontiguousarray(m))
                     if m.dtype == bool else torch.from_numpy(m).to(dt))
        kwargs: dict = {}
        needed = {"attn_mask": call.attn_mask, "is_causal": call.is_causal or None,
                  "enable_gqa": call.enable_gqa or None}
        for key, val in needed.items():
            if val is None:
                continue
            if not self._takes(key):
                raise InputError(f"{self.name} must take {key}= for this call (got a function "
                                 f"without it); add the argument or drop the {key} option")
            kwargs[key] = mconv(val) if key == "attn_mask" else val
        if call.scale is not None:
            if not self._takes("scale"):
                raise InputError(f"{self.name} must take scale= for an explicit scale (got a "
                                 "function without it)")
            kwargs["scale"] = call.scale
        for key, val in (("alignment", call.alignment), ("gqa", call.gqa), ("dtype", call.dtype)):
            if self._takes(key):
                kwargs[key] = val
        out = self.fn(conv(call.query), conv(call.key), conv(call.value), **kwargs)
        if hasattr(out, "detach"):
            import torch
            out = out.detach().to(torch.float64).cpu().numpy()
        return np.asarray(out, dtype=np.float64)


IMPLS = ("numpy", "numpy-naive", "torch")


def load_impl(impl, *, arrays: str = "numpy") -> Impl:
    """An :class:`Impl` from a name (``numpy``, ``numpy-naive``, ``torch``, ``module:function``) or a callable.

    Raises:
        InputError: an unknown name, a module or function that cannot be loaded.

    >>> load_impl("numpy").name, load_impl("numpy-naive").name
    ('numpy', 'numpy-naive')
    >>> load_impl("cuda")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: impl must be numpy, numpy-naive, torch or module:function (got 'cuda')
    """
    if isinstance(impl, Impl):
        return impl
    if callable(impl):
        return FunctionImpl(impl, arrays=arrays)
    if impl == "numpy":
        return NumpyImpl()
    if impl == "numpy-naive":
        return NumpyImpl(naive=True)
    if impl == "torch":
        return TorchImpl()
    if isinstance(impl, str) and ":" in impl:
        mod_name, _, fn_name = impl.partition(":")
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            raise InputError(f"impl module {mod_name!r} must be importable (got {e})") from None
        fn = mod
        for part in fn_name.split("."):
            fn = getattr(fn, part, None)
            if fn is None:
                raise InputError(f"impl {impl!r} must name a function in {mod_name} "
                                 f"(got no {fn_name!r} there)")
        if isinstance(fn, Impl):
            return fn
        if not callable(fn):
            raise InputError(f"impl {impl!r} must be callable (got {type(fn).__name__})")
        return FunctionImpl(fn, arrays=arrays, name=impl)
    raise InputError(f"impl must be numpy, numpy-naive, torch or module:function (got {impl!r})")
