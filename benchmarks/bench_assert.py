"""Benchmark: ``assert_attention_close`` beside a float64 reference with ``assert_close``.

For each case, torch's CPU ``scaled_dot_product_attention`` in the case's dtype gives the
output a kernel test has; then, on the same tensors and in the same process:

* the anchor: float64 SDPA of the same inputs and ``torch.testing.assert_close`` of the
  output against it (``ref.to(out.dtype)``, the dtype's default tolerances), warm;
* ``exactattn.testing.assert_attention_close`` (every output within its tolerance in
  ULPs of the exact value; decided from float64 enclosures with a proved bound, the
  entries they leave open in ``arb``).

It prints the median of the repeats of each, their ratio, the first call of the assertion
on the case (the first row's first call is also the process's: imports and the one-time
check of ``numpy.exp`` included), how many outputs were left to the exact path, and the
load average.  Targets (issue "the exact assertion at the speed of a kernel test suite"):
ratio <= 20x at 1 x 8 x 256 x 64 (float32 and bfloat16, causal and GQA 8/2), <= 30x at
1 x 32 x 1024 x 128 GQA 32/8 bfloat16, and every case accepted.

Run: ``python3 benchmarks/bench_assert.py`` from the repository root (``--quick``: the
1 x 8 x 256 x 64 cases only; ``--flash``: also FlashAttention's largest test shape,
4 x 9 x 2048 x 2048, head dim 256, a few minutes).
This is a benchmark, not a test: it prints figures and never fails on time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: (name, B, H_q, H_kv, L = S, E, dtype, causal, target ratio or None)
CASES = [
    ("1x8x256x64 f32 causal", 1, 8, 8, 256, 64, "float32", True, 20),
    ("1x8x256x64 f32 GQA 8/2", 1, 8, 2, 256, 64, "float32", False, 20),
    ("1x8x256x64 bf16 causal", 1, 8, 8, 256, 64, "bfloat16", True, 20),
    ("1x8x256x64 bf16 GQA 8/2", 1, 8, 2, 256, 64, "bfloat16", False, 20),
    ("2x8x512x64 f32", 2, 8, 8, 512, 64, "float32", False, None),
    ("1x32x1024x128 bf16 GQA 32/8", 1, 32, 8, 1024, 128, "bfloat16", False, 30),
]
FLASH = ("4x9x2048x256 bf16 causal", 4, 9, 9, 2048, 256, "bfloat16", True, None)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_case(case, repeats: int) -> None:
    import torch
    import torch.nn.functional as F
    from exactattn.testing import assert_attention_close
    name, B, Hq, Hkv, n, E, dtype, causal, target = case
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    q = torch.randn(B, Hq, n, E, generator=gen).to(dt)
    k, v = (torch.randn(B, Hkv, n, E, generator=gen).to(dt) for _ in range(2))
    kw = dict(is_causal=causal, enable_gqa=Hq != Hkv)
    out = F.scaled_dot_product_attention(q, k, v, **kw)

    def anchor():
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
        try:
            torch.testing.assert_close(out, ref.to(out.dtype))
        except AssertionError:
            pass            # timed all the same: a failing comparison costs as much

    def exact():
        return assert_attention_close(out, q, k, v, **kw)

    t0 = time.perf_counter()
    report = exact()
    first = time.perf_counter() - t0
    anchor()
    a = median_seconds(anchor, repeats)
    e = median_seconds(exact, repeats)
    left = next((note.split(":")[1].split("(")[0].strip() for note in report.notes
                 if note.startswith("outputs left")), "0")
    verdict = "" if target is None else f"  target <= {target}x: " + (
        "met" if e / a <= target else "MISSED")
    print(f"{name:30} anchor {a * 1e3:8.1f} ms  exact {e * 1e3:8.1f} ms  ratio {e / a:7.1f}x  "
          f"first {first:6.2f} s  open {left:>12}  max {report.summary()['max_ulps']} ULPs"
          f"{verdict}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 1 x 8 x 256 x 64 cases only")
    ap.add_argument("--flash", action="store_true",
                    help="also FlashAttention's largest test shape (minutes)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per case (median)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_assert needs torch (pip install -e '.[torch]')")
    torch.set_num_threads(os.cpu_count() or 1)
    cases = CASES[:4] if args.quick else CASES + ([FLASH] if args.flash else [])
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"median of {args.repeats} repeats")
    for case in cases:
        run_case(case, args.repeats if case[4] <= 512 else max(1, args.repeats // 2))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
