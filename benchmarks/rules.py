"""Benchmark: the field's tolerance rules beside exactattn's, on a zoo of kernels.

A zoo of correct attention kernels (float64 and float32 math; FlashAttention-style kernels
with float32 accumulation and the weights rounded to the dtype; online softmax in blocks,
ragged blocks, split-KV with a log-sum-exp merge; causal, bottom-right causal, GQA, window,
sinks, soft-cap, RoPE, dropout, 4,096 keys, float8 inputs; torch's own SDPA) and of faulty
ones (the public bug kinds: scale twice, off by 1%, 1/d_k, none; causal misaligned or
hiding the diagonal; window off by one; GQA tiled for interleaved; sink dropped or counted
twice; soft-cap not divided or before the scale; a float16 running sum; float16 softmax
without the max; bfloat16-rounded weights; a split-KV merge with a base-2 LSE; dropout
without its 1/(1-p); RoPE's layout swapped; online softmax that forgets to rescale or drops
the ragged last block; the mask applied after the softmax; a float8 kernel with its scale
off), each run at two shapes and several seeds in float32, bfloat16 and float16.

Every output is judged, outputs only, by

* ``exactattn``: :func:`exactattn.testing.assert_attention_close` (the proved tolerance);
* ``exactattn verify``: :func:`exactattn.verify.verify` with its probes (first seed, first
  shape; the kernel is called on derived values too);
* ``flash-attn 2x``: FlashAttention's tests (``tests/test_flash_attn.py``): the error against
  a float32 reference (rounded to the dtype) at most twice that of the same math in the test
  dtype, plus 1e-5, in max-abs;
* ``pytorch fudge``: PyTorch's SDPA tests (``test/test_transformers.py``, ``get_tolerances``):
  atol and rtol = 3 x max(the low-precision math's max error against a higher-precision
  reference, the dtype default: atol 1e-5/1e-3/1e-3, rtol 1.3e-6/1e-3/1.6e-2 for
  float32/float16/bfloat16), then ``assert_close``;
* ``flex 1.1x``: FlexAttention's tests (``test/inductor/test_flex_attention.py``,
  ``_check_equal``): mean absolute error against float64 at most 1.1x that of the eager
  math in the dtype;
* ``xformers``: fixed tables (``tests/test_mem_eff_attention.py``, the cutlass op's
  ERROR_ATOL/ERROR_RTOL: 3e-4/2e-5, 4e-3/4e-4, 2e-2/2e-2) against float32 math;
* ``assert_close``: ``torch.testing.assert_close`` with its dtype defaults against float64
  math rounded to the dtype;
* ``llama.cpp``: ``test-backend-ops``' normalised MSE, sum (a - b)^2 / sum b^2 <= 5e-4,
  against float32 math.

It prints, per rule, the faulty runs it fails and the correct runs it fails (a false FAIL),
and the runs where some field rule fails a faulty kernel that exactattn passes (goal: 0).
Run ``python3 benchmarks/rules.py`` from the repository root (``--quick``: one shape,
2 seeds; ``--seeds N`` seeds of the correct kernels, 10 by default, faulty ones get 3;
``--json FILE`` writes every run).  Needs torch.  A benchmark, not a test: it prints
figures and exits 0 (1 only with ``--check`` when a goal is missed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
DTYPES = {"float32": F32, "bfloat16": BF16, "float16": F16}


@dataclass(frozen=True)
class Case:
    """The call a kernel is run on: shapes and modifiers (two shapes: ``shapes``)."""
    shapes: tuple = ((2, 64, 64, 32), (2, 128, 128, 64))      # (H_q, L, S, E)
    h_kv: int | None = None          # GQA: H_kv (query head h reads h // (H_q / H_kv))
    causal: str | None = None        # "top_left" or "bottom_right"
    window: int | None = None        # keys j with i - window <= j <= i (causal)
    sink: float | None = None
    softcap: float | None = None
    big: float = 1.0                 # queries and keys ~ N(0, big^2)
    rope: str | None = None          # "half" or "interleaved", theta 10000
    dropout: bool = False            # p = 1/10, a fixed keep-mask
    fp8: bool = False                # inputs float8_e4m3fn (the kernel computes in bfloat16)


CASES = {
    "plain": Case(),
    "causal": Case(causal="top_left"),
    "causal L<S": Case(causal="bottom_right", shapes=((2, 32, 64, 32), (2, 64, 160, 64))),
    "GQA 8/2": Case(h_kv=2, shapes=((8, 32, 64, 32), (8, 64, 128, 64))),
    "window": Case(causal="top_left", window=9),
    "sink": Case(sink=1.5),
    "soft-cap": Case(softcap=5.0, big=3.0),
    "large logits": Case(big=3.0),
    "ragged": Case(shapes=((2, 32, 72, 32), (2, 64, 200, 64))),
    "4096 keys": Case(shapes=((1, 8, 4096, 32), (2, 4, 4096, 64))),
    "rope": Case(rope="half", shapes=((1, 12, 12, 8), (2, 16, 16, 16))),
    "dropout": Case(dropout=True, shapes=((1, 12, 12, 8), (2, 16, 16, 16))),
    "fp8": Case(fp8=True),
}


# --------------------------------------------------------------------------- the kernels
def _rope(x, layout):
    """Rotary embedding of x (... x n x E) at positions 0..n-1, theta 10000, in x's dtype."""
    n, E = x.shape[-2], x.shape[-1]
    freq = 10000.0 ** (-torch.arange(0, E, 2, dtype=F64) / E)
    ang = torch.arange(n, dtype=F64)[:, None] * freq[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = (x[..., :E // 2], x[..., E // 2:]) if layout == "half" else (x[..., 0::2], x[..., 1::2])
    ra, rb = a * cos - b * sin, a * sin + b * cos
    if layout == "half":
        return torch.cat([ra, rb], dim=-1)
    return torch.stack([ra, rb], dim=-1).flatten(-2)


def _visible(L, S, c: Case, fault: str):
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    vis = torch.ones(L, S, dtype=torch.bool)
    if c.causal is not None:
        shift = S - L if c.causal == "bottom_right" and fault != "causal misaligned" else 0
        vis = j < i + shift if fault == "causal hides the diagonal" else j <= i + shift
    if c.window is not None:
        vis = vis & (j >= i - c.window + (fault == "window off by one"))
    return vis


def keep_mask(c: Case, H, L, S, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.rand(1, H, L, S, generator=g) >= 0.1


def attend(q, k, v, c: Case, *, acc=F32, p_dtype=None, block=None, splits=1, fault="",
           keep=None):
    """Attention of q (1 x H x L x E), k, v (1 x H_kv x S x ...) under ``c``, computed in
    ``acc`` with the weights rounded to ``p_dtype`` before they meet the values, online
    over key blocks of ``block`` and split over ``splits`` key ranges; ``fault`` one of
    :data:`FAULTS`' bugs.  Returns ``acc`` values (the caller rounds to the dtype)."""
    H, L, E = q.shape[1], q.shape[2], q.shape[3]
    q, k, v = q.to(acc), k.to(acc), v.to(acc)
    S = k.shape[2]
    if k.shape[1] != H:
        rep = H // k.shape[1]
        k, v = ((x.repeat(1, rep, 1, 1) if fault == "GQA tiled" else
                 x.repeat_interleave(rep, dim=1)) for x in (k, v))
    if c.rope is not None:
        layout = c.rope if fault != "RoPE layout swapped" else \
            ("interleaved" if c.rope == "half" else "half")
        q, k = _rope(q, layout), _rope(k, layout)
    scale = {"scale twice": 1 / E, "scale off by 1%": 1.01 / math.sqrt(E), "scale 1/d_k": 1 / E,
             "no scale": 1.0}.get(fault, 1 / math.sqrt(E))
    s = q @ k.transpose(-1, -2)
    if fault == "soft-cap before the scale" and c.softcap is not None:
        s = c.softcap * torch.tanh(s / c.softcap) * scale
    else:
        s = s * scale
        if c.softcap is not None:
            s = c.softcap * torch.tanh(s if fault == "soft-cap not divided" else s / c.softcap)
    vis = _visible(L, S, c, fault)
    norm_vis = torch.ones_like(vis) if fault == "mask after the softmax" else vis
    s = s.masked_fill(~norm_vis, -math.inf)
    edges = [round(S * t / splits) for t in range(splits + 1)]
    parts = []
    for a, b in zip(edges[:-1], edges[1:]):
        step = block or (b - a)
        stop = a + (b - a) // step * step if fault == "online drops the last block" else b
        m = torch.full(s.shape[:-1], -math.inf, dtype=acc)
        l, o = torch.zeros(s.shape[:-1], dtype=acc), torch.zeros(s.shape[:-1] + v.shape[-1:], dtype=acc)
        if c.sink is not None and a == 0 and fault != "sink dropped":
            m = torch.full_like(m, c.sink)
            l = l + (2.0 if fault == "sink counted twice" else 1.0)
        for c0 in range(a, stop, step):
            t, vb = s[..., c0:min(c0 + step, b)], v[..., c0:min(c0 + step, b), :]
            m_new = torch.maximum(m, t.max(dim=-1).values)
            if fault == "float16 softmax without the max":      # exp(s) itself, in float16
                m_new = torch.zeros_like(m_new)
            safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m - safe)
            if fault == "float16 softmax without the max":
                p = torch.exp(t.to(F16)).to(acc)
            else:
                p = torch.exp(t - safe[..., None])
            num = p * vis[..., c0:min(c0 + step, b)] if fault == "mask after the softmax" else p
            if keep is not None:
                kb = keep[..., c0:min(c0 + step, b)].to(acc)
                num = num * kb * (1.0 if fault == "dropout without 1/(1-p)" else 1 / 0.9)
            if p_dtype is not None:
                num = num.to(p_dtype).to(acc)
            if fault == "float16 running sum":
                total = l * alpha
                for j in range(p.shape[-1]):
                    total = (total.to(F16) + p[..., j].to(F16)).to(acc)
                l = total
            else:
                l = l * alpha + p.sum(dim=-1)
            o = (o if fault == "online forgets to rescale" else o * alpha[..., None]) + num @ vb
            m = m_new
        parts.append((m, l, o))
    if len(parts) == 1:
        m, l, o = parts[0]
        return o / l[..., None]
    lse = [m + torch.log(l) for m, l, _ in parts]
    if fault == "split-KV merge with a base-2 LSE":
        lse = [x / math.log(2) for x in lse]
    top = torch.stack(lse).max(dim=0).values
    w = [torch.exp(x - top) for x in lse]
    out = sum(wi[..., None] * torch.where(l[..., None] > 0, o / l[..., None], 0.0)
              for wi, (_, l, o) in zip(w, parts))      # a split that sees no key adds 0
    return out / sum(w)[..., None]


@dataclass(frozen=True)
class Kernel:
    name: str
    case: str
    how: dict = field(default_factory=dict)     # attend()'s keywords (acc, block, splits, fault)
    dtypes: tuple = tuple(DTYPES)
    sdpa: bool = False                          # torch's own scaled_dot_product_attention

    def run(self, q, k, v, dt, keep=None):
        c = CASES[self.case]
        if self.sdpa:
            import torch.nn.functional as F
            return F.scaled_dot_product_attention(q, k, v, is_causal=c.causal is not None,
                                                  enable_gqa=c.h_kv is not None)
        how = dict(self.how)
        how.setdefault("p_dtype", dt)
        if how.pop("p_bf16", False):
            how["p_dtype"] = BF16
        return attend(q, k, v, c, keep=keep, **how).to(dt)


CORRECT = [
    Kernel("float64 math", "plain", {"acc": F64, "p_dtype": F64}),
    Kernel("float32 math", "plain", {"p_dtype": F32}),
    Kernel("flash, P in the dtype", "plain"),
    Kernel("online, blocks of 16", "causal", {"block": 16}),
    Kernel("online, ragged blocks of 32", "ragged", {"block": 32}),
    Kernel("split-KV x4, LSE merge", "plain", {"splits": 4}),
    Kernel("split-KV x3 + online 16", "causal L<S", {"splits": 3, "block": 16}),
    Kernel("flash GQA", "GQA 8/2", {"block": 32}),
    Kernel("flash window", "window", {"block": 16}),
    Kernel("flash sink", "sink", {"block": 32}),
    Kernel("flash soft-cap", "soft-cap"),
    Kernel("flash large logits", "large logits", {"splits": 2}),
    Kernel("flash 4096 keys", "4096 keys", {"block": 256}),
    Kernel("flash RoPE", "rope"),
    Kernel("flash dropout", "dropout"),
    Kernel("flash float8 inputs", "fp8", dtypes=("bfloat16",)),
    Kernel("torch SDPA", "plain", sdpa=True),
    Kernel("torch SDPA causal", "causal", sdpa=True),
    Kernel("torch SDPA GQA", "GQA 8/2", sdpa=True),
]

NOT_BF16 = ("float32", "float16")
FAULTS = [
    Kernel("scale twice", "plain", {"fault": "scale twice"}),
    Kernel("scale off by 1%", "plain", {"fault": "scale off by 1%"}),
    Kernel("scale 1/d_k", "plain", {"fault": "scale 1/d_k"}),
    Kernel("no scale", "plain", {"fault": "no scale"}),
    Kernel("causal misaligned", "causal L<S", {"fault": "causal misaligned"}),
    Kernel("causal hides the diagonal", "causal", {"fault": "causal hides the diagonal"}),
    Kernel("window off by one", "window", {"fault": "window off by one"}),
    Kernel("GQA tiled for interleaved", "GQA 8/2", {"fault": "GQA tiled"}),
    Kernel("sink dropped", "sink", {"fault": "sink dropped"}),
    Kernel("sink counted twice", "sink", {"fault": "sink counted twice"}),
    Kernel("soft-cap not divided", "soft-cap", {"fault": "soft-cap not divided"}),
    Kernel("soft-cap before the scale", "soft-cap", {"fault": "soft-cap before the scale"}),
    Kernel("float16 running sum", "4096 keys", {"fault": "float16 running sum"}),
    Kernel("float16 softmax without the max", "large logits",
           {"fault": "float16 softmax without the max"}, dtypes=("float16",)),
    Kernel("bfloat16-rounded weights", "plain", {"p_bf16": True}, dtypes=NOT_BF16),
    Kernel("split-KV merge, base-2 LSE", "plain",
           {"splits": 4, "fault": "split-KV merge with a base-2 LSE"}),
    Kernel("dropout without 1/(1-p)", "dropout", {"fault": "dropout without 1/(1-p)"}),
    Kernel("RoPE layout swapped", "rope", {"fault": "RoPE layout swapped"}),
    Kernel("online forgets to rescale", "plain", {"block": 16, "fault": "online forgets to rescale"}),
    Kernel("online drops the last block", "ragged",
           {"block": 32, "fault": "online drops the last block"}),
    Kernel("mask after the softmax", "causal", {"fault": "mask after the softmax"}),
    Kernel("float8 kernel, scale off by 1%", "fp8", {"fault": "scale off by 1%"},
           dtypes=("bfloat16",)),
]


# --------------------------------------------------------------------------- inputs
def inputs(c: Case, shape, dt, seed):
    """q, k, v (1 x H x L x E ...) in the kernel's dtype, from ``seed``."""
    H, L, S, E = shape
    g = torch.Generator().manual_seed(seed)
    hk = c.h_kv or H
    q = torch.randn(1, H, L, E, generator=g, dtype=F64) * c.big
    k = torch.randn(1, hk, S, E, generator=g, dtype=F64) * c.big
    v = torch.randn(1, hk, S, E, generator=g, dtype=F64)
    if c.fp8:
        return tuple(x.to(torch.float8_e4m3fn).to(dt) for x in (q, k, v))
    return tuple(x.to(dt) for x in (q, k, v))


def policy_of(c: Case, keep):
    """assert_attention_close's keywords for ``c``."""
    kw = {"is_causal": c.causal is not None, "enable_gqa": c.h_kv is not None}
    if c.causal == "bottom_right":
        kw["alignment"] = "bottom_right"
    if c.window is not None:
        kw["window"] = (c.window, 0)
    if c.sink is not None:
        kw["sink"] = str(c.sink)
    if c.softcap is not None:
        kw["softcap"] = str(c.softcap)
    if c.rope is not None:
        from exactattn.call.modifiers import Rope
        kw["rope"] = Rope(theta=10000, layout=c.rope)
    if keep is not None:
        kw.update(dropout="1/10", dropout_keep=keep.numpy())
    return kw


# --------------------------------------------------------------------------- the rules
def _math(q, k, v, c, acc, keep):
    return attend(q, k, v, c, acc=acc, keep=keep)


def field_rules(out, q, k, v, c: Case, dt, keep) -> dict:
    """``{rule: passed}`` for the field's rules on one output (``out`` in ``dt``)."""
    m64, m32 = _math(q, k, v, c, F64, keep), _math(q, k, v, c, F32, keep)
    low = _math(q, k, v, c, dt, keep)                  # the same math in the test dtype
    o = out.to(F64)
    res = {}
    ref = m32.to(dt).to(F64)                           # flash-attn: fp32 reference, rounded
    res["flash-attn 2x"] = bool((o - ref).abs().max() <= 2 * (low.to(F64) - ref).abs().max() + 1e-5)
    high = m64 if dt == F32 else m32.to(F64)           # pytorch: get_tolerances, fudge 3
    err = (high - low.to(F64)).abs()
    atol0, rtol0 = {F32: (1e-5, 1.3e-6), F16: (1e-3, 1e-3), BF16: (1e-3, 1.6e-2)}[dt]
    atol = 3 * max(float(err.max()), atol0)
    rtol = 3 * max(float((err / high.abs()).nan_to_num(0, 0, 0).max()), rtol0)
    res["pytorch fudge"] = _close(out, high.to(dt), atol, rtol)
    ce, re = float((m64 - o).abs().mean()), float((m64 - low.to(F64)).abs().mean())
    res["flex 1.1x"] = math.isfinite(ce) and ce <= 1.1 * re
    xa, xr = {F32: (3e-4, 2e-5), F16: (4e-3, 4e-4), BF16: (2e-2, 2e-2)}[dt]
    res["xformers"] = _close(out.to(F32), m32.to(F32), xa, xr)
    res["assert_close"] = _close(out, m64.to(dt), None, None)
    nmse = float(((o - m32.to(F64)) ** 2).sum() / (m32.to(F64) ** 2).sum())
    res["llama.cpp"] = math.isfinite(nmse) and nmse <= 5e-4
    return res


def _close(a, b, atol, rtol) -> bool:
    try:
        if atol is None:
            torch.testing.assert_close(a, b)
        else:
            torch.testing.assert_close(a, b, atol=atol, rtol=rtol)
        return True
    except AssertionError:
        return False


def exact_rule(out, q, k, v, c: Case, keep) -> bool:
    from exactattn.testing import assert_attention_close
    try:
        assert_attention_close(out, q, k, v, **policy_of(c, keep))
        return True
    except AssertionError:
        return False


def verify_rule(kernel: Kernel, q, k, v, c: Case, dtype: str, keep) -> bool:
    from exactattn.call import Call
    from exactattn.verify import verify
    from exactattn.verify.adapter import FunctionImpl
    dt = DTYPES[dtype]

    def impl(query, key, value, **_):
        return kernel.run(query, key, value, dt, keep)
    kw = policy_of(c, keep)
    call = Call.from_sdpa(*(x.to(F64).numpy() for x in (q, k, v)), **kw)
    return verify(FunctionImpl(impl, arrays="torch", name=kernel.name), call, dtype).passed


# --------------------------------------------------------------------------- the run
RULES = ("exactattn", "exactattn verify", "flash-attn 2x", "pytorch fudge", "flex 1.1x",
         "xformers", "assert_close", "llama.cpp")


def run(kernels, correct: bool, seeds: int, shapes: int, probes: bool, log) -> list:
    rows = []
    for kern in kernels:
        c = CASES[kern.case]
        for dtype in kern.dtypes:
            dt = DTYPES[dtype]
            for si, shape in enumerate(c.shapes[:shapes]):
                for seed in range(seeds):
                    q, k, v = inputs(c, shape, dt, seed)
                    keep = keep_mask(c, shape[0], shape[1], shape[2], seed) if c.dropout else None
                    out = kern.run(q, k, v, dt, keep)
                    row = {"kernel": kern.name, "correct": correct, "case": kern.case,
                           "dtype": dtype, "shape": list(shape), "seed": seed}
                    row["exactattn"] = exact_rule(out, q, k, v, c, keep)
                    if probes and si == 0 and seed == 0:
                        row["exactattn verify"] = verify_rule(kern, q, k, v, c, dtype, keep)
                    row.update(field_rules(out, q, k, v, c, dt, keep))
                    rows.append(row)
            log(f"  {'correct' if correct else 'faulty '} {kern.name:34} {dtype:9} "
                f"exactattn fails {sum(not r['exactattn'] for r in rows if r['kernel'] == kern.name and r['dtype'] == dtype)}"
                f" of {seeds * min(shapes, len(c.shapes))}")
    return rows


def table(rows) -> str:
    """The markdown table: per rule, faulty runs failed and correct runs failed."""
    bad = [r for r in rows if not r["correct"]]
    good = [r for r in rows if r["correct"]]
    kinds = sorted({(r["kernel"], r["dtype"]) for r in bad})
    lines = ["| rule | faulty runs failed | fault kinds x dtype caught (every run) | "
             "correct runs failed (false FAIL) |", "|---|---|---|---|"]
    for rule in RULES:
        b = [r for r in bad if rule in r]
        g = [r for r in good if rule in r]
        caught = sum(all(not r[rule] for r in b if (r["kernel"], r["dtype"]) == kd) and
                     any((r["kernel"], r["dtype"]) == kd for r in b) for kd in kinds)
        seen = sum(any((r["kernel"], r["dtype"]) == kd for r in b) for kd in kinds)
        lines.append(f"| {rule} | {sum(not r[rule] for r in b)} of {len(b)} | "
                     f"{caught} of {seen} | {sum(not r[rule] for r in g)} of {len(g)} |")
    return "\n".join(lines)


def missed(rows) -> list:
    """Faulty runs some field rule fails and exactattn (outputs only) passes."""
    field_ = [r for r in RULES if not r.startswith("exactattn")]
    return [r for r in rows if not r["correct"] and r["exactattn"] and
            any(not r[f] for f in field_)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one shape, 2 seeds")
    ap.add_argument("--seeds", type=int, default=10, help="seeds of each correct kernel (10)")
    ap.add_argument("--no-probes", action="store_true", help="skip exactattn verify")
    ap.add_argument("--json", metavar="FILE", help="write every run as JSON")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a goal is missed (a false FAIL, or a fault missed)")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error(f"--seeds must be at least 1 (got {a.seeds})")
    seeds, shapes = (2, 1) if a.quick else (a.seeds, 2)
    t0 = time.perf_counter()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    rows = run(CORRECT, True, seeds, shapes, not a.no_probes, log)
    rows += run(FAULTS, False, min(seeds, 3), shapes, not a.no_probes, log)
    print(f"{len(CORRECT)} correct and {len(FAULTS)} faulty kernels, {len(rows)} runs, "
          f"{time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}, torch {torch.__version__}")
    print(table(rows))
    miss = missed(rows)
    print(f"faulty runs a field rule fails and exactattn passes: {len(miss)}")
    for r in miss[:10]:
        print(f"  {r['kernel']} {r['dtype']} {r['shape']} seed {r['seed']}: failed by "
              + ", ".join(f for f in RULES if f in r and not r[f]))
    false_fail = [r for r in rows if r["correct"] and (not r["exactattn"] or
                                                       r.get("exactattn verify") is False)]
    for r in false_fail[:10]:
        print(f"  false FAIL: {r['kernel']} {r['dtype']} {r['shape']} seed {r['seed']}")
    vmiss = [r for r in rows if not r["correct"] and r.get("exactattn verify")]
    for r in vmiss[:10]:
        print(f"  verify passes faulty: {r['kernel']} {r['dtype']} {r['shape']}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if a.check and (miss or false_fail or vmiss) else 0


if __name__ == "__main__":
    sys.exit(main())
