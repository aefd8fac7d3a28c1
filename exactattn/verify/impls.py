"""The float attention implementations ``exactattn verify`` checks out of the box, and loading one.

* ``numpy`` / ``numpy-naive``: ``softmax(scale * q k^T + mask) v`` in numpy
  float64, float32 (or float16), the softmax with the row maximum subtracted
  (``numpy``) or without (``numpy-naive``: ``exp`` overflows past 88.7 in
  float32 and the row turns into ``inf/inf = nan``).  A row with no visible
  key is 0/0 = NaN in both.  Modifiers follow the one composition of
  :func:`exactattn.logits.softmax_row`: RoPE rotates q and k (angles in
  float64, cast to the dtype), then scale, ``cap * tanh(s / cap)``, + ALiBi
  bias, hidden keys to ``-inf``, the sink as one more column of the softmax,
  dropout factors ``keep / (1 - p)`` on the weights; keys no query sees are
  left out of the mixing (so an ``inf`` there is never multiplied by 0); the
  log-sum-exp is ``max + log(sum)`` (divided by ``log 2`` in base 2).
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention`` on the CPU
  in float64, float32, bfloat16 or float16 (optional extra ``torch``).
  ``top_left`` causal is ``is_causal=True``; ``bottom_right`` is
  ``attn_mask=causal_lower_right(L, S)``; with a mask as well the causal rule
  is folded into the mask.  GQA ``interleave`` is ``enable_gqa=True``;
  ``tile`` repeats the key/value heads before the call.  RoPE rotates q and
  k first and ALiBi, windows and query offsets travel as an additive float
  mask; a soft-cap, a sink, dropout or a log-sum-exp (which SDPA cannot take)
  run the same composition as ``numpy`` in torch ops, in the dtype.
* ``module:function``: any function ``f(query, key, value, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)``, called by
  :class:`~exactattn.verify.adapter.FunctionImpl` (the one adapter, shared
  with :mod:`exactattn.properties`); it is also handed ``alignment``, ``gqa``
  and ``dtype`` when its signature takes them (or ``**kwargs``).  Arrays are
  numpy arrays of the dtype (``arrays="numpy"``, float64/float32/float16) or
  torch tensors (``arrays="torch"``, any dtype).  A function without
  ``alignment`` is called with ``is_causal=True`` and so is checked as
  whatever alignment it implements.

Every implementation is called with one :class:`~exactattn.verify.adapter.FloatCall`
(:func:`~exactattn.verify.adapter.make_call`); masks reach it in SDPA's
convention: boolean True = attend (a ``bool_drop`` mask is inverted on the
way) or additive floats (``-inf`` hides).  An implementation that raises is a
hard failure of that input, not a crash: it raises
:class:`~exactattn.verify.adapter.ImplRaised`, which ``verify`` turns into a
report (``report.raised``).

>>> from exactattn.call import Call
>>> call = make_call(Call([[1]], [[100], [99]], [[1], [0]], policy=Policy(scale="none")),
...                  "float32")
>>> NumpyImpl(naive=True)(call).tolist(), NumpyImpl()(call).tolist()     # e/(e+1) = 0.7310585786...
([[nan]], [[0.7310585975646973]])
"""

from __future__ import annotations

import importlib
import os
import re
import sys

import numpy as np

from ..call.policy import Policy
from ..errors import InputError, shorten
from .adapter import NUMPY_DTYPES, FloatCall, FunctionImpl, Impl, ImplRaised, make_call

__all__ = ["FloatCall", "FunctionImpl", "IMPLS", "Impl", "ImplRaised", "NumpyImpl", "TorchImpl",
           "composed", "count_flops", "flop_counts", "load_impl", "make_call", "sdpa_arguments"]


