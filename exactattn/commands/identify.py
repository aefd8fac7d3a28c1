"""``identify``: which conventions a float attention kernel implements, each decided exactly.

One small exact probe per convention (scale, causal alignment, window bounds,
GQA map, empty rows, log-sum-exp base and sink, soft-cap form, ALiBi, RoPE
layout and base); one line per convention, ``NAME  declared X  found Y
ok|DIFFERS`` (:func:`exactattn.verify.identify.identify`).  The declared
conventions are the policy flags given, SDPA's defaults otherwise.  Exit
status: 0 when every convention the kernel can be asked about is the declared
one, 1 when one differs (or is undecided, or the kernel raised), 2 on bad input.
"""

from __future__ import annotations

import sys

from ..options import argtype, choice
from .modifier_flags import add_policy_flags, apply

HELP = "find which conventions a float attention kernel implements (scale, causal alignment, " \
       "window, GQA, empty rows, LSE, soft-cap, ALiBi, RoPE), decided exactly"
MODIFIERS = ("sink", "alibi", "softcap", "rope", "rope_scaling", "lse")


def _conventions(text: str) -> tuple:
    from ..errors import InputError
    from ..verify.identify import CONVENTIONS
    names = tuple(t.strip() for t in text.split(","))
    for n in names:
        if n not in CONVENTIONS:
            raise InputError(f"--conventions must be a comma list of {', '.join(CONVENTIONS)} "
                             f"(got {n!r})")
    return names


def register(sub) -> None:
    from ..numbers.formats import DTYPES
    p = sub.add_parser("identify", help=HELP, description=HELP + ": exact probe inputs on "
                       "which every candidate gives a different answer; a candidate is found "
                       "only when the kernel is within the proved tolerance of it and provably "
                       "outside every other's.")
    p.add_argument("--impl", default="numpy", metavar="NAME", help="numpy, torch, flex, jax or "
                   "module:function (SDPA's signature; window, sink, softcap, alibi_slopes, "
                   "rope_theta, rope_layout, return_lse when it takes them) (default numpy)")
    p.add_argument("--arrays", type=choice("--arrays", ("numpy", "torch", "jax")),
                   help="what a module:function impl is handed (default numpy arrays)")
    p.add_argument("--device", type=choice("--device", ("cpu", "cuda")),
                   help="where --impl torch or flex runs (default cpu)")
    p.add_argument("--backend", type=choice("--backend", ("flash", "efficient", "cudnn", "math")),
                   help="--impl torch: the one SDPA backend allowed")
    p.add_argument("--dtype", type=choice("--dtype", DTYPES), default="float32",
                   help="the probes' dtype (default float32)")
    p.add_argument("--conventions", type=argtype(_conventions, "--conventions", echo=False),
                   metavar="LIST", help="probe only these (default all)")
    add_policy_flags(p, "declared policy (what the kernel should do; SDPA's by default)",
                     ("like", "scale", "alignment", "empty_row", "gqa"))
    add_policy_flags(p, "declared modifiers (the probes' values)", MODIFIERS)


def run(args) -> int:
    from ..verify.identify import CONVENTIONS, identify
    from ..verify.impls import load_from_flags
    policy = apply(None, args)
    impl = load_from_flags(args.impl, arrays=args.arrays, device=args.device,
                           backend=args.backend)
    found = identify(impl, policy, dtype=args.dtype, lse=args.lse or "e",
                     conventions=args.conventions or CONVENTIONS)
    sys.stdout.write(found.text() + "\n")
    return found.exit_status
