"""The FLOP counters the audit runs and the attention calls it runs them on, each counter in
a fresh interpreter.

Each :class:`AuditCall` says what the torch side builds (an SDPA call, an
explicit matmul attention, ``nn.MultiheadAttention``, a ``transformers``
BERT self-attention layer or a GPT-2 attention block, built from small
configs, nothing downloaded) and gives the derived side its
:class:`~exactattn.cost.sizes.CallShape` (shapes, :class:`~exactattn.call.policy.
Policy`, explicit mask, projections).  The band mask of the windowed call
and GPT-2's causal mask are made from the same ``Policy.keep`` rows the
derived side reads.  The sizes are small enough to check by hand: the
bottom-right causal call (4 queries, 10 keys, d_k 8, d_v 16) runs
7 + 8 + 9 + 10 = 34 pairs, so 34 x (8 + 16) = 816 MACs, where the full
4 x 10 square is 960 MACs (1920 FLOPs).

Counters (all optional; the ``counters`` extra installs them): torch's
``FlopCounterMode``, fvcore's ``FlopCountAnalysis``, ptflops (its ``pytorch``
and ``aten`` backends), thop's ``profile``, calflops' ``calculate_flops`` and
DeepSpeed's ``get_model_profile``.  Several of them patch torch functions
while they count and leave them patched when the model raises, so every
counter runs in its own interpreter (``python -m exactattn.audit.counters``),
and a call that fails ends that interpreter: the next call starts a fresh one.
The figures come back as JSON lines; nothing here judges them (that is
:mod:`exactattn.audit.flops`).

Nothing imports torch or a counter until a child interpreter runs; the
parent reads versions from the installed distributions' metadata.  The
names below load no sympy either, so the command line can list them.

>>> [c.key for c in COUNTERS]
['torch', 'fvcore', 'ptflops', 'ptflops_aten', 'thop', 'calflops', 'deepspeed']
>>> counter("thop").readings
(('MACs', 1),)
>>> [c.key for c in AUDIT_CALLS][:3], call("sdpa_bottom_right").shape.pairs()
(['sdpa_top_left', 'sdpa_bottom_right', 'sdpa_window'], 34)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata, util

from ..call.masks import Mask
from ..call.policy import Policy
from ..cost.sizes import CallShape
from ..errors import shorten
from ..options import check_choice

#: the prefix of the lines a child interpreter reports on (counters print too)
MARK = "@@exactattn-audit "
#: the longest one child interpreter may run (seconds)
CHILD_SECONDS = 600


@dataclass(frozen=True)
class Counter:
    """A FLOP counter: how to import it, what it reports, and its convention.

    ``readings`` lists ``(unit, operations per multiply-add)``: ``("FLOPs", 2)``
    for a counter that reports two operations per multiply-add, ``("MACs",
    1)`` for one that reports multiply-adds (fvcore calls them "flops").
    """

    key: str
    name: str
    distribution: str
    module: str
    readings: tuple
    convention: str


COUNTERS = (
    Counter("torch", "torch FlopCounterMode", "torch", "torch.utils.flop_counter",
            (("FLOPs", 2),), "FLOPs, 2 per multiply-add; counts registered aten ops only"),
    Counter("fvcore", "fvcore FlopCountAnalysis", "fvcore", "fvcore.nn", (("MACs", 1),),
            "reports 'flops' that are multiply-adds (1 per MAC); traces with torch.jit"),
    Counter("ptflops", "ptflops (pytorch backend)", "ptflops", "ptflops", (("MACs", 1),),
            "MACs (1 per MAC); module hooks and patched torch functions; adds biases"),
    Counter("ptflops_aten", "ptflops (aten backend)", "ptflops", "ptflops", (("MACs", 1),),
            "MACs (1 per MAC); counts aten ops under a dispatch mode; adds biases"),
    Counter("thop", "thop profile", "thop", "thop", (("MACs", 1),),
            "MACs (1 per MAC); hooks on listed module types only"),
    Counter("calflops", "calflops calculate_flops", "calflops", "calflops",
            (("FLOPs", 2), ("MACs", 1)),
            "FLOPs (2 per MAC plus elementwise ops) and MACs; patched torch functions"),
    Counter("deepspeed", "DeepSpeed flops profiler", "deepspeed",
            "deepspeed.profiling.flops_profiler", (("FLOPs", 2), ("MACs", 1)),
            "FLOPs (2 per MAC plus elementwise ops) and MACs; patched torch functions"),
)

_BY_KEY = {c.key: c for c in COUNTERS}


def counter(key: str) -> Counter:
    """The counter named ``key`` (one of :data:`COUNTERS`).

    Raises:
        InputError: an unknown name.
    """
    return _BY_KEY[check_choice(key, "counter", tuple(_BY_KEY))]


def band_mask(n: int, window: int) -> Mask:
    """A sliding window as an explicit mask: query i sees keys i - window + 1 .. i.

    The rows of ``Policy(causal=True, window=(window - 1, 0)).keep(n, n)``
    (the one visibility rule), handed over as a mask, as the audit's torch call does.

    >>> band_mask(3, 2).rows
    ((True, False, False), (True, True, False), (False, True, True))
    """
    band = Policy(causal=True, window=(window - 1, 0))
    return Mask("bool_keep", band.keep(n, n).tolist())


@dataclass(frozen=True)
class AuditCall:
    """One call of the audit.

    ``key`` names it (``sdpa_bottom_right``); ``title`` says it in words;
    ``kind`` is how the torch side computes it (``sdpa``, ``matmul``, ``mha``,
    ``bert`` or ``gpt2``); ``shape`` its :class:`~exactattn.cost.sizes.CallShape`;
    ``impl`` the ``transformers`` attention implementation (``eager`` or
    ``sdpa``); ``ops`` the elementwise operations the implementation runs
    outside its matrix products (``softmax``, ``scale_scores``,
    ``scale_queries``, ``mask_add``: a separate softmax, a scaling of the
    scores or of the queries, an additive mask); ``bias`` whether its
    projections add biases; ``code`` the torch call, as a person would write it.
    """

    key: str
    title: str
    kind: str
    shape: CallShape
    code: str
    impl: str = ""
    ops: tuple = ()
    bias: bool = False


def _sdpa(key, title, q, k, v, code, policy=Policy(), mask=None, kind="sdpa", ops=()):
    return AuditCall(key, title, kind, CallShape(q, k, v, policy, mask), code, ops=ops)


def _layer(key, title, kind, code, *, causal=False, impl="", out_projection=True, ops=()):
    d_model, heads, tokens = 10, 2, 8
    head = (1, heads, tokens, d_model // heads)
    return AuditCall(key, title, kind,
                     CallShape(head, head, head, Policy(causal=causal), d_model=d_model,
                               out_projection=out_projection), code, impl=impl, ops=ops,
                     bias=True)


_BR = Policy(causal=True, alignment="bottom_right")
_EAGER = ("softmax", "scale_scores")

AUDIT_CALLS = (
    _sdpa("sdpa_top_left", "SDPA causal top_left, q 1x1x4x8, k 1x1x10x8, v 1x1x10x16",
          (1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
          "F.scaled_dot_product_attention(q, k, v, is_causal=True)", Policy(causal=True)),
    _sdpa("sdpa_bottom_right", "SDPA causal bottom_right, q 1x1x4x8, k 1x1x10x8, v 1x1x10x16",
          (1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
          "F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(4, 10))", _BR),
    _sdpa("sdpa_window", "SDPA windowed (band of 3, explicit mask), q k v 1x1x6x4",
          (1, 1, 6, 4), (1, 1, 6, 4), (1, 1, 6, 4),
          "F.scaled_dot_product_attention(q, k, v, attn_mask=band)", mask=band_mask(6, 3)),
    _sdpa("sdpa_gqa", "SDPA GQA, q 1x4x4x8, k v 1x2x4x8",
          (1, 4, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8),
          "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)"),
    _sdpa("sdpa_batched", "SDPA batched, q k v 2x3x4x8",
          (2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("sdpa_broadcast_query", "SDPA query broadcast, q 1x1x2x4, k v 3x1x5x4",
          (1, 1, 2, 4), (3, 1, 5, 4), (3, 1, 5, 4), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("sdpa_broadcast_kv", "SDPA key/value broadcast, q 3x1x2x4, k v 1x1x5x4",
          (3, 1, 2, 4), (1, 1, 5, 4), (1, 1, 5, 4), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("matmul_broadcast_query", "matmul attention, query broadcast, q 1x1x2x4, "
          "k v 3x1x5x4", (1, 1, 2, 4), (3, 1, 5, 4), (3, 1, 5, 4),
          "torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 4 ** -0.5, -1), v)",
          kind="matmul", ops=_EAGER),
    _layer("mha", "nn.MultiheadAttention(10, 2), x 8x1x10", "mha",
           "nn.MultiheadAttention(10, 2)(x, x, x)", ops=("softmax", "scale_queries")),
    _layer("bert_eager", "BERT self-attention (eager), hidden 10, 2 heads, x 1x8x10", "bert",
           "BertSelfAttention(BertConfig(hidden_size=10, num_attention_heads=2))(x)",
           impl="eager", out_projection=False, ops=_EAGER),
    _layer("bert_sdpa", "BERT self-attention (sdpa), hidden 10, 2 heads, x 1x8x10", "bert",
           "BertSelfAttention(BertConfig(hidden_size=10, num_attention_heads=2))(x)",
           impl="sdpa", out_projection=False),
    _layer("gpt2_eager", "GPT-2 attention (eager, causal mask), n_embd 10, 2 heads, x 1x8x10",
           "gpt2", "GPT2Attention(GPT2Config(n_embd=10, n_head=2))(x, attention_mask=causal)",
           causal=True, impl="eager", ops=_EAGER + ("mask_add",)),
    _layer("gpt2_sdpa", "GPT-2 attention (sdpa, is_causal), n_embd 10, 2 heads, x 1x8x10",
           "gpt2", "GPT2Attention(GPT2Config(n_embd=10, n_head=2))(x)", causal=True,
           impl="sdpa"),
)

_CALLS = {c.key: c for c in AUDIT_CALLS}


def call(key: str) -> AuditCall:
    """The audit call named ``key``.

    Raises:
        InputError: an unknown name.
    """
    return _CALLS[check_choice(key, "call", tuple(_CALLS))]


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Installed versions (None: not installed) of torch, transformers and each counter."""
    names = ["torch", "transformers"] + [c.distribution for c in COUNTERS]
    return {n: _version(n) for n in dict.fromkeys(names)}


