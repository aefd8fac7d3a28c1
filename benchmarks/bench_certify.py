"""Certified at float speed: the ratios of issue 27, each printed beside its goal in one run.

    python3 benchmarks/bench_certify.py                 # all three parts (about a minute)
    python3 benchmarks/bench_certify.py --repeat 5

1. **API, n = 1024** (d_model = d_k = d_v = 64, entries with 3 decimals: x ~ N(0, 1),
   weights ~ N(0, 1/64), each rounded to 3 places): ``attend(head, x, engine="fast")``,
   then ``share_decimals(4)`` and ``output_decimals(4)``: every share and output certified.
   Beside it numpy float64 doing the same job: projections, a max-subtracted softmax, the
   outputs, and every share and output formatted to 4 places.  Goal: exact/numpy <= 1.5.
   Printed with it: how many cells the integer enclosures left undecided (they go to the
   per-entry arb path and its Ziv loop), out of how many.
2. **float32 vs 3 decimals, n = 200** (the same sizes): the head's entries are exact float32
   values, written as the exact decimal of each float32 (as a checkpoint or ``--save-inputs``
   gives them), against the same head rounded to 3 decimals; ``exactattn walkthrough
   --spec FILE`` in text and JSON, a fresh process each run.  Goal: float32/3-decimal <= 2.
3. The load average before and after (2 cores here).

Medians of ``--repeat`` runs (default 5; the API job after one untimed call of each side,
whose time is printed too).  A script, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

import numpy as np

D = 64


def _gauss_rows(rng: random.Random, rows: int, cols: int, sd: float) -> list[list[float]]:
    return [[rng.gauss(0.0, sd) for _ in range(cols)] for _ in range(rows)]


def head_entries(n: int, seed: int = 0):
    """x (n x D) and three D x D weights as Python floats."""
    rng = random.Random(seed)
    return _gauss_rows(rng, n, D, 1.0), [_gauss_rows(rng, D, D, D ** -0.5) for _ in range(3)]


def api_job(n: int, repeat: int) -> None:
    from exactattn import Head, attend
    x, ws = head_entries(n)
    xq = [[Fraction(round(v * 1000), 1000) for v in r] for r in x]
    wq = [[[Fraction(round(v * 1000), 1000) for v in r] for r in w] for w in ws]
    head = Head(*wq)

    def exact():
        t = attend(head, xq, engine="fast")
        t.share_decimals(4)
        t.output_decimals(4)
        return t

    X = np.array([[float(v) for v in r] for r in xq])
    W = [np.array([[float(v) for v in r] for r in w]) for w in wq]

    def floats():
        Q, K, V = (X @ w.T for w in W)
        S = Q @ K.T / np.sqrt(D)
        S -= S.max(axis=1, keepdims=True)
        P = np.exp(S)
        P /= P.sum(axis=1, keepdims=True)
        O = P @ V
        [[f"{v:.4f}" for v in r] for r in P.tolist()]
        [[f"{v:.4f}" for v in r] for r in O.tolist()]

    t0 = time.perf_counter()
    exact()                       # the first call builds the exponential tables: timed apart
    first = time.perf_counter() - t0
    floats()
    te, tn, trace = [], [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        trace = exact()
        te.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        floats()
        tn.append(time.perf_counter() - t0)
    e, f = statistics.median(te), statistics.median(tn)
    cells = n * n + n * D
    print(f"1. API n = {n}: exact {e:.3f} s, numpy {f:.3f} s: {e / f:.2f}x (goal <= 1.5x); "
          f"cells left to arb: {trace.fallbacks} of {cells:,}; the first call {first:.3f} s")


def _spec(x, ws, text) -> dict:
    return {"name": "float32 head", "tokens": [{"x": [text(v) for v in r]} for r in x],
            "W_Q": [[text(v) for v in r] for r in ws[0]],
            "W_K": [[text(v) for v in r] for r in ws[1]],
            "W_V": [[text(v) for v in r] for r in ws[2]], "layout": "rows"}


def _exact_float32(v: float) -> str:
    """The exact decimal of ``v`` rounded to float32 (a dyadic rational, so it terminates)."""
    q = Fraction(float(np.float32(v)))
    if q.denominator == 1:
        return str(q.numerator)
    k = q.denominator.bit_length() - 1              # a power of two: 5^k / 10^k
    digits = abs(q.numerator) * 5 ** k
    s = str(digits).rjust(k + 1, "0")
    return ("-" if q < 0 else "") + s[:-k] + "." + s[-k:]


def float32_pair(n: int, repeat: int, folder: str) -> None:
    x, ws = head_entries(n, seed=1)
    paths = {}
    for name, text in (("float32", _exact_float32), ("3 decimals", lambda v: f"{v:.3f}")):
        paths[name] = os.path.join(folder, f"head-{n}-{name.replace(' ', '')}.json")
        with open(paths[name], "w", encoding="utf-8") as f:
            json.dump(_spec(x, ws, text), f)
    for fmt in ("text", "json"):
        med = {}
        for name, path in paths.items():
            runs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "exactattn", "walkthrough", "--spec", path,
                                "--format", fmt], check=True, stdout=subprocess.DEVNULL)
                runs.append(time.perf_counter() - t0)
            med[name] = statistics.median(runs)
        a, b = med["float32"], med["3 decimals"]
        print(f"2. walkthrough n = {n}, {fmt}: float32 {a:.2f} s, 3 decimals {b:.2f} s: "
              f"{a / b:.2f}x (goal <= 2x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n-api", type=int, default=1024)
    ap.add_argument("--n-float32", type=int, default=200)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"({os.cpu_count()} cores), python {sys.version.split()[0]}")
    api_job(args.n_api, args.repeat)
    with tempfile.TemporaryDirectory() as folder:
        float32_pair(args.n_float32, args.repeat, folder)
    print(f"3. load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
