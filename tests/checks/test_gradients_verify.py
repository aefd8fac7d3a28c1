"""``exactattn verify --backward``: float backward passes against the exact gradients, in ULPs.

A correct backward (torch autograd of SDPA, the numpy reference) passes; a deliberately
wrong one (no D_i term, or a scale of 1/d_k in dK) fails with its worst entry shown.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction

import numpy as np
import pytest

from exactattn.call.policy import Policy, Rope
from exactattn.cli import main
from exactattn.call import Call
from exactattn.reference.reference import Reference
from exactattn.verify.backward import GRADS, BackwardEntry, random_d_out, verify_backward
from exactattn.verify.backward_impls import BackwardOf, FunctionBackward, load_backward
from exactattn.verify.impls import NumpyImpl
from exactattn.testing.report import backward_sections


def _backward(query, key, value, grad_out, scale, is_causal, *, use_D=True, dk_scale=None):
    """A float backward in numpy for one head (L x E), correct unless told otherwise."""
    E = query.shape[-1]
    sc = 1 / np.sqrt(query.dtype.type(E)) if scale is None else query.dtype.type(scale)
    s = (query @ key.T) * sc
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ value
    dp = grad_out @ value.T
    D = (grad_out * o).sum(axis=-1, keepdims=True) if use_D else 0
    ds = p * (dp - D)
    dk = ds.T @ query * (sc if dk_scale is None else query.dtype.type(dk_scale))
    return ds @ key * sc, dk, p.T @ grad_out


def right(query, key, value, grad_out, *, scale=None, is_causal=False):
    return _backward(query, key, value, grad_out, scale, is_causal)


def no_d(query, key, value, grad_out, *, scale=None, is_causal=False):
    """Forgets the -D_i term of dS = P (dP - D)."""
    return _backward(query, key, value, grad_out, scale, is_causal, use_D=False)


def dk_over_d_k(query, key, value, grad_out, *, scale=None, is_causal=False):
    """Scales dK by 1/d_k instead of 1/sqrt(d_k)."""
    return _backward(query, key, value, grad_out, scale, is_causal,
                     dk_scale=1 / query.shape[-1])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_correct_backward_passes(dtype):
    p = Call.random(8, 4, seed=2)
    for impl in ("numpy", right):
        report = verify_backward(impl, p.with_policy(Policy(causal=True)), dtype)
        assert report.passed and report.raised is None, report.summary()
        assert [e.index[0] for e in report.entries] == ["dQ"] * 32 + ["dK"] * 32 + ["dV"] * 32
        assert all(isinstance(e, BackwardEntry) for e in report.entries)
    first = report.entries[0]        # causal: query 0 sees one key, so dQ_0 = 0 exactly
    assert first.index == ("dQ", 0, 0, 0, 0) and first.exact.rational() == 0
    assert type(first.exact.rational()) is Fraction and first.rounded == 0.0


@pytest.mark.parametrize("wrong, grad", [(no_d, "dQ"), (dk_over_d_k, "dK")])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_wrong_backward_fails_with_its_worst_entry_shown(wrong, grad, dtype):
    p = Call.random(8, 4, seed=2)
    report = verify_backward(wrong, p.with_policy(Policy(causal=True)), dtype)
    assert not report.passed
    over = [e for e in report.entries if e.status == "over"]
    assert over and {e.index[0] for e in over} <= {"dQ", "dK"} and grad in {e.index[0] for e in over}
    if wrong is dk_over_d_k:           # everything but dK is right
        assert all(e.status == "ok" for e in report.entries if e.index[0] != "dK")
    section = backward_sections([report], worst=3)[0]
    assert section.rows[0][-1] == "over" and section.rows[0][0] in ("dQ", "dK")
    assert backward_sections([report])[-1].notes[0] == "result: FAIL"


def test_torch_autograd_passes_for_every_dtype_with_gqa_and_a_mask():
    pytest.importorskip("torch")
    p = Call.random(6, 4, seed=1, heads=4, kv_heads=2)
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        report = verify_backward("torch", p.with_policy(Policy(causal=True, alignment="bottom_right")), dtype)
        assert report.passed, (dtype, report.summary())
        assert {e.index[0] for e in report.entries} == set(GRADS)
        assert max(e.index[2] for e in report.entries if e.index[0] == "dK") == 1  # H_kv = 2
    masked = Call([[1, 0], [0, 1]], [[1, 1], [0, 2], [1, -1]], [[1], [2], [3]],
                                 [["0", "-inf", "1/2"], ["-inf", "-inf", "-inf"]],
                                 mask_kind="additive")
    report = verify_backward("torch", masked.with_policy(Policy(mask_kind="additive")), "float64",
                             d_out=[[1], [2]])
    assert report.passed, report.summary()
    ex = Reference(masked.rounded("float64")[0].with_policy(Policy(mask_kind="additive"))
                   ).gradients([[1], [2]])
    assert ex.value("dQ", 0, 0, 1, 0).rational() == 0        # the empty row: 0 (policy zero)
    assert ex.value("dK", 0, 0, 1, 0).rational() == 0        # key 1 is hidden from every query


def test_an_implementation_that_raises_or_returns_nonsense_fails_hard():
    def broken(query, key, value, grad_out):
        raise RuntimeError("no backward here")

    def nonsense(query, key, value, grad_out):
        return query
    p = Call.random(3, 2, seed=0)
    for fn in (broken, nonsense):
        report = verify_backward(fn, p.with_policy(Policy()), "float64")
        assert not report.passed and report.raised and all(e.status == "hard"
                                                           for e in report.entries)


def test_d_out_is_seeded_and_checked():
    p = Call.random(3, 2, seed=0)
    assert np.array_equal(random_d_out(p, 4), random_d_out(p, 4))
    assert not np.array_equal(random_d_out(p, 4), random_d_out(p, 5))
    from exactattn.errors import ShapeError
    with pytest.raises(ShapeError, match="d_out must be 3 x 2 like the output"):
        verify_backward("numpy", p.with_policy(Policy()), "float64", d_out=[[1, 2]])
    assert load_backward("numpy").name == BackwardOf(NumpyImpl()).name == "numpy backward"
    assert load_backward(NumpyImpl(naive=True)).name == "numpy-naive backward"
    assert isinstance(load_backward(right), FunctionBackward)


def test_the_numpy_backward_runs_the_forwards_composition():
    from exactattn.verify.adapter import make_call
    p = Call.random(4, 2, seed=3, heads=2, kv_heads=1).with_policy(Policy(sink=Fraction(1, 2),
                                                                          causal=True))
    call = make_call(p.rounded("float32")[0], "float32")
    impl, d_out = NumpyImpl(), random_d_out(p, 0)
    dq, _, dv = impl.backward(call, d_out)
    assert dq.dtype == np.float32 and dv.shape == call.value.shape
    f = impl.compose(call, *(a.astype(np.float32) for a in (call.query, call.key, call.value)))
    assert np.array_equal(f.out, impl(call))           # the forward's output is the composition's
    for pol in (Policy(softcap=Fraction(5)), Policy(rope=Rope())):   # 1 - tanh^2, R^T
        assert verify_backward(impl, p.with_policy(pol), "float32").passed


def test_cli_backward_torch_all_dtypes(capsys):
    pytest.importorskip("torch")
    argv = ["verify", "--backward", "--impl", "torch", "--dtype", "all", "--n", "5",
            "--d-k", "3", "--causal"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        assert f"(CPU autograd) in {dtype}: the 5 worst gradient entries" in out
    assert "Summary per dtype and gradient" in out and "result: PASS" in out
    assert main(argv) == 0
    assert capsys.readouterr().out == out          # the same bytes on a rerun


def test_cli_wrong_backward_fails_and_misplaced_flags_are_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "mybackward.py").write_text(textwrap.dedent('''
        import numpy as np
        def no_d(query, key, value, grad_out, *, scale=None):
            E = query.shape[-1]
            sc = 1 / np.sqrt(E) if scale is None else scale
            s = (query @ key.T) * sc
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            ds = p * (grad_out @ value.T)
            return ds @ key * sc, ds.T @ query * sc, p.T @ grad_out
    '''))
    monkeypatch.chdir(tmp_path)
    assert main(["verify", "--backward", "--impl", "mybackward:no_d", "--dtype", "float64",
                 "--n", "4", "--d-k", "2", "--worst", "1"]) == 1
    out = capsys.readouterr().out
    assert "result: FAIL" in out and " over" in out
    assert main(["verify", "--backward", "--flops"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("exactattn: error: --flops must come without --backward")
    # soft-caps, RoPE and --lse: the numpy backward runs them (1 - tanh^2, R^T, P dlse)
    for flags in (["--softcap", "2"], ["--rope", "10000"], ["--lse"]):
        assert main(["verify", "--backward", *flags]) == 0
        assert "result: PASS" in capsys.readouterr().out


# --------------------------------------------------------------------------- modifiers, search
def ignores_the_sink(query, key, value, grad_out, *, scale=None, is_causal=False, sink=None):
    """A backward that takes a sink and leaves it out of the normaliser."""
    return _backward(query, key, value, grad_out, scale, is_causal)


@pytest.mark.parametrize("impl", ["numpy", "numpy-naive", "torch"])
def test_sinks_alibi_and_windows_pass_and_a_backward_that_drops_the_sink_fails(impl):
    if impl == "torch":
        pytest.importorskip("torch")
    from exactattn.call.modifiers import Alibi
    p = Call.random(5, 3, seed=2)
    for policy in (Policy(sink=Fraction(1, 2)), Policy(alibi=Alibi(12), head=8, causal=True),
                   Policy(window=(1, 1), alibi=Alibi(4, "symmetric"))):
        rep = verify_backward(impl, p.with_policy(policy), "float32")
        assert rep.passed, (impl, policy)
    bad = verify_backward(FunctionBackward(ignores_the_sink, name="nosink"), p.with_policy(Policy(sink=Fraction(1, 2))), "float64")
    assert not bad.passed
    assert {e.index[0] for e in bad.entries if e.status == "over"} >= {"dQ", "dV"}


def test_dropout_backward_passes_with_the_problem_keep_mask():
    import json
    from exactattn.call.spec import load_problem
    keep = [[True, False, True], [True, True, False], [False, True, True]]
    doc = {"query": [[1, 0], [0, 1], [1, 1]], "key": [[1, 2], [0, 1], [2, 0]],
           "value": [[1], [2], [3]], "policy": {"dropout": {"p": "1/4", "keep": keep}}}
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "drop.json"
        path.write_text(json.dumps(doc))
        problem, policy, _, fields = load_problem(str(path), extras=True)
    assert problem.dropout_keep is not None and fields.dropout_keep == keep
    for impl in ("numpy", "torch"):
        if impl == "torch":
            pytest.importorskip("torch")
        rep = verify_backward(impl, problem.with_policy(policy), "float32")
        assert rep.passed, impl


def test_backward_search_finds_and_shrinks_a_wrong_backward():
    from exactattn.verify.backward import search_backward
    res = search_backward(FunctionBackward(no_d, name="no_d"), "float64", examples=8,
                          max_size=2, seed=0)
    assert res.score > 1000 and not res.report.passed
    assert isinstance(res.report.entries[0], BackwardEntry)
    sh = res.call.shape
    assert sh["L"] <= 2 and sh["S"] <= 2 and sh["E"] <= 2
    # the reproducer and seed give the same report again
    again = verify_backward(FunctionBackward(no_d, name="no_d"), res.call, "float64",
                            seed=0)
    assert [e.ulps for e in again.entries] == [e.ulps for e in res.report.entries]


def test_cli_backward_search_prints_a_reproducer_and_reruns_with_its_seed(tmp_path, capsys,
                                                                          monkeypatch):
    (tmp_path / "bwd.py").write_text(textwrap.dedent('''
        import numpy as np
        def no_d(query, key, value, grad_out, *, scale=None):
            sc = 1 / np.sqrt(query.shape[-1]) if scale is None else scale
            s = (query @ key.T) * sc
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            ds = p * (grad_out @ value.T)
            return ds @ key * sc, ds.T @ query * sc, p.T @ grad_out
    '''))
    monkeypatch.chdir(tmp_path)
    argv = ["verify", "--backward", "--impl", "bwd:no_d", "--search", "3", "--max-size", "1",
            "--seed", "3"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "rerun with --spec FILE --backward --seed 3" in out
    (tmp_path / "repro.json").write_text(out[out.index("\n{") + 1:])
    assert main(["verify", "--backward", "--impl", "bwd:no_d", "--spec", "repro.json",
                 "--seed", "3"]) == 1
    assert "result: FAIL" in capsys.readouterr().out
    assert main(["verify", "--impl", "numpy", "--spec", "repro.json", "--seed", "3"]) == 2
    assert "--seed must come without --spec" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_numpy_backward_differentiates_soft_caps_rope_and_the_lse(dtype, monkeypatch):
    # the numpy backward refused a soft-cap and RoPE, every built-in backward refused --lse
    from exactattn.verify import impls
    llama3 = {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
              "original_max_position_embeddings": 16}
    yarn = {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4}
    cases = [Policy(softcap="2", causal=True), Policy(rope=Rope(dims=2), sink="1/2"),
             Policy(rope=Rope(layout="interleaved", scaling=llama3), softcap="5", gqa="tile"),
             Policy(rope=Rope(scaling=yarn), window=(2, 0), query_offset=1)]
    for pol in cases:
        call = Call.random(5, 4, seed=2, heads=2, kv_heads=1, policy=pol)
        for lse in (None, "e"):
            assert verify_backward("numpy", call, dtype, lse=lse).passed, (pol, lse)

    class NoCapFactor(NumpyImpl):       # FlashAttention's soft-cap bug: dS without 1 - tanh^2
        def compose(self, call, q, k, v):
            f = super().compose(call, q, k, v)
            f.t = None if f.t is None else 0 * f.t       # the tanh taken as 0: factor 1
            return f
    assert not verify_backward(NoCapFactor(), Call.random(5, 4, seed=1, policy=cases[0]),
                               dtype).passed

    class NoLse(NumpyImpl):             # dlse dropped
        def backward(self, call, d_out, d_lse=None):
            return super().backward(call, d_out)
    assert not verify_backward(NoLse(), Call.random(5, 4, seed=1), dtype, lse="e").passed
    turned = impls.rotated                # dQ and dK left unturned (no R^T)
    monkeypatch.setattr(impls, "rotated",
                        lambda call, q, k, turn=1: (q, k) if turn == -1 else turned(call, q, k))
    assert not verify_backward("numpy", Call.random(5, 4, seed=1, policy=cases[1]),
                               dtype).passed
