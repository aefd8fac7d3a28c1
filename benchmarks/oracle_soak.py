"""Soak the package against the independent oracle: N random composed cases, every path.

    python benchmarks/oracle_soak.py --cases 300 --seed 1
    python benchmarks/oracle_soak.py --cases 100000 --seed 7 --jobs 2 --cli-every 500 \\
        --failures /tmp/oracle_failures.jsonl
    python benchmarks/oracle_soak.py --replay /tmp/oracle_failures.jsonl

The same cases and the same comparison as tests/checks/test_oracle.py (tests/oracle_cases.py,
tests/oracle_paths.py, tests/oracle.py).  Case k of seed S is drawn from
``random.Random(f"{S}:{k}")``, so a case does not depend on --jobs.  Each case is compared at 6
and 12 places (3 as well on every 7th case) and in the four float formats; the command line
(``scores``, ``square``, ``backward`` in JSON) runs on every K-th case only (--cli-every K;
0 = never, the default).

Ends with a summary of what failed, grouped by kind, path and quantity, and then exactly one
line ``N cases, K values checked, M mismatches``.  M counts every failed check: mismatched
values, ties or repeated values that did not compare equal, crashes, refusals of supported
calls, timeouts and oracle errors.  With --failures PATH the first failing cases go to PATH,
one JSON object a line (``{"case": ..., "message": ...}``).  Exit status 1 when M > 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from oracle_cases import random_case  # noqa: E402
from oracle_paths import compare  # noqa: E402


def case_of(seed: int, k: int) -> dict:
    return random_case(random.Random(f"{seed}:{k}"))


def places_of(k: int) -> tuple:
    return (3, 6, 12) if k % 7 == 0 else (6, 12)


def run_one(args: tuple) -> dict:
    """Compare one case (in a worker process); a small summary back."""
    seed, k, cli, timeout, case = args
    if case is None:
        case = case_of(seed, k)
    start = time.perf_counter()
    rep = compare(case, places_of(k), cli=cli, timeout=timeout)
    failures = (len(rep.mismatches) + len(rep.equalities) + len(rep.crashes)
                + len(rep.refusals) + len(rep.oracle_errors))
    return {"k": k, "checked": rep.checked, "undecided": rep.undecided,
            "conventions": rep.conventions, "failures": failures,
            "mismatches": len(rep.mismatches),
            "groups": [[list(key), n] for key, n in rep.groups().items()],
            "skipped": sorted({p for p, _ in rep.skipped}),
            "seconds": time.perf_counter() - start,
            "case": case if rep.failed else None,
            "message": rep.message() if rep.failed else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300, help="how many random cases (300)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the cases (0)")
    ap.add_argument("--cli-every", type=int, default=0, metavar="K",
                    help="run the command-line paths on every K-th case (0: never)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (1)")
    ap.add_argument("--failures", metavar="PATH",
                    help="write the first failing cases here, one JSON object a line")
    ap.add_argument("--keep", type=int, default=20,
                    help="how many failing cases --failures keeps (20)")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds one case may take before it counts as a failure (120)")
    ap.add_argument("--replay", metavar="PATH",
                    help="compare the cases of a --failures file (or a file of one case) again")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    if args.replay:
        with open(args.replay) as f:
            text = f.read().strip()
        docs = [json.loads(line) for line in text.splitlines()] if text.startswith("{\"case\"") \
            else [json.loads(text)]
        cases = [d.get("case", d) for d in docs]
        work = [(args.seed, k, True, args.timeout, c) for k, c in enumerate(cases)]
    else:
        work = [(args.seed, k, bool(args.cli_every) and k % args.cli_every == 0, args.timeout,
                 None) for k in range(args.cases)]

    groups: collections.Counter = collections.Counter()
    skipped: collections.Counter = collections.Counter()
    totals = collections.Counter()
    kept = []
    slowest = (0.0, None)
    start = time.perf_counter()
    if args.jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=500)
        results = pool.imap_unordered(run_one, work, chunksize=4)
    else:
        pool = None
        results = map(run_one, work)
    try:
        for r in tqdm(results, total=len(work), unit="case", file=sys.stderr, smoothing=0.05):
            totals["cases"] += 1
            for key in ("checked", "undecided", "conventions", "failures", "mismatches"):
                totals[key] += r[key]
            for key, n in r["groups"]:
                groups[tuple(key)] += n
            for p in r["skipped"]:
                skipped[p] += 1
            if r["seconds"] > slowest[0]:
                slowest = (r["seconds"], r["k"])
            if r["case"] is not None and len(kept) < args.keep:
                kept.append(r)
    finally:
        if pool is not None:
            pool.terminate()
    wall = time.perf_counter() - start

    n = totals["cases"]
    print(f"{n / wall:.1f} cases/s ({wall:.1f} s on {args.jobs} job(s)); slowest case "
          f"{slowest[0]:.2f} s (k = {slowest[1]}); {totals['undecided']} values the oracle "
          f"left undecided; {totals['conventions']} values differing by a documented "
          "convention")
    if skipped:
        print("paths skipped (documented unsupported), cases: " +
              ", ".join(f"{p} {c}" for p, c in sorted(skipped.items())))
    if groups:
        print("failures by kind, path and quantity (values or events):")
        for (kind, path, quantity), c in sorted(groups.items(), key=lambda x: -x[1]):
            print(f"  {c:8d}  {kind:10s} {path:22s} {quantity}")
        failing = sum(1 for _ in kept)
        print(f"first failing case (k = {kept[0]['k']}):\n" +
              "\n".join("    " + line for line in kept[0]["message"].splitlines()[:12]))
        if args.failures:
            with open(args.failures, "w") as f:
                for r in kept:
                    f.write(json.dumps({"k": r["k"], "seed": args.seed, "case": r["case"],
                                        "message": r["message"]}) + "\n")
            print(f"{failing} failing case(s) written to {args.failures}")
    print(f"{n} cases, {totals['checked']} values checked, {totals['failures']} mismatches")
    return 1 if totals["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
