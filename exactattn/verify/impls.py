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

An implementation that raises is a hard failure of that input, not a crash:
:class:`FunctionImpl` wraps what the function raises in :class:`ImplRaised`,
which ``verify`` turns into a report (``report.raised``).

>>> import numpy as np
>>> from exactattn.verify import Problem
>>> call = make_call(Problem.from_arrays([[1]], [[100], [99]], [[1], [0]]), Policy(scale="none"),
...                  "float32")
>>> NumpyImpl(naive=True)(call).tolist(), NumpyImpl()(call).tolist()     # e/(e+1) = 0.7310585786...
([[nan]], [[0.7310585975646973]])
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..call import DEFAULT_SCALE, Policy, float_scale
from ..errors import InputError, shorten

__all__ = ["Call", "FunctionImpl", "IMPLS", "Impl", "ImplRaised", "NumpyImpl", "TorchImpl",
           "flop_counts", "load_impl", "make_call"]

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
        policy = Policy(causal=True, alignment=self.alignment)
        return policy.keep(self.query.shape[-2], self.key.shape[-2])

    def kv_index(self) -> list[int]:
        """For each query head, the key/value head it reads (``gqa`` map)."""
        if self.query.ndim < 3:
            return [0]
        hq, hkv = self.query.shape[-3], self.key.shape[-3]
        policy = Policy(gqa=self.gqa)
        return [policy.kv_head(h, hq, hkv) for h in range(hq)]


class ImplRaised(Exception):
    """An implementation under test raised; ``line`` says what, in one line.

    Not an :class:`~exactattn.errors.ExactAttnError`: it is the implementation's
    failure on an input, which ``verify`` reports as a hard failure.
    """

    def __init__(self, error: BaseException):
        text = " ".join(str(error).split())
        self.line = f"{type(error).__name__}: {shorten(text, 200)}" if text else \
            type(error).__name__
        super().__init__(self.line)


def make_call(problem, policy: Policy, dtype: str) -> Call:
    """The :class:`Call` for a problem whose entries are floats of ``dtype``.

    The mask is handed over in SDPA's convention (``bool_drop`` inverted);
    the scale is None under the default policy, 1.0 with no scaling, else the
    float64 nearest the exact scale.
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
    scale = None if policy.scale == DEFAULT_SCALE else \
        1.0 if policy.scale is None else float_scale(policy.scale)
    return Call(q, k, v, dtype, scale, policy.causal, policy.alignment, mask, policy.gqa)


class Impl:
    """An implementation under test: ``impl(call) -> outputs``; ``name`` and the ``dtypes`` it runs."""

    name = "impl"
    dtypes: tuple = ("float64", "float32", "float16", "bfloat16")

    def dtype_hint(self, dtype: str) -> str:
        """Why a dtype outside ``dtypes`` is not run, and the fix ("" when none is known)."""
        return ""

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

    def dtype_hint(self, dtype: str) -> str:
        return "; numpy has no bfloat16, use --impl torch for it" if dtype == "bfloat16" else ""

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
            import torch
        except ImportError:
            raise InputError("impl torch needs PyTorch (got none installed); "
                             "pip install 'exactattn[torch]'") from None
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
        try:
            out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        except Exception as e:     # e.g. a dtype or shape this build of SDPA refuses
            raise ImplRaised(e) from e
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

    def dtype_hint(self, dtype: str) -> str:
        if dtype == "bfloat16" and self.arrays == "numpy":
            return "; numpy has no bfloat16, pass --arrays torch (arrays='torch') for it"
        return ""

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
        try:
            out = self.fn(conv(call.query), conv(call.key), conv(call.value), **kwargs)
            if hasattr(out, "detach"):
                import torch
                out = out.detach().to(torch.float64).cpu().numpy()
        except Exception as e:     # the function under test failed on this input
            raise ImplRaised(e) from e
        return out


IMPLS = ("numpy", "numpy-naive", "torch")


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORMS = "numpy, numpy-naive, torch or module:function"


def _import(mod_name: str):
    """Import a module the way ``python -m`` does: the current directory comes first on the path.

    The directory is put on ``sys.path`` only while the module is imported.
    """
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name and mod_name.split(".")[0] == e.name.split(".")[0]:
            raise InputError(
                f"impl module {mod_name!r} must be importable (got no module {e.name!r}); "
                f"run from the folder holding {mod_name.split('.')[0]}.py or put that folder "
                "on PYTHONPATH") from None
        raise InputError(f"impl module {mod_name!r} must import cleanly (got "
                         f"{ImplRaised(e).line})") from None
    except Exception as e:       # the module itself fails: a syntax error, its own imports
        raise InputError(f"impl module {mod_name!r} must import cleanly (got "
                         f"{ImplRaised(e).line})") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def load_impl(impl, *, arrays: str = "numpy") -> Impl:
    """An :class:`Impl` from a name (``numpy``, ``numpy-naive``, ``torch``, ``module:function``) or a callable.

    A ``module:function`` module is looked for in the current directory first,
    as ``python -m`` and pytest do, then on ``sys.path``.

    Raises:
        InputError: an unknown name, a malformed ``module:function``, a module
            or function that cannot be loaded.

    >>> load_impl("numpy").name, load_impl("numpy-naive").name
    ('numpy', 'numpy-naive')
    >>> load_impl("cuda")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: impl must be numpy, numpy-naive, torch or module:function (got 'cuda')
    >>> load_impl(".foo:bar")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: impl must be module:function with a module name such as mykern or pkg.kernels and a function name such as attention (got '.foo:bar')
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
    if not isinstance(impl, str) or ":" not in impl:
        raise InputError(f"impl must be {_FORMS} (got {shorten(repr(impl))})")
    mod_name, _, fn_name = impl.partition(":")
    if not _DOTTED.match(mod_name) or not _DOTTED.match(fn_name):
        raise InputError("impl must be module:function with a module name such as mykern or "
                         "pkg.kernels and a function name such as attention "
                         f"(got {shorten(repr(impl))})")
    fn = _import(mod_name)
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


def flop_counts(problem, policy: Policy, dtype: str) -> dict:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` reports for the SDPA call of ``problem``.

    Returns ``{"fused": ..., "math": ...}``: the default CPU kernel and the
    decomposed math backend (``sdpa_kernel(SDPBackend.MATH)``).

    Raises:
        InputError: torch is not installed.
    """
    impl = TorchImpl(lower_right_bias=False)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    rounded, _ = problem.rounded(dtype)
    call = make_call(rounded, policy, dtype)
    out = {}
    with FlopCounterMode(display=False) as fc:
        impl(call)
    out["fused"] = int(fc.get_total_flops())
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        impl(call)
    out["math"] = int(fc.get_total_flops())
    return out
