"""Row blocks on Dask: a LocalCluster of 2 worker processes started by the tests themselves.

The same strings from this process, 1 worker and 2 workers; a worker killed mid-run
changes nothing (Dask computes its blocks again); an address from
DASK_SCHEDULER_ADDRESS is used.  Needs the optional extra (``exactattn[dask]``).
"""

import json
import os
import signal

import numpy as np
import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

from exactattn.blocks import Engine, certify, check_impl, random_floats  # noqa: E402
from exactattn.call import Call  # noqa: E402
from exactattn.blocks.engine import ADDRESS_VARIABLE  # noqa: E402
from exactattn.call.policy import Policy  # noqa: E402


def cluster(workers=2):
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                        dashboard_address=None)


def blocks(inputs, engine, rows=16, on_block=None):
    return [(b.r0, b.r1, b.shares, b.outputs)
            for b in certify(inputs, 4, rows=rows, engine=engine, on_block=on_block)]


INPUTS = Call.from_floats(*random_floats(128, 8, seed=5),
                          policy=Policy(causal=True, window=(40, 0))).head()


@pytest.fixture(scope="module")
def plain():
    with Engine("none") as engine:
        return blocks(INPUTS, engine)


def test_one_worker_two_workers_and_this_process_give_the_same_strings(plain):
    for workers in (1, 2):
        with Engine("local", workers) as engine:
            typed = blocks(INPUTS, engine)
            assert engine.describe() == f"a local Dask cluster, {workers} worker" + \
                ("s" if workers == 2 else "")
        assert typed == plain
    assert len(plain) == 8 and plain[0][2][0][:2] == ["1.0000", "0.0000"]


def test_a_worker_killed_mid_run_changes_nothing():
    with Engine("none") as engine:      # 32 blocks of 4 rows: one is always in flight
        plain = blocks(INPUTS, engine, rows=4)
    with cluster() as c:
        with Client(c) as client:
            pids = client.run(os.getpid)           # worker address -> process id
        killed = []

        def kill(done, total):       # after the first block, a worker busy with another one
            if killed:
                return
            busy = [a for a, w in c.scheduler.workers.items() if w.processing]
            if busy:
                os.kill(pids[busy[0]], signal.SIGKILL)
                killed.append(pids[busy[0]])
        with Engine(c.scheduler_address) as engine:
            got = blocks(INPUTS, engine, rows=4, on_block=kill)
        assert len(killed) == 1
        with pytest.raises(ProcessLookupError):
            os.kill(killed[0], 0)                  # that process is gone
        started = [e[0] for e in c.scheduler.transition_log        # (key, start, finish, ...)
                   if e[2] == "processing" and str(e[0]).startswith("certify_block")]
        assert len(started) > len(plain)           # its block was computed again
        assert got == plain


def test_the_scheduler_address_comes_from_the_environment(plain, monkeypatch):
    with cluster() as c:
        monkeypatch.setenv(ADDRESS_VARIABLE, c.scheduler_address)
        with Engine() as engine:
            assert engine.describe() == f"the Dask cluster at {c.scheduler_address}, 2 workers"
            assert blocks(INPUTS, engine) == plain


def test_a_blocked_check_on_two_workers_matches_this_process():
    q, k, v = random_floats(96, 8, seed=1)
    with Engine("none") as engine:
        want = check_impl("numpy", q, k, v, "float32", rows=8, engine=engine)
    with cluster() as c, Engine(c.scheduler_address) as engine:
        got = check_impl("numpy", q, k, v, "float32", rows=8, engine=engine)
    assert got.summary() == want.summary() and got.max_ulps == want.max_ulps
    assert [w.index for w in got.found.worst] == [w.index for w in want.found.worst]
    assert got.summary()["count"] == 96 * 8 and got.blocks == 12


def test_the_command_sends_blocks_to_a_cluster(cli):
    with cluster() as c:
        rc, out, err = cli("blocks", "--random", "40,4,2", "--scheduler", c.scheduler_address,
                           "--format", "json", "--rows", "8")
    doc = json.loads(out)
    assert rc == 0 and doc["engine"] == f"the Dask cluster at {c.scheduler_address}, 2 workers"
    with Engine("none") as engine:
        want = [o for b in certify(Call.from_floats(*random_floats(40, 4, seed=2)).head(), 4, rows=40, engine=engine,
                                   shares=False) for o in b.outputs]
    assert [r["outputs"] for r in doc["rows"]] == want
    assert np.array(want).shape == (40, 4)