class NumpyImpl(Impl):
    """Attention in numpy float64/float32/float16: ``softmax(scale q k^T + mask) v``.

    Args:
        naive: exponentiate the scores as they are (no row maximum
            subtracted); the float32 ``exp`` overflows above 88.72.

    Shapes: as :class:`FloatCall`; returns ... x H_q x L x E_v in the dtype.
    """

    dtypes = ("float64", "float32", "float16")

    def __init__(self, naive: bool = False):
        self.naive = naive
        self.name = "numpy-naive" if naive else "numpy"

    def dtype_hint(self, dtype: str) -> str:
        return "; numpy has no bfloat16, use --impl torch for it" if dtype == "bfloat16" else ""

    def __call__(self, call: FloatCall) -> np.ndarray:
        if call.dtype not in self.dtypes:
            raise InputError(f"dtype must be float64, float32 or float16 for {self.name} "
                             f"(got {call.dtype!r})")
        dt = NUMPY_DTYPES[call.dtype]
        q, k, v = (a.astype(dt) for a in (call.query, call.key, call.value))
        if q.ndim >= 3:
            idx = call.kv_index()
            k, v = k[..., idx, :, :], v[..., idx, :, :]
        E = q.shape[-1]
        scale = dt(1) / np.sqrt(dt(E)) if call.scale is None else dt(call.scale)
        with np.errstate(all="ignore"):
            if call.rope is not None:
                q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
                k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
            s, seen = float_logits(call, q, k, scale, dt)
            if seen is not None:
                v = np.where(np.any(seen, axis=-2)[..., :, None], v, dt(0))   # keys no query sees
            top = s.max(axis=-1, keepdims=True) if not self.naive else dt(0)
            e = np.exp(s - top)
            den = e.sum(axis=-1, keepdims=True)
            w = e / den
            if call.sink is not None:
                w = w[..., :-1]
            if call.dropout_p is not None:
                w = w * dropout_weights(call, dt)
            out = (w @ v).astype(dt)
            if call.lse is None:
                return out
            lse = (top + np.log(den))[..., 0]
            return out, (lse / np.log(dt(2)) if call.lse == "2" else lse).astype(dt)


def float_logits(call: FloatCall, q, k, scale, dt):
    """``(s, seen)``: the logits a numpy implementation feeds its softmax, and which keys
    each query sees (None: all).

    ``s = scale q k^T``, soft-capped, plus ALiBi biases and an additive mask, -inf where a
    key is hidden (positions or mask), with the sink's column appended last.
    """
    s = (q @ np.swapaxes(k, -1, -2)) * scale          # ... x L x S
    if call.softcap is not None:
        cap = dt(call.softcap)
        s = cap * np.tanh(s / cap)
    if call.alibi is not None:
        s = s + call.alibi_bias().astype(dt)
    seen = call.keep() if call.positional else None
    if call.attn_mask is not None:
        m = call.attn_mask
        if m.dtype != bool:
            s = s + np.where(np.isneginf(m), 0, m).astype(dt)
            m = ~np.isneginf(m)
        seen = m if seen is None else seen & m
    if seen is not None:
        s = np.where(seen, s, dt(-np.inf))
    if call.sink is not None:
        s = np.concatenate([s, np.full(s.shape[:-1] + (1,), call.sink, dtype=dt)], -1)
    return s, seen


def dropout_weights(call: FloatCall, dt):
    """The float factor of each weight under dropout: keep / (1 - p), in the dtype."""
    return np.where(call.dropout_mask, dt(1) / (dt(1) - dt(call.dropout_p)), dt(0))


