"""Benchmark: counting multiply-adds by running the head (issue 3).

Times ``exactattn cost --rows 128,256,512,1024`` at D = d_k = 4 (about 8.4
million MACs at n = 1024, every one counted in the pencil engine's loops), next
to the time the command estimates before it runs (``counting_work``: a command
estimated over ``MAX_SECONDS`` is refused, so keep the estimate at or above the
measured time); the same rows with a head whose token rows are all different
(width 5: no two score rows repeat, so no softmax row is shared); for scale, the
per-MAC cost of the plain ``Fraction`` loops the engine used before it ran on
integers over a common denominator; and the start-up time of
``exactattn cost --help`` (which loads neither sympy nor the cost tables).

Target: the first figure under 20 s on the project's 2-core machine; ``cost --help``
under 0.3 s.
Run: ``python3 benchmarks/bench_cost.py`` from the repository root.
This is a benchmark, not a test: it prints figures and never fails on time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 20.0


def time_cli(*argv: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of one CLI run in a fresh interpreter (imports included)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "exactattn", *argv], env=env, check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + \
        (after.children_system - before.children_system)
    return wall, cpu, out


def distinct_tokens(n: int) -> list[list[Fraction]]:
    """n different token rows of width 4 (so every row of scores differs)."""
    return [[Fraction(i % 17), Fraction(1), Fraction(i % 5, 2), Fraction(i // 17)]
            for i in range(n)]


def fraction_loop_seconds_per_mac(n: int = 128) -> float:
    """Per-MAC time of the scores loop written on Fractions (the old engine's way)."""
    from exactattn.cost import count_tokens, count_head
    head = count_head(4, 4, 4)
    x = count_tokens(n, 4)
    q = [[sum((w * e for w, e in zip(row, xi)), Fraction(0)) for row in head.W_Q] for xi in x]
    k = [[sum((w * e for w, e in zip(row, xi)), Fraction(0)) for row in head.W_K] for xi in x]
    macs = 0
    t0 = time.perf_counter()
    for qi in q:
        for kj in k:
            acc = 0
            for a, b in zip(qi, kj):
                acc += a * b
                macs += 1
    return (time.perf_counter() - t0) / macs


def main() -> int:
    rows = "128,256,512,1024"
    wall, cpu, out = time_cli("cost", "--rows", rows)
    line = next(x for x in out.splitlines() if x.startswith("1024"))
    total = int(line.split()[3])
    same = "same: true" in out
    print(f"exactattn cost --rows {rows} (D = d_k = 4): {wall:.2f} s wall, {cpu:.2f} s CPU; "
          f"n = 1024 counted {total} MACs; derived = counted: {same}; "
          f"target {TARGET_S:.0f} s: {'met' if wall < TARGET_S else 'NOT met'}")
    from exactattn.commands.cost import MAX_SECONDS
    from exactattn.cost import counting_work, derive_at, run
    estimate = sum(s for _, s in counting_work([int(r) for r in rows.split(",")]))
    print(f"estimated before running: {estimate:.2f} s (commands estimated over "
          f"{MAX_SECONDS} s are refused)")
    t0, c0 = time.perf_counter(), time.process_time()
    for n in (128, 256, 512, 1024):
        x = distinct_tokens(n)
        counted = run(n, 4, 4, x=x).macs
        assert counted == derive_at(n, 4, 4)
    print(f"the same rows with every token row different (no shared softmax rows): "
          f"{time.perf_counter() - t0:.2f} s wall, {time.process_time() - c0:.2f} s CPU "
          f"(in process); derived = counted: True")
    per_mac = fraction_loop_seconds_per_mac()
    all_macs = sum(int(x.split()[3]) for x in out.splitlines()
                   if x.split() and x.split()[0] in rows.split(","))
    print(f"plain Fraction loops: {per_mac * 1e9:.0f} ns per MAC, about "
          f"{per_mac * all_macs:.1f} s for the {all_macs} MACs of these rows "
          f"(scores and mixing loops alone, no softmax)")
    help_wall = min(time_cli("cost", "--help")[0] for _ in range(5))
    print(f"exactattn cost --help: {help_wall:.2f} s wall (best of 5); target 0.3 s: "
          f"{'met' if help_wall < 0.3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
