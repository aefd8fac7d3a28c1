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

Each built-in kernel is a row of :data:`KERNELS` (the class that runs it, the
library it imports, the options it takes, its row of the policy's capability
table :data:`~exactattn.call.policy.UNSUPPORTED` and the refusal's words) and an
:class:`ArrayImpl` with a small ``attend`` of its own: the forward, the backward
and the refusal are :class:`ArrayImpl`'s, written once, and so is the float
composition numpy and torch run (:meth:`ArrayImpl.compose`, over an array module).

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

import collections
import contextlib
import functools
import importlib
import os
import re
import sys
from types import SimpleNamespace

import numpy as np

from ..call.inputs import empty_rows
from ..call.policy import UNSUPPORTED
from ..errors import InputError, shorten
from .adapter import FloatCall, FunctionImpl, Impl, ImplRaised, as_array, check_dtype, make_call

__all__ = ["FlexImpl", "load_impl"]


def _need(impl: str):
    """The library kernel ``impl`` runs on (its row of :data:`KERNELS`), imported; refused when
    absent."""
    module, what, fix = KERNELS[impl].needs
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(f"impl {impl} needs {what} (got none installed); {fix}") from None


class ArrayImpl(Impl):
    """A kernel run in an array library (numpy, torch, jax): its row of :data:`KERNELS`, the
    one forward and backward around its ``attend``, and the float composition once.

    :meth:`compose` is the one float composition of a call, in the order of
    :func:`exactattn.reference.logits.softmax_row`, over ``xp`` (numpy or torch); a library
    supplies ``xp`` and ``on`` (where its arrays live: torch's device), so :meth:`const` (a
    scalar of the dtype) and :meth:`array` (:func:`~exactattn.verify.adapter.as_array`) make
    its arrays.  ``in_dtype`` says where the
    default scale ``1/sqrt(E)`` and the dropout factor ``1/(1 - p)`` are computed: in the
    dtype (numpy), or in float64 and rounded once (torch, as SDPA does).  A kernel supplies
    :meth:`attend` on its own arrays (:meth:`inputs`, inside :meth:`scope`), the outputs
    read back by :meth:`host`; ``natural_lse``: its lse is in natural log (base 2 taken
    here, in float64), not already in the call's base.  ``backward_name`` names
    :meth:`backward`, which :func:`~exactattn.verify.backward_impls.load_backward` hands out.
    """

    xp = np
    naive = False
    in_dtype = True
    kernel = "numpy"
    natural_lse = False

    def refuse(self, call: FloatCall, bad=()) -> None:
        """Refuse a call that sets a field the kernel's row of :data:`KERNELS` refuses (its
        row of :data:`~exactattn.call.policy.UNSUPPORTED`; ``bad``: what else was found)."""
        row = KERNELS[self.kernel]
        names = UNSUPPORTED.get(row.refuses, ())
        bad = [*bad, *(call.policy.unsupported(row.refuses) if names else ())]
        if bad:
            raise InputError(f"call must have no {row.listed or ' or '.join(names)} for "
                             f"impl {self.kernel} (got {bad[0]}){row.fix}")

    on: dict = {}

    def const(self, x, dt):
        return self.xp.asarray(x, dtype=dt, **self.on)

    def array(self, a, dt):
        return as_array(self.xp, a, dt, **self.on)

    def inputs(self, call: FloatCall, *more) -> list:
        """query, key, value (and ``more``) as the kernel's arrays of the call's dtype."""
        check_dtype(self, call.dtype)
        return [self.array(a, getattr(self.xp, call.dtype)) for a in (call.query, call.key, call.value, *more)]

    def host(self, a):
        """A result read back (numpy: as it is, in the dtype)."""
        return a

    def attend(self, call: FloatCall, q, k, v):
        """The kernel on its arrays: ``(output, lse)`` (lse None when the call asks none)."""
        f = self.compose(call, q, k, v)
        return f.out, f.lse

    def forward(self, call: FloatCall):
        """The outputs (``(outputs, lse)`` when the call asks for the log-sum-exp)."""
        self.refuse(call)
        with self.scope(call.dtype):
            out, lse = (None if a is None else self.host(a) for a in
                        self.attend(call, *self.inputs(call)))
            if call.lse is None:
                return out
            return out, lse / np.log(2) if self.natural_lse and call.lse == "2" else lse

    def backward(self, call: FloatCall, d_out: np.ndarray, d_lse=None):
        """``(dq, dk, dv)`` read back: :meth:`grad` of :meth:`attend` at ``d_out`` (and
        ``d_lse``, the rows' natural log-sum-exps' upstream gradient)."""
        self.refuse(call)
        with self.scope(call.dtype):
            grads = self.grad(call, *self.inputs(call), d_out, d_lse)
            return tuple(self.host(g) for g in grads)

    def compose(self, call: FloatCall, q, k, v):
        """The composition on q, k, v (arrays of the dtype, the call's shapes), as a namespace.

        Key/value heads expanded to the query heads (``gqa`` map); RoPE
        rotates q and k; ``s = scale q k^T``, ``cap * tanh(s / cap)`` (``t`` the tanh), +
        ALiBi bias, + an additive mask's offsets, hidden keys to ``-inf``; keys no
        query sees are zeroed in k and v (so an ``inf`` there is never
        multiplied by 0); the sink as one more column; ``p`` the softmax (the
        row maximum subtracted unless ``naive``), the sink's column dropped, a
        query that sees no key given the call's empty row (shares 0 under
        ``zero``, 1/S under ``uniform``, NaN under ``nan``, and lse ``-inf``, NaN under
        ``nan``; ``naive``: 0/0, NaN);
        ``w = p * factors`` under dropout; ``out = w v``; ``lse`` (``max +
        log(sum)``, over ``log 2`` in base 2) when the call asks for it.
        """
        xp, dt = self.xp, q.dtype

        def c(x):
            return self.const(x, dt)
        if q.ndim >= 3:
            idx = call.kv_index()
            k, v = k[..., idx, :, :], v[..., idx, :, :]
        q, k = rotated(call, q, k)
        E = q.shape[-1]
        if self.in_dtype:
            scale = c(1) / xp.sqrt(c(E)) if call.scale is None else c(call.scale)
        else:
            scale = c(1 / np.sqrt(E) if call.scale is None else call.scale)
        s = (q @ k.swapaxes(-1, -2)) * scale          # ... x L x S
        cap = t = None if call.softcap is None else c(call.softcap)
        if cap is not None:
            t = xp.tanh(s / cap)
            s = cap * t
        offsets, seen = call.visibility()
        for bias in (call.alibi_bias(), offsets):     # ALiBi, then an additive mask's offsets
            if bias is not None:
                s = s + self.array(bias, dt)
        # queries that see no key (and no sink) answer as the policy's empty row says; the
        # naive kernel keeps the textbook 0/0 = NaN (the masked-rows bug of public reports)
        empty = None if seen is None or self.naive else empty_rows(call.policy, seen)[..., None]
        empty = empty if empty is not None and empty.any() else None
        if seen is not None:
            s = xp.where(self.array(seen, dt), s, c(-np.inf))
            if empty is None or call.policy.empty_row != "uniform":    # a uniform row reads every key
                read = self.array(np.any(seen, axis=-2)[..., :, None], dt)   # keys seen
                k, v = xp.where(read, k, c(0)), xp.where(read, v, c(0))
                if t is not None:       # the tanh of a key read by no query: of q . 0
                    t = xp.where(read.swapaxes(-1, -2), t, c(0))
        if call.sink is not None:
            sink = xp.full(s.shape[:-1] + (1,), call.sink, dtype=dt, **self.on)
            s = xp.concatenate([s, sink], -1)
        top = c(0) if self.naive else xp.amax(s, axis=-1, keepdims=True)
        e = xp.exp(s - top)
        den = e.sum(axis=-1, keepdims=True)
        p = e / den
        if call.sink is not None:
            p = p[..., :-1]
        if empty is not None:       # the empty row's shares and lse, one fill
            hit = self.array(empty, dt)
            row = call.policy.empty_row
            share, log = (c(np.nan), c(np.nan)) if row == "nan" else \
                (c(1) / c(p.shape[-1]) if row == "uniform" else c(0), c(-np.inf))
            p = xp.where(hit, share, p)
        factors = None
        if call.dropout_p is not None:
            pd = call.dropout_p
            f = c(1) / (c(1) - c(pd)) if self.in_dtype else c(1 / (1 - pd))
            factors = xp.where(self.array(call.dropout_mask, dt), f, c(0))
        w = p if factors is None else p * factors
        out, lse = w @ v, None
        if call.lse is not None:
            lse = top + xp.log(den)
            lse = (lse if empty is None else xp.where(hit, log, lse))[..., 0]
            lse = lse / xp.log(c(2)) if call.lse == "2" else lse
        return SimpleNamespace(out=out, lse=lse, p=p, w=w, factors=factors, q=q, k=k, v=v,
                               scale=scale, t=t)


class NumpyImpl(ArrayImpl):
    """Attention in numpy float64/float32/float16: ``softmax(scale q k^T + mask) v``; its backward.

    Args:
        naive: exponentiate the scores as they are (no row maximum
            subtracted); the float32 ``exp`` overflows above 88.72.

    Shapes: as :class:`FloatCall`; returns ... x H_q x L x E_v in the dtype.
    """

    dtypes, bfloat16_fix = ("float64", "float32", "float16"), "use --impl torch"

    def __init__(self, naive: bool = False):
        self.naive = naive
        self.name = "numpy-naive" if naive else "numpy"
        self.backward_name = f"{self.name} backward"

    def scope(self, dtype: str):
        return np.errstate(all="ignore")

    def grad(self, call: FloatCall, q, k, v, d_out, d_lse=None):
        """``(dq, dk, dv)`` in the dtype, from the forward's pieces (:meth:`compose`).

        ``dV = W^T dO``, ``dP = M (dO V^T)``, ``D = rowsum(dO * O)``, ``dS = P
        (dP - D + dlse)`` (``d_lse``: the rows' natural log-sum-exps' upstream gradient),
        times ``1 - tanh^2(s / cap)`` under a soft-cap, ``dQ = scale dS K``, ``dK = scale dS^T
        Q`` (q and k rotated under RoPE, and dQ and dK turned back by R^T); grouped heads
        add their dK and dV into the key/value head they read.
        """
        do, f = self.array(d_out, q.dtype), self.compose(call, q, k, v)
        dv = np.swapaxes(f.w, -1, -2) @ do
        dp = do @ np.swapaxes(f.v, -1, -2)
        if f.factors is not None:
            dp = dp * f.factors
        dp = dp - (do * f.out).sum(axis=-1, keepdims=True)
        ds = f.p * (dp if d_lse is None else dp + self.array(d_lse, q.dtype)[..., None])
        if f.t is not None:        # (cap tanh(s / cap))' = 1 - tanh^2(s / cap)
            ds = ds * (1 - f.t * f.t)
        dq, dk = rotated(call, (ds @ f.k) * f.scale,
                         (np.swapaxes(ds, -1, -2) @ f.q) * f.scale, -1)
        if q.ndim >= 3:     # per-query-head gradients added into the key/value head each reads
            folded = [np.zeros(a.shape, dtype=g.dtype) for g, a in ((dk, k), (dv, v))]
            for out, g in zip(folded, (dk, dv)):      # in head order
                np.add.at(out, (slice(None),) * (g.ndim - 3) + (call.kv_index(),), g)
            dk, dv = folded
        return dq, dk, dv


#: --backend names: torch.nn.attention.SDPBackend members (``sdpa_kernel`` allows only that one)
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def torch_device(device: str):
    """The ``torch.device`` of ``cpu`` or ``cuda`` (``cuda:N``), refused where torch cannot use it.

    Raises:
        InputError: another name, or CUDA on a machine where
            ``torch.cuda.is_available()`` is false (the message says so).

    >>> torch_device("cpu").type
    'cpu'
    """
    import torch
    text = str(device)
    if text != "cpu" and not re.match(r"^cuda(:[0-9]+)?$", text):
        raise InputError(f"device must be cpu or cuda (got {shorten(text, quote=True)})")
    if text.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"device {text}: torch.cuda.is_available() is false on this machine "
                             f"(torch {torch.__version__}); run on a machine with a CUDA GPU, "
                             "or use device cpu")
        index = int(text.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise InputError(f"device {text} must name one of the {torch.cuda.device_count()} "
                             f"CUDA devices (got index {index})")
    return torch.device(text)


def _device_label(device) -> str:
    return "CPU" if device.type == "cpu" else f"CUDA {device}"


class TorchImpl(ArrayImpl):
    """``torch.nn.functional.scaled_dot_product_attention`` on the CPU or a CUDA device (any of the
    four dtypes), and its autograd backward.

    A call with a modifier SDPA cannot take (soft-cap, sink, dropout, log-sum-exp) runs
    :meth:`~ArrayImpl.compose` in torch ops instead.  Inputs are moved to the
    device and the results read back to the CPU as float64 (exactly their floats).

    Args:
        lower_right_bias: express ``bottom_right`` causal attention as
            ``causal_lower_right(L, S)`` (default); False folds it into a
            boolean mask instead (``FlopCounterMode`` cannot trace the bias).
        device: ``cpu`` (default), ``cuda`` or ``cuda:N`` (:func:`torch_device`).
        backend: None (torch chooses), or ``flash``, ``efficient``, ``cudnn``,
            ``math``: that ``SDPBackend`` alone, through
            ``torch.nn.attention.sdpa_kernel``.  ``dtypes`` are then the ones
            torch selects it for on the device (probed on a 1 x 1 x 4 x 8
            call); a call it cannot take is refused by name
            (:class:`~exactattn.errors.InputError`), never reported as a wrong
            answer.  A backend needs a call SDPA takes as it is (no
            soft-cap, sink, dropout or log-sum-exp).

    Raises:
        InputError: torch is not installed (``pip install 'exactattn[torch]'``),
            a device torch cannot use, a backend it selects for no dtype there.
    """

    name = kernel = "torch"
    in_dtype = False

    def __init__(self, *, lower_right_bias: bool = True, device: str = "cpu",
                 backend: str | None = None):
        self.lower_right_bias = lower_right_bias
        self.xp = _need("torch")
        self.device = torch_device(device)
        self.on = {"device": self.device}
        self.backend = None
        if backend is not None:
            self._select(backend)
        self._named("scaled_dot_product_attention" + ("" if backend is None else f" [{backend}]"))

    def _named(self, kernel: str, tail: str = "") -> None:
        """``torch <version> <kernel> (<device>)<tail>``, and its autograd backward's name."""
        where = _device_label(self.device)
        self.name = f"torch {self.xp.__version__} {kernel} ({where}){tail}"
        self.backward_name = self.name.replace(f"({where})", f"backward ({where} autograd)")

    def _select(self, backend: str) -> None:
        """Probe which dtypes torch selects ``backend`` for on the device; refuse it if none."""
        from torch.nn.attention import SDPBackend
        if backend not in BACKENDS:
            raise InputError(f"backend must be {', '.join(BACKENDS)} (got "
                             f"{shorten(str(backend), quote=True)})")
        self.backend = getattr(SDPBackend, BACKENDS[backend])
        self.backend_name = backend
        why = {dt: _refusal(backend, dt, self.device) for dt in self.dtypes}
        ok = [dt for dt, w in why.items() if w is None]
        if not ok:
            raise InputError(f"backend {backend}: torch {self.xp.__version__} cannot select "
                             f"SDPBackend.{BACKENDS[backend]} on {_device_label(self.device)} "
                             f"for any dtype (torch: {why['float32']}); use backend "
                             f"{_cpu_backends() if self.device.type == 'cpu' else 'math'} here")
        self.dtypes, self._why = tuple(ok), why

    def dtype_hint(self, dtype: str) -> str:
        why = getattr(self, "_why", {}).get(dtype)
        return "" if why is None else (f"; torch cannot select SDPBackend."
                                       f"{BACKENDS[self.backend_name]} for it here ({why})")

    def host(self, t) -> np.ndarray:
        """A result tensor read back to the CPU as float64 numpy (exactly its floats)."""
        return t.detach().to("cpu").to(self.xp.float64).numpy()

    def grad(self, call: FloatCall, q, k, v, d_out, d_lse=None) -> tuple:
        """``(dq, dk, dv)`` tensors: autograd through :meth:`attend` (of ``sum dO O + sum
        dlse lse`` with ``d_lse``, the rows' natural log-sum-exps' upstream gradient).

        Raises:
            ImplRaised: this build does not run the backward.
        """
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
        outs = self.attend(call, q, k, v)[:1 if d_lse is None else 2]
        try:
            with _kernel(self.backend):
                self.xp.autograd.backward(outs, [self.array(g, o.dtype)
                                                 for g, o in zip((d_out, d_lse), outs)])
        except Exception as e:       # a backward this build does not run
            raise self._raised(e, call) from e
        return q.grad, k.grad, v.grad

    def _raised(self, e: Exception, call: FloatCall) -> Exception:
        """What torch raised: a refusal by name when the chosen backend cannot take the call
        (SDPA's ``No available kernel``), else the implementation's failure (:class:`ImplRaised`)."""
        text = str(e) if isinstance(e, RuntimeError) else ""
        if self.backend is not None and ("No available kernel" in text or
                                         "No viable backend" in text):
            return InputError(f"backend {self.backend_name}: torch {self.xp.__version__} cannot "
                              f"select SDPBackend.{BACKENDS[self.backend_name]} for this call in "
                              f"{call.dtype} on {_device_label(self.device)} (torch: "
                              f"{_kernel_reason(e)}); use another backend, or drop "
                              "--backend")
        return ImplRaised(e)

    def attend(self, call: FloatCall, q, k, v):
        """SDPA of the call on tensors q, k, v of its dtype: the output tensor and None
        (autograd kept), or torch's composition's output and lse (a call SDPA cannot take).

        What :meth:`backward` differentiates.

        Raises:
            ImplRaised: SDPA refused the call.
            InputError: the chosen backend cannot take the call.
        """
        got = next((f for f in ("softcap", "sink", "dropout_p", "lse")   # SDPA has no argument
                    if getattr(call, f) is not None), None)                # for these
        if got is not None:
            if self.backend is not None:
                raise InputError(f"backend {self.backend_name} must run a call SDPA takes as it "
                                 f"is (got {got.replace('_p', '')}, which SDPA has no argument "
                                 "for); drop --backend to check torch's composition in torch ops")
            return ArrayImpl.attend(self, call, q, k, v)
        q, k, v, kwargs = sdpa_arguments(call, q, k, v, lower_right_bias=self.lower_right_bias)
        rank = q.dim()
        if self.backend is not None:      # the fused kernels take B x H x L x E only
            q, k, v = four_d(q, k, v)
        try:
            out = _sdpa(self.backend, q, k, v, **kwargs)
            return _unfour(rank, out)[0] if out.dim() > rank else out, None
        except Exception as e:     # e.g. a dtype or shape this build of SDPA refuses
            raise self._raised(e, call) from e


def _sdpa(backend, q, k, v, **kwargs):
    """``scaled_dot_product_attention`` under ``sdpa_kernel(backend)`` (None: torch chooses),
    its warnings recorded (a RuntimeError carries them as ``caught``, for
    :func:`_kernel_reason`)."""
    import warnings
    import torch.nn.functional as F
    with warnings.catch_warnings(record=True) as caught, _kernel(backend):
        if backend is not None:
            warnings.simplefilter("always")
        try:
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
        except RuntimeError as e:
            e.caught = list(caught)
            raise


def _kernel(backend):
    """``sdpa_kernel(backend)`` when a backend is chosen, else a no-op context."""
    from torch.nn.attention import sdpa_kernel
    return contextlib.nullcontext() if backend is None else sdpa_kernel(backend)


def _kernel_reason(e: Exception) -> str:
    """Why torch selected no kernel: its first warning about the kernel, else the error, one line."""
    for w in getattr(e, "caught", ()):
        text = " ".join(str(w.message).split())
        if "not used because" in text or "requires" in text or "support" in text:
            return shorten(text, 160)
    return shorten(" ".join(str(e).split()), 160)


def _refusal(backend: str, dtype: str, device) -> str | None:
    """Why torch selects no ``backend`` kernel for a 1 x 1 x 4 x 8 call of ``dtype`` on
    ``device`` (:func:`_kernel_reason`), or None when it selects one."""
    import torch
    from torch.nn.attention import SDPBackend
    q = torch.ones(1, 1, 4, 8, dtype=getattr(torch, dtype), device=device)
    try:
        _sdpa(getattr(SDPBackend, BACKENDS[backend]), q, q, q)
    except RuntimeError as e:
        return _kernel_reason(e)
    return None


def _cpu_backends() -> str:
    """The backends torch selects on the CPU, probed: ``math or flash`` with torch 2.13."""
    ok = [name for name in BACKENDS if _refusal(name, "float32", "cpu") is None]
    return " or ".join(sorted(ok, key=lambda n: n != "math")) or "none"


def rotated(call: FloatCall, q, k, turn: int = 1):
    """``(q, k)`` rotated by the call's RoPE (queries at their positions, keys at 0..S-1), or
    as they are without one: numpy, torch or jax arrays, ... x L x E and ... x S x E.
    ``turn=-1`` turns them back (``R^T``, with yarn's factor: a gradient through the rotation).

    Angles ``pos * theta^(-2k/d)`` in float64, one row per position and one column per pair;
    cos and sin taken in float64 (times yarn's attention factor under a scaling) and cast to
    the arrays' dtype; each pair ``(a, b) -> (a cos - b sin, a sin + b cos)``.
    """
    rope = call.policy.rope
    if rope is None:
        return q, k
    L, S, E = call.query.shape[-2], call.key.shape[-2], call.query.shape[-1]
    freq = np.array(rope.for_call(call.policy, L, S).float_frequencies(E))
    pairs = rope.pairs(E)
    ia, ib = [a for a, _, _ in pairs], [b for _, b, _ in pairs]
    order = list(range(E))              # x's columns, the turned pairs' in their places
    for n, (a, b) in enumerate(zip(ia, ib)):
        order[a], order[b] = E + n, E + len(ia) + n

    def turned(x, positions):
        angles = turn * (np.asarray(positions, dtype=np.float64)[:, None] * freq[None, :])
        c, s = np.cos(angles), np.sin(angles)
        if rope.scaling is not None:      # yarn's attention factor multiplies cos and sin
            c, s = c * rope.float_gain(), s * rope.float_gain()
        xp = _xp(x)
        kw = {"device": x.device} if xp is sys.modules.get("torch") else {}
        c, s = (xp.asarray(t, dtype=x.dtype, **kw) for t in (c, s))
        xa, xb = x[..., ia], x[..., ib]
        return xp.concatenate([x, xa * c - xb * s, xa * s + xb * c], -1)[..., order]
    return turned(q, call.query_positions()), turned(k, range(S))


def _xp(x):
    """The array module of ``x``: numpy, torch, or jax.numpy (its arrays and tracers)."""
    lib = type(x).__module__.split(".")[0]
    return {"numpy": np, "torch": sys.modules.get("torch")}.get(lib) or sys.modules["jax.numpy"]


def rope_and_heads(call: FloatCall, q, k, v, four: bool = False):
    """``(q, k, v, enable_gqa)``: RoPE applied to q and k, and the GQA map in the fused
    kernels' terms, as B x H x n x d arrays when ``four`` (:func:`four_d`).

    GQA ``interleave`` is the kernels' own grouping (torch's ``enable_gqa=True``: query head
    h reads key head ``h // (H_q / H_kv)``); ``tile`` repeats k and v (``h % H_kv``) and
    hands equal head counts.  The one translation for SDPA (:func:`sdpa_arguments`),
    FlexAttention, flash-attn and JAX; numpy, torch or jax arrays.
    """
    q, k = rotated(call, q, k)
    tile = call.enable_gqa and call.policy.gqa == "tile"
    if tile:
        reps = [1] * k.ndim
        reps[-3] = q.shape[-3] // k.shape[-3]
        k, v = (_xp(k).tile(a, reps) for a in (k, v))
    return (*(four_d(q, k, v) if four else (q, k, v)), call.enable_gqa and not tile)


def sdpa_arguments(call: FloatCall, q, k, v, *, lower_right_bias: bool = True):
    """``(q, k, v, kwargs)``: the call in ``torch.nn.functional.scaled_dot_product_attention``'s terms.

    The one translation of a call (a policy's scale, causal rule and
    alignment, window, query offset, ALiBi, RoPE and GQA map) into SDPA's
    arguments, for :class:`TorchImpl` and the FLOP-counter audit
    (:mod:`exactattn.audit.counters`).  q, k, v are torch tensors of the
    call's shapes; RoPE rotates q and k; GQA ``tile`` repeats k and v.
    ``top_left`` causal is ``is_causal=True``; ``bottom_right`` is
    ``causal_lower_right(L, S)`` (or, without ``lower_right_bias``, a folded
    boolean mask); with an explicit mask, a window, a query offset or ALiBi
    everything is folded into one ``attn_mask`` (additive under ALiBi).
    ``scale`` is passed only when the call sets one.  Soft-caps, sinks,
    dropout and log-sum-exps are not SDPA arguments (soft-cap, sink, dropout, log-sum-exp).
    """
    import torch
    dt = getattr(torch, call.dtype)
    q, k, v, gqa = rope_and_heads(call, q, k, v)
    kwargs: dict = {} if call.scale is None else {"scale": call.scale}
    if gqa:
        kwargs["enable_gqa"] = True
    mask, pol = call.attn_mask, call.policy
    plain = pol.window is None and pol.query_offset is None and pol.alibi is None
    if pol.causal and mask is None and plain and (pol.alignment == "top_left" or lower_right_bias):
        if pol.alignment == "top_left":
            kwargs["is_causal"] = True
        else:
            import warnings
            from torch.nn.attention.bias import causal_lower_right
            with warnings.catch_warnings():   # "NaNs when L > S": verify checks what it gives
                warnings.simplefilter("ignore", UserWarning)
                kwargs["attn_mask"] = causal_lower_right(q.shape[-2], k.shape[-2])
    elif mask is not None or pol.positional or pol.alibi is not None:
        # SDPA takes one of the two: fold the causal rule (and a window) in; ALiBi is a bias
        mask = call.mask_in(fold=True) if pol.alibi is None else call.bias()
        t = torch.from_numpy(np.ascontiguousarray(mask)).to(q.device)
        kwargs["attn_mask"] = t if mask.dtype == bool else t.to(dt)
    return q, k, v, kwargs


def four_d(*arrays) -> list:
    """Arrays (numpy, torch or jax) of ... x n x d as the fused kernels' B x H x n x d."""
    return [a.reshape((1,) * (4 - a.ndim) + tuple(a.shape)) for a in arrays]


def _unfour(rank: int, *arrays) -> list:
    """A fused kernel's 4-D results (3-D for a log-sum-exp) back at the call's ``rank``."""
    return [a.reshape(a.shape[4 - rank:]) for a in arrays]


class FlexImpl(TorchImpl):
    """``torch.nn.attention.flex_attention.flex_attention``, forward and autograd backward.

    The policy becomes one ``score_mod``: the score FlexAttention hands it is
    already ``scale q k^T``; the mod applies ``cap * tanh(s / cap)`` and adds
    one bias tensor (ALiBi + an additive mask's offsets, ``-inf`` on every
    key the causal rule, a window, a query offset or a boolean mask hides:
    :meth:`FloatCall.bias <exactattn.verify.adapter.FloatCall.bias>`),
    indexed ``[b, h, q, kv]``.  RoPE rotates q and k first; GQA ``interleave``
    is ``enable_gqa=True``, ``tile`` repeats k and v.  The log-sum-exp is
    ``return_lse=True`` (natural log; over ``log 2`` in base 2).  Sinks and
    dropout are refused by name (:data:`~exactattn.call.policy.UNSUPPORTED`
    ``["flex"]``).  On the CPU torch runs it unfused and warns once; that
    warning is silenced here.  On CUDA it runs ``torch.compile(flex_attention)``,
    the fused kernel.

    Your own modifiers (``module:function`` text or callables) take the
    policy's place, while the exact answer stays the policy's:

    * ``score_mod(score, b, h, q_idx, kv_idx) -> score`` replaces the
      policy's score_mod (soft-cap, ALiBi, an additive mask's offsets); the
      keys the policy hides are then hidden by a block mask of its visible
      keys (``create_block_mask``);
    * ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (True = attend) replaces the
      policy's visibility (causal rule, window, query offset, the mask's
      hidden keys), through ``create_block_mask`` on the device.

    Before the kernel runs, each of your functions is evaluated on every
    ``(b, h, q_idx, kv_idx)`` of the call under ``torch.func.vmap``, as
    FlexAttention evaluates it; one that raises, returns no tensor, or
    returns the wrong shape or dtype (a score_mod: floating scores; a
    mask_mod: booleans) is a hard failure of the check
    (:class:`~exactattn.verify.adapter.ImplRaised`, its message in the
    report), not a traceback.

    Raises:
        InputError: torch is not installed, the call has a sink or dropout, a
            function cannot be loaded or does not take its arguments.

    >>> impl = FlexImpl(score_mod=lambda s, b, h, q, kv: s)
    >>> impl.name.endswith("flex_attention (CPU) with score_mod <lambda>")
    True
    """

    kernel, natural_lse = "flex", True

    def __init__(self, *, score_mod=None, mask_mod=None, device: str = "cpu"):
        super().__init__(device=device)
        self.score_mod = user_mod(score_mod, "score_mod")
        self.mask_mod = user_mod(mask_mod, "mask_mod")
        mods = " and ".join(f"{what} {mod[1]}" for what, mod in
                            (("score_mod", self.score_mod), ("mask_mod", self.mask_mod)) if mod)
        self._named("flex_attention", f" with {mods}" if mods else "")

    def mods(self, call: FloatCall, shape, dt):
        """``(score_mod, block_mask)`` of the call on B x H x L x S: the policy's or yours.

        Raises:
            ImplRaised: your function failed on the call (see the class).
        """
        import torch
        from torch.nn.attention.flex_attention import create_block_mask
        dev = self.device

        def indexed(a, dtype):      # a [b, h, q, kv] table of the whole call
            return torch.from_numpy(np.array(np.broadcast_to(a, shape), copy=True)).to(dev, dtype)
        hidden = self.score_mod is None and self.mask_mod is None    # the policy in one score_mod
        for what, mod in (("mask_mod", self.mask_mod), ("score_mod", self.score_mod)):
            if mod is not None:
                probe(mod[0], what, mod[1], shape, dt, dev)
        mask_fn, score_fn = (mod and mod[0] for mod in (self.mask_mod, self.score_mod))
        seen = None if hidden or mask_fn else call.visibility()[1]    # yours replaces it
        if seen is not None:
            seen_t = indexed(seen, torch.bool)

            def mask_fn(b, h, qi, kv):
                return seen_t[b, h, qi, kv]
        if score_fn is None:
            bias = call.bias(hidden=hidden)
            b_t = None if bias is None else indexed(bias, dt)
            cap = None if call.softcap is None else self.const(call.softcap, dt)
            if cap is not None or b_t is not None:
                def score_fn(score, b, h, qi, kv):
                    if cap is not None:
                        score = cap * torch.tanh(score / cap)
                    return score if b_t is None else score + b_t[b, h, qi, kv]
        block = None
        if mask_fn is not None:
            try:
                block = create_block_mask(mask_fn, shape[0], shape[1], shape[2], shape[3],
                                          device=str(dev))
            except Exception as e:      # probed already: torch's own refusal of the mask
                mask = f"mask_mod {self.mask_mod[1]}" if self.mask_mod else \
                    "the policy's visible keys"
                raise ImplRaised(e).within(f"create_block_mask of {mask}") from e
        return score_fn, block

    def attend(self, call: FloatCall, q, k, v):
        """flex_attention of the call on tensors of its dtype: the output and lse tensors."""
        import warnings

        from torch.nn.attention.flex_attention import flex_attention
        rank = q.dim()
        q, k, v, gqa = rope_and_heads(call, q, k, v, four=True)   # B x H x L x E only
        shape = (q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])
        score_fn, block = self.mods(call, shape, q.dtype)
        kwargs = {"scale": call.scale} if call.scale is not None else {}
        try:
            with warnings.catch_warnings():   # "flex_attention called without torch.compile()"
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", FutureWarning)    # return_lse's new spelling
                run = flex_attention if self.device.type == "cpu" else _compiled(flex_attention)
                out, lse = run(q, k, v, score_mod=score_fn, block_mask=block, enable_gqa=gqa,
                               return_lse=True, **kwargs)
        except Exception as e:
            raise ImplRaised(e) from e
        return tuple(_unfour(rank, out, lse))


