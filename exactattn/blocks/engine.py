"""Where blocks run: this process, a local Dask cluster, or an existing Dask cluster.

:class:`Engine` maps a block task ``task(data, r0, r1)`` over row spans and
yields the results in row order, whatever order they finish in:

* ``scheduler="none"``: this process, one block after another (no Dask);
* ``scheduler="local"`` (default): a ``distributed.LocalCluster`` of
  ``workers`` processes (default: this machine's cores), one thread each,
  started on first use and closed with the engine; no setup;
* ``scheduler="tcp://host:8786"`` (or any Dask address; ``DASK_SCHEDULER_ADDRESS``
  when no scheduler is named): an existing cluster.  Its workers need
  exactattn installed (the task is a function of this package).

The data (the exact inputs, O(n d)) reach each worker once
(``client.scatter(..., broadcast=True)``), never once per block.  At most two
blocks per worker are in flight, so results waiting at the driver stay
bounded.  A worker lost mid-run costs its blocks only: Dask hands them to
another worker (or to the restarted one) and computes them again; since every
block is a pure function of its rows, the results do not change.

Dask is optional (``pip install 'exactattn[dask]'``) and imported only here,
lazily: without it ``"local"`` runs in this process (:attr:`Engine.note` says
so) and an address is refused.

>>> with Engine("none") as engine:
...     list(engine.map(lambda data, r0, r1: sum(data[r0:r1]), [1, 2, 3, 4, 5], [(0, 2), (2, 5)]))
[3, 12]
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Sequence

from ..errors import InputError, shorten

#: the environment variable Dask reads for a scheduler address
ADDRESS_VARIABLE = "DASK_SCHEDULER_ADDRESS"
_IN_FLIGHT = 2                    # blocks submitted per worker ahead of the results read


def dask_available() -> bool:
    """True when ``dask.distributed`` can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def check_scheduler(value: Any, name: str = "scheduler") -> str:
    """``none``, ``local`` or a Dask address (``tcp://host:8786``, ``tls://...``, ``inproc://...``).

    >>> check_scheduler("tcp://10.0.0.5:8786"), check_scheduler("local")
    ('tcp://10.0.0.5:8786', 'local')
    >>> check_scheduler("10.0.0.5")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: scheduler must be none, local or a Dask address such as tcp://host:8786 (got '10.0.0.5')
    """
    if isinstance(value, str) and (value in ("none", "local") or
                                   ("://" in value and value.split("://", 1)[1].strip())):
        return value
    raise InputError(f"{name} must be none, local or a Dask address such as tcp://host:8786 "
                     f"(got {shorten(value, quote=True)})")


class Engine:
    """Runs block tasks; a context manager (closes a cluster it started).

    Args:
        scheduler: ``none``, ``local``, a Dask address, or None: the
            ``DASK_SCHEDULER_ADDRESS`` environment variable, else ``local``.
        workers: worker processes of a local cluster (default: ``os.cpu_count()``).

    Raises:
        InputError: a bad scheduler, a bad worker count, an address without
            Dask installed.
    """

    def __init__(self, scheduler: str | None = None, workers: int | None = None):
        from ..options import check_whole
        if scheduler is None:
            scheduler = os.environ.get(ADDRESS_VARIABLE) or "local"
        self.scheduler = check_scheduler(scheduler)
        if workers is not None:
            check_whole(workers, "workers")
        self.note = None
        if workers is not None and scheduler not in ("none", "local"):
            raise InputError(f"workers must come with a local cluster (got the scheduler "
                             f"{shorten(scheduler)}, from {ADDRESS_VARIABLE} or given); a "
                             "cluster at an address has its own workers")
        if scheduler not in ("none", "local") and not dask_available():
            raise InputError(f"scheduler {shorten(scheduler)} needs Dask (got none installed); "
                             "pip install 'exactattn[dask]'")
        if scheduler == "local" and not dask_available():
            self.scheduler = "none"
            self.note = "dask is not installed: blocks ran in this process " \
                        "(pip install 'exactattn[dask]' to use every core)"
        self.workers = workers if workers is not None else (
            1 if self.scheduler == "none" else os.cpu_count() or 1)
        self._client = self._cluster = None
        self._scattered: dict = {}

    # -- life cycle ---------------------------------------------------------
    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the client, and the local cluster when this engine started it."""
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None
        self._scattered.clear()

    @property
    def client(self):
        """The ``distributed.Client`` (started on first use); None for ``none``."""
        if self.scheduler == "none":
            return None
        if self._client is None:
            import logging
            from distributed import Client, LocalCluster
            if self.scheduler == "local":
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                             processes=True, dashboard_address=":0",
                                             silence_logs=logging.ERROR)
                self._client = Client(self._cluster)
            else:
                self._client = Client(self.scheduler)
                self.workers = max(1, len(self._client.scheduler_info()["workers"]))
        return self._client

    def computing(self) -> int:
        """Processes computing blocks at once (for the memory budget): 0 = this process."""
        return 0 if self.scheduler == "none" else self.workers

    def describe(self) -> str:
        """Where the blocks run, in words."""
        if self.scheduler == "none":
            return "this process"
        where = "a local Dask cluster" if self.scheduler == "local" else \
            f"the Dask cluster at {self.scheduler}"
        return f"{where}, {self.workers} worker" + ("s" if self.workers != 1 else "")

    # -- running ------------------------------------------------------------
    def map(self, task: Callable, data: Any, spans: Sequence[tuple[int, int]],
            on_block: Callable[[int, int], None] | None = None) -> Iterator:
        """``task(data, r0, r1)`` for every span, yielded in the order of ``spans``.

        ``on_block(done, total)`` is called as each block finishes (in any order).
        One span runs in this process (no cluster is started for it).
        """
        spans = list(spans)
        if self.scheduler == "none" or len(spans) <= 1:
            for done, (r0, r1) in enumerate(spans, 1):
                result = task(data, r0, r1)
                if on_block is not None:
                    on_block(done, len(spans))
                yield result
            return
        yield from self._dask_map(task, data, spans, on_block)

    def _dask_map(self, task, data, spans, on_block) -> Iterator:
        from distributed import as_completed
        client = self.client
        key = id(data)
        if key not in self._scattered:       # once per run, to every worker (the last data only)
            self._scattered = {key: (data, client.scatter(data, broadcast=True, hash=False))}
        ref = self._scattered[key][1]
        ahead = _IN_FLIGHT * max(1, len(client.scheduler_info()["workers"]))
        index: dict = {}
        waiting: dict = {}
        pending = as_completed()
        submitted = emitted = done = 0

        def submit() -> None:
            nonlocal submitted
            while submitted < len(spans) and submitted - emitted < ahead:
                r0, r1 = spans[submitted]
                future = client.submit(task, ref, r0, r1, pure=False)
                index[future.key] = submitted
                pending.add(future)
                submitted += 1
        submit()
        for future in pending:
            waiting[index.pop(future.key)] = future.result()
            future.release()
            done += 1
            if on_block is not None:
                on_block(done, len(spans))
            while emitted in waiting:
                yield waiting.pop(emitted)
                emitted += 1
            submit()
