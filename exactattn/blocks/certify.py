"""Every certified share and output of a call, block by block, in row order.

:func:`certify` picks the block size from a memory budget
(:func:`~exactattn.blocks.memory.block_rows`), runs
:func:`~exactattn.blocks.rows.certify_block` on an
:class:`~exactattn.blocks.engine.Engine` and yields the blocks in row order as
they are ready, so a caller can stream rows out while later blocks are still
being computed.  The strings are the same for every block size and every
engine.

>>> from exactattn.call import Call, Policy
>>> x = Call([[0], [1], [2]], [[0], [1], [2]], [[1], [0], [0]], policy=Policy(scale="none")).head()
>>> [b.outputs for b in certify(x, 4, rows=2, engine=Engine("none"))]
[[['0.3333'], ['0.0900']], [['0.0159']]]
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Callable, Iterator

from ..errors import InputError
from ..options import check_places, check_whole
from .engine import Engine
from .memory import block_rows, block_spans
from .rows import BlockResult, certify_block

#: the memory budget when none is given: 4 GiB for the whole run
DEFAULT_MEMORY = 4 * 2 ** 30


def plan(call, engine: Engine, *, memory: int = DEFAULT_MEMORY, rows: int | None = None,
         shares: bool = True) -> list[tuple[int, int]]:
    """The row spans of the blocks: ``rows`` each, or as many as ``memory`` allows.

    Raises:
        InputError: ``rows`` not a positive whole number, a budget too small; a call of
            several heads (blocks read one: :meth:`Call.head <exactattn.call.Call.head>`), or
            one that call.head refuses.
    """
    sh = call.shape
    if call.head().shape != sh:    # head() refuses an additive mask, a seen inf, ...
        raise InputError(f"call must hold one head for row blocks (got B={sh['B']}, "
                         f"H_q={sh['H_q']}); pass call.head(b, h)")
    if rows is None:
        rows = block_rows(memory, n_q=sh["L"], n_k=sh["S"], d_k=sh["E"], d_v=sh["E_v"],
                          workers=engine.computing(), shares=shares)
    check_whole(rows, "rows")
    return block_spans(sh["L"], rows)


def certify(call, places: int, *, shares: bool = True,
            memory: int = DEFAULT_MEMORY, rows: int | None = None,
            engine: Engine | None = None,
            on_block: Callable[[int, int], None] | None = None) -> Iterator[BlockResult]:
    """Blocks of certified decimals (:class:`~exactattn.blocks.rows.BlockResult`), in row order.

    Args:
        places: decimal places, 0 to 50.
        shares: also the n_k shares of every row (else outputs only).
        memory: the budget in bytes for the whole run (all workers).
        rows: rows per block (instead of choosing them from ``memory``).
        engine: where blocks run (default: a local Dask cluster over this
            machine's cores, closed when the iteration ends).
        on_block: ``on_block(done, total)`` as each block finishes.

    Raises:
        InputError: bad places, a budget too small for one row.
    """
    check_places(places)
    with nullcontext(engine) if engine else Engine() as engine:     # a new one closed at the end
        spans = plan(call, engine, memory=memory, rows=rows, shares=shares)
        task = partial(certify_block, places=places, shares=shares)
        yield from engine.map(task, call, spans, on_block)