@functools.cache
def _compiled(fn):
    """``torch.compile(fn)``, once: flex_attention as it runs on CUDA (eager on the CPU)."""
    import torch
    return torch.compile(fn)


#: the arguments of a user's FlexAttention modifier, by kind
MOD_ARGS = {"score_mod": ("score", "b", "h", "q_idx", "kv_idx"),
            "mask_mod": ("b", "h", "q_idx", "kv_idx")}


def user_mod(mod, what: str):
    """``(function, name)`` of a FlexAttention ``score_mod``/``mask_mod``, or None for None.

    ``mod`` is a callable or ``module:function`` text (loaded by
    :func:`load_function`, with its messages); the function must take the
    kind's positional arguments (:data:`MOD_ARGS`).

    Raises:
        InputError: text that does not load, something not callable, a
            function that cannot take the arguments.

    >>> user_mod(lambda b, h, q, kv: q >= kv, "mask_mod")[1]
    '<lambda>'
    >>> user_mod(lambda s: s, "score_mod")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: score_mod <lambda> must take (score, b, h, q_idx, kv_idx) (got a function of (s)); write def score_mod(score, b, h, q_idx, kv_idx)
    """
    import inspect
    if mod is None:
        return None
    if isinstance(mod, str):
        fn, name = load_function(mod, what), mod
    elif callable(mod):
        fn, name = mod, getattr(mod, "__name__", None) or repr(mod)
    else:
        raise InputError(f"{what} must be a function or module:function (got "
                         f"{shorten(repr(mod))})")
    if not callable(fn):
        raise InputError(f"{what} {name!r} must be callable (got {type(fn).__name__})")
    want = MOD_ARGS[what]
    try:
        sig = inspect.signature(fn)
        sig.bind(*want)
    except ValueError:          # no signature to read (a builtin): FlexAttention will tell
        return fn, name
    except TypeError:
        got = ", ".join(str(p) for p in sig.parameters.values())
        raise InputError(f"{what} {name} must take ({', '.join(want)}) (got a function of "
                         f"({got})); write def {what}({', '.join(want)})") from None
    return fn, name


