"""``exactattn prove [NAME ...]``: run the symbolic proofs in ``proofs/`` and list the verdicts.

Each proof is one module of the ``exactattn.proofs`` package (the top-level
``proofs/`` directory, shipped with the package): its docstring states the
claim, ``run(out=...)`` derives it with sympy, prints a short report and
returns True when the claim holds.  A new file is picked up without being
registered; a module whose name starts with ``_`` is not a proof.

Exit status: 0 every proof held, 1 a proof failed (or raised), 2 bad input
(an unknown name).

Reference: Vaswani et al. 2017, sec. 3.2.1 (the head), sec. 4 (its cost); the
properties each proof states are listed by ``exactattn prove --list``.

>>> "row_sums_to_one" in proof_names()
True
>>> load_proof("nope")
Traceback (most recent call last):
...
exactattn.errors.InputError: proof must be the name of a file in proofs/ (got 'nope'); ...
"""

from __future__ import annotations

import argparse
import importlib
import importlib.resources
import importlib.util
import io
import sys
from collections import namedtuple
from pathlib import Path
from types import ModuleType
from typing import Sequence

from ..errors import InputError, shorten

PACKAGE = "exactattn.proofs"
HELP = "run the symbolic proofs of the claims about attention and list the verdicts"


def proofs_package() -> ModuleType:
    """The ``exactattn.proofs`` package: installed, or ``proofs/`` of a source checkout (kept in
    ``sys.modules`` once loaded, where the import finds it)."""
    try:
        return importlib.import_module(PACKAGE)
    except ModuleNotFoundError as e:
        if e.name != PACKAGE:
            raise
    # a source checkout: proofs/ sits beside the exactattn package
    root = Path(__file__).resolve().parents[2] / "proofs"
    init = root / "__init__.py"
    if not init.is_file():
        raise InputError(f"the proofs must be installed with exactattn (got no {init})")
    spec = importlib.util.spec_from_file_location(PACKAGE, init,
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    import exactattn
    exactattn.proofs = module
    return module


def proof_names() -> list[str]:
    """Every proof, by file name without ``.py``, in alphabetical order."""
    files = importlib.resources.files(proofs_package())
    return sorted(f.name[:-3] for f in files.iterdir()
                  if f.name.endswith(".py") and not f.name.startswith("_"))


def load_proof(name: str) -> ModuleType:
    """Import the proof module ``name`` (``row_sums_to_one`` or ``row_sums_to_one.py``).

    Raises:
        InputError: no proof of that name.
    """
    stem = name[:-3] if name.endswith(".py") else name
    if stem not in proof_names():
        raise InputError(f"proof must be the name of a file in proofs/ (got {shorten(name, quote=True)}); "
                         "`exactattn prove --list` lists them")
    return importlib.import_module(f"{PACKAGE}.{stem}")


def claim_of(module: ModuleType) -> str:
    """A proof's claim in one line: its ``CLAIM``, else the first line of its docstring."""
    return getattr(module, "CLAIM", None) or (
        module.__doc__.strip().splitlines()[0] if module.__doc__ else "")


#: one proof's outcome: ``verdict`` is ``PROVED``, ``FAILED`` or ``ERROR``
ProofResult = namedtuple("ProofResult", "name claim verdict report")


def run_proofs(names: Sequence[str] | None = None) -> list[ProofResult]:
    """Run the named proofs (all by default) and collect their reports and verdicts, in
    the order named; on a machine with several cores, in one forked process a core (one
    process when JAX or torch is loaded: forking a multithreaded runtime is unsafe).

    A proof that raises is reported as ``ERROR`` with the exception's one-line
    message, never hidden.
    """
    names = [load_proof(n).__name__.rsplit(".", 1)[-1] for n in names or proof_names()]
    from ..present.stream import forked_map, progress  # every name checked and imported
    jobs = 1 if {"jax", "torch"} & set(sys.modules) else None   # forks share the imports
    return list(progress(forked_map(_prove, names, jobs), len(names), "proofs", unit="proof"))


def _prove(name: str) -> ProofResult:
    """One proof, run to its verdict."""
    module, stream = load_proof(name), io.StringIO()
    try:
        verdict = "PROVED" if module.run(out=stream) else "FAILED"
    except Exception as e:  # a crashing proof is a failed proof, said so
        print(f"  verdict: ERROR ({type(e).__name__}: {e})", file=stream)
        verdict = "ERROR"
    return ProofResult(name, claim_of(module), verdict, stream.getvalue())


def register(sub) -> None:
    p = sub.add_parser("prove", help=HELP, description=HELP)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="proofs to run (default: all); see --list")
    p.add_argument("--list", action="store_true", help="list the proofs and their claims")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the verdicts, not each proof's derivation")


def run(args: argparse.Namespace) -> int:
    if args.list and args.quiet:
        raise InputError("--quiet must be used without --list (got both); --list prints "
                         "only the names and claims")
    if args.list:
        mods = {m.__name__.rsplit(".", 1)[-1]: m for m in map(load_proof, args.names or proof_names())}
        width = max(map(len, mods))
        sys.stdout.writelines(f"{n:<{width}}  {claim_of(m)}\n" for n, m in mods.items())
        return 0
    results, out = run_proofs(args.names), sys.stdout
    out.writelines(r.report + "\n" for r in results if not args.quiet)
    width = max(len(r.name) for r in results)
    out.write(f"verdicts ({len(results)} proof{'s' if len(results) != 1 else ''}):\n")
    out.writelines(f"  {r.verdict:<6}  {r.name:<{width}}  {r.claim}\n" for r in results)
    failed = sum(r.verdict != "PROVED" for r in results)
    out.write(f"{len(results) - failed} proved, {failed} failed\n")
    return 1 if failed else 0
