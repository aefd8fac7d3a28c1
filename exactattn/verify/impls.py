"""The float attention implementations ``exactattn verify`` checks out of the box, and loading one.

* ``numpy`` / ``numpy-naive``: ``softmax(scale * q k^T + mask) v`` in numpy
  float64, float32 (or float16), the softmax with the row maximum subtracted
  (``numpy``) or without (``numpy-naive``: ``exp`` overflows past 88.7 in
  float32 and the row turns into ``inf/inf = nan``).  A row with no visible
  key is 0/0 = NaN in both.  Modifiers follow the one composition of
  :func:`exactattn.reference.logits.softmax_row`: RoPE rotates q and k (angles in
  float64, cast to the dtype), then scale, ``cap * tanh(s / cap)``, + ALiBi
  bias, hidden keys to ``-inf``, the sink as one more column of the softmax,
  dropout factors ``keep / (1 - p)`` on the weights; keys no query sees are
  left out of the mixing (so an ``inf`` there is never multiplied by 0); the
  log-sum-exp is ``max + log(sum)`` (divided by ``log 2`` in base 2).
  :meth:`NumpyImpl.backward` differentiates that same composition.
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention`` on the CPU
  in float64, float32, bfloat16 or float16 (optional extra ``torch``).
  ``top_left`` causal is ``is_causal=True``; ``bottom_right`` is
  ``attn_mask=causal_lower_right(L, S)``; with a mask as well the causal rule
  is folded into the mask.  GQA ``interleave`` is ``enable_gqa=True``;
  ``tile`` repeats the key/value heads before the call.  RoPE rotates q and
  k first and ALiBi, windows and query offsets travel as an additive float
  mask; a soft-cap, a sink, dropout or a log-sum-exp (which SDPA cannot take)
  run the same composition as ``numpy`` in torch ops, in the dtype (the
  default scale and the dropout factor rounded once from float64, as SDPA
  rounds its scale).  :meth:`TorchImpl.backward` is autograd of either.
* ``flex``: torch's ``flex_attention`` on the CPU with the policy as one
  ``score_mod`` (:class:`FlexImpl`).
* ``jax``: ``jax.nn.dot_product_attention`` on the CPU in float32, bfloat16,
  float16 or float64 (JAX's 64-bit mode on for that call only), optional
  extra ``jax`` (:class:`JaxImpl`); soft-caps, sinks and dropout are refused
  by name (it has no argument for them).
* ``module:function``: any function ``f(query, key, value, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)``, called by
  :class:`~exactattn.verify.adapter.FunctionImpl` (the one adapter, shared
  with :mod:`exactattn.properties`); it is also handed ``alignment``, ``gqa``
  and ``dtype`` when its signature takes them (or ``**kwargs``).  Arrays are
  numpy arrays of the dtype (``arrays="numpy"``, float64/float32/float16),
  torch tensors (``arrays="torch"``, any dtype) or jax arrays
  (``arrays="jax"``, any dtype).  A function without
  ``alignment`` is called with ``is_causal=True`` and so is checked as
  whatever alignment it implements.

Both are :class:`ArrayImpl` s: the composition (:meth:`ArrayImpl.compose`) is
written once, over an array module (numpy or torch).

Every implementation is called with one :class:`~exactattn.verify.adapter.FloatCall`
(:func:`~exactattn.verify.adapter.make_call`); masks reach it in SDPA's
convention: boolean True = attend (a ``bool_drop`` mask is inverted on the
way) or additive floats (``-inf`` hides).  An implementation that raises is a
hard failure of that input, not a crash: it raises
:class:`~exactattn.verify.adapter.ImplRaised`, which ``verify`` turns into a
report (``report.raised``).

>>> from exactattn.call import Call, Policy
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
from types import SimpleNamespace

import numpy as np

from ..call.policy import UNSUPPORTED
from ..errors import InputError, shorten
from .adapter import (FloatCall, FunctionImpl, Impl, ImplRaised, bfloat16_hint, jax_array,
                      jax_scope, make_call, numpy_array, numpy_dtype, torch_tensor)

__all__ = ["ArrayImpl", "FlexImpl", "FloatCall", "FunctionImpl", "IMPLS", "Impl", "ImplRaised",
           "JaxImpl", "NumpyImpl",
           "TorchImpl", "composed", "count_flops", "flop_counts", "load_impl", "make_call",
           "rotate", "sdpa_arguments"]


class ArrayImpl(Impl):
    """Attention written once over an array module ``xp`` (numpy or torch): forward and backward.

    :meth:`compose` is the one float composition of a call, in the order of
    :func:`exactattn.reference.logits.softmax_row`; a library supplies ``xp``,
    :meth:`const` (a scalar of the dtype) and :meth:`array` (a numpy array as
    one of xp's: floats in the dtype, booleans as they are).  ``in_dtype``
    says where the default scale ``1/sqrt(E)`` and the dropout factor
    ``1/(1 - p)`` are computed: in the dtype (numpy), or in float64 and
    rounded once (torch, as SDPA does).  ``backward_name`` names
    :meth:`backward`, which :func:`~exactattn.verify.backward_impls.load_backward` hands out.
    """

    xp = np
    naive = False
    in_dtype = True

    def const(self, x, dt):
        return dt.type(x)

    array = staticmethod(numpy_array)

    def __call__(self, call: FloatCall):
        return self.forward(call)

    def compose(self, call: FloatCall, q, k, v):
        """The composition on q, k, v (arrays of the dtype, the call's shapes), as a namespace.

        Key/value heads expanded to the query heads (``gqa`` map); RoPE
        rotates q and k; ``s = scale q k^T``, ``cap * tanh(s / cap)``, + ALiBi
        bias, + an additive mask's offsets, hidden keys to ``-inf``; keys no
        query sees are zeroed in k and v (so an ``inf`` there is never
        multiplied by 0); the sink as one more column; ``p`` the softmax (the
        row maximum subtracted unless ``naive``), the sink's column dropped;
        ``w = p * factors`` under dropout; ``out = w v``; ``lse`` (``max +
        log(sum)``, over ``log 2`` in base 2) when the call asks for it.
        """
        xp, dt = self.xp, q.dtype

        def c(x):
            return self.const(x, dt)
        if q.ndim >= 3:
            idx = call.kv_index()
            k, v = k[..., idx, :, :], v[..., idx, :, :]
        if call.rope is not None:
            q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
            k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
        E = q.shape[-1]
        if self.in_dtype:
            scale = c(1) / xp.sqrt(c(E)) if call.scale is None else c(call.scale)
        else:
            scale = c(1 / np.sqrt(E) if call.scale is None else call.scale)
        s = (q @ k.swapaxes(-1, -2)) * scale          # ... x L x S
        if call.softcap is not None:
            cap = c(call.softcap)
            s = cap * xp.tanh(s / cap)
        if call.alibi is not None:
            s = s + self.array(call.alibi_bias(), dt)
        seen = call.keep() if call.positional else None
        m = call.attn_mask
        if m is not None:
            if m.dtype != bool:
                s = s + self.array(np.where(np.isneginf(m), 0, m), dt)
                m = ~np.isneginf(m)
            seen = m if seen is None else seen & m
        if seen is not None:
            s = xp.where(self.array(seen, dt), s, c(-np.inf))
            read = self.array(np.any(seen, axis=-2)[..., :, None], dt)    # keys some query sees
            k, v = xp.where(read, k, c(0)), xp.where(read, v, c(0))
        if call.sink is not None:
            s = xp.concatenate([s, xp.full(s.shape[:-1] + (1,), call.sink, dtype=dt)], -1)
        top = c(0) if self.naive else xp.amax(s, axis=-1, keepdims=True)
        e = xp.exp(s - top)
        den = e.sum(axis=-1, keepdims=True)
        p = e / den
        if call.sink is not None:
            p = p[..., :-1]
        factors = None
        if call.dropout_p is not None:
            pd = call.dropout_p
            f = c(1) / (c(1) - c(pd)) if self.in_dtype else c(1 / (1 - pd))
            factors = xp.where(self.array(call.dropout_mask, dt), f, c(0))
        w = p if factors is None else p * factors
        out, lse = w @ v, None
        if call.lse is not None:
            lse = (top + xp.log(den))[..., 0]
            lse = lse / xp.log(c(2)) if call.lse == "2" else lse
        return SimpleNamespace(out=out, lse=lse, p=p, w=w, factors=factors, k=k, v=v,
                               scale=scale)


class NumpyImpl(ArrayImpl):
    """Attention in numpy float64/float32/float16: ``softmax(scale q k^T + mask) v``; its backward.

    Args:
        naive: exponentiate the scores as they are (no row maximum
            subtracted); the float32 ``exp`` overflows above 88.72.

    Shapes: as :class:`FloatCall`; returns ... x H_q x L x E_v in the dtype.
    """

    dtypes = ("float64", "float32", "float16")

    def __init__(self, naive: bool = False):
        self.naive = naive
        self.name = "numpy-naive" if naive else "numpy"
        self.backward_name = f"{self.name} backward"

    def dtype_hint(self, dtype: str) -> str:
        return bfloat16_hint(dtype, "use --impl torch")

    def _arrays(self, call: FloatCall, *arrays):
        dt = numpy_dtype(call.dtype, self.name)
        return [a.astype(dt) for a in (call.query, call.key, call.value, *arrays)]

    def forward(self, call: FloatCall):
        """The outputs (``(outputs, lse)`` when the call asks for the log-sum-exp), in the dtype."""
        q, k, v = self._arrays(call)
        with np.errstate(all="ignore"):
            f = self.compose(call, q, k, v)
        return f.out if f.lse is None else (f.out, f.lse)

    def backward(self, call: FloatCall, d_out: np.ndarray):
        """``(dq, dk, dv)`` in the dtype, from the forward's pieces (:meth:`compose`).

        ``dV = W^T dO``, ``dP = M (dO V^T)``, ``D = rowsum(dO * O)``, ``dS = P
        (dP - D)``, ``dQ = scale dS K``, ``dK = scale dS^T Q``; grouped heads
        add their dK and dV into the key/value head they read.

        Raises:
            InputError: a soft-cap or RoPE (this backward does not differentiate them).
        """
        bad = [f for f in UNSUPPORTED["numpy_backward"] if getattr(call, f) is not None]
        if bad:
            raise InputError(f"call must have no {' or '.join(UNSUPPORTED['numpy_backward'])} for "
                             f"{self.backward_name} (got {bad[0]})")
        q, k, v, do = self._arrays(call, d_out)
        with np.errstate(all="ignore"):
            f = self.compose(call, q, k, v)
            dv = np.swapaxes(f.w, -1, -2) @ do
            dp = do @ np.swapaxes(f.v, -1, -2)
            if f.factors is not None:
                dp = dp * f.factors
            ds = f.p * (dp - (do * f.out).sum(axis=-1, keepdims=True))
            dq = (ds @ f.k) * f.scale
            dk = (np.swapaxes(ds, -1, -2) @ q) * f.scale
        if q.ndim >= 3:     # per-query-head gradients added into the key/value head each reads
            idx = call.kv_index()
            dk, dv = (_fold_heads(g, a.shape, idx) for g, a in ((dk, k), (dv, v)))
        return dq, dk, dv


def _fold_heads(g: np.ndarray, shape, idx: list[int]) -> np.ndarray:
    out = np.zeros(shape, dtype=g.dtype)
    for h, kv in enumerate(idx):
        out[..., kv, :, :] += g[..., h, :, :]
    return out


def _is_jax(x) -> bool:
    """True for a jax array (without importing jax when nothing has)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def rotate(x, angles, rope):
    """RoPE in floats: ``x`` (... x n x d, a numpy array, a tensor or a jax array) rotated
    pairwise by ``angles``.

    ``angles`` is n x d/2 float64 (:meth:`FloatCall.rope_angles`); cos and sin are
    taken in float64 and cast to x's dtype; ``(a, b) -> (a cos - b sin, a sin + b cos)``.
    """
    pairs = rope.pairs(x.shape[-1])
    ia, ib = [a for a, _, _ in pairs], [b for _, b, _ in pairs]
    c, s = np.cos(angles), np.sin(angles)
    if _is_jax(x):          # jax arrays are immutable: two functional updates
        import jax.numpy as jnp
        c, s = jnp.asarray(c, dtype=x.dtype), jnp.asarray(s, dtype=x.dtype)
        xa, xb = x[..., ia], x[..., ib]
        return x.at[..., ia].set(xa * c - xb * s).at[..., ib].set(xa * s + xb * c)
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


class TorchImpl(ArrayImpl):
    """``torch.nn.functional.scaled_dot_product_attention`` on the CPU (any of the four dtypes),
    and its autograd backward.

    A call with a modifier SDPA cannot take (:func:`composed`) runs
    :meth:`~ArrayImpl.compose` in torch ops instead.

    Args:
        lower_right_bias: express ``bottom_right`` causal attention as
            ``causal_lower_right(L, S)`` (default); False folds it into a
            boolean mask instead (``FlopCounterMode`` cannot trace the bias).

    Raises:
        InputError: torch is not installed (``pip install 'exactattn[torch]'``).
    """

    name = "torch"
    in_dtype = False

    def __init__(self, *, lower_right_bias: bool = True):
        self.lower_right_bias = lower_right_bias
        try:
            import torch
        except ImportError:
            raise InputError("impl torch needs PyTorch (got none installed); "
                             "pip install 'exactattn[torch]'") from None
        self.xp = torch
        self.name = f"torch {torch.__version__} scaled_dot_product_attention (CPU)"
        self.backward_name = self.name.replace("(CPU)", "backward (CPU autograd)")

    def const(self, x, dt):
        return self.xp.tensor(x, dtype=dt)

    array = staticmethod(torch_tensor)

    def _tensors(self, call: FloatCall):
        dt = getattr(self.xp, call.dtype)
        return [self.array(a, dt) for a in (call.query, call.key, call.value)]

    def forward(self, call: FloatCall):
        """The outputs as float64 numpy arrays (``(outputs, lse)`` when the call asks for it)."""
        q, k, v = self._tensors(call)
        if not composed(call):
            return self.attend(call, q, k, v).to(self.xp.float64).numpy()
        f = self.compose(call, q, k, v)
        out = f.out.to(self.xp.float64).numpy()
        return out if f.lse is None else (out, f.lse.to(self.xp.float64).numpy())

    def backward(self, call: FloatCall, d_out: np.ndarray):
        """``(dq, dk, dv)`` as float64: autograd through :meth:`attend`.

        Raises:
            ImplRaised: this build does not run the backward.
        """
        q, k, v = (t.requires_grad_(True) for t in self._tensors(call))
        out = self.attend(call, q, k, v)
        try:
            out.backward(self.array(d_out, out.dtype))
        except Exception as e:       # a backward this build does not run
            raise ImplRaised(e) from e
        return tuple(t.grad.to(self.xp.float64).numpy() for t in (q, k, v))

    def attend(self, call: FloatCall, q, k, v):
        """SDPA of the call on tensors q, k, v of its dtype: the output tensor (autograd kept).

        What :meth:`backward` differentiates.

        Raises:
            ImplRaised: SDPA refused the call.
        """
        import torch.nn.functional as F
        if composed(call):
            return self.compose(call, q, k, v).out
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


class FlexImpl(TorchImpl):
    """``torch.nn.attention.flex_attention.flex_attention`` on the CPU, forward and autograd backward.

    The policy becomes one ``score_mod``: the score FlexAttention hands it is
    already ``scale q k^T``; the mod applies ``cap * tanh(s / cap)`` and adds
    one bias tensor (ALiBi + an additive mask's offsets, ``-inf`` on every
    key the causal rule, a window, a query offset or a boolean mask hides),
    indexed ``[b, h, q, kv]``.  RoPE rotates q and k first; GQA ``interleave``
    is ``enable_gqa=True``, ``tile`` repeats k and v.  The log-sum-exp is
    ``return_lse=True`` (natural log; over ``log 2`` in base 2).  Sinks and
    dropout are refused by name (:data:`~exactattn.call.policy.UNSUPPORTED`
    ``["flex"]``).  On the CPU torch runs it unfused and warns once; that
    warning is silenced here.

    Raises:
        InputError: torch is not installed, or the call has a sink or dropout.
    """

    def __init__(self):
        super().__init__()
        import torch
        self.name = f"torch {torch.__version__} flex_attention (CPU)"
        self.backward_name = self.name.replace("(CPU)", "backward (CPU autograd)")

    def _refuse(self, call: FloatCall):
        got = {"sink": call.sink, "dropout": call.dropout_p}
        bad = [f for f in UNSUPPORTED["flex"] if got.get(f) is not None]
        if bad:
            raise InputError(f"call must have no {' or '.join(UNSUPPORTED['flex'])} for impl flex "
                             f"(got {bad[0]}); use --impl torch")

    def forward(self, call: FloatCall):
        """The outputs as float64 numpy arrays (``(outputs, lse)`` when the call asks for it)."""
        q, k, v = self._tensors(call)
        out, lse = self.attend(call, q, k, v, with_lse=True)
        out = out.detach().to(self.xp.float64).numpy()
        if call.lse is None:
            return out
        lse = lse.detach().to(self.xp.float64)
        if call.lse == "2":
            lse = lse / np.log(2)
        return out, lse.numpy()

    def attend(self, call: FloatCall, q, k, v, *, with_lse: bool = False):
        """flex_attention of the call on tensors of its dtype: the output (and lse) tensors."""
        import warnings
        import torch
        from torch.nn.attention.flex_attention import flex_attention
        self._refuse(call)
        dt = q.dtype
        if call.rope is not None:
            q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
            k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
        gqa = False
        if call.enable_gqa:
            if call.gqa == "interleave":
                gqa = True
            else:
                reps = q.shape[-3] // k.shape[-3]
                shape = [1] * k.dim()
                shape[-3] = reps
                k, v = k.repeat(*shape), v.repeat(*shape)
        squeeze = q.dim()
        while q.dim() < 4:      # flex_attention takes B x H x L x E only
            q, k, v = q[None], k[None], v[None]
        L, S = q.shape[-2], k.shape[-2]
        bias = np.zeros((L, S))
        if call.alibi is not None:
            bias = bias + call.alibi_bias()
        seen = call.keep() if call.positional else None
        m = call.attn_mask
        if m is not None:
            if m.dtype != bool:
                bias = bias + np.where(np.isneginf(m), 0, m)
                m = ~np.isneginf(m)
            seen = m if seen is None else seen & m
        if seen is not None:
            bias = np.where(seen, bias, -np.inf)
        bias = np.broadcast_to(bias, (1,) * (4 - np.ndim(bias)) + np.shape(bias))
        bias = np.broadcast_to(bias, (q.shape[0], q.shape[1], L, S))
        b_t = torch.from_numpy(np.array(bias, copy=True)).to(dt)   # a broadcast view is read-only
        cap = None if call.softcap is None else torch.tensor(call.softcap, dtype=dt)

        def score_mod(score, b, h, qi, kv):
            if cap is not None:
                score = cap * torch.tanh(score / cap)
            return score + b_t[b, h, qi, kv]
        kwargs = {"scale": call.scale} if call.scale is not None else {}
        try:
            with warnings.catch_warnings():   # "flex_attention called without torch.compile()"
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", FutureWarning)    # return_lse's new spelling
                out, lse = flex_attention(q, k, v, score_mod=score_mod, enable_gqa=gqa,
                                          return_lse=True, **kwargs)
        except Exception as e:
            raise ImplRaised(e) from e
        for _ in range(4 - squeeze):
            out, lse = out[0], lse[0]
        return (out, lse) if with_lse else out


class JaxImpl(Impl):
    """``jax.nn.dot_product_attention`` on the CPU (float32, bfloat16, float16, float64) and
    its backward by ``jax.vjp``.

    The call is mapped onto the function's own arguments: ``scale`` when the
    policy sets one (else its default ``1/sqrt(E)``), ``is_causal=True`` for
    causal attention and ``local_window_size=(left, right)`` for a window
    when every query sits at its own index (query i at key position i:
    JAX's causal mask is ``tril(ones(T, S))``, i.e. ``top_left``; an unbounded
    side is ``L + S``); otherwise (``bottom_right`` with L != S, a query
    offset) the causal rule and the window travel as its boolean ``mask``
    (True = attend), with an explicit boolean mask and an additive mask's
    ``-inf`` entries.  ALiBi and an additive mask's finite offsets are its
    ``bias`` (in the dtype).  RoPE rotates q and k first, in jax ops.  Heads
    are its ``B x T x N x H`` layout (the call's ``B x H x L x E``
    transposed); GQA ``interleave`` is its own grouping (query head n reads
    key/value head ``n // (N/K)``), ``tile`` repeats the key/value heads
    first.  The log-sum-exp is ``return_residual=True`` (natural log, in the
    dtype; over ``log 2`` in float64 for base 2).  It has no padding
    lengths in the call model, so ``query_seq_lengths`` and
    ``key_value_seq_lengths`` are never passed.  Run eagerly (no
    ``jax.jit``), on the CPU device; float64 inside ``jax.enable_x64(True)``
    for this call only (:func:`~exactattn.verify.adapter.jax_scope`).  JAX
    computes the softmax in float32 whatever the dtype and hides keys with a
    large finite negative score (an empty row is uniform: ``--like jax``).

    JAX takes value shaped like key; when E_v != E the narrower side gets
    zero columns (value, or query and key with the scale of the real E
    passed), which add exact zeros, and the output keeps its E_v columns.

    Shapes: as :class:`FloatCall`; returns ... x H_q x L x E_v as float64
    numpy arrays (the dtype's floats).

    Raises:
        InputError: JAX is not installed; the call has a soft-cap, a sink or
            dropout (:data:`~exactattn.call.policy.UNSUPPORTED` ``["jax"]``).
    """

    dtypes = ("float64", "float32", "float16", "bfloat16")

    def __init__(self):
        try:
            import jax
        except ImportError:
            raise InputError("impl jax needs JAX (got none installed); "
                             "pip install 'exactattn[jax]'") from None
        self.name = f"jax {jax.__version__} dot_product_attention (CPU)"
        self.backward_name = f"jax {jax.__version__} dot_product_attention backward (CPU jax.vjp)"

    def __call__(self, call: FloatCall):
        return self.forward(call)

    def _refuse(self, call: FloatCall):
        got = {"softcap": call.softcap, "sink": call.sink, "dropout": call.dropout_p}
        bad = [f for f in UNSUPPORTED["jax"] if got.get(f) is not None]
        if bad:
            raise InputError(f"call must have no {', '.join(UNSUPPORTED['jax'])} for impl jax "
                             f"(got {bad[0]}); jax.nn.dot_product_attention has no argument "
                             "for it, use --impl torch")

    def _arrays(self, call: FloatCall, *more):
        import jax.numpy as jnp
        dt = getattr(jnp, call.dtype)
        return [jax_array(a, dt) for a in (call.query, call.key, call.value, *more)]

    def forward(self, call: FloatCall):
        """The outputs as float64 numpy arrays (``(outputs, lse)`` when the call asks for it)."""
        self._refuse(call)
        with jax_scope(call.dtype):
            q, k, v = self._arrays(call)
            out, lse = self.attend(call, q, k, v, with_lse=True)
            out = np.asarray(out).astype(np.float64)
            if call.lse is None:
                return out
            lse = np.asarray(lse).astype(np.float64)
        return out, (lse / np.log(2) if call.lse == "2" else lse)

    def backward(self, call: FloatCall, d_out: np.ndarray):
        """``(dq, dk, dv)`` as float64: ``jax.vjp`` of :meth:`attend` at ``d_out`` (in the dtype).

        Raises:
            ImplRaised: JAX failed on the call.
        """
        import jax
        self._refuse(call)
        with jax_scope(call.dtype):
            q, k, v, do = self._arrays(call, d_out)
            try:
                _, pull = jax.vjp(lambda q, k, v: self.attend(call, q, k, v), q, k, v)
                grads = pull(do)
            except ImplRaised:
                raise
            except Exception as e:     # a backward JAX does not run
                raise ImplRaised(e) from e
            return tuple(np.asarray(g).astype(np.float64) for g in grads)

    def attend(self, call: FloatCall, q, k, v, *, with_lse: bool = False):
        """``jax.nn.dot_product_attention`` of the call on jax arrays q, k, v of its dtype and
        shapes (inside :func:`~exactattn.verify.adapter.jax_scope`): the output array (with the
        lse array when ``with_lse``), what :meth:`backward` differentiates.

        Raises:
            ImplRaised: JAX refused the call.
        """
        import jax
        import jax.numpy as jnp
        dt = q.dtype
        shape = q.shape[:-1] + (v.shape[-1],)
        q, k, v = (a.reshape((1,) * (4 - a.ndim) + a.shape) for a in (q, k, v))
        if call.rope is not None:
            q = rotate(q, call.rope_angles(call.query_positions()), call.rope)
            k = rotate(k, call.rope_angles(range(k.shape[-2])), call.rope)
        if call.enable_gqa and call.gqa == "tile":
            reps = q.shape[1] // k.shape[1]
            k, v = jnp.tile(k, (1, reps, 1, 1)), jnp.tile(v, (1, reps, 1, 1))
        E, E_v = q.shape[-1], v.shape[-1]
        kwargs: dict = {"scale": call.scale} if call.scale is not None else \
            {} if E_v <= E else {"scale": 1 / np.sqrt(E)}      # JAX's default, of the real E

        def widen(a, width):        # zero columns: exact zero terms in every dot product
            return jnp.pad(a, [(0, 0)] * 3 + [(0, width - a.shape[-1])])
        if E_v < E:
            v = widen(v, E)
        elif E_v > E:
            q, k = widen(q, E_v), widen(k, E_v)
        L, S = q.shape[-2], k.shape[-2]
        bias, keep = call.alibi_bias(), call.attn_mask
        if keep is not None and keep.dtype != bool:        # additive: offsets + hidden keys
            offsets = np.where(np.isneginf(keep), 0, keep)
            bias = offsets if bias is None else bias + offsets
            keep = ~np.isneginf(keep)
        if call.query_positions() == list(range(L)):       # JAX's own (top-left) positions
            if call.is_causal:
                kwargs["is_causal"] = True
            if call.window is not None:
                kwargs["local_window_size"] = tuple(L + S if w is None else int(w)
                                                    for w in call.window)
        elif call.positional:
            keep = call.keep() if keep is None else keep & call.keep()

        def four(a, dtype):
            return None if a is None else jnp.asarray(a.reshape((1,) * (4 - a.ndim) + a.shape),
                                                      dtype=dtype)
        try:
            got = jax.nn.dot_product_attention(
                *(a.transpose(0, 2, 1, 3) for a in (q, k, v)), bias=four(bias, dt),
                mask=four(keep, bool), return_residual=with_lse, **kwargs)
        except Exception as e:      # a dtype or shape this JAX refuses
            raise ImplRaised(e) from e
        out, lse = got if with_lse else (got, None)
        out = out.transpose(0, 2, 1, 3)[..., :E_v].reshape(shape)
        if not with_lse:
            return out
        return out, lse.transpose(0, 2, 1).reshape(shape[:-1])


IMPLS = ("numpy", "numpy-naive", "torch", "flex", "jax")


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORMS = "numpy, numpy-naive, torch, flex, jax or module:function"


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
    """An :class:`Impl` from a name (``numpy``, ``numpy-naive``, ``torch``, ``flex``, ``jax``,
    ``module:function``) or a callable.

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
    exactattn.errors.InputError: impl must be numpy, numpy-naive, torch, flex, jax or module:function (got 'cuda')
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
    if impl == "flex":
        return FlexImpl()
    if impl == "jax":
        return JaxImpl()
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