class _BadResult(Exception):
    """A user's modifier returned something FlexAttention cannot use (probe's own finding)."""


def probe(fn, what: str, name: str, shape, dt, device) -> None:
    """Evaluate a user's ``score_mod``/``mask_mod`` on every ``(b, h, q_idx, kv_idx)`` of a
    B x H x L x S call, under nested ``torch.func.vmap`` as FlexAttention does (scores 0 of
    the dtype ``dt``); a failure is the check's hard failure, said in one line.

    Raises:
        ImplRaised: the function raised (``score_mod m:f raised ZeroDivisionError: ...``),
            returned no tensor, or the wrong shape or dtype.
    """
    import torch
    from torch.func import vmap

    def checked(*args):
        out = fn(*args)
        if not isinstance(out, torch.Tensor):
            raise _BadResult(f"a {type(out).__name__}, not a tensor")
        return out
    score = what == "score_mod"
    f = checked
    for axis in (3, 2, 1, 0):        # innermost kv, then q, h, b
        dims = tuple(0 if k == axis else None for k in range(4))
        f = vmap(f, in_dims=((0,) if score else ()) + dims, out_dims=0)
    idx = [torch.arange(n, device=device) for n in shape]
    args = ([torch.zeros(shape, dtype=dt, device=device)] if score else []) + idx
    try:
        out = f(*args)
    except _BadResult as e:
        raise ImplRaised(TypeError(f"{what} {name} returned {e}")) from None
    except Exception as e:         # the user's function failed on the call's indices
        raise ImplRaised(e).within(f"{what} {name}") from e
    one = tuple(out.shape[4:])
    if one:
        raise ImplRaised(ValueError(
            f"{what} {name} must return one {'score' if score else 'boolean'} per (b, h, q_idx, "
            f"kv_idx) (got a tensor of shape {one} for each)"))
    if score and not out.dtype.is_floating_point:
        raise ImplRaised(TypeError(f"score_mod {name} must return floating-point scores (got "
                                   f"{str(out.dtype).replace('torch.', '')})"))
    if not score and out.dtype != torch.bool:
        raise ImplRaised(TypeError(f"mask_mod {name} must return booleans, True = attend (got "
                                   f"{str(out.dtype).replace('torch.', '')}); compare, e.g. "
                                   "q_idx >= kv_idx"))


