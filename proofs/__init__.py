"""The claims about attention as executable symbolic proofs (``exactattn prove``).

One claim per module.  Each module's docstring states the claim, its
assumptions and a reference; ``run(...)`` derives it with sympy over symbols,
prints a short deterministic report (claim, key steps, residual or solved
value, verdict) and returns True when the claim holds.  ``run`` takes the
thing it checks as a keyword argument (a softmax, an attention function, a
cost derivation, a divisor...), so a deliberately broken variant can be fed in
and the proof seen to fail.  Run one with ``exactattn prove NAME`` or, from an
installed package, ``python -m exactattn.proofs.NAME``; a module whose name
starts with ``_`` is not a proof.

Installed, this directory is the subpackage ``exactattn.proofs``.
"""
