"""The GPU sweep of issue 31: every attention backend, forward and backward, against the exact answer.

For each problem (n = 512 .. 8192 queries and keys, d = 64 and 128, causal and
not, MHA 2/2 heads and GQA 4/2 heads) and each dtype (bfloat16, float16), every
backend runs on the device: torch SDPA restricted to ``flash``, ``efficient``,
``cudnn`` and ``math`` (``torch.nn.attention.sdpa_kernel``), FlexAttention
(``torch.compile``'d on CUDA) and, when the flash_attn package is installed,
``flash_attn_func``.

The exact side stays on the CPU and is computed once per problem for every
backend and dtype: the inputs are standard-normal numbers rounded to bfloat16
(those below 2^-14 in magnitude set to 0), which are floats of float16 and
float32 too, so no dtype moves them and one :class:`~exactattn.reference.Reference`
serves every check (``verify(..., reference=...)``).  The kernels run the
whole n x n problem; ``--rows`` query rows spread over the sequence (the first
and the last included) are judged: their outputs, and for the backward, with
the upstream gradient dO nonzero on those rows only (standard normal, rounded
to bfloat16), dQ of those rows and the whole of dK and dV (the other rows add
exactly 0 to them: their dS is ``P (0 - 0)``).  The exact problem of those
rows is the rows of the call with the causal rule as a boolean mask.

Writes one markdown table (``--out FILE``, default stdout): backend, dtype, n,
d, causal, heads, forward max ULPs / at terms / tolerance, backward max ULPs /
at terms / tolerance, result (PASS, FAIL or the refusal in one line).

Run: ``python3 benchmarks/gpu_sweep.py --out docs/gpu-table.md`` on a
machine with CUDA; ``--device cpu --n 64 --d 16`` runs the same sweep on the
CPU (math and flash SDPA, FlexAttention forward) to try it.  Without CUDA the
default run exits 2 with one line.
This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLUMNS = ("backend", "dtype", "n", "d", "causal", "heads", "fwd max ULPs", "fwd at terms",
           "fwd tol", "bwd max ULPs", "bwd at terms", "bwd tol", "result")


def inputs(n: int, d: int, hq: int, hkv: int, seed: int):
    """float64 arrays whose entries are bfloat16 floats (hence float16 and float32 ones too)."""
    import numpy as np
    import torch
    rng = np.random.default_rng(seed)

    def draw(h):
        x = torch.from_numpy(rng.standard_normal((h, n, d))).to(torch.bfloat16).double().numpy()
        x[np.abs(x) < 2.0 ** -14] = 0.0
        return x
    return draw(hq), draw(hkv), draw(hkv)


def rows_of(n: int, k: int) -> list[int]:
    import numpy as np
    return sorted(set(np.linspace(0, n - 1, k).round().astype(int).tolist()))


def make_rows_impl(inner, q, k, v, causal: bool, rows):
    """The kernel on the whole call, read on ``rows`` (forward) and with dO on ``rows`` (backward)."""
    import numpy as np
    from exactattn.call.policy import Policy
    from exactattn.verify.adapter import Impl, policy_call

    class Rows(Impl):
        name, dtypes = inner.name, inner.dtypes
        backward_name = getattr(inner, "backward_name", inner.name + " backward")

        def full(self, sub):
            return policy_call(q, k, v, Policy(causal=causal), sub.dtype)

        def __call__(self, sub):
            return inner(self.full(sub))[..., rows, :]

        def backward(self, sub, d_out):
            big = np.zeros(q.shape[:-1] + (v.shape[-1],))
            big[..., rows, :] = d_out
            dq, dk, dv = inner.backward(self.full(sub), big)
            return dq[..., rows, :], dk, dv
    return Rows()


def backends(device: str):
    from exactattn.errors import InputError
    from exactattn.verify.impls import load_impl
    out = []
    for name, opts in ([("torch " + b, dict(impl="torch", backend=b))
                        for b in ("flash", "efficient", "cudnn", "math")] +
                       [("flex", dict(impl="flex")), ("flash-attn", dict(impl="flash-attn"))]):
        impl = opts.pop("impl")
        try:
            out.append((name, load_impl(impl, device=device, **opts), None))
        except InputError as e:
            out.append((name, None, str(e)))
    return out


def sweep(args) -> list[tuple]:
    import numpy as np
    from exactattn.call import Call, Policy
    from exactattn.errors import InputError
    from exactattn.reference.reference import Reference
    from exactattn.verify import verify
    from exactattn.verify.backward import verify_backward
    from exactattn.verify.backward_impls import load_backward
    from exactattn.present.stream import busy
    table = []
    kernels = backends(args.device)
    for n in args.n:
        for d in args.d:
            for causal in (False, True):
                for hq, hkv in ((2, 2), (4, 2)):
                    q, k, v = inputs(n, d, hq, hkv, args.seed)
                    rows = rows_of(n, args.rows)
                    mask = np.tril(np.ones((n, n), dtype=bool))[rows] if causal else None
                    sub = Call(q[:, rows], k, v, mask, floats="exact", policy=Policy())
                    ref = Reference(sub)
                    dO = inputs(len(rows), v.shape[-1], hq, 1, args.seed + 1)[0]
                    for name, impl, refusal in kernels:
                        for dt in ("bfloat16", "float16"):
                            head = (name, dt, n, d, "yes" if causal else "no", f"{hq}/{hkv}")
                            if impl is None:
                                table.append(head + ("",) * 6 + (refusal,))
                                continue
                            rimpl = make_rows_impl(impl, q, k, v, causal, rows)
                            try:
                                with busy(f"{name} {dt} n={n} d={d}"):
                                    f = verify(rimpl, sub, dt, reference=ref)
                                    b = None if args.no_backward else \
                                        verify_backward(load_backward(rimpl), sub, dt, d_out=dO)
                            except InputError as e:
                                table.append(head + ("",) * 6 + (str(e),))
                                continue
                            fs = f.summary()
                            cells = [fs["max_ulps"], fs["max_terms_ulps"], f.max_ulps]
                            ok = f.passed
                            if b is not None:
                                bs = b.summary()
                                cells += [bs["max_ulps"], bs["max_terms_ulps"], b.max_ulps]
                                ok = ok and b.passed
                            else:
                                cells += ["-", "-", "-"]
                            why = f.raised or (b.raised if b is not None else None)
                            table.append(head + tuple("hard" if c is None else
                                                      f"{c:.2f}" if isinstance(c, float) else
                                                      str(c) for c in cells) +
                                         ("PASS" if ok else f"FAIL{': ' + why if why else ''}",))
    return table


def markdown(table) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in table]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (to try the sweep)")
    p.add_argument("--n", type=lambda t: [int(x) for x in t.split(",")],
                   default=[512, 1024, 2048, 4096, 8192], help="comma list of n")
    p.add_argument("--d", type=lambda t: [int(x) for x in t.split(",")], default=[64, 128],
                   help="comma list of head widths")
    p.add_argument("--rows", type=int, default=16, help="query rows judged per problem (16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-backward", action="store_true", help="forward only")
    p.add_argument("--out", default=None, help="write the markdown table here")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.stderr.write("gpu_sweep: error: torch is not installed; pip install 'exactattn[torch]'\n")
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.stderr.write(f"gpu_sweep: error: torch.cuda.is_available() is false on this machine "
                         f"(torch {torch.__version__}); run on a CUDA machine, or pass "
                         "--device cpu to try the sweep on the CPU\n")
        return 2
    text = markdown(sweep(args))
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