class FlashAttnImpl(TorchImpl):
    """``flash_attn.flash_attn_func`` (Dao et al., FlashAttention-2) on a CUDA device, float16 or
    bfloat16, forward and autograd backward.

    Layout: the package takes B x L x H x E, so the call's B x H x L x E
    arrays are transposed on the way in and out.  It runs the scale
    (``softmax_scale``), causal attention aligned ``bottom_right`` (the
    package's rule; ``top_left`` only when L == S, where the two agree), a
    soft-cap (``softcap``), GQA ``interleave`` natively (``tile`` repeats k
    and v), RoPE (q and k rotated first) and the log-sum-exp
    (``return_attn_probs=True``).  Masks and the modifiers in
    :data:`~exactattn.call.policy.UNSUPPORTED` ``["flash_attn"]`` are refused
    by name: this adapter does not translate them.

    Raises:
        InputError: no CUDA, the flash_attn package not installed, a call it
            does not translate.
    """

    takes_mask = False
    kernel, natural_lse = "flash-attn", True
    dtypes = ("float16", "bfloat16")

    def __init__(self, *, device: str = "cuda"):
        super().__init__(device=device)
        if self.device.type != "cuda":
            raise InputError(f"impl flash-attn must run on a CUDA device (got device {device}); "
                             "use device cuda")
        flash_attn = _need("flash-attn")
        self.name = (f"flash-attn {flash_attn.__version__} flash_attn_func "
                     f"({_device_label(self.device)})")
        self.backward_name = self.name.replace("flash_attn_func", "flash_attn_func backward")

    def dtype_hint(self, dtype: str) -> str:
        return "; flash-attn runs float16 and bfloat16 only"

    def refuse(self, call: FloatCall, bad=()) -> None:
        skewed = call.policy.causal and call.policy.alignment == "top_left" and \
            call.query.shape[-2] != call.key.shape[-2]
        super().refuse(call, [w for w, hit in (("top_left causal with L != S", skewed),
                                               ("mask", call.attn_mask is not None)) if hit])

    def attend(self, call: FloatCall, q, k, v):
        """``flash_attn_func`` of the call on tensors of its dtype: the output and lse."""
        from flash_attn import flash_attn_func
        # tile repeats k and v; interleave is the package's own grouping (h // (H_q / H_kv))
        rank = q.dim()
        q, k, v, _ = rope_and_heads(call, q, k, v, four=True)
        E = q.shape[-1]
        scale = 1 / np.sqrt(E) if call.scale is None else call.scale
        kwargs = {"softmax_scale": scale, "causal": call.policy.causal}
        if call.softcap is not None:
            kwargs["softcap"] = call.softcap
        try:
            got = flash_attn_func(*(t.transpose(-3, -2) for t in (q, k, v)),
                                  return_attn_probs=True, **kwargs)
        except Exception as e:
            raise ImplRaised(e) from e
        return tuple(_unfour(rank, got[0].transpose(-3, -2), got[1]))


