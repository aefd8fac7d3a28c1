"""verify --backward and assert_attention_grads_close under soft-caps, RoPE, sinks and an LSE
output (issue 44): a correct torch autograd kernel passes; FlashAttention's soft-cap backward bug
(dS without the factor 1 - tanh^2) and TransformerEngine's dsink returned as 0 fail; gradients
of the wrong shape fail the case (not a bad input)."""

from __future__ import annotations

import functools
import textwrap

import numpy as np
import pytest

from exactattn.call import Call
from exactattn.call.modifiers import Rope
from exactattn.call.policy import Policy
from exactattn.cli import main
from exactattn.testing import assert_attention_grads_close
from exactattn.verify.backward import verify_backward

torch = pytest.importorskip("torch")

KERNEL = '''
import functools

import torch


def attention_backward(query, key, value, grad_out, grad_lse=None, *, scale=None, softcap=None,
                       sink=None, return_lse=False, bug=None):
    """Autograd of softmax(cap tanh(scale q k^T / cap), sink) v (and of its log-sum-exp);
    ``bug``: "softcap" (dS without 1 - tanh^2), "sink" (dsink returned as 0), "shape"."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        capped = softcap * torch.tanh(s / softcap)
        s = s + (capped - s).detach() if bug == "softcap" else capped
    if sink is not None:
        sk = torch.tensor(float(sink), dtype=s.dtype, requires_grad=True)
        s = torch.cat([s, sk.expand(*s.shape[:-1], 1)], -1)
    outs, grads = [torch.softmax(s, -1)[..., :key.shape[-2]] @ v], [grad_out]
    if grad_lse is not None:
        outs.append(torch.logsumexp(s, -1))
        grads.append(grad_lse)
    torch.autograd.backward(outs, grads)
    got = [q.grad, k.grad, v.grad[:-1] if bug == "shape" else v.grad]
    if sink is not None:
        got.append(torch.zeros_like(sk.grad) if bug == "sink" else sk.grad)
    return tuple(got)


capped_wrong = functools.partial(attention_backward, bug="softcap")
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    import importlib.util
    path = tmp_path_factory.mktemp("kernel") / "capkernel.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("capkernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _call(policy, L=4, S=5, E=8, Ev=3, seed=3):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((L, E)) * 3, rng.standard_normal((S, E)) * 3, \
        rng.standard_normal((S, Ev))
    return Call(q.tolist(), k.tolist(), v.tolist(), policy=policy, floats="exact")


def _check(kernel, policy, bug=None, lse=None, dtype="float64"):
    fn = functools.partial(kernel.attention_backward, bug=bug)
    return verify_backward(fn, _call(policy), dtype, arrays="torch", lse=lse)


def test_the_soft_cap_backward_bug_fails_and_autograd_passes(kernel):
    """FlashAttention's bug: dS without the factor 1 - tanh^2(s/cap).  With cap 1 the scores
    saturate (the factor is far from 1): 72 of dQ and dK's 72 entries are off, dV is right."""
    for dtype in ("float64", "float32"):
        good = _check(kernel, Policy(softcap="1"), dtype=dtype)
        assert good.passed and good.found.count == 87, dtype
        bad = _check(kernel, Policy(softcap="1"), bug="softcap", dtype=dtype)
        assert not bad.passed
        over = {e.index[0] for e in bad.entries if e.status == "over"}
        assert over == {"dQ", "dK"}
        assert bad.found.over == 72


def test_dsink_is_judged_where_the_kernel_returns_it(kernel):
    good = _check(kernel, Policy(sink="1/2"))
    assert good.passed and good.found.count == 88          # 87 + one dsink (B = H = 1)
    sinks = [e for e in good.entries if e.index[0] == "dsink"]
    assert [e.index for e in sinks] == [("dsink", 0, 0, 0, 0)]
    assert sinks[0].exact.decimal(12) == sinks[0].exact.decimal(12) != "0.000000000000"
    bad = _check(kernel, Policy(sink="1/2"), bug="sink")   # TransformerEngine: dsink = 0
    assert not bad.passed
    assert [e.index[0] for e in bad.entries if e.status == "over"] == ["dsink"]


def test_an_lse_output_soft_cap_and_sink_together_pass(kernel):
    rep = _check(kernel, Policy(softcap="2", sink="1/2"), lse="e")
    assert rep.passed and rep.found.count == 88
    assert "(dlse too)" in rep.notes[0]
    # a kernel that ignores dlse fails
    def no_lse(q, k, v, g, grad_lse=None, **kw):
        return kernel.attention_backward(q, k, v, g, None, **kw)
    bad = verify_backward(no_lse, _call(Policy(softcap="2")), "float64", arrays="torch", lse="e")
    assert not bad.passed
    with pytest.raises(Exception, match="lse must be 'e' for a backward check"):
        _check(kernel, Policy(softcap="2"), lse="2")


def test_rope_and_every_modifier_pass_torch_autograd():
    for policy in (Policy(rope=Rope()), Policy(rope=Rope(layout="interleaved", dims=4),
                                               softcap="5", causal=True, sink="0"),
                   Policy(rope=Rope(theta=100), window=(1, 0), query_offset=1)):
        rep = verify_backward("torch", _call(policy), "float32")
        assert rep.passed and rep.found.count == 87, policy


def test_gradients_of_the_wrong_shape_fail_the_case(kernel):
    rep = _check(kernel, Policy(softcap="2"), bug="shape")
    assert not rep.passed and rep.found.hard == rep.found.count == 87
    assert rep.raised.startswith("gradients of the wrong shape (")
    assert "dV must be 5 x 3 (got 4 x 3)" in rep.raised


def test_cli_checks_a_soft_capped_backward_and_fails_the_bug(kernel, tmp_path, capsys,
                                                            monkeypatch):
    (tmp_path / "capkernel.py").write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["verify", "--backward", "--softcap", "1", "--dtype", "float64", "--n", "4",
            "--d-k", "4", "--arrays", "torch", "--worst", "1"]
    assert main(base + ["--impl", "capkernel:attention_backward"]) == 0
    assert "result: PASS" in capsys.readouterr().out
    assert main(base + ["--impl", "capkernel:capped_wrong"]) == 1
    out = capsys.readouterr().out      # dQ and dK over the tolerance, dV right, nothing raised
    assert "result: FAIL" in out and "raised" not in out
    rows = {line.split()[1]: line.split()[-2:] for line in out.splitlines()
            if line.startswith("float64 ")}
    assert rows["dV"] == ["0", "0"] and rows["dQ"][1] == rows["dK"][1] == "0"
    assert int(rows["dQ"][0]) > 0 and int(rows["dK"][0]) > 0
    assert main(base + ["--impl", "capkernel:attention_backward", "--lse"]) == 0
    assert "result: PASS" in capsys.readouterr().out


def test_assert_attention_grads_close_takes_soft_caps_sinks_and_lse(kernel):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    d_out = torch.randn(1, 2, 3, 4, generator=g, dtype=torch.float64)
    d_lse = torch.randn(1, 2, 3, generator=g, dtype=torch.float64)
    grads = kernel.attention_backward(q, k, v, d_out, d_lse, softcap=2.0, sink=0.5)
    per_head = []        # dsink is judged per batch and query head: each head's own sum
    for h in range(2):
        one = kernel.attention_backward(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1],
                                        d_out[:, h:h + 1], d_lse[:, h:h + 1], softcap=2.0,
                                        sink=0.5)
        per_head.append(one[3])
    got = (*grads[:3], torch.stack(per_head).reshape(1, 2))
    rep = assert_attention_grads_close(got, q, k, v, d_out, grad_lse=d_lse, softcap="2",
                                       sink="1/2")
    assert rep.passed and rep.found.count == 3 * 24 + 2
    with pytest.raises(AssertionError):
        assert_attention_grads_close(kernel.attention_backward(q, k, v, d_out, softcap=2.0,
                                                               bug="softcap"),
                                     q, k, v, d_out, softcap="2")


def test_a_search_goes_on_past_gradients_of_the_wrong_shape():
    """The search scores such a case as a hard failure (it stopped on it as a bad input)."""
    from exactattn.verify.backward import search_backward

    def short_dv(query, key, value, grad_out, *, scale=None):
        return np.zeros_like(query), np.zeros_like(key), np.zeros_like(value)[:-1]
    res = search_backward(short_dv, "float64", examples=3, max_size=2, seed=1)
    assert not res.report.passed
    assert res.report.raised.startswith("gradients of the wrong shape (")


def test_torchs_own_backward_takes_dlse():
    """Autograd of sum dO O + sum dlse lse through torch's composition (it refused --lse); a
    composition whose lse carries no gradient fails."""
    from exactattn.verify.impls import TorchImpl
    for pol in (Policy(), Policy(softcap="2", sink="1/2", rope=Rope(), causal=True)):
        assert verify_backward("torch", _call(pol), "float64", lse="e").passed

    class Detached(TorchImpl):
        def compose(self, call, q, k, v):
            f = super().compose(call, q, k, v)
            f.lse = None if f.lse is None else f.lse.detach() + 0 * f.lse     # no gradient
            return f
    assert not verify_backward(Detached(), _call(Policy()), "float64", lse="e").passed


def test_jaxs_backward_refuses_dlse_in_one_line():
    pytest.importorskip("jax")
    with pytest.raises(Exception, match=r"dot_product_attention backward \(CPU jax.vjp\) must be "
                                        r"checked without lse \(got one\); it takes dO only"):
        verify_backward("jax", _call(Policy()), "float32", lse="e")
