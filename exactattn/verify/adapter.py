"""The one adapter for an attention function under test: the call it gets, how it is called, how its answer is read.

Every float implementation, ``exactattn verify``'s and the property checks',
is called with one :class:`FloatCall` (the arguments of PyTorch's
``scaled_dot_product_attention`` as float64 numpy arrays holding floats of the
checked dtype, plus the policy's ``alignment`` and ``gqa`` map);
:func:`make_call` builds it from an exact :class:`~exactattn.call.Call` (its inputs
rounded to the dtype) and the call's :class:`~exactattn.call.policy.Policy`.

:class:`FunctionImpl` calls any function in one of two conventions:

* ``convention="sdpa"`` (default): ``f(query, key, value, *, attn_mask=None,
  is_causal=False, scale=None, enable_gqa=False)``, handed each argument only
  when the call needs it, and ``alignment``, ``gqa`` and ``dtype`` when its
  signature takes them (or ``**kwargs``);
* ``convention="mask"``: ``f(queries, keys, values, *, mask=None,
  scale=None)``, the interface of :mod:`exactattn.properties`, with the causal
  rule folded into the mask (:meth:`Policy.fold <exactattn.call.policy.Policy.fold>`).

Modifiers of the call model reach a function as keyword arguments, each
only when the call needs it (a function without the argument is refused
with one line, so nothing is silently dropped): ``softcap`` and ``sink``
(floats), ``alibi_slopes`` (float64 per query head, the exact rule's slopes
rounded) or, to a function that derives them, ``alibi_heads`` (the model's
head count; with ``alibi_form`` and ``head``, the first head's index, when
taken), ``window`` (``(left, right)``, None = no limit, the query's own key
counted), ``query_offset`` (the position of query 0, when a positional
modifier is on and it is not 0), ``rope_theta`` and ``rope_layout`` (and ``rope_dims``, the
rotated width, under partial rotary; ``rope_scaling``, transformers' dict with whole numbers as
ints and the others as floats, under a scaling), ``dropout_p`` and ``dropout_mask``
(booleans, True = kept), and
``return_lse=True`` when the log-sum-exp is checked (the function then
returns ``(output, lse)``).  In the ``mask`` convention a window and a query
offset are folded into the mask with the causal rule.

The mask arrives in ``mask_as`` form: ``bool_keep`` (True = attend),
``bool_drop`` (True = ignore) or ``additive`` (floats, ``-inf`` hides); None
keeps SDPA's (boolean True = attend, or additive floats).  Arrays are numpy
arrays of the dtype, torch tensors (``arrays="torch"``, bfloat16 included), jax
arrays (``arrays="jax"``, bfloat16 included; float64 with JAX's 64-bit mode
switched on for that call only, :func:`jax_scope`) or whatever ``convert``
makes of the numpy arrays.  :meth:`FunctionImpl.answer`
reads the result with the dtype it came back in (:class:`Answer`), so a
tolerance can follow it.  Whatever the function raises becomes
:class:`ImplRaised`, the one hard failure of an implementation.

>>> import numpy as np
>>> from exactattn.call import Call
>>> call = make_call(Call([[0], [0]], [[0], [0]], [[1], [3]], policy=Policy(causal=True)),
...                  "float32")
>>> def mean(queries, keys, values, *, mask=None, scale=None):   # the mean of the visible values
...     keep = mask.astype(values.dtype)
...     return keep @ values / keep.sum(axis=-1, keepdims=True)
>>> answer = FunctionImpl(mean, convention="mask").answer(call)
>>> answer.values.tolist(), answer.dtype
([[1.0], [2.0]], 'float32')
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..call.policy import DEFAULT_SCALE, MASK_KINDS, Mask, Policy, float_scale
from ..errors import InputError, ShapeError, shorten
from ..options import check_choice

__all__ = ["FunctionImpl"]

NUMPY_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16}
CONVENTIONS = ("sdpa", "mask")
ARRAYS = ("numpy", "torch", "jax")


@dataclass
class FloatCall:
    """One attention call in SDPA's terms, with the policy hints an implementation may honour.

    Shapes (the caller's rank: L x E, H x L x E or B x H x L x E): query
    ... x H_q x L x E; key ... x H_kv x S x E; value ... x H_kv x S x E_v;
    attn_mask None, or booleans (True = attend) or float64 additive (``-inf``
    hides) in the shape the caller built it, broadcastable to B x H_q x L x S
    as SDPA's is (``L x S``, ``B x 1 x L x S``, ``1 x H_q x L x S``, ...).  The ``policy``
    (:class:`~exactattn.call.policy.Policy`: positions, modifiers, the GQA map, the empty
    row) is the exact call's; what a kernel is handed of it in floats is derived from it:
    ``scale`` (:func:`call_scale`: None means the implementation's own default
    1/sqrt(E)), ``softcap``, ``sink`` and ``dropout_p`` (the float64 nearest the exact
    value; None when off).  ``dropout_mask``: booleans, True = kept, the caller's rank;
    ``lse``: ``"e"`` or ``"2"``: return ``(output, lse)``.
    """

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    dtype: str
    policy: Policy = field(default_factory=Policy)
    attn_mask: np.ndarray | None = None
    dropout_mask: np.ndarray | None = None
    lse: str | None = None
    scale: float | None = field(init=False)
    softcap: float | None = field(init=False)
    sink: float | None = field(init=False)
    dropout_p: float | None = field(init=False)

    def __post_init__(self):
        p = self.policy
        self.scale, (self.softcap, self.sink, self.dropout_p) = call_scale(p), (
            None if x is None else float(x) for x in (p.softcap, p.sink, p.dropout))

    @property
    def enable_gqa(self) -> bool:
        return self.query.ndim >= 3 and self.query.shape[-3] != self.key.shape[-3]

    def query_positions(self) -> list[int]:
        """The position of each query among the key positions 0 .. S - 1."""
        L, S = self.query.shape[-2], self.key.shape[-2]
        return [self.policy.query_position(i, L, S) for i in range(L)]

    def alibi_slopes(self) -> np.ndarray | None:
        """float64 ALiBi slopes of the call's query heads (model heads ``head``, ``head + 1``, ...)."""
        alibi, heads = self.policy.alibi, self.query.shape[-3] if self.query.ndim >= 3 else 1
        return None if alibi is None else \
            np.array([float(alibi.slope(self.policy.head + h)) for h in range(heads)])

    def alibi_bias(self) -> np.ndarray | None:
        """The float64 ALiBi bias, H_q x L x S (L x S for an L x E call): ``slope * distance``."""
        if self.policy.alibi is None:
            return None
        S = self.key.shape[-2]
        dist = np.array([[self.policy.alibi.distance(p, j) for j in range(S)]
                         for p in self.query_positions()], dtype=np.float64)
        bias = self.alibi_slopes()[:, None, None] * dist
        return bias if self.query.ndim >= 3 else bias[0]

    def visibility(self, positions: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(offsets, seen)``: what the mask and the positions add to and hide from the scores.

        ``offsets`` is an additive mask's finite part as float64 (``-inf``
        entries 0; the mask's shape), None for a boolean mask or none;
        ``seen`` the booleans (True = attend) of the causal rule, window and
        query offset (L x S) and the mask's (a boolean mask, or an additive
        one's non-``-inf`` entries), broadcast together; None when nothing is
        hidden.  The one reading of visibility for the float compositions
        (:meth:`ArrayImpl.compose <exactattn.verify.impls.ArrayImpl.compose>`,
        :meth:`bias`, :meth:`mask_in`); without ``positions``, the mask's alone.

        >>> m = np.array([[0.5, -np.inf]])
        >>> o, s = FloatCall(np.zeros((1, 1)), np.zeros((2, 1)), np.zeros((2, 1)), "float64",
        ...                  attn_mask=m).visibility()
        >>> o.tolist(), s.tolist()
        ([[0.5, 0.0]], [[True, False]])
        """
        L, S = self.query.shape[-2], self.key.shape[-2]
        seen = self.policy.keep(L, S) if positions and self.policy.positional else None
        m, offsets = self.attn_mask, None
        if m is not None:
            if m.dtype != bool:
                offsets = np.where(np.isneginf(m), 0, m)
                m = ~np.isneginf(m)
            seen = m if seen is None else seen & m
        return offsets, seen

    def bias(self, *, hidden: bool = True) -> np.ndarray | None:
        """The float64 additive bias of the call: ALiBi + an additive mask's offsets, and with
        ``hidden`` ``-inf`` on every key :meth:`visibility` hides; None when there is none.

        Shape: broadcast of L x S, the ALiBi bias (H_q x L x S) and the mask's.
        Summed in float64 (the kernel rounds it once to its dtype).

        >>> FloatCall(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1)), "float64",
        ...           Policy(causal=True)).bias().tolist()
        [[0.0, -inf], [0.0, 0.0]]
        """
        offsets, seen = self.visibility()
        parts = [b for b in (self.alibi_bias(), offsets) if b is not None]
        seen = seen if hidden else None
        if not parts and seen is None:
            return None
        bias = sum(parts, np.zeros((self.query.shape[-2], self.key.shape[-2])))
        return bias if seen is None else np.where(seen, bias, -np.inf)

    def kv_index(self) -> list[int]:
        """For each query head, the key/value head it reads (``gqa`` map)."""
        if self.query.ndim < 3:
            return [0]
        hq, hkv = self.query.shape[-3], self.key.shape[-3]
        return [self.policy.kv_head(h, hq, hkv) for h in range(hq)]

    def mask_in(self, form: str | None = None, *, fold: bool = False) -> np.ndarray | None:
        """The mask to hand over: in ``form``, with the causal rule folded in when ``fold``.

        ``form`` None keeps SDPA's convention (booleans True = attend, or
        additive float64); ``bool_keep``, ``bool_drop`` or ``additive`` (float64,
        ``-inf`` hides) rewrite it.  Folding is :meth:`visibility`'s ``seen``, the
        offsets of an additive mask kept.  Shape: the mask's leading axes
        with its last two broadcast to L x S (a ``1 x S`` mask folded with the
        causal rule becomes ``L x S``), or L x S without one.

        Raises:
            InputError: an additive mask with finite offsets asked for as booleans.

        >>> call = FloatCall(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1)), "float64",
        ...             Policy(causal=True))
        >>> call.mask_in("additive", fold=True).tolist()
        [[0.0, -inf], [0.0, 0.0]]
        """
        m = self.attn_mask
        kind = None if m is None else "bool_keep" if m.dtype == bool else "additive"
        if not (fold and self.policy.positional) and (m is None or form in (None, kind)):
            return m
        bad = np.argwhere(np.isnan(m) | (m == math.inf)) if kind == "additive" else ()
        if len(bad):       # NaN or +inf: Mask's refusal, whichever form is asked for
            raise InputError(f"mask[{bad[0][-2]}][{bad[0][-1]}] must be finite "
                             f"(got {m[tuple(bad[0])]})")
        offsets, seen = self.visibility(fold)
        seen = seen & np.ones((self.query.shape[-2], self.key.shape[-2]), dtype=bool)
        want = form or ("bool_keep" if offsets is None else "additive")
        if want == "additive":
            return np.where(seen, 0.0 if offsets is None else offsets + 0.0, -math.inf)  # no -0.0
        if offsets is not None and np.where(seen, offsets, 0).any():  # Mask's refusal, as seen
            Mask("additive", [[1]]).as_form(want)
        return seen if want == "bool_keep" else ~seen


class ImplRaised(Exception):
    """An implementation under test raised; ``line`` says what, in one line.

    Not an :class:`~exactattn.errors.ExactAttnError`: it is the implementation's
    failure on an input, which ``verify`` reports as a hard failure and a
    property check as a failed property.
    """

    def __init__(self, error: BaseException):
        text = " ".join(str(error).split())
        self.line = f"{type(error).__name__}: {shorten(text, 200)}" if text else \
            type(error).__name__
        super().__init__(self.line)

    def within(self, what: str) -> "ImplRaised":
        """This failure, its line ending ``(in what)``: where in the implementation it raised.

        >>> ImplRaised(ZeroDivisionError("division by zero")).within("score_mod m:f").line
        'ZeroDivisionError: division by zero (in score_mod m:f)'
        """
        self.line = f"{self.line} (in {what})"
        self.args = (self.line,)
        return self


def ask(run: Callable, *args, asking: bool = False, **kwargs) -> tuple:
    """Run a kernel: ``(run(*args, **kwargs), None, "", None)``, or ``(None, status, why,
    error)`` when it has no answer: ``raised`` (it raised, :class:`ImplRaised`; ``why`` its
    one line) or, with ``asking`` (a probe it may not take), also ``raised`` for an answer
    that is no array of numbers and ``cannot be asked`` for an argument or output it does not
    have (its refusal up to `` (got``); ``error`` the exception caught, for a caller to chain.
    The one reading of a kernel's failure.

    >>> def boom(call):
    ...     raise ImplRaised(ZeroDivisionError("division by zero"))
    >>> ask(boom, None)[:3]
    (None, 'raised', 'ZeroDivisionError: division by zero')
    """
    try:
        return run(*args, **kwargs), None, "", None
    except ImplRaised as e:
        return None, "raised", e.line, e
    except ShapeError as e:
        if not asking:
            raise
        return None, "raised", str(e), e
    except InputError as e:
        if not asking:
            raise
        return None, "cannot be asked", shorten(str(e).split(" (got")[0], 100), e


def call_scale(policy: Policy) -> float | None:
    """The scale an implementation is handed: None under the default (its own 1/sqrt(E)),
    1.0 with no scaling, else the float64 nearest ``1/sqrt(D)`` (:func:`~exactattn.call.policy.float_scale`).

    >>> call_scale(Policy()), call_scale(Policy(scale="none")), call_scale(Policy(scale="1/sqrt(2)"))
    (None, 1.0, 0.7071067811865476)
    """
    if policy.divisor_squared == DEFAULT_SCALE:
        return None
    return 1.0 if policy.divisor_squared is None else float_scale(policy.divisor_squared)


def make_call(call, dtype: str, lse: str | None = None, arrays: tuple | None = None) -> FloatCall:
    """The :class:`FloatCall` of an exact :class:`~exactattn.call.Call` whose entries are floats of ``dtype``.

    The mask is handed over in the shape the caller gave it
    (:meth:`Call.mask_given <exactattn.call.inputs.Call.mask_given>`: a spec's
    ``(B, 1, L, S)`` stays ``(B, 1, L, S)``, an ``L x S`` mask stays ``L x S``)
    and in SDPA's convention (``bool_drop`` inverted);
    the scale is None under the default policy, 1.0 with no scaling, else the
    float64 nearest the exact scale; soft-cap and sink are the float64
    nearest their exact values; the dropout keep-mask comes from the call.  ``arrays``: the
    call's query, key and value as float64 B x H x n x E arrays already (exact copies).
    """
    problem, policy = call, call.policy
    rank = problem.rank
    q, k, v = (problem.floats(n) for n in ("query", "key", "value")) if arrays is None else \
        (a.reshape(a.shape[4 - rank:]) for a in arrays)
    mask, kind = problem.mask_given(), problem.mask_kind or policy.mask_kind
    if mask is not None:        # SDPA's convention: booleans True = attend, or additive floats
        mask = mask.astype(bool) ^ (kind == "bool_drop") if kind in ("bool_keep", "bool_drop") \
            else np.vectorize(lambda x: -math.inf if x is None else float(x), otypes=[float])(mask)
    keep = problem.dropout_keep
    keep = None if keep is None else keep.reshape(keep.shape[4 - rank:])
    return policy_call(q, k, v, policy, dtype, attn_mask=mask, dropout_mask=keep, lse=lse)


def policy_call(query, key, value, policy: Policy, dtype: str, *, attn_mask=None,
                dropout_mask=None, lse: str | None = None) -> FloatCall:
    """The :class:`FloatCall` of float64 arrays under ``policy``: the one reading of a policy into a call.

    The scale is :func:`call_scale`'s; soft-cap, sink and dropout p are the
    float64 nearest their exact values; positions, ALiBi, RoPE and the GQA
    map are the policy's.  ``attn_mask`` is in SDPA's convention (booleans
    True = attend, or additive float64).

    >>> c = policy_call(np.zeros((2, 1)), np.zeros((3, 1)), np.zeros((3, 1)),
    ...                 Policy(causal=True, sink="1/2"), "float32")
    >>> c.policy.causal, c.sink, c.scale
    (True, 0.5, None)
    """
    return FloatCall(query, key, value, dtype, policy, attn_mask, dropout_mask, lse)


@dataclass(frozen=True)
class Answer:
    """An implementation's outputs as float64 (exactly its floats), the dtype it returned,
    and its log-sum-exp per row (float64, ... x H_q x L) when it was asked for."""

    values: np.ndarray
    dtype: str
    lse: np.ndarray | None = None


def read_answer(out: Any, name: str = "impl", *, lse: bool = False) -> Answer:
    """Read what an implementation returned: any array ``numpy.asarray`` reads, or a torch tensor.

    With ``lse`` the result must be a pair ``(output, lse)``.

    Raises:
        ShapeError: something that is not an array of numbers.
        InputError: ``lse`` asked for and no pair returned.

    >>> read_answer(np.ones((1, 2), dtype=np.float16)).dtype
    'float16'
    >>> read_answer((np.ones((1, 2)), np.zeros(1)), lse=True).lse.tolist()
    [0.0]
    """
    if lse:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise InputError(f"{name} must return (output, lse) when the log-sum-exp is checked "
                             f"(got {shorten(type(out).__name__)}); return both (asked for with "
                             "return_lse=True), or drop --lse or --split-merge")
        values = read_answer(out[0], name)
        return Answer(values.values, values.dtype, read_answer(out[1], name).values)
    if hasattr(out, "detach"):       # a PyTorch tensor: bfloat16 has no numpy dtype (a jax
        # array's bfloat16 is ml_dtypes', which numpy.asarray reads below)
        import torch
        t = out.detach().cpu()
        return Answer(t.to(torch.float64).numpy(), str(t.dtype).replace("torch.", ""))
    from ..call.inputs import rectangular
    try:
        arr = rectangular(out, f"{name}'s output")     # a ragged list: named as Call names it
        return Answer(arr.astype(np.float64), arr.dtype.name)
    except InputError:
        raise
    except (TypeError, ValueError):
        raise ShapeError(f"{name}'s output must be an array of numbers "
                         f"(got {shorten(type(out).__name__)})") from None


def check_dtype(impl, dtype: str) -> None:
    """Refuse a dtype ``impl`` (forward or backward) does not run, with its ``dtype_hint``.

    >>> check_dtype(FunctionImpl(print), "bfloat16")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: dtype must be one of float64, float32, float16 for print (got
    'bfloat16'); numpy has no bfloat16, pass --arrays torch (arrays='torch') for it
    """
    if dtype not in impl.dtypes:
        raise InputError(f"dtype must be one of {', '.join(impl.dtypes)} for {impl.name} "
                         f"(got {dtype!r}){impl.dtype_hint(dtype)}")


def as_array(xp, a: np.ndarray, dt, **on):
    """A float64 numpy argument as one of ``xp``'s arrays (numpy, torch or jax.numpy; ``on``:
    torch's ``device``): floats in ``dt`` (bfloat16 included outside numpy), booleans as
    they are; numpy's a copy.  Call it inside :func:`jax_scope` for jax float64."""
    make = np.array if xp is np else xp.asarray
    return make(np.ascontiguousarray(a), dtype=None if a.dtype == bool else dt, **on)


def jax_scope(dtype: str):
    """The context a jax call of ``dtype`` runs in: the CPU device, and for float64 JAX's
    64-bit mode (``jax.enable_x64(True)``, a context that changes the setting for this
    thread only and restores it on exit; without it JAX makes every float64 array float32).

    Raises:
        InputError: JAX is not installed (``pip install 'exactattn[jax]'``).
    """
    import contextlib
    try:
        import jax
    except ImportError:
        raise InputError("jax arrays need JAX (got none installed); "
                         "pip install 'exactattn[jax]'") from None
    stack = contextlib.ExitStack()
    stack.enter_context(jax.default_device(jax.devices("cpu")[0]))
    if dtype == "float64":
        stack.enter_context(jax.enable_x64(True))
    return stack


class Impl:
    """An implementation under test: ``impl(call) -> outputs``; ``name`` and the ``dtypes`` it runs.

    ``takes_mask`` and ``takes_gqa`` say whether it can be handed an explicit
    mask and fewer key/value heads than query heads (what a search may draw).
    """

    name = "impl"
    dtypes: tuple = ("float64", "float32", "float16", "bfloat16")
    takes_mask = True
    takes_gqa = True
    bfloat16_fix = None       # numpy arrays: how to run bfloat16 instead
    arrays = "numpy"          # the arrays it runs on: numpy, torch or jax

    def scope(self, dtype: str):
        """The context it runs in: :func:`jax_scope` for jax arrays, else none (numpy kernels:
        float warnings silenced)."""
        return jax_scope(dtype) if self.arrays == "jax" else contextlib.nullcontext()

    def dtype_hint(self, dtype: str) -> str:
        """Why a dtype outside ``dtypes`` is not run, and the fix ("" when none is known)."""
        return f"; numpy has no bfloat16, {self.bfloat16_fix} for it" \
            if dtype == "bfloat16" and self.bfloat16_fix else ""

    def answer(self, call: FloatCall) -> Answer:
        """The outputs read as float64, with the dtype they came back in (and the lse when asked)."""
        return read_answer(self(call), self.name, lse=call.lse is not None)

    def __call__(self, call: FloatCall) -> Any:
        """The outputs (``(outputs, lse)`` when the call asks for them): :meth:`forward`'s."""
        return self.forward(call)


class FunctionImpl(Impl):
    """Any attention function, called in SDPA's convention or the properties' one.

    Args:
        arrays: ``numpy`` (float64/float32/float16 arrays), ``torch``
            (tensors of the dtype, bfloat16 included) or ``jax`` (jax arrays
            of the dtype on the CPU, bfloat16 included; float64 in JAX's
            64-bit mode, switched on for the call only).
        convention: ``sdpa`` (``attn_mask=``, ``is_causal=``, ``scale=``,
            ``enable_gqa=``) or ``mask`` (``mask=``, ``scale=``; the causal
            rule folded into the mask).
        mask_as: ``bool_keep``, ``bool_drop`` or ``additive``; None: SDPA's
            (booleans True = attend, or additive floats).
        convert: applied to every numpy array argument, the mask included
            (e.g. ``torch.from_numpy``); only with ``arrays="numpy"``.
        name: how reports name the function (default: its ``__qualname__``).

    Raises:
        InputError: a bad argument; at call time, a call that needs an
            argument the function does not take, or a dtype the arrays cannot
            hold (bfloat16 with ``arrays="numpy"``).

    >>> def mean_of_values(query, key, value):
    ...     return np.repeat(value.mean(axis=-2, keepdims=True), query.shape[-2], axis=-2)
    >>> FunctionImpl(mean_of_values).name
    'mean_of_values'
    """

    def __init__(self, fn: Callable, *, arrays: str = "numpy", convention: str = "sdpa",
                 mask_as: str | None = None, convert: Callable | None = None,
                 name: str | None = None):
        if not callable(fn):
            raise InputError(f"fn must be callable (got {shorten(repr(fn))})")
        if arrays not in ARRAYS:
            raise InputError(f"arrays must be numpy, torch or jax (got {shorten(repr(arrays))})")
        check_choice(convention, "convention", CONVENTIONS)
        if mask_as is not None:
            check_choice(mask_as, "mask_as", MASK_KINDS)
        if convert is not None and not callable(convert):
            raise InputError(f"convert must be callable or None (got {shorten(repr(convert))})")
        if convert is not None and arrays != "numpy":
            raise InputError(f"convert must be None with arrays={arrays!r} (got a function); "
                             "convert= works on the numpy arrays, e.g. convert=torch.from_numpy")
        self.fn, self.arrays, self.convention = fn, arrays, convention
        self.mask_as, self.convert = mask_as, convert
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.dtypes, self.bfloat16_fix = (tuple(NUMPY_DTYPES), "pass --arrays torch (arrays="
                                          "'torch')") if arrays == "numpy" else (Impl.dtypes, None)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        self.var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
        self.accepts = set(params)
        self.takes_mask = self._takes("mask" if convention == "mask" else "attn_mask")
        self.takes_gqa = convention == "sdpa" and self._takes("enable_gqa")

    def _takes(self, name: str) -> bool:
        return self.var_kw or name in self.accepts

    def _converter(self, dtype: str) -> Callable:
        """numpy array -> the argument the function gets (floats in ``dtype``, booleans as they are)."""
        check_dtype(self, dtype)
        xp = np if self.arrays == "numpy" else \
            importlib.import_module("jax.numpy" if self.arrays == "jax" else "torch")
        dt, user = getattr(xp, dtype), self.convert or (lambda a: a)
        return lambda a: user(as_array(xp, a, dt))

    def _arguments(self, call: FloatCall) -> dict:
        """The keyword arguments of the call, as numpy arrays (converted later): each one the
        call needs (refused when the function lacks it; the mask convention's mask and scale
        handed as None when it takes them), then the hints it takes."""
        pol, rope, alibi, masked = call.policy, call.policy.rope, call.policy.alibi, \
            self.convention == "mask"
        if masked and call.enable_gqa:
            raise InputError(f"{self.name} must be called in convention 'sdpa' for grouped "
                             "query heads (got convention 'mask', which has no enable_gqa)")
        needed = {"mask": call.mask_in(self.mask_as, fold=True), "scale": call.scale} if masked \
            else {"attn_mask": call.mask_in(self.mask_as), "scale": call.scale,
                  "is_causal": pol.causal or None, "enable_gqa": call.enable_gqa or None,
                  "window": pol.window}
        hints = {} if masked else {"alignment": pol.alignment, "gqa": pol.gqa, "dtype": call.dtype}
        pos = call.query_positions()[0]
        shifted = pos != 0 and (alibi is not None or rope is not None or
                                (pol.window is not None and not masked))
        needed.update({"softcap": call.softcap, "sink": call.sink,
                       "query_offset": pos if shifted else None,
                       "rope_theta": None if rope is None else float(rope.theta),
                       "rope_layout": None if rope is None else rope.layout,
                       "rope_dims": None if rope is None else rope.dims,
                       "rope_scaling": None if rope is None or rope.scaling is None else
                       rope.scaling.to_dict(lambda q: int(q) if q.denominator == 1 else float(q)),
                       "dropout_p": call.dropout_p, "dropout_mask": call.dropout_mask})
        if alibi is not None:
            by_heads = self._takes("alibi_heads") and not self.var_kw
            needed.update({"alibi_heads": alibi.heads} if by_heads else
                          {"alibi_slopes": call.alibi_slopes()})
            hints.update(alibi_form=alibi.form, head=pol.head)
        if call.lse is not None:
            hints["return_lse"] = True
        kwargs: dict = {}
        for key, val in needed.items():
            if val is None:
                if masked and key in ("mask", "scale") and self._takes(key):
                    kwargs[key] = None
                continue
            if not self._takes(key):
                raise InputError(f"{self.name} must take {key}= for this call (got a function "
                                 f"without it); add the argument or drop the {key} option")
            kwargs[key] = val
        kwargs.update((k, v) for k, v in hints.items() if self._takes(k))
        return kwargs

    def answer(self, call: FloatCall, *more, read: Callable | None = None) -> Answer:
        """FloatCall the function on ``call``; its outputs read as float64, with the dtype it returned.

        ``more``: arrays handed after query, key and value (a backward's ``grad_out``),
        converted like them; ``read``: what reads the result instead (inside the guard, so
        its own refusal is the function's failure).

        Raises:
            ImplRaised: the function (or ``convert``) raised.
            InputError: see the class.
            ShapeError: the result is not an array of numbers.
        """
        kwargs = self._arguments(call)
        with self.scope(call.dtype):
            conv = self._converter(call.dtype)
            try:
                args = [conv(a) for a in (call.query, call.key, call.value, *more)]
                kwargs = {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
                out = self.fn(*args, **kwargs)
                if read is not None:
                    return read(out)
                if call.lse is None and hasattr(out, "detach"):
                    return read_answer(out, self.name)
            except Exception as e:     # the function under test failed on this input
                raise ImplRaised(e) from e
            return read_answer(out, self.name, lse=call.lse is not None)

    def __call__(self, call: FloatCall) -> np.ndarray:
        """The outputs as float64 (:meth:`answer` without the dtype)."""
        return self.answer(call).values