class JaxImpl(ArrayImpl):
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
    kernel, natural_lse, arrays = "jax", True, "jax"

    def __init__(self):
        jax = _need("jax")
        self.xp = importlib.import_module("jax.numpy")
        self.name = f"jax {jax.__version__} dot_product_attention (CPU)"
        self.backward_name = f"jax {jax.__version__} dot_product_attention backward (CPU jax.vjp)"

    def host(self, a) -> np.ndarray:
        return np.asarray(a).astype(np.float64)

    def grad(self, call: FloatCall, q, k, v, d_out, d_lse=None) -> tuple:
        """``(dq, dk, dv)``: ``jax.vjp`` of :meth:`attend` at ``d_out`` (in the dtype).

        Raises:
            ImplRaised: JAX failed on the call.
        """
        import jax
        try:
            _, pull = jax.vjp(lambda q, k, v: self.attend(call, q, k, v)[0], q, k, v)
            return pull(self.array(d_out, q.dtype))
        except ImplRaised:
            raise
        except Exception as e:     # a backward JAX does not run
            raise ImplRaised(e) from e

    def attend(self, call: FloatCall, q, k, v):
        """``jax.nn.dot_product_attention`` of the call on jax arrays q, k, v of its dtype and
        shapes (inside :func:`~exactattn.verify.adapter.jax_scope`): the output and lse arrays
        (its residual, natural log), what :meth:`backward` differentiates.

        Raises:
            ImplRaised: JAX refused the call.
        """
        import jax
        import jax.numpy as jnp
        dt, rank = q.dtype, q.ndim
        q, k, v, _ = rope_and_heads(call, q, k, v, four=True)
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
        native = call.query_positions() == list(range(L))    # JAX's own (top-left) positions
        if native and call.policy.causal:
            kwargs["is_causal"] = True
        if native and call.policy.window is not None:
            kwargs["local_window_size"] = tuple(L + S if w is None else int(w)
                                                for w in call.policy.window)
        bias = call.bias(hidden=False)      # ALiBi + an additive mask's offsets; keep: the rest
        keep = call.visibility(not native)[1]

        def four(a, dtype):
            return None if a is None else jnp.asarray(four_d(a)[0], dtype=dtype)
        try:
            got = jax.nn.dot_product_attention(
                *(a.transpose(0, 2, 1, 3) for a in (q, k, v)), bias=four(bias, dt),
                mask=four(keep, bool), return_residual=True, **kwargs)
        except Exception as e:      # a dtype or shape this JAX refuses
            raise ImplRaised(e) from e
        return tuple(_unfour(rank, got[0].transpose(0, 2, 1, 3)[..., :E_v],
                             got[1].transpose(0, 2, 1)))


