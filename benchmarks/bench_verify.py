"""Benchmark: verifying one torch SDPA call against certified exact outputs (issue 6).

One call ``scaled_dot_product_attention`` at n = 512 queries and keys, d_k =
d_v = 64, float32, standard-normal inputs (seed 0), default policy: the torch
run, the exact reference for all 32,768 outputs (``fmpq_mat`` scores, ``arb``
enclosures, each output correctly rounded to float32 and certified) and the
comparison.  Also the same call in the CLI (fresh interpreter, imports
included), and with ``--quick`` only n = 128.

Target: under 30 s on this machine.
Run: ``python3 benchmarks/bench_verify.py`` from the repository root.
This is a benchmark, not a test: it prints figures and never fails on time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 30.0


def one(n: int, d_k: int, dtype: str, impl: str) -> None:
    from exactattn.call.policy import Policy
    from exactattn.call import Call
    from exactattn.verify import verify
    t0 = time.perf_counter()
    problem = Call.random(n, d_k, seed=0)
    t1 = time.perf_counter()
    report = verify(impl, problem.with_policy(Policy()), dtype)
    t2 = time.perf_counter()
    s = report.summary()
    sec = report.seconds
    print(f"{impl:6} {dtype:8} n={n:4} d_k={d_k}: total {t2 - t0:6.2f} s "
          f"(inputs {t1 - t0:.2f}, {impl} {sec['impl']:.2f}, exact {sec['exact']:.2f}, "
          f"compare {sec['compare']:.2f}); {s['count']} outputs, max {s['max_ulps']} ULPs, "
          f"mean {s['mean_ulps']:.2f}, median {s['median_ulps']}, "
          f"max at terms {s['max_terms_ulps']:.2f}, {'PASS' if report.passed else 'FAIL'}")
    return t2 - t0


def cli(n: int, d_k: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "exactattn", "verify", "--impl", "torch", "--dtype",
                    "float32", "--n", str(n), "--d-k", str(d_k)], env=env, check=False,
                   capture_output=True, text=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 128 only")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        impl = "torch"
    except ImportError:
        impl = "numpy"
        print("torch is not installed: timing the numpy implementation instead")
    n = 128 if args.quick else 512
    seconds = one(n, 64, "float32", impl)
    if n == 512:
        print(f"target: under {TARGET_S:.0f} s for n = 512, d_k = 64, float32: "
              f"{'met' if seconds < TARGET_S else 'MISSED'} ({seconds:.2f} s)")
    else:
        print(f"quick run at n = {n}; the {TARGET_S:.0f} s target is for n = 512")
    if not args.quick:
        for dtype in ("float64", "bfloat16", "float16"):
            one(n, 64, dtype, impl)
        print(f"CLI, fresh interpreter, n = {n}: {cli(n, 64):.2f} s")


if __name__ == "__main__":
    main()
