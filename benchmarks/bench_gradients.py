"""Benchmark: every exact gradient of one attention call, certified to 4 places (issue 14).

One call at n = 128, 256, 512 and 1024 queries and keys (``--sizes`` picks
others), d_k = d_v = 64, standard-normal float32 inputs and upstream gradient
dO (seed 0), default scale 1/sqrt(64), causal: the exact dQ, dK and dV
(``exactattn.gradients``: exponentials enclosed by the forward pass's integer
tables, certified float64 interval products, every entry correctly rounded to
4 places, undecided ones by the exact path), beside

* torch's float64 backward of the same call (autograd of SDPA on the CPU,
  fastest of 7 runs after a warm-up, with torch's default threads and with
  one thread, the faster kept: on a loaded machine two threads can be the
  slower): the ratio ``exact / torch``;
* the forward exact side of ``exactattn verify`` at the same size (every
  output correctly rounded to float32): the ratio ``gradients / forward``;
* with ``--verify-backward``, the exact side of ``exactattn verify
  --backward`` (every dQ, dK, dV entry correctly rounded to float32; up to
  n = 512, the largest call ``verify --backward`` takes).

Targets (issue 14, at n = 512): at most 3x the forward verify, at most 100x
torch's float64 backward.  The machine's load average is printed first: other
jobs on a shared machine slow every column (torch's threads the most).  Run:
``python3 benchmarks/bench_gradients.py`` from the repository root.  A
benchmark, not a test: it prints figures and never fails on time.
"""

from __future__ import annotations

import argparse
import os
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
    from exactattn.call.policy import Policy
    from exactattn.gradients import gradients
    t0 = time.perf_counter()
    g = gradients(*exact, Policy(causal=True))
    for name in ("dQ", "dK", "dV"):
        g.decimals(name, 4)
    return time.perf_counter() - t0


def torch_seconds(arrays) -> tuple[float, int] | None:
    """(fastest of 7 runs, threads) of torch's float64 backward, or None without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    best = []
    default = torch.get_num_threads()
    for threads in sorted({default, 1}):
        torch.set_num_threads(threads)
        times = []
        for run in range(8):
            q, k, v = (torch.from_numpy(a).double().requires_grad_(True) for a in arrays[:3])
            dO = torch.from_numpy(arrays[3]).double()
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dO)
            if run:
                times.append(time.perf_counter() - t0)
        best.append((min(times), threads))
    torch.set_num_threads(default)
    return min(best)


def verify_seconds(n: int, backward: bool) -> tuple[float, float | None]:
    from exactattn.call.policy import Policy
    from exactattn.call import Call
    from exactattn.verify import verify
    from exactattn.verify.backward import verify_backward
    problem = Call.random(n, D, seed=0)
    forward = verify("numpy", problem.with_policy(Policy(causal=True)), "float32")
    if not backward or n > 512:
        return forward.seconds["exact"], None
    back = verify_backward("numpy", problem.with_policy(Policy(causal=True)), "float32")
    return forward.seconds["exact"], back.seconds["exact"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="128,256,512,1024", help="n values (128,256,512,1024)")
    ap.add_argument("--verify-backward", action="store_true",
                    help="also time the exact side of verify --backward")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"d_k = d_v = {D}, causal, float32 inputs; load average {load} on "
          f"{os.cpu_count()} cores; seconds (ratios)")
    exact_seconds(inputs(8)[1])          # warm: the exponential tables are built once
    head = (f"{'n':>5} {'gradients 4 places':>19} {'torch f64 bwd':>16} {'x torch':>8} "
            f"{'verify fwd exact':>17} {'x fwd':>6}")
    print(head + (f" {'verify --backward exact':>24}" if args.verify_backward else ""))
    for n in sizes:
        arrays, exact = inputs(n)
        ex = exact_seconds(exact)
        th = torch_seconds(arrays)
        fwd, bwd = verify_seconds(n, args.verify_backward)
        ratio = "-" if th is None else f"{ex / th[0]:.0f}x"
        th_text = "-" if th is None else f"{th[0] * 1000:.2f} ms ({th[1]}t)"
        line = (f"{n:>5} {ex:>17.2f} s {th_text:>16} {ratio:>8} {fwd:>15.2f} s "
                f"{ex / fwd:>5.2f}x")
        if args.verify_backward:
            line += f" {bwd:>22.2f} s" if bwd is not None else f" {'-':>24}"
        print(line)


if __name__ == "__main__":
    main()
