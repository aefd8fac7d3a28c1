"""Time the whole exact head against numpy, raw python-flint and naive sympy.

    python3 benchmarks/bench_head.py                 # n = 4, 128, 512, 1024
    python3 benchmarks/bench_head.py --quick         # n = 4, 128; one run each
    python3 benchmarks/bench_head.py --sizes 64 256 --repeat 5

At each n the head has d_model = d_k = d_v = 64 and the default divisor
sqrt(64) = 8; tokens are random k/4 (|k| <= 4), weights random k/8 (|k| <= 4),
so the scaled scores have a spread of about 3 and reach |10| (as in a trained
head; much larger scores would make nearly every share print 0.0000).  The
work timed is: queries, keys, values, raw scores, and every share (n x n) and
every output (n x d_v) to 4 places.

Columns (seconds, best of --repeat):
  exactattn  ``attend(head, x, engine="fast")`` then ``share_decimals(4)`` and
             ``output_decimals(4)``: exact projections and scores, every
             decimal certified (correctly rounded).
  flint      the same work written directly against python-flint: fmpq_mat
             products, one ``arb.exp`` per score, ``arb_mat`` row sums and
             outputs, and the rounding of each ball decided with ``arb.floor``
             (Ziv: undecided balls are redone at doubled precision).
  numpy      float64: the same products, a max-subtracted softmax and the
             outputs (no certification, no strings): the floor for speed.
  naive      sympy ``Matrix`` products of ``Rational`` and ``N(share, 4)`` per
             share and per output; where a full run would pass a minute the
             time is extrapolated from a sample of rows and entries (marked ~).

Ratios: exactattn/flint (target <= 1.5 at n = 1024), naive/exactattn (target
>= 10,000), exactattn/numpy (target <= 100).  Then the wall time of
``python -m exactattn walkthrough`` (target < 1.5 s, start-up included).
This is a script, not a test: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from fractions import Fraction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

D = 64
PLACES = 4


def make_problem(n: int, seed: int = 0):
    """Random tokens and weights (slots layout) as lists of ``Fraction``."""
    rng = random.Random(seed * 100003 + n)
    x = [[Fraction(rng.randint(-4, 4), 4) for _ in range(D)] for _ in range(n)]
    W = [[[Fraction(rng.randint(-4, 4), 8) for _ in range(D)] for _ in range(D)]
         for _ in range(3)]
    return x, W


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


# --- the engines ----------------------------------------------------------------------
def run_exactattn(head, x):
    from exactattn import attend
    trace = attend(head, x, engine="fast")
    return trace.share_decimals(PLACES), trace.output_decimals(PLACES)


def run_numpy(xf, wq, wk, wv):
    import numpy as np
    q, k, v = xf @ wq.T, xf @ wk.T, xf @ wv.T
    s = (q @ k.T) / np.sqrt(q.shape[1])
    s -= s.max(axis=1, keepdims=True)
    e = np.exp(s)
    shares = e / e.sum(axis=1, keepdims=True)
    return shares, shares @ v


def _fmpq_mat(rows):
    from flint import fmpq, fmpq_mat
    return fmpq_mat(len(rows), len(rows[0]),
                    [fmpq(e.numerator, e.denominator) for r in rows for e in r])


def _fmt(k: int) -> str:
    sign = "-" if k < 0 else ""
    s = str(abs(k)).rjust(PLACES + 1, "0")
    return f"{sign}{s[:-PLACES]}.{s[-PLACES:]}"


def _round_balls(balls, scale, prec, redo):
    """Decide round(scale * b) for each ball b, or call ``redo(index, prec)``."""
    from flint import arb
    half = arb(1) / 2
    out = []
    for idx, b in enumerate(balls):
        f = (b * scale + half).floor()
        out.append(_fmt(int(f.unique_fmpz())) if f.is_exact() else redo(idx, prec * 2))
    return out


def run_flint(x, W):
    """The head written directly against python-flint, per-entry arb (see module doc)."""
    from flint import arb, arb_mat, ctx
    X = _fmpq_mat(x)
    WQ, WK, WV = (_fmpq_mat(m) for m in W)
    Q, K, V = X * WQ.transpose(), X * WK.transpose(), X * WV.transpose()
    S = Q * K.transpose()
    n, d_v = S.nrows(), V.ncols()
    saved = ctx.prec
    memo = {}

    def compute(prec):
        ctx.prec = prec
        if prec in memo:
            return memo[prec]
        scaled = arb_mat(S) * (1 / arb(D).sqrt())
        E = arb_mat(n, n, [e.exp() for e in scaled.entries()])
        dens = (E * arb_mat(n, 1, [1] * n)).entries()
        memo[prec] = E, dens, E * arb_mat(V)
        return memo[prec]

    try:
        E, dens, O = compute(53)
        ten = arb(10) ** PLACES
        shares, outputs = [], []
        ent, oent = E.entries(), O.entries()

        def redo_share(i, j, prec):
            E2, d2, _ = compute(prec)
            b = E2[i, j] / d2[i]
            return _round_balls([b], ten, prec, lambda _, p: redo_share(i, j, p))[0]

        def redo_output(i, c, prec):
            _, d2, O2 = compute(prec)
            b = O2[i, c] / d2[i]
            return _round_balls([b], ten, prec, lambda _, p: redo_output(i, c, p))[0]

        for i in range(n):
            ctx.prec = 53
            scale = ten / dens[i]
            shares.append(_round_balls(ent[i * n:(i + 1) * n], scale, 53,
                                       lambda j, p, i=i: redo_share(i, j, p)))
            outputs.append(_round_balls(oent[i * d_v:(i + 1) * d_v], scale, 53,
                                        lambda c, p, i=i: redo_output(i, c, p)))
        return shares, outputs
    finally:
        ctx.prec = saved


def time_naive(x, W, budget: float = 60.0, sample_rows: int = 2, sample_entries: int = 3):
    """Seconds for the naive sympy route; (time, extrapolated?)."""
    import sympy
    n = len(x)
    R = sympy.Rational
    Xs = [sympy.Matrix([[R(e.numerator, e.denominator) for e in row]]) for row in x]
    WQ, WK, WV = (sympy.Matrix([[R(e.numerator, e.denominator) for e in r] for r in m])
                  for m in W)
    full = n <= 8
    rows = range(n) if full else range(min(n, sample_rows))
    # projections: each token's query, key and value (time per token, then x n)
    t0 = time.perf_counter()
    proj = [(Xs[i] * WQ.T, Xs[i] * WK.T, Xs[i] * WV.T) for i in rows]
    per_token = (time.perf_counter() - t0) / len(proj)
    if full:
        keys = [p[1] for p in proj]
        values = [p[2] for p in proj]
    else:  # the scores need every key: build them from the sampled tokens' keys, reused
        keys = [proj[i % len(proj)][1] for i in range(n)]
        values = [proj[i % len(proj)][2] for i in range(n)]
    K = sympy.Matrix.vstack(*keys)
    V = sympy.Matrix.vstack(*values)
    divisor = sympy.sqrt(D)
    score_t = share_t = out_t = 0.0
    n_shares = n_outs = 0
    for i in rows:
        t0 = time.perf_counter()
        s = proj[i][0] * K.T
        ex = [sympy.exp(v / divisor) for v in s]
        den = sympy.Add(*ex)
        score_t += time.perf_counter() - t0
        js = range(n) if full else range(min(n, sample_entries))
        t0 = time.perf_counter()
        for j in js:
            sympy.N(ex[j] / den, PLACES)
            n_shares += 1
        share_t += time.perf_counter() - t0
        cs = range(D) if full else range(1)
        t0 = time.perf_counter()
        for c in cs:
            sympy.N(sympy.Add(*[ex[j] * V[j, c] for j in range(n)]) / den, PLACES)
            n_outs += 1
        out_t += time.perf_counter() - t0
    total = (per_token * n + score_t / len(rows) * n + share_t / n_shares * n * n
             + out_t / n_outs * n * D)
    return total, not full


def time_walkthrough(repeat: int) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "exactattn", "walkthrough"], cwd=ROOT, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 128, 512, 1024],
                        help="numbers of tokens n (default: 4 128 512 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing, best kept")
    parser.add_argument("--quick", action="store_true", help="n = 4, 128 and one run each")
    parser.add_argument("--no-naive", action="store_true", help="skip the sympy route")
    args = parser.parse_args(argv)
    sizes, repeat = ([4, 128], 1) if args.quick else (args.sizes, args.repeat)

    import numpy as np
    import flint
    import sympy
    from exactattn import Head
    print(f"python {sys.version.split()[0]}, python-flint {flint.__version__}, "
          f"sympy {sympy.__version__}, numpy {np.__version__}; d_model = d_k = d_v = {D}; "
          f"{PLACES} places; best of {repeat}")
    header = (f"{'n':>5} {'exactattn':>10} {'flint':>9} {'numpy':>9} {'naive':>11} "
              f"{'exactattn/flint':>16} {'naive/exactattn':>16} {'exactattn/numpy':>16}")
    print(header)
    for n in sizes:
        x, W = make_problem(n)
        head = Head(*W)
        t_ex, (shares, outputs) = best(lambda: run_exactattn(head, x), repeat)
        t_fl, (fl_shares, fl_outputs) = best(lambda: run_flint(x, W), repeat)
        if (fl_shares, fl_outputs) != (shares, outputs):
            print(f"  n = {n}: flint and exactattn DISAGREE", file=sys.stderr)
            return 1
        xf = np.array([[float(e) for e in r] for r in x])
        wf = [np.array([[float(e) for e in r] for r in m]) for m in W]
        run_numpy(xf, *wf)  # warm BLAS
        t_np, _ = best(lambda: run_numpy(xf, *wf), max(repeat, 5))
        if args.no_naive:
            t_nv, approx, naive = float("nan"), False, "-"
        else:
            t_nv, approx = time_naive(x, W)
            naive = ("~" if approx else "") + _secs(t_nv)
        print(f"{n:>5} {_secs(t_ex):>10} {_secs(t_fl):>9} {_secs(t_np):>9} {naive:>11} "
              f"{t_ex / t_fl:>16.2f} {_ratio(t_nv / t_ex):>16} {t_ex / t_np:>16.1f}",
              flush=True)
    print(f"walkthrough: {time_walkthrough(repeat):.2f} s wall "
          "(python -m exactattn walkthrough, start-up included)")
    return 0


def _secs(t: float) -> str:
    if t != t:
        return "-"
    if t >= 3600:
        return f"{t / 3600:.1f} h"
    if t >= 100:
        return f"{t:.0f} s"
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1000:.1f} ms"
    return f"{t * 1e6:.0f} us"


def _ratio(r: float) -> str:
    return "-" if r != r else f"{r:,.0f}" if r >= 100 else f"{r:.1f}"


if __name__ == "__main__":
    sys.exit(main())
