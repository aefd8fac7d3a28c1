"""How many query rows a block holds: from a memory budget and measured bytes per pair.

A block of r rows against a span of m keys holds, at its peak, about
:data:`BYTES_PER_PAIR` bytes per (row, key) pair while its enclosures are
computed (measured with ``tracemalloc`` at n = 4096, d = 64: 121 bytes for
rows of 64 to 512; the scores as int64 high and low parts, the gaps, two
uint64 bounds and the temporaries of their products), plus what it hands
back: 8 bytes per share string reference (strings are shared) and about 100
bytes per output.  Each process also holds the exact inputs (8 bytes per
int64 numerator) and its own interpreter (:data:`PROCESS_BYTES`).

:func:`block_rows` turns a budget for the whole run into a block size:

    budget >= (workers + 1) (PROCESS_BYTES + inputs)
              + workers r (BYTES_PER_PAIR m + out)  + 2 workers r out

(each worker computes one block at a time; up to two results per worker wait
at the driver; ``workers`` 0 is this process alone: one process, one block).  The result does not change any printed digit: results are
the same for every block size.

>>> block_rows(2 ** 32, n_q=16384, n_k=16384, d_k=64, d_v=64, workers=2, shares=False)
512
>>> block_rows(2 ** 20, n_q=16384, n_k=16384, d_k=64, d_v=64, workers=2)
Traceback (most recent call last):
...
exactattn.errors.InputError: memory must be at least 557 MiB for 16384 keys on 2 workers (got 1 MiB); give more memory, or fewer workers
"""

from __future__ import annotations

from ..errors import InputError

#: peak bytes per (row, key) pair of a block (measured: 121; see the module text)
BYTES_PER_PAIR = 128
#: bytes one process holds before any block: interpreter, numpy, python-flint, exactattn
PROCESS_BYTES = 160 * 2 ** 20
#: bytes per share string reference handed back, and per output
_SHARE_BYTES, _OUTPUT_BYTES = 8, 100
_INPUT_BYTES = 8             # per int64 numerator of the inputs


def size_text(size: int) -> str:
    """Bytes in words: ``512 MiB``, ``3.5 GiB``.

    >>> size_text(2 ** 29), size_text(7 * 2 ** 29)
    ('512 MiB', '3.5 GiB')
    """
    if size >= 2 ** 30:
        return f"{size / 2 ** 30:.1f} GiB"
    return f"{-(-size // 2 ** 20)} MiB"


def block_rows(budget: int, *, n_q: int, n_k: int, d_k: int, d_v: int, workers: int = 1,
               shares: bool = True) -> int:
    """The most query rows per block that keep the whole run within ``budget`` bytes.

    At most n_q; with several workers at most n_q / (4 workers) rounded up, so
    that each worker gets a few blocks.  ``workers`` 0: this process computes.  A power of two when below n_q (blocks
    then line up with causal spans and the progress bar counts evenly).

    Raises:
        InputError: not even one row fits.
    """
    inputs = _INPUT_BYTES * (n_q * d_k + n_k * (d_k + d_v))
    out = _OUTPUT_BYTES * d_v + (_SHARE_BYTES * n_k if shares else 0)
    computing = max(workers, 1)
    fixed = (workers + 1 if workers else 1) * (PROCESS_BYTES + inputs)
    per_row = computing * (BYTES_PER_PAIR * n_k + out) + (2 * workers * out if workers else 0)
    rows = (budget - fixed) // per_row
    if rows < 1:
        need = fixed + per_row
        who = f"{workers} worker" + ("s" if workers != 1 else "") if workers else "this process"
        raise InputError(f"memory must be at least {size_text(need)} for {n_k} keys on {who} "
                         f"(got {size_text(budget)}); give more memory, or fewer workers")
    most = n_q if workers <= 1 else -(-n_q // (4 * workers))
    rows = min(rows, most)
    return rows if rows >= n_q else 1 << (rows.bit_length() - 1)


def block_spans(n_q: int, rows: int) -> list[tuple[int, int]]:
    """``[(0, rows), (rows, 2 rows), ...]`` covering 0 .. n_q - 1.

    >>> block_spans(5, 2)
    [(0, 2), (2, 4), (4, 5)]
    """
    return [(r0, min(n_q, r0 + rows)) for r0 in range(0, n_q, rows)]