#: a built-in kernel as data: the class that runs it (``make``), the library it imports
#: (``needs``: module, the library as its refusal names it, the fix), the options of
#: :func:`load_impl` it takes, its row of :data:`~exactattn.call.policy.UNSUPPORTED`
#: (``refuses``) with the refusal's ``fix`` and list (``listed``, default the row's fields
#: joined by ``or``), and whether its backward takes dlse
Kernel = collections.namedtuple("Kernel", "make needs takes refuses fix listed lse_backward",
                                defaults=((), (), None, "", None, False))
_TORCH = ("torch", "PyTorch", "pip install 'exactattn[torch]'")
#: the built-in kernels, by the name ``--impl`` takes
KERNELS = {
    "numpy": Kernel(NumpyImpl, lse_backward=True),
    "numpy-naive": Kernel(functools.partial(NumpyImpl, naive=True), lse_backward=True),
    "torch": Kernel(TorchImpl, _TORCH, ("device", "backend"), lse_backward=True),
    "flex": Kernel(FlexImpl, _TORCH, ("device", "score_mod", "mask_mod"), "flex",
                   "; use --impl torch"),
    "flash-attn": Kernel(FlashAttnImpl, ("flash_attn", "the flash_attn package", "pip install "
                         "flash-attn --no-build-isolation on a CUDA machine"), ("device",),
                         "flash_attn", "; use --impl torch or flex", f"mask, "
                         f"{', '.join(UNSUPPORTED['flash_attn'])} or top_left causal with L != S"),
    "jax": Kernel(JaxImpl, ("jax", "JAX", "pip install 'exactattn[jax]'"), (), "jax",
                  "; jax.nn.dot_product_attention has no argument for it, use --impl torch",
                  ", ".join(UNSUPPORTED["jax"])),
}

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def load_function(text: str, what: str = "impl"):
    """The function ``module:function`` names (``what`` names it in the messages).

    The module is imported the way ``python -m`` and pytest do: the current directory first
    (put on ``sys.path`` only while the module is imported), then ``sys.path``; ``function``
    may be dotted (``Class.method``).

    Raises:
        InputError: a malformed name, a module that cannot be imported, no
            such function there.

    >>> load_function("math:sqrt", "score_mod")(4.0)
    2.0
    """
    mod_name, _, fn_name = text.partition(":")
    if not _DOTTED.match(mod_name) or not _DOTTED.match(fn_name):
        raise InputError(f"{what} must be module:function with a module name such as mykern or "
                         "pkg.kernels and a function name such as attention "
                         f"(got {shorten(repr(text))})")
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        fn = importlib.import_module(mod_name)
    except Exception as e:       # no such module, or it fails: a syntax error, its own imports
        if isinstance(e, ModuleNotFoundError) and e.name and \
                mod_name.split(".")[0] == e.name.split(".")[0]:
            raise InputError(
                f"{what} module {shorten(mod_name, quote=True)} must be importable (got no module "
                f"{shorten(e.name, quote=True)}); run from the folder holding "
                f"{shorten(mod_name.split('.')[0])}.py or put that folder "
                "on PYTHONPATH") from None
        raise InputError(f"{what} module {shorten(mod_name, quote=True)} must import cleanly (got "
                         f"{ImplRaised(e).line})") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    for part in fn_name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise InputError(f"{what} {text!r} must name a function in {mod_name} "
                             f"(got no {fn_name!r} there)")
    return fn


