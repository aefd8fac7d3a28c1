"""verify with large attention sinks and logit offsets: huge sinks are refused in one line (no
traceback, no minute-long rounding), and correct float kernels pass at any sink the check takes."""
import importlib.util
import time

import numpy as np
import pytest

from exactattn.call import Call
from exactattn.call.modifiers import Alibi
from exactattn.call.policy import Policy
from exactattn.errors import InputError
from exactattn.verify import Reference, verify
from exactattn.verify.adapter import FunctionImpl
from exactattn.verify.check import MAX_SINK, logit_bound

IMPLS = ("numpy", "torch") if importlib.util.find_spec("torch") else ("numpy",)


@pytest.mark.parametrize("sink", ["1e10", "1e20", "1e3000", "-1e20", "65505", "-65504.5"])
def test_a_sink_past_the_range_is_refused_in_one_line(cli, sink):
    t0 = time.perf_counter()
    rc, out, err = cli("verify", "--sink", sink)
    assert time.perf_counter() - t0 < 10
    assert rc == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line and len(line) < 300, line
    assert "--sink" in line and f"-{MAX_SINK} to {MAX_SINK}" in line and "pass one" in line


@pytest.mark.parametrize("args", [["--search", "3"], ["--backward"]])
def test_the_search_and_the_backward_refuse_a_huge_sink_too(cli, args):
    rc, out, err = cli("verify", "--sink", "1e20", *args)
    assert rc == 2 and "Traceback" not in err and "--sink must be from" in err


def test_the_python_api_refuses_a_huge_sink():
    c = Call.random(2, 2, seed=0).with_policy(Policy(sink="1e20"))
    with pytest.raises(InputError, match="sink must be from -65504 to 65504"):
        verify("numpy", c, "float64")


@pytest.mark.parametrize("sink", [str(MAX_SINK), f"-{MAX_SINK}"])
def test_the_ends_of_the_range_are_checked_quickly(cli, sink):
    t0 = time.perf_counter()
    rc, out, err = cli("verify", "--sink", sink, "--dtype", "float64,float16")
    assert rc == 0 and "result: PASS" in out, out + err
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("flags", [["--sink", "40"], ["--sink", "200"], ["--sink", "-200"],
                                   ["--sink", "73/3"], ["--alibi", "8:absolute", "--n", "64"]],
                         ids=["sink40", "sink200", "sink-200", "sink73/3", "alibi"])
def test_correct_kernels_pass_under_large_offsets(cli, impl, dtype, flags):
    args = ["--n", "16", *flags] if "--n" not in flags else flags
    rc, out, err = cli("verify", "--impl", impl, "--d-k", "8", "--dtype", dtype, *args)
    assert rc == 0 and "result: PASS" in out, out + err


def _max_ulps(sink=None) -> int:
    """The default ULP tolerance of the probes and the log-sum-exp (``report.max_ulps``)."""
    from exactattn.call import Call
    from exactattn.verify.check import verify
    c = Call.random(16, 8, seed=0)
    c = c if sink is None else c.with_policy(c.policy.replace(sink=sink))
    return verify("numpy", c, "float64", probes="none").max_ulps


def test_a_positive_sink_raises_the_tolerance_and_a_negative_one_leaves_it():
    assert _max_ulps() == 18
    assert _max_ulps("-200") == _max_ulps("0") == 18      # no looser than without a sink
    assert _max_ulps("200") == 214


def _bound(call: Call) -> float:
    ref = Reference(call)
    return logit_bound(ref.max_abs_exponent(), ref.policy)


def test_logit_bound_takes_the_sink_only_above_the_logits():
    c = Call.from_scores([[0, 1]], policy=Policy(scale="none"))
    bound = [_bound(c.with_policy(c.policy.replace(sink=s))) for s in ("1/2", "40", "-200")]
    assert bound == [1.0, 40.0, 1.0]
    big = Call.from_scores([[0, 300]], policy=Policy(scale="none", sink="200"))
    assert _bound(big) == 300.0


def _sink_in_float32(query, key, value, *, scale, sink):
    """A float64 kernel that computes in float32 inside: wrong by far more than any tolerance."""
    s = (query @ key.T * scale).astype(np.float32)
    s = np.concatenate([s, np.full((s.shape[0], 1), sink, dtype=np.float32)], axis=1)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return ((e / e.sum(axis=1, keepdims=True))[:, :-1] @ value.astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("sink", ["40", "200"])
def test_a_wrong_kernel_still_fails_under_a_large_sink(sink):
    c = Call.random(8, 4, seed=1).with_policy(Policy(sink=sink))
    rep = verify(FunctionImpl(_sink_in_float32), c, "float64")
    assert not rep.passed


def test_alibi_bias_is_in_the_bound():
    c = Call.random(4, 2, seed=0).with_policy(Policy(alibi=Alibi(4096, "absolute")))
    plain = Call.random(4, 2, seed=0)
    assert _bound(c) > _bound(plain)


def test_a_softcap_past_float16_is_refused_in_one_line(cli):
    """``verify --softcap 1e3000`` died converting the cap to a float."""
    rc, out, err = cli("verify", "--softcap", "1e3000")
    assert (rc, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith("exactattn: error: --softcap must be at most 65504 to be checked")
    assert cli("verify", "--softcap", "65504")[0] == 0