def rotate(x, angles, rope):
    """RoPE in floats: ``x`` (... x n x d, a numpy array or a tensor) rotated pairwise by ``angles``.

    ``angles`` is n x d/2 float64 (:meth:`FloatCall.rope_angles`); cos and sin are
    taken in float64 and cast to x's dtype; ``(a, b) -> (a cos - b sin, a sin + b cos)``.
    """
    pairs = rope.pairs(x.shape[-1])
    ia, ib = [a for a, _, _ in pairs], [b for _, b, _ in pairs]
    c, s = np.cos(angles), np.sin(angles)
    if hasattr(x, "detach"):
        import torch
        c, s = (torch.from_numpy(np.asarray(t)).to(x.dtype) for t in (c, s))
        out = x.clone()
    else:
        c, s = c.astype(x.dtype), s.astype(x.dtype)
        out = x.copy()
    xa, xb = x[..., ia], x[..., ib]
    out[..., ia] = xa * c - xb * s
    out[..., ib] = xa * s + xb * c
    return out


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

    def __call__(self, call: FloatCall):
        import torch
        dt = getattr(torch, call.dtype)
        q, k, v = (torch.from_numpy(np.ascontiguousarray(a)).to(dt)
                   for a in (call.query, call.key, call.value))
        if composed(call):
            out, lse = self.composed(call, q, k, v)
            out = out.to(torch.float64).numpy()
            return out if lse is None else (out, lse.to(torch.float64).numpy())
        return self.attend(call, q, k, v).to(torch.float64).numpy()

    def composed(self, call: FloatCall, q, k, v):
        """``(output, lse or None)``: the one composition in torch ops, for what SDPA cannot take."""
        import torch
        dt = q.dtype
        if q.dim() >= 3:
            idx = call.kv_index()
            k, v = k[..., idx, :, :], v[..., idx, :, :]
        if call.rope is not None:
            q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
            k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
        scale = 1 / np.sqrt(q.shape[-1]) if call.scale is None else call.scale
        s = (q @ k.transpose(-1, -2)) * torch.tensor(scale, dtype=dt)
        if call.softcap is not None:
            cap = torch.tensor(call.softcap, dtype=dt)
            s = cap * torch.tanh(s / cap)
        if call.alibi is not None:
            s = s + torch.from_numpy(call.alibi_bias()).to(dt)
        m = call.mask_in("additive", fold=True)
        if m is not None:
            seen = torch.from_numpy(~np.isneginf(m))
            s = torch.where(seen, s + torch.from_numpy(np.where(np.isneginf(m), 0, m)).to(dt),
                            torch.tensor(-np.inf, dtype=dt))
            v = torch.where(seen.any(dim=-2)[..., :, None], v, torch.zeros((), dtype=dt))
        if call.sink is not None:
            s = torch.cat([s, torch.full(s.shape[:-1] + (1,), call.sink, dtype=dt)], dim=-1)
        top = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - top)
        den = e.sum(dim=-1, keepdim=True)
        w = e / den
        if call.sink is not None:
            w = w[..., :-1]
        if call.dropout_p is not None:
            f = torch.tensor(1 / (1 - call.dropout_p), dtype=dt)
            w = w * torch.where(torch.from_numpy(call.dropout_mask), f, torch.zeros((), dtype=dt))
        out = w @ v
        if call.lse is None:
            return out, None
        lse = (top + torch.log(den))[..., 0]
        return out, lse / torch.log(torch.tensor(2.0, dtype=dt)) if call.lse == "2" else lse

    def attend(self, call: FloatCall, q, k, v):
        """SDPA of the call on tensors q, k, v of its dtype: the output tensor (autograd kept).

        What ``verify --backward`` differentiates (:mod:`exactattn.verify.backward`).

        Raises:
            ImplRaised: SDPA refused the call.
        """
        import torch.nn.functional as F
        if composed(call):
            return self.composed(call, q, k, v)[0]
        q, k, v, kwargs = sdpa_arguments(call, q, k, v, lower_right_bias=self.lower_right_bias)
        try:
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
        except Exception as e:     # e.g. a dtype or shape this build of SDPA refuses
            raise ImplRaised(e) from e