# --------------------------------------------------------------------------- child side
def _modules():
    """The torch modules the calls are wrapped in (torch imported here, in the child)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Sdpa(nn.Module):
        """One SDPA call; ``anchor`` is unused (calflops needs a parameter to start)."""

        def __init__(self, options):
            super().__init__()
            self.options = options
            self.anchor = nn.Parameter(torch.zeros(()))

        def forward(self, query, key, value):
            return F.scaled_dot_product_attention(query, key, value, **self.options)

    class Matmul(Sdpa):
        """The same attention written out: two matmuls and a softmax."""

        def forward(self, query, key, value):
            scores = torch.matmul(query, key.transpose(-2, -1)) * query.shape[-1] ** -0.5
            return torch.matmul(torch.softmax(scores, dim=-1), value)

    class SelfAttention(nn.Module):
        """A library layer called on one tensor x, as its model calls it."""

        def __init__(self, inner, kind, mask=None):
            super().__init__()
            self.inner, self.kind, self.mask = inner, kind, mask

        def forward(self, x):
            if self.kind == "mha":
                return self.inner(x, x, x)[0]
            if self.kind == "gpt2":
                return self.inner(x, attention_mask=self.mask)[0]
            return self.inner(x)[0]

    return torch, Sdpa, Matmul, SelfAttention


def build(c: AuditCall):
    """``(module, args, names)``: the torch side of one audit call (seeded inputs)."""
    torch, Sdpa, Matmul, SelfAttention = _modules()
    s = c.shape
    g = torch.Generator().manual_seed(0)
    if c.kind in ("sdpa", "matmul"):
        import numpy as np
        from ..verify.adapter import policy_call
        from ..verify.impls import sdpa_arguments
        q, k, v = (torch.randn(x, generator=g) for x in (s.query, s.key, s.value))
        mask = None if s.mask is None else Policy().keep(s.queries, s.keys, s.mask)
        call = policy_call(*(np.zeros(x) for x in (s.query, s.key, s.value)), s.policy,
                           "float32", attn_mask=mask)
        q, k, v, options = sdpa_arguments(call, q, k, v)     # verify's own SDPA arguments
        return (Sdpa if c.kind == "sdpa" else Matmul)(options), (q, k, v), ("query", "key", "value")
    torch.manual_seed(0)
    D, H, L, B = s.d_model, s.heads, s.queries, s.batch_size
    mask, x = None, torch.randn(*((L, B) if c.kind == "mha" else (B, L)), D, generator=g)
    if c.kind == "mha":
        inner = torch.nn.MultiheadAttention(D, H)
    elif c.kind == "bert":
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertSelfAttention
        inner = BertSelfAttention(BertConfig(hidden_size=D, num_attention_heads=H,
                                             intermediate_size=4 * D, num_hidden_layers=1,
                                             attn_implementation=c.impl))
    else:
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
        inner = GPT2Attention(GPT2Config(n_embd=D, n_head=H, n_positions=max(16, L),
                                         n_layer=1, attn_implementation=c.impl), layer_idx=0)
        if c.impl == "eager":   # the additive causal mask GPT2Model hands its eager attention
            keep = torch.tensor(s.policy.keep(L, L))
            mask = torch.zeros(L, L).masked_fill(~keep, torch.finfo(torch.float32).min)[None, None]
    return SelfAttention(inner.eval(), c.kind, mask), (x,), ("x",)


def _whole(value):
    return int(value) if float(value).is_integer() else float(value)


def _measure(key: str, module, args, names) -> dict:
    """What counter ``key`` reports for ``module(*args)``: ``{unit: figure}`` (+ details)."""
    if key == "torch":
        from ..verify.impls import count_flops
        return {"FLOPs": count_flops(lambda: module(*args))}
    if key == "fvcore":
        from fvcore.nn import FlopCountAnalysis
        a = FlopCountAnalysis(module, args)
        a.unsupported_ops_warnings(False)
        a.uncalled_modules_warnings(False)
        return {"MACs": _whole(a.total()), "skipped": sorted(a.unsupported_ops())}
    if key in ("ptflops", "ptflops_aten"):
        from ptflops import get_model_complexity_info
        macs, _ = get_model_complexity_info(
            module, (1,), input_constructor=lambda _: dict(zip(names, args)),
            as_strings=False, print_per_layer_stat=False,
            backend="aten" if key == "ptflops_aten" else "pytorch")
        if macs is None:
            raise RuntimeError("ptflops returned no figure (it caught an error)")
        return {"MACs": _whole(macs)}
    if key == "thop":
        from thop import profile
        return {"MACs": _whole(profile(module, inputs=args, verbose=False)[0])}
    if key == "calflops":
        from calflops import calculate_flops
        flops, macs, _ = calculate_flops(module, args=list(args), print_results=False,
                                         print_detailed=False, output_as_string=False)
        return {"FLOPs": _whole(flops), "MACs": _whole(macs)}
    from deepspeed.profiling.flops_profiler import get_model_profile
    flops, macs, _ = get_model_profile(module, args=list(args), print_profile=False,
                                       detailed=False, as_string=False)
    return {"FLOPs": _whole(flops), "MACs": _whole(macs)}


def _kernel(module, args) -> str:
    """Which torch kernel computed the attention (from torch's profiler)."""
    from torch.profiler import profile
    with profile() as p:
        module(*args)
    names = [e.name for e in p.events()]
    fused = [n for n in names if "scaled_dot_product" in n]
    if fused:
        return fused[-1].removeprefix("aten::")
    return "+".join(sorted({n.removeprefix("aten::") for n in names
                            if n in ("aten::bmm", "aten::baddbmm", "aten::matmul")}))


def main(argv=None) -> int:
    """Child interpreter: ``python -m exactattn.audit.counters COUNTER CALL...``.

    Prints one marked JSON line per call (its figures, or its error) and
    stops at the first error: a counter that failed may leave torch patched.
    ``COUNTER`` may be ``kernel``: which torch kernel each call runs.
    """
    import warnings
    argv = sys.argv[1:] if argv is None else argv
    out, noise = sys.stdout, io.StringIO()

    def emit(record):
        print(MARK + json.dumps(record), file=out, flush=True)

    warnings.simplefilter("ignore")
    key, keys = argv[0], argv[1:]
    with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
        try:
            __import__("torch")   # the first import is the slow one
            if key != "kernel":
                __import__(counter(key).module)
        except Exception as e:  # a counter that does not import is "not installed"
            emit({"import_error": f"{type(e).__name__}: {shorten(str(e), 120)}"})
            return 3
    for k in keys:
        try:
            with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
                module, args, names = build(call(k))
                result = {"kernel": _kernel(module, args)} if key == "kernel" else \
                    _measure(key, module, args, names)
        except ModuleNotFoundError as e:   # e.g. transformers, to build a BERT layer
            emit({"call": k, "error": f"not installed: {e.name} (needed to build this call)"})
            continue
        except Exception as e:
            emit({"call": k, "error": f"{type(e).__name__}: {shorten(str(e), 160)}"})
            return 4
        emit({"call": k, **result})
    return 0


# --------------------------------------------------------------------------- parent side
@dataclass(frozen=True)
class Measurement:
    """One counter on one call: ``figures`` ``{unit: figure}`` (None on failure),
    ``error`` (why there is no figure), ``details`` (e.g. fvcore's skipped ops)."""

    counter: str
    call: str
    figures: dict | None
    error: str | None = None
    details: tuple = ()


def _run_child(key: str, keys: list[str]) -> list[dict]:
    try:
        p = subprocess.run([sys.executable, "-m", __name__, key, *keys], capture_output=True,
                           text=True, timeout=CHILD_SECONDS,
                           env={"OMP_NUM_THREADS": "1", **os.environ, "PYTHONWARNINGS": "ignore",
                                "TRANSFORMERS_VERBOSITY": "error",
                                "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"})
    except subprocess.TimeoutExpired:
        return [{"call": keys[0], "error": f"timed out after {CHILD_SECONDS} s"}]
    records = [json.loads(line[len(MARK):]) for line in p.stdout.splitlines()
               if line.startswith(MARK)]
    if not records:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        records = [{"call": keys[0], "error": f"interpreter exited {p.returncode}: "
                                             f"{shorten(tail, 160)}"}]
    return records


def _measure_counter(key: str, keys: list[str]) -> dict[str, Measurement]:
    """Every call under one counter, a fresh interpreter after each failure."""
    done: dict[str, Measurement] = {}
    pending = list(keys)
    while pending:
        for r in _run_child(key, pending):
            if "import_error" in r:
                for k in pending:
                    done[k] = Measurement(key, k, None, "not installed: " + r["import_error"])
                return done
            k = r["call"]
            done[k] = Measurement(key, k, None, r["error"]) if "error" in r else Measurement(
                key, k, {u: v for u, v in r.items() if u not in ("call", "skipped")}, None,
                tuple(r.get("skipped", ())))
        pending = [k for k in pending if k not in done]
    return done


def measure_all(counters=None, calls=None, jobs: int = 2, *,
                kernels: bool = True) -> dict[tuple[str, str], Measurement]:
    """Run each counter (default: all) on each call (default: all), ``jobs`` at a time.

    A counter that is not installed gives ``Measurement(..., error="not
    installed")`` without starting an interpreter; with ``kernels``, the torch
    kernel of every call is measured too, as counter ``kernel`` (when torch is
    installed and some counter runs).
    Returns ``{(counter, call): Measurement}``.
    """
    keys = [c.key for c in AUDIT_CALLS] if calls is None else [call(k).key for k in calls]
    wanted = [c.key for c in COUNTERS] if counters is None else [counter(k).key for k in counters]
    results: dict[tuple[str, str], Measurement] = {}
    run = []
    for key in wanted:
        c = counter(key)
        top = c.module.split(".")[0]
        if _version(c.distribution) is None or util.find_spec(top) is None:
            results.update({(key, k): Measurement(key, k, None, "not installed") for k in keys})
        else:
            run.append(key)
    if kernels and run and _version("torch") is not None:
        run.insert(0, "kernel")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for key, done in zip(run, pool.map(lambda k: _measure_counter(k, keys), run)):
            results.update({(key, k): m for k, m in done.items()})
    return results


if __name__ == "__main__":
    sys.exit(main())