def load_impl(impl, *, arrays: str = "numpy", device: str | None = None,
              backend: str | None = None, score_mod=None, mask_mod=None, flags=False) -> Impl:
    """An :class:`Impl` from a name (``numpy``, ``numpy-naive``, ``torch``, ``flex``,
    ``flash-attn``, ``jax``, ``module:function``) or a callable.

    A ``module:function`` module is looked for in the current directory first,
    as ``python -m`` and pytest do, then on ``sys.path``.  ``device``
    (``cpu``/``cuda``) goes to ``torch``, ``flex`` and ``flash-attn``;
    ``backend`` to ``torch``; ``score_mod`` and ``mask_mod`` to ``flex``
    (:class:`FlexImpl`).  ``flags``: an option refused is named as its command-line flag.

    Raises:
        InputError: an unknown name, a malformed ``module:function``, a module
            or function that cannot be loaded, an option the implementation
            does not take.

    >>> load_impl("numpy").name, load_impl("numpy-naive").name
    ('numpy', 'numpy-naive')
    >>> load_impl("cuda")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: impl must be numpy, numpy-naive, torch, flex, flash-attn, jax or module:function (got 'cuda')
    >>> load_impl(".foo:bar")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: impl must be module:function with a module name such as mykern or pkg.kernels and a function name such as attention (got '.foo:bar')
    """
    given = {"device": device, "backend": backend, "score_mod": score_mod, "mask_mod": mask_mod}
    opts = {k: v for k, v in given.items() if v is not None}
    row = KERNELS.get(impl) if isinstance(impl, str) else None
    for key in opts:
        if key not in (row.takes if row else ()):
            word, name = ("--impl ", "--" + key.replace("_", "-")) if flags else ("impl ", key)
            owners = (" or " + word * flags).join(n for n, r in KERNELS.items() if key in r.takes)
            raise InputError(f"{name} must come with {word}{owners} "
                             f"(got {word}{shorten(impl if isinstance(impl, str) else getattr(impl, 'name', impl), quote=not flags)})")
    if flags and opts.get("device") == "cpu" and impl == "flash-attn":
        raise InputError("--device cpu must come without --impl flash-attn (got both); the "
                         "flash_attn package runs on CUDA only")
    if isinstance(impl, Impl):
        return impl
    if callable(impl):
        return FunctionImpl(impl, arrays=arrays)
    if row is not None:
        return row.make(**opts)
    if not isinstance(impl, str) or ":" not in impl:
        raise InputError(f"impl must be {', '.join(KERNELS)} or module:function (got "
                         f"{shorten(repr(impl))})")
    fn = load_function(impl, "impl")
    if isinstance(fn, Impl):
        return fn
    if not callable(fn):
        raise InputError(f"impl {impl!r} must be callable (got {type(fn).__name__})")
    return FunctionImpl(fn, arrays=arrays, name=impl)


