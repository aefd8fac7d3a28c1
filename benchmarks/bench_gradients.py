"""Benchmark: every exact gradient of one attention call, certified to 4 places (issue 14).

One call at n = 64, 128, 256 (and 512 with ``--large``) queries and keys,
d_k = d_v = 64, standard-normal float32 inputs and upstream gradient dO
(seed 0), default scale 1/sqrt(64), causal: the exact dQ, dK and dV
(``exactattn.gradients``: ``fmpq_mat`` scores, ``arb_mat`` enclosures, every
entry correctly rounded to 4 places, undecided ones by the exact path), beside

* torch's float64 backward of the same call (autograd of SDPA on the CPU,
  median of 5 runs after a warm-up): the ratio ``exact / torch``;
* the forward exact side of ``exactattn verify`` at the same size (every
  output correctly rounded to float32): the ratio ``gradients / forward``;
* the exact side of ``exactattn verify --backward`` (every dQ, dK, dV entry
  correctly rounded to float32).

Targets (issue 14, at n = 512): at most 3x the forward verify, at most 100x
torch's float64 backward.  Run: ``python3 benchmarks/bench_gradients.py``
from the repository root.  A benchmark, not a test: it prints figures and
never fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

D = 64


def inputs(n: int):
    import numpy as np
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, D)).astype(np.float32) for _ in range(4)]
    return arrays, [[[Fraction(float(x)) for x in row] for row in a] for a in arrays]


def exact_seconds(exact) -> float:
    from exactattn.call import Policy
    from exactattn.gradients import gradients
    t0 = time.perf_counter()
    g = gradients(*exact, Policy(causal=True))
    for name in ("dQ", "dK", "dV"):
        g.decimals(name, 4)
    return time.perf_counter() - t0


def torch_seconds(arrays) -> float | None:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    times = []
    for run in range(6):
        q, k, v = (torch.from_numpy(a).double().requires_grad_(True) for a in arrays[:3])
        dO = torch.from_numpy(arrays[3]).double()
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dO)
        if run:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def verify_seconds(n: int) -> tuple[float, float]:
    from exactattn.call import Policy
    from exactattn.verify import random_problem, verify
    from exactattn.verify.backward import verify_backward
    problem = random_problem(n, D, seed=0)
    forward = verify("numpy", problem, Policy(causal=True), "float32")
    backward = verify_backward("numpy", problem, Policy(causal=True), "float32")
    return forward.seconds["exact"], backward.seconds["exact"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", action="store_true", help="also n = 512")
    args = ap.parse_args()
    print(f"d_k = d_v = {D}, causal, float32 inputs; seconds (ratios)")
    print(f"{'n':>5} {'gradients 4 places':>19} {'torch f64 bwd':>14} {'ratio':>8} "
          f"{'verify fwd exact':>17} {'ratio':>6} {'verify --backward exact':>24}")
    for n in (64, 128, 256) + ((512,) if args.large else ()):
        arrays, exact = inputs(n)
        ex = exact_seconds(exact)
        th = torch_seconds(arrays)
        fwd, bwd = verify_seconds(n)
        ratio = "-" if th is None else f"{ex / th:.0f}x"
        th_text = "-" if th is None else f"{th * 1000:.2f} ms"
        print(f"{n:>5} {ex:>17.2f} s {th_text:>14} {ratio:>8} {fwd:>15.2f} s "
              f"{ex / fwd:>5.1f}x {bwd:>22.2f} s")


if __name__ == "__main__":
    main()
