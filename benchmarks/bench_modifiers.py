"""Benchmark: ``verify`` of a float32 implementation with each modifier against plain ``verify`` (issue 13).

One call at n = 512 queries and keys, d_k = d_v = 64, float32, standard-normal
inputs (seed 0), checked by :func:`exactattn.verify.verify` with the default
policy, then with each modifier of the call model: a sink, ALiBi (12 heads,
head 8: the irrational slope 2^(-1/2)), a causal sliding window, a query offset
(a decode step), dropout (p = 1/10, a random keep-mask), the log-sum-exp per
row, soft-capping and RoPE.  Each run's wall-clock time is printed with its
ratio to the plain run.

Target: every ratio at most 2x, except soft-capping and RoPE, where the
certified transcendental values dominate (their ratios are printed).
Run: ``python3 benchmarks/bench_modifiers.py`` from the repository root
(``--quick``: n = 128; ``--impl torch`` to time torch instead of numpy).
This is a benchmark, not a test: it prints figures and never fails on time.
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 2.0
EXEMPT = ("softcap", "rope")


def runs(n: int):
    import numpy as np
    from exactattn.call.policy import Policy
    from exactattn.call.modifiers import Alibi, Rope
    from exactattn.call import Call
    plain = Call.random(n, 64, seed=0)
    keep = np.random.default_rng(1).random((n, n)) >= 0.1
    dropped = Call(plain.query[0, 0], plain.key[0, 0], plain.value[0, 0],
                                  dropout_keep=keep, name="dropout")
    return [
        ("plain", plain, Policy(), None),
        ("sink", plain, Policy(sink="0"), None),
        ("alibi", plain, Policy(alibi=Alibi(12), head=8, causal=True), None),
        ("window", plain, Policy(causal=True, window=(127, 0)), None),
        ("query_offset", plain, Policy(query_offset=n // 4, causal=True), None),
        ("dropout", dropped, Policy(dropout=Fraction(1, 10)), None),
        ("lse", plain, Policy(), "e"),
        ("softcap", plain, Policy(softcap="50"), None),
        ("rope", plain, Policy(rope=Rope(Fraction(10000))), None),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 128")
    ap.add_argument("--impl", default="numpy", help="numpy (default) or torch")
    ap.add_argument("--only", default=None, help="comma list of runs (plain always runs)")
    args = ap.parse_args()
    from exactattn.verify import verify
    n = 128 if args.quick else 512
    only = None if args.only is None else set(args.only.split(",")) | {"plain"}
    base = None
    print(f"verify --impl {args.impl}, float32, n = {n}, d_k = d_v = 64")
    for name, problem, policy, lse in runs(n):
        if only is not None and name not in only:
            continue
        t0 = time.perf_counter()
        rep = verify(args.impl, problem.with_policy(policy), "float32", lse=lse)
        seconds = time.perf_counter() - t0
        base = seconds if name == "plain" else base
        ratio = seconds / base
        s = rep.summary()
        verdict = "" if name == "plain" else \
            (" (exempt: certified values)" if name in EXEMPT else
             f" (target <= {TARGET:g}x: {'met' if ratio <= TARGET else 'MISSED'})")
        print(f"{name:13} {seconds:7.2f} s  ratio {ratio:5.2f}{verdict}; exact "
              f"{rep.seconds['exact']:.2f} s, compare {rep.seconds['compare']:.2f} s; max "
              f"{s['max_ulps']} ULPs, {'PASS' if rep.passed else 'FAIL'}")


if __name__ == "__main__":
    main()
