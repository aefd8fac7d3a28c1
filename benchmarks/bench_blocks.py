"""Row blocks: verify a float32 SDPA call at long lengths, every output certified (issue 15).

    python3 benchmarks/bench_blocks.py                 # n = 1024, 2048, 4096, then 16,384
    python3 benchmarks/bench_blocks.py --sizes 1024 2048 4096 --big 0
    python3 benchmarks/bench_blocks.py --speedup       # also 1 vs 2 workers at n = 8192
    python3 benchmarks/bench_blocks.py --overhead      # also one block vs blocks at n = 4096
    python3 benchmarks/bench_blocks.py --breakdown 16384 256   # one block, phase by phase

Each run is a fresh process (imports, the Dask cluster's start and the float
call included): standard-normal query, key and value of n x 64 rounded to
float32 (``exactattn verify``'s random inputs, seed 0), torch's CPU
``scaled_dot_product_attention`` once on 1 x 1 x n x 64 tensors, then every
one of the n x 64 outputs checked against the exact output correctly rounded
to float32, in row blocks (:func:`exactattn.blocks.check_impl`) on a local
Dask cluster of ``--workers`` processes (``--workers 0``: this process), the
block size chosen from ``--memory``.

Printed per run: the wall time of the whole process, the exact side's time,
the peak memory of the process tree (the sum of the resident sizes of the
driver and every Dask process, sampled every 0.2 s: shared pages count once
per process, so it is an upper bound), blocks x rows, the cost per (row, key)
pair and per output on one worker, entries decided by the exact per-entry
path, and the check's verdict.  Then the ratios against the targets: at
n = 16,384 wall <= 15 min and peak <= 4 GiB; 2 workers over 1 at n = 8192
>= 1.7x; blocks over one block at n = 4096 <= 1.2x.  The load average
(``os.getloadavg``) before and after: other work on the machine slows every
figure.  A script, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

D = 64


def one(n: int, workers: int, memory: str, rows: int | None) -> dict:
    """The child: one check; returns its figures."""
    from exactattn.blocks import Engine, check_impl, random_floats
    from exactattn.options import check_memory
    t0 = time.perf_counter()
    q, k, v = random_floats(n, D, seed=0, dtype="float32")
    with Engine("none" if workers == 0 else "local", workers or None) as engine:
        report = check_impl("torch", q, k, v, "float32", memory=check_memory(memory), rows=rows,
                            engine=engine)
    s = report.summary()
    busy = max(workers, 1)
    return {"n": n, "workers": workers, "check_s": time.perf_counter() - t0,
            "exact_s": report.seconds["exact"], "impl_s": report.seconds["impl"],
            "blocks": report.blocks, "rows": report.rows, "count": s["count"],
            "max_ulps": s["max_ulps"], "median_ulps": s["median_ulps"],
            "tolerance": report.max_ulps, "passed": report.passed,
            "fallbacks": report.found.fallbacks,
            "ns_per_pair": report.seconds["exact"] * busy / (n * n) * 1e9,
            "block_s": report.seconds["exact"] * busy / report.blocks}


def breakdown(n: int, rows: int) -> None:
    """One block of ``rows`` x n in this process, phase by phase: the cost model of docs/scale.md."""
    import numpy as np
    import torch
    from exactattn.blocks import random_floats
    from exactattn.blocks.check import check_block
    from exactattn.call import Call
    from exactattn.blocks.rows import certify_block, numerators, score_bound, score_top
    from exactattn.numbers.bulk import block_bounds
    q, k, v = random_floats(n, D, seed=0, dtype="float32")
    x = Call.from_floats(q, k, v)
    (qn, qd), (kn, kd), (vn, vd) = numerators(x)
    d2 = x.policy.divisor_squared_for(D)
    got = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a)[None, None] for a in (q, k, v)))[0, 0].double().numpy()
    keep = np.ones((rows, n), dtype=bool)
    score_top(x, 0, 8)                                # tables and imports, once per process
    check_block((x, got), 0, 8, dtype="float32", max_ulps=100)
    times = {}
    for name, fn in (
            ("scores (pass 1)", lambda: score_top(x, 0, rows)),
            ("enclosures", lambda: block_bounds(qn[:rows], qd, kn, kd, d2, keep, vn, vd,
                                                62, score_bound(x))),
            ("check (enclosures + judge)", lambda: check_block((x, got), 0, rows,
                                                               dtype="float32", max_ulps=100)),
            ("certify outputs, 4 places", lambda: certify_block(x, 0, rows, 4, shares=False)),
            ("certify shares too", lambda: certify_block(x, 0, rows, 4, shares=True))):
        t0 = time.perf_counter()
        fn()
        times[name] = time.perf_counter() - t0
        print(f"  {name:28s} {times[name]:7.2f} s  {times[name] / (rows * n) * 1e9:7.0f} ns/pair",
              flush=True)
    judge = times["check (enclosures + judge)"] - times["enclosures"]
    print(f"  judging: {judge / (rows * D) * 1e6:.0f} us per output", flush=True)


def measure(n: int, workers: int, memory: str, rows: int | None) -> dict:
    """Run :func:`one` in a fresh process; add its wall time and the tree's peak memory."""
    import psutil
    cmd = [sys.executable, __file__, "--one", str(n), "--workers", str(workers),
           "--memory", memory] + (["--rows", str(rows)] if rows else [])
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    root, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        try:
            procs = [root] + root.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    out = child.stdout.read()
    got = json.loads(out.strip().splitlines()[-1])
    got.update(wall_s=time.perf_counter() - t0, peak_bytes=peak)
    return got


