"""Row blocks: certified attention at any n, in bounded memory, on this machine or a Dask cluster.

Every query row of an attention call is independent given the keys and
values, so the unit of work is a block of query rows against the keys they
can see.  A block holds O(block x n) numbers at its peak, the inputs O(n d);
the block size comes from a memory budget; the results are the same strings
for every block size and wherever the blocks run.

The modules, in the order data flows through them:

* :meth:`Call.head <exactattn.call.Call.head>`: one head of a call alone, its exact inputs
  as integer numerators over common denominators (:meth:`Call.from_floats
  <exactattn.call.Call.from_floats>` reads float arrays as a one-head call;
  :func:`random_floats` draws verify's random ones, rounded to a float type);
* :mod:`~exactattn.blocks.rows`: :func:`certify_block`, one block's certified
  shares and outputs (:mod:`exactattn.numbers.bulk` enclosures, exact fallbacks);
* :mod:`~exactattn.blocks.memory`: :func:`block_rows`, the block size from a budget;
* :mod:`~exactattn.blocks.engine`: :class:`Engine`, this process or Dask
  (``scheduler="local"``, ``"tcp://host:8786"``, ``DASK_SCHEDULER_ADDRESS``);
* :mod:`~exactattn.blocks.certify`: :func:`certify`, every block in row order;
* :mod:`~exactattn.blocks.check`: :func:`check_impl`, ``verify`` in blocks.

>>> from exactattn.call import Call, Policy
>>> x = Call.from_floats(*random_floats(6, 4, seed=0), policy=Policy(causal=True))
>>> blocks = list(certify(x, 3, rows=4, engine=Engine("none")))
>>> [(b.r0, b.r1, b.keys) for b in blocks], blocks[0].shares[0][:3]
([(0, 4, (0, 4)), (4, 6, (0, 6))], ['1.000', '0.000', '0.000'])
"""

from .certify import DEFAULT_MEMORY, certify
from .check import check_impl, check_outputs
from .engine import Engine, check_scheduler
from ..call.inputs import random_floats

__all__ = ["Engine", "certify", "check_impl", "random_floats"]