def sdpa_arguments(call: FloatCall, q, k, v, *, lower_right_bias: bool = True):
    """``(q, k, v, kwargs)``: the call in ``torch.nn.functional.scaled_dot_product_attention``'s terms.

    The one translation of a call (a policy's scale, causal rule and
    alignment, window, query offset, ALiBi, RoPE and GQA map) into SDPA's
    arguments, for :class:`TorchImpl` and the FLOP-counter audit
    (:mod:`exactattn.cost.counters`).  q, k, v are torch tensors of the
    call's shapes; RoPE rotates q and k; GQA ``tile`` repeats k and v.
    ``top_left`` causal is ``is_causal=True``; ``bottom_right`` is
    ``causal_lower_right(L, S)`` (or, without ``lower_right_bias``, a folded
    boolean mask); with an explicit mask, a window, a query offset or ALiBi
    everything is folded into one ``attn_mask`` (additive under ALiBi).
    ``scale`` is passed only when the call sets one.  Soft-caps, sinks,
    dropout and log-sum-exps are not SDPA arguments (:func:`composed`).
    """
    import torch
    dt = getattr(torch, call.dtype)
    if call.rope is not None:
        q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
        k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
    kwargs: dict = {} if call.scale is None else {"scale": call.scale}
    if call.enable_gqa:
        if call.gqa == "interleave":
            kwargs["enable_gqa"] = True
        else:
            reps = q.shape[-3] // k.shape[-3]
            shape = [1] * k.dim()
            shape[-3] = reps
            k, v = k.repeat(*shape), v.repeat(*shape)
    mask = call.attn_mask
    plain = call.window is None and call.query_offset is None and call.alibi is None
    if call.is_causal and mask is None and plain and (call.alignment == "top_left"
                                                      or lower_right_bias):
        if call.alignment == "top_left":
            kwargs["is_causal"] = True
        else:
            import warnings
            from torch.nn.attention.bias import causal_lower_right
            with warnings.catch_warnings():   # "NaNs when L > S": verify checks what it gives
                warnings.simplefilter("ignore", UserWarning)
                kwargs["attn_mask"] = causal_lower_right(q.shape[-2], k.shape[-2])
    elif mask is not None or call.positional or call.alibi is not None:
        # SDPA takes one of the two: fold the causal rule (and a window) in; ALiBi is a bias
        mask = call.mask_in(None if call.alibi is None else "additive", fold=True)
        if call.alibi is not None:
            mask = call.alibi_bias() if mask is None else mask + call.alibi_bias()
        t = torch.from_numpy(np.ascontiguousarray(mask))
        kwargs["attn_mask"] = t if mask.dtype == bool else t.to(dt)
    return q, k, v, kwargs


def composed(call: FloatCall) -> bool:
    """True when the call has a modifier SDPA cannot take: soft-cap, sink, dropout, log-sum-exp."""
    return any(x is not None for x in (call.softcap, call.sink, call.dropout_p, call.lse))


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
                f"impl module {shorten(mod_name, quote=True)} must be importable (got no module "
                f"{shorten(e.name, quote=True)}); run from the folder holding "
                f"{shorten(mod_name.split('.')[0])}.py or put that folder "
                "on PYTHONPATH") from None
        raise InputError(f"impl module {shorten(mod_name, quote=True)} must import cleanly (got "
                         f"{ImplRaised(e).line})") from None
    except Exception as e:       # the module itself fails: a syntax error, its own imports
        raise InputError(f"impl module {shorten(mod_name, quote=True)} must import cleanly (got "
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


def flop_counts(problem, dtype: str) -> dict:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` reports for the SDPA call of an exact
    :class:`~exactattn.call.Call`.

    Returns ``{"fused": ..., "math": ...}``: the default CPU kernel and the
    decomposed math backend (``sdpa_kernel(SDPBackend.MATH)``).

    Raises:
        InputError: torch is not installed.
    """
    impl = TorchImpl(lower_right_bias=False)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rounded, _ = problem.rounded(dtype)
    call = make_call(rounded, dtype)
    out = {"fused": int(count_flops(lambda: impl(call)))}
    with sdpa_kernel(SDPBackend.MATH):
        out["math"] = int(count_flops(lambda: impl(call)))
    return out


def count_flops(run) -> int:
    """The FLOPs ``torch.utils.flop_counter.FlopCounterMode`` reports while ``run()`` runs.

    The one place exactattn runs torch's counter (:func:`flop_counts`, and the
    ``torch`` counter of the FLOP-counter audit).

    Raises:
        ImportError: torch is not installed.
    """
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as mode:
        run()
    return mode.get_total_flops()
