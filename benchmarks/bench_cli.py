"""Whole-process timings of ``exactattn walkthrough`` / ``exactattn scores`` beside numpy.

    python3 benchmarks/bench_cli.py                    # n = 32, 128, 512, 1024 (a few minutes)
    python3 benchmarks/bench_cli.py --big              # and n = 4096 (one run each there)
    python3 benchmarks/bench_cli.py --sizes 32 128 --repeat 1 --modes scores --formats json

Each run is a fresh process (start-up and imports included) reading a spec
file and writing its output to a file: ``exactattn MODE --spec FILE --format
FMT``.  The spec: n random tokens, d_model = d_k = d_v = 64, every entry
p/q with |p| <= 3 and 4 <= q <= 8 (tokens and weights), default divisor
sqrt(64) = 8.  Specs are written once to ``--specs`` (default a folder under
the system's temporary directory).

Beside each exact run, ``numpy`` is float64 doing the same whole job in a
fresh process: read the same spec (entries parsed as floats), compute
queries, keys, values, scores, shares and outputs, and write the same
numbers in the same format: for text the same tables (the corner people see
past 16 tokens, each query's sum and largest share, the outputs), for JSON
every share and output rounded to 4 places in the same document layout (and,
for walkthrough, the token numbers, weights, projections and the raw and
scaled scores).  numpy writes no closed forms and certifies nothing: it is
the floor for speed, not a correct answer.

Printed per (n, mode, format): the median wall time of ``--repeat`` runs
(default 3), the ratio exact/numpy, the peak memory of each process
(``ru_maxrss`` from ``os.wait4``), the output size, and at the end the
measured exponent of time in n (log t(1024)/t(512) / log 2, and from 1024 to
4096).  The machine's load average (``os.getloadavg``) is printed before and
after.  Targets: exact/numpy <= 20 at n = 512 and 1024 (text and JSON);
n = 32 JSON <= 1 s; n = 4096 completes with peak memory <= 4 GiB.  A script,
not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = 64
PLACES = 4
CORNER, PAGE = 8, 16


# --------------------------------------------------------------------------- specs
def make_spec(n: int, d: int = D, seed: int = 0) -> dict:
    """n random tokens of width d and d x d weights; entries p/q, |p| <= 3, 4 <= q <= 8."""
    rng = random.Random(seed * 1000003 + n)

    def entry() -> str:
        return f"{rng.randint(-3, 3)}/{rng.randint(4, 8)}"
    return {"name": f"random head, n = {n}", "layout": "slots",
            "tokens": [{"x": [entry() for _ in range(d)]} for _ in range(n)],
            "W_Q": [[entry() for _ in range(d)] for _ in range(d)],
            "W_K": [[entry() for _ in range(d)] for _ in range(d)],
            "W_V": [[entry() for _ in range(d)] for _ in range(d)]}


def spec_file(folder: str, n: int) -> str:
    path = os.path.join(folder, f"h{n}.json")
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump(make_spec(n), f)
    return path


# --------------------------------------------------------------------------- numpy's job
def _parse(e) -> float:
    if isinstance(e, str) and "/" in e:
        p, q = e.split("/")
        return float(p) / float(q)
    return float(e)


def numpy_job(mode: str, fmt: str, path: str) -> None:
    """The whole job in float64: read the spec, compute, write the numbers to stdout."""
    import numpy as np
    with open(path) as f:
        spec = json.load(f)
    x = np.array([[_parse(e) for e in t["x"]] for t in spec["tokens"]])
    W = {k: np.array([[_parse(e) for e in r] for r in spec[k]]) for k in ("W_Q", "W_K", "W_V")}
    Q, K, V = x @ W["W_Q"].T, x @ W["W_K"].T, x @ W["W_V"].T
    raw = Q @ K.T
    scaled = raw / math.sqrt(Q.shape[1])
    e = np.exp(scaled - scaled.max(axis=1, keepdims=True))
    shares = e / e.sum(axis=1, keepdims=True)
    outputs = shares @ V
    n = len(x)
    dec = np.char.mod(f"%.{PLACES}f", shares)
    odec = np.char.mod(f"%.{PLACES}f", outputs)
    top = shares.argmax(axis=1)
    walk = mode == "walkthrough"
    out = sys.stdout
    if fmt == "json":
        tables = []
        if walk:
            tables.append(("row", [[str(i + 1)] + [repr(v) for v in r] for i, r in enumerate(x)],
                           {"x": x.tolist()}))
            for k in ("W_Q", "W_K", "W_V"):
                tables.append((f"weights/{k}", W[k].tolist(), {}))
            tables.append(("project", [[str(i + 1), repr(q.tolist()), repr(k.tolist()),
                                        repr(v.tolist())] for i, (q, k, v) in
                                       enumerate(zip(Q, K, V))],
                           {"queries": Q.tolist(), "keys": K.tolist(), "values": V.tolist()}))
            tables.append(("square/raw", [[str(i + 1)] + r for i, r in enumerate(raw.tolist())],
                           {"raw_scores": raw.tolist()}))
            tables.append(("square/scaled", [[str(i + 1)] + r for i, r in
                                             enumerate(scaled.tolist())],
                           {"scaled_scores": scaled.tolist()}))
        rows = [[str(i + 1)] + dec[i].tolist() + ["exactly 1", f"{dec[i, top[i]]} at key "
                                                  f"{top[i] + 1}"] for i in range(n)]
        tables.append(("scores/shares", rows, {"shares_decimal": dec.tolist()}))
        tables.append(("scores/outputs", [[str(i + 1)] + r for i, r in enumerate(odec.tolist())],
                       {"outputs_decimal": odec.tolist()}))
        out.write('{\n  "tables": [')
        for k, (name, rows, data) in enumerate(tables):
            out.write(("," if k else "") + f'\n    {{\n      "name": "{name}",\n      "rows": [')
            out.write(",".join("\n        " + json.dumps(r) for r in rows))
            out.write("\n      ],\n      \"data\": {")
            out.write(",".join(f'\n        "{key}": [' + ",".join(
                "\n          " + json.dumps(r) for r in v) + "\n        ]"
                for key, v in data.items()))
            out.write("\n      }\n    }")
        out.write("\n  ]\n}\n")
        return
    # text: the tables people get past 16 tokens
    def table(title, cols, rows):
        grid = [cols] + rows
        widths = [max(len(r[c]) for r in grid) for c in range(len(cols))]
        out.write(title + "\n" + "=" * len(title) + "\n")
        for r in grid:
            out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
        out.write("\n")
    c = range(min(n, CORNER) if n > PAGE else n)
    if walk:
        table("The row", ["n"] + [f"x{m + 1}" for m in range(CORNER)],
              [[str(i + 1)] + [f"{v:g}" for v in x[i, :CORNER]] for i in c])
        for k in ("W_Q", "W_K", "W_V"):
            table(k, ["slot"] + [f"x{m + 1}" for m in range(CORNER)],
                  [[str(s + 1)] + [f"{v:g}" for v in W[k][s, :CORNER]] for s in range(CORNER)])
        table("Projections", ["token", "query", "key", "value"],
              [[str(i + 1)] + [str(np.round(m[i, :CORNER], 4).tolist()) for m in (Q, K, V)]
               for i in c])
        for name, m in (("Raw scores", raw), ("Scaled scores", scaled)):
            table(name, ["query"] + [f"key {j + 1}" for j in c],
                  [[str(i + 1)] + [f"{m[i, j]:.4f}" for j in c] for i in c])
    table("Shares", ["query"] + [f"key {j + 1}" for j in c] + ["sum", "largest"],
          [[str(i + 1)] + [dec[i, j] for j in c] + ["exactly 1", f"{dec[i, top[i]]} at key "
                                                    f"{top[i] + 1}"] for i in c])
    table("Each query", ["query", "sum", "largest"],
          [[str(i + 1), "exactly 1", f"{dec[i, top[i]]} at key {top[i] + 1}"] for i in range(n)])
    table("Outputs", ["token"] + [f"out {k + 1}" for k in range(CORNER)],
          [[str(i + 1)] + odec[i, :CORNER].tolist() for i in c])


# --------------------------------------------------------------------------- timing
def timed(argv: list[str], out_path: str) -> tuple[float, int, int]:
    """(wall seconds, peak memory in bytes, output bytes) of one fresh process."""
    with open(out_path, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{err}")
    return wall, usage.ru_maxrss * 1024, os.path.getsize(out_path)


def median_run(argv, out_path, repeat):
    runs = [timed(argv, out_path) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


def fmt_time(s: float) -> str:
    return f"{s:.2f} s" if s < 100 else f"{s:.0f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 128, 512, 1024])
    ap.add_argument("--big", action="store_true", help="also n = 4096 (one run)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown")
    ap.add_argument("--modes", nargs="+", default=["scores", "walkthrough"])
    ap.add_argument("--formats", nargs="+", default=["text", "json"])
    ap.add_argument("--specs", default=os.path.join(tempfile.gettempdir(), "exactattn-bench"))
    ap.add_argument("--numpy-job", nargs=3, metavar=("MODE", "FORMAT", "SPEC"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.numpy_job:
        numpy_job(*args.numpy_job)
        return 0
    sizes = list(args.sizes) + ([4096] if args.big and 4096 not in args.sizes else [])
    os.makedirs(args.specs, exist_ok=True)
    out_path = os.path.join(args.specs, "out.txt")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"({os.cpu_count()} cores), python {sys.version.split()[0]}")
    print(f"{'n':>5} {'mode':<11} {'format':<6} {'exactattn':>10} {'numpy':>9} {'ratio':>7} "
          f"{'exact peak':>11} {'numpy peak':>11} {'output':>10}")
    times: dict = {}
    for n in sizes:
        path = spec_file(args.specs, n)
        repeat = 1 if n >= 4096 else args.repeat
        for mode in args.modes:
            for fmt in args.formats:
                exact = median_run([sys.executable, "-m", "exactattn", mode, "--spec", path,
                                    "--format", fmt], out_path, repeat)
                base = median_run([sys.executable, os.path.abspath(__file__), "--numpy-job",
                                   mode, fmt, path], out_path + ".np", repeat)
                times[n, mode, fmt] = exact[0]
                print(f"{n:>5} {mode:<11} {fmt:<6} {fmt_time(exact[0]):>10} "
                      f"{fmt_time(base[0]):>9} {exact[0] / base[0]:>6.1f}x "
                      f"{exact[1] / 2**20:>8.0f} MB {base[1] / 2**20:>8.0f} MB "
                      f"{exact[2] / 2**20:>7.1f} MB", flush=True)
    for mode in args.modes:
        for fmt in args.formats:
            for a, b in ((512, 1024), (1024, 4096)):
                if (a, mode, fmt) in times and (b, mode, fmt) in times:
                    k = math.log(times[b, mode, fmt] / times[a, mode, fmt]) / math.log(b / a)
                    print(f"exponent of time, {mode} {fmt}, n = {a} -> {b}: {k:.2f}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