def load_from_flags(impl, *, arrays: str | None = None, merge=None, **opts) -> Impl:
    """:func:`load_impl` of the command line's ``--impl`` with ``--arrays`` and the options
    ``--device``, ``--backend``, ``--score-mod``, ``--mask-mod`` (None: not given), each
    refused in one line, named as its flag, where ``--impl`` does not take it: the one reading
    of these choices for every command (``--arrays`` is also taken by a ``--merge``).

    >>> load_from_flags("numpy", backend="math")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: --backend must come with --impl torch (got --impl numpy)
    """
    if arrays is not None and (not isinstance(impl, str) or ":" not in impl) and merge is None:
        raise InputError(f"--arrays must come with a module:function impl (got --impl "
                         f"{shorten(impl)}); the built-in implementations choose their own "
                         "arrays")
    return load_impl(impl, arrays=arrays or "numpy", flags=True, **opts)


def flop_counts(problem, dtype: str) -> dict:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` reports for the SDPA call of an exact
    :class:`~exactattn.call.Call`.

    Returns ``{"fused": ..., "math": ...}``: the default CPU kernel and the
    decomposed math backend (``sdpa_kernel(SDPBackend.MATH)``).

    Raises:
        InputError: torch is not installed.
    """
    impl = TorchImpl(lower_right_bias=False)
    from torch.nn.attention import SDPBackend
    call = make_call(problem.rounded(dtype)[0], dtype)
    out = {"fused": int(count_flops(lambda: impl(call)))}
    with _kernel(SDPBackend.MATH):
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