def show(r: dict) -> None:
    print(f"n={r['n']:6d}  workers={r['workers']}  wall {r['wall_s']:7.1f} s  exact "
          f"{r['exact_s']:7.1f} s  sdpa {r['impl_s']:5.2f} s  peak {r['peak_bytes'] / 2**30:5.2f} "
          f"GiB  blocks {r['blocks']} x {r['rows']}  {r['ns_per_pair']:6.0f} ns/pair/worker  "
          f"{r['block_s']:6.2f} s/block/worker  outputs {r['count']}  exact path "
          f"{r['fallbacks']}  max {r['max_ulps']} ULPs (tol {r['tolerance']})  "
          f"{'pass' if r['passed'] else 'FAIL'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    ap.add_argument("--big", type=int, default=16384, help="the target size (0: skip)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory", default="4GiB")
    ap.add_argument("--speedup", action="store_true", help="1 vs 2 workers at n = 8192")
    ap.add_argument("--overhead", action="store_true", help="one block vs blocks at n = 4096")
    ap.add_argument("--breakdown", type=int, nargs=2, metavar=("N", "ROWS"),
                    help="time the phases of one block of ROWS x N in this process, then stop")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.workers, args.memory, args.rows)))
        return
    if args.breakdown:
        print(f"one block of {args.breakdown[1]} rows x {args.breakdown[0]} keys, d = {D} "
              f"(load average {os.getloadavg()}):", flush=True)
        breakdown(*args.breakdown)
        return
    print(f"load average before: {os.getloadavg()}  cores: {os.cpu_count()}", flush=True)
    for n in args.sizes:
        show(measure(n, args.workers, args.memory, None))
    if args.overhead:
        whole = measure(4096, 0, "64GiB", 4096)
        blocked = measure(4096, 0, args.memory, 512)
        show(whole)
        show(blocked)
        print(f"block overhead at n = 4096 (512-row blocks / one block, this process): "
              f"{blocked['exact_s'] / whole['exact_s']:.2f}x (target <= 1.2x)", flush=True)
    if args.speedup:
        w1, w2 = measure(8192, 1, args.memory, None), measure(8192, 2, args.memory, None)
        show(w1)
        show(w2)
        print(f"speed-up at n = 8192, 2 workers over 1: {w1['exact_s'] / w2['exact_s']:.2f}x "
              f"(target >= 1.7x)", flush=True)
    if args.big:
        print(f"load average before n = {args.big}: {os.getloadavg()}", flush=True)
        r = measure(args.big, args.workers, args.memory, None)
        show(r)
        print(f"n = {args.big}: wall {r['wall_s'] / 900:.2f} of 15 min, peak "
              f"{r['peak_bytes'] / 2 ** 32:.2f} of 4 GiB, every output certified: "
              f"{r['count'] == args.big * D}", flush=True)
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
