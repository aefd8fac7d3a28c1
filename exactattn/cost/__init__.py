"""Cost of attention: multiply-adds counted where they happen, the formula derived
from the loops, the crossover solved.

Three independent routes to one number, which must agree:

* **counted** (:mod:`~exactattn.cost.counting`): :func:`count` runs the head
  through the pencil engine's loops (:mod:`exactattn.reference.kernels`,
  :mod:`exactattn.engines.head`), whose counters go up by one inside the innermost
  loop at every multiply-add that really runs;
* **derived** (:mod:`~exactattn.cost.derivation`): :func:`derive` describes
  each stage's loop nest by its bounds (:func:`loop_nests`, mirroring the
  engine's ``for`` loops) and lets sympy sum them, giving ``3 n D d_k``
  (projections, at d_v = d_k), ``n^2 d_k`` (scores), ``n^2 d_v`` (mixing);
* **solved** (:mod:`~exactattn.cost.solve`): :func:`crossover` solves where
  the pairs (scores + mixing) pass the projections: ``2 n^2 d_k > 3 n D d_k``,
  i.e. ``n > 3D/2`` (n = 7 at D = 4, and at n = 6 the two are equal, 288 and
  288).

The stages are ``projections``, ``scores``, ``mix`` and, with heads,
``out_projection`` (W_O: the heads' outputs, concatenated, projected back to
d_model).  The FLOP conventions are stated in
:mod:`~exactattn.cost.conventions` (a MAC is one multiplication plus one
addition, FLOPs = 2 x MACs; a causal mask leaves n(n+1)/2 pairs).  The
figures of the tables are :mod:`~exactattn.cost.rows` and
:mod:`~exactattn.cost.conventions` (``exactattn cost`` puts them in words).

Every route reads one description of a call, :class:`CallShape`
(:mod:`~exactattn.cost.sizes`): the operands' shapes (``B x H x L x E``,
broadcast batches, GQA groups), the :class:`~exactattn.call.policy.Policy`,
an explicit mask, and the projections, W_O, layers or decoding around the
attention; built from shapes, from a :class:`~exactattn.call.inputs.Call`
(:meth:`CallShape.of_call`) or from the keyword sizes of one head
(:meth:`CallShape.of_sizes`).  One API over it: :func:`call_nests`,
:func:`call_formula` and :func:`derive_call` (derived), :func:`count_call`
(counted); :func:`loop_nests`, :func:`derive`, :func:`derive_at`,
:func:`count` and :func:`run` are its front doors for one head.
:mod:`exactattn.audit.flops` explains a FLOP counter's figure by its departures
from the derived count and runs the counters (``exactattn cost --audit``).

The names below are loaded on first use, so importing the package (or its
light :mod:`~exactattn.cost.sizes`) does not load sympy; a counted run never
needs it.

Reference: Vaswani et al. 2017, sec. 3.2.1 and Table 1 (self-attention is
O(n^2 d) per layer); the built-in worked example ``chronicle``.

>>> from exactattn.cost import SYMBOLS, count, crossover, derive
>>> derive()["total"]
2*D*d_k*n + D*d_v*n + d_k*n**2 + d_v*n**2
>>> n, D, d_k, d_v = SYMBOLS
>>> derive(d_v=d_k)["projections"], derive(d_v=d_k)["scores"]
(3*D*d_k*n, d_k*n**2)
>>> count(4, 4, 4)
{'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
>>> crossover(4).first, crossover(4).equal_at
(7, 6)
"""

from __future__ import annotations

import importlib

#: every public name, and the module of the package that holds it
_EXPORTS = {name: "exactattn.cost." + module for module, names in (
    ("sizes", "CallShape"),
    ("derivation", "EXTENSION_SYMBOLS SYMBOLS call_formula call_nests derive derive_call derive_at "
                   "derive_operations loop_nests"),
    ("counting", "Run count count_call decode_steps run"),
    ("solve", "crossover doubling_ratio")) for name in names.split()}

__all__ = sorted(_EXPORTS)

# also loaded on first use, for the benchmarks and the owners' test (not listed above)
_EXPORTS.update(broadcast_batch="exactattn.cost.sizes", count_head="exactattn.cost.counting",
                count_tokens="exactattn.cost.counting", counting_work="exactattn.cost.rows")


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

