"""--impl flex: torch's flex_attention on the CPU, judged against the exact answer."""
import pytest

pytest.importorskip("torch")
from exactattn.call import Call, Policy  # noqa: E402
from exactattn.call.modifiers import Alibi  # noqa: E402
from exactattn.errors import InputError  # noqa: E402
from exactattn.verify import verify  # noqa: E402
from exactattn.verify.impls import load_impl  # noqa: E402


def test_flex_forward_causal_softcap_passes():
    call = Call.random(seed=1, policy=Policy(causal=True, softcap="5"))
    rep = verify(load_impl("flex"), call, "float32")
    assert rep.passed is True


def test_flex_refuses_a_sink_by_name():
    call = Call.random(seed=1, policy=Policy(sink="0"))
    with pytest.raises(InputError, match="no sink or dropout for impl flex"):
        verify(load_impl("flex"), call, "float32")


# ------------------------------------------------- your score_mod / mask_mod against the policy
import json  # noqa: E402

import torch  # noqa: E402

from exactattn.cli import main  # noqa: E402

MODS = '''import torch
def softcap(score, b, h, q_idx, kv_idx):
    return 5 * torch.tanh(score / 5)
def softcap_nodiv(score, b, h, q_idx, kv_idx):
    return 5 * torch.tanh(score)
def alibi(score, b, h, q_idx, kv_idx):          # slopes 2^-(8/H)(h+1), H = 2: 1/16, 1/256
    return score - torch.exp2(-4.0 * (h + 1)) * (q_idx - kv_idx).abs()
def alibi_wrong_sign(score, b, h, q_idx, kv_idx):
    return score + torch.exp2(-4.0 * (h + 1)) * (q_idx - kv_idx).abs()
def window(b, h, q_idx, kv_idx):                # causal, the query and the 2 keys before it
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 2)
def window_off_by_one(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 2)
def boom(score, b, h, q_idx, kv_idx):
    return score / 0 if score is None else 1 / 0
def pair(score, b, h, q_idx, kv_idx):
    return torch.stack([score, score])
'''


@pytest.fixture
def mods(tmp_path, monkeypatch):
    (tmp_path / "flexmods_t.py").write_text(MODS)
    monkeypatch.chdir(tmp_path)


def run_json(capsys, *argv):
    rc = main(["verify", "--impl", "flex", "--n", "6", "--d-k", "4", "--format", "json",
               "--no-progress", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out else None), err


def _worst(doc):
    return next(t for t in doc["tables"] if "worst" in t["title"])["rows"][0]


def test_a_right_softcap_score_mod_passes(mods, capsys):
    rc, doc, err = run_json(capsys, "--score-mod", "flexmods_t:softcap", "--softcap", "5")
    assert (rc, err) == (0, "") and doc["passed"] is True
    assert doc["impl"].endswith("flex_attention (CPU) with score_mod flexmods_t:softcap")


def test_a_softcap_without_the_division_fails_with_the_exact_value(mods, capsys):
    rc, doc, err = run_json(capsys, "--score-mod", "flexmods_t:softcap_nodiv", "--softcap", "5",
                            "--worst", "1")
    assert (rc, err) == (1, "") and doc["passed"] is False
    row = _worst(doc)
    assert row[0] == "0,0,2,2" and row[1] == "5.13003040971e-02" and row[3] == "-0.4762603"
    assert row[-2:] == ["over", "103"]      # the proved tolerance of a soft-capped float32 kernel


def test_alibi_score_mod_right_passes_wrong_sign_fails(mods, capsys):
    argv = ("--heads", "2", "--alibi", "2", "--causal")
    rc, doc, _ = run_json(capsys, "--score-mod", "flexmods_t:alibi", *argv)
    assert rc == 0 and doc["passed"] is True
    rc, doc, _ = run_json(capsys, "--score-mod", "flexmods_t:alibi_wrong_sign", *argv, "--worst", "1")
    assert rc == 1 and doc["passed"] is False and _worst(doc)[-1] == "over"


def test_sliding_window_mask_mod_right_passes_off_by_one_fails(mods, capsys):
    argv = ("--causal", "--window", "2,0")
    rc, doc, _ = run_json(capsys, "--mask-mod", "flexmods_t:window", *argv)
    assert rc == 0 and doc["passed"] is True
    rc, doc, _ = run_json(capsys, "--mask-mod", "flexmods_t:window_off_by_one", *argv)
    assert rc == 1 and doc["passed"] is False


def test_a_score_mod_that_raises_or_returns_a_wrong_shape_is_a_hard_failure(mods, capsys):
    for fn, line in (("boom", "raised ZeroDivisionError: division by zero (in score_mod "
                              "flexmods_t:boom)"),
                     ("pair", "raised ValueError: score_mod flexmods_t:pair must return one "
                              "score per (b, h, q_idx, kv_idx) (got a tensor of shape (2,) for "
                              "each)")):
        rc = main(["verify", "--impl", "flex", "--n", "3", "--d-k", "2", "--no-progress",
                   "--score-mod", f"flexmods_t:{fn}"])
        out, err = capsys.readouterr()
        assert rc == 1 and err == "" and "Traceback" not in out
        assert f"with score_mod flexmods_t:{fn} {line}; every output counts as failed" in \
            " ".join(out.split())


def test_a_mask_mod_returning_numbers_is_a_hard_failure():
    impl = load_impl("flex", mask_mod=lambda b, h, q, kv: (q >= kv).float())
    rep = verify(impl, Call.random(3, 2, seed=1, policy=Policy(causal=True)), "float32")
    assert rep.passed is False and rep.raised == (
        "TypeError: mask_mod <lambda> must return booleans, True = attend (got float32); "
        "compare, e.g. q_idx >= kv_idx")


def test_the_policy_visibility_holds_under_a_users_score_mod():
    """A plain score_mod leaves the policy's causal rule to a block mask: the check passes."""
    impl = load_impl("flex", score_mod=lambda s, b, h, q, kv: s)
    rep = verify(impl, Call.random(5, 4, seed=2, policy=Policy(causal=True)), "float32")
    assert rep.passed is True


def test_flex_backward_on_the_cpu_is_torchs_refusal_reported_as_a_hard_failure():
    """torch 2.13 runs no FlexAttention backward on the CPU: every gradient fails hard, said."""
    from exactattn.verify.backward import verify_backward
    from exactattn.verify.backward_impls import load_backward
    impl = load_impl("flex", mask_mod=lambda b, h, q, kv: q >= kv)
    rep = verify_backward(load_backward(impl), Call.random(4, 2, seed=3,
                                                           policy=Policy(causal=True)),
                          "float64")
    assert rep.passed is False and rep.raised.startswith(
        "NotImplementedError: FlexAttention does not support backward on CPU.")
    assert [e.status for e in rep.entries] == ["hard"] * 24


@pytest.mark.parametrize("argv, start", [
    (["--impl", "torch", "--score-mod", "m:f"], "--score-mod must come with --impl flex (got "
                                                "--impl torch)"),
    (["--mask-mod", "m:f"], "--mask-mod must come with --impl flex (got --impl numpy)"),
    (["--backend", "math"], "--backend must come with --impl torch (got --impl numpy)"),
    (["--device", "cuda"], "--device must come with --impl torch or --impl flex or --impl "
                           "flash-attn (got --impl numpy)"),
    (["--impl", "flex", "--score-mod", "no_such_mods_t:f"],
     "score_mod module 'no_such_mods_t' must be importable"),
    (["--impl", "flex", "--score-mod", "math:sqrt"],
     "score_mod math:sqrt must take (score, b, h, q_idx, kv_idx)"),
    (["--impl", "torch", "--backend", "efficient"],
     "backend efficient: torch 2.13.0+cpu cannot select SDPBackend.EFFICIENT_ATTENTION on CPU "
     "for any dtype"),
    (["--impl", "torch", "--backend", "cudnn"], "backend cudnn: torch 2.13.0+cpu cannot select "
                                                "SDPBackend.CUDNN_ATTENTION on CPU"),
    (["--impl", "torch", "--backend", "math", "--softcap", "1"],
     "backend math must run a call SDPA takes as it is (got softcap"),
])
def test_options_that_cannot_apply_are_refused_in_one_line(capsys, argv, start):
    rc = main(["verify", "--n", "2", "--d-k", "2", "--no-progress", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("exactattn: error: " + start), err


no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="torch.cuda.is_available() is false on this machine")


@no_cuda
@pytest.mark.parametrize("impl", ["torch", "flex", "flash-attn"])
def test_cuda_is_refused_without_a_gpu(capsys, impl):
    extra = [] if impl == "flash-attn" else ["--device", "cuda"]
    rc = main(["verify", "--impl", impl, *extra, "--n", "2", "--d-k", "2", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err == (
        f"exactattn: error: device cuda: torch.cuda.is_available() is false on this machine "
        f"(torch {torch.__version__}); run on a machine with a CUDA GPU, or use device cpu\n")


def test_math_and_flash_backends_run_on_the_cpu():
    call = Call.random(6, 4, seed=1, heads=4, kv_heads=2, policy=Policy(causal=True))
    for backend in ("math", "flash"):
        impl = load_impl("torch", backend=backend)
        assert impl.name.endswith(f"scaled_dot_product_attention [{backend}] (CPU)")
        assert verify(impl, call, "bfloat16").passed is True


@needs_cuda
@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn", "math"])
def test_cuda_backends_pass_forward_and_backward(backend):
    from exactattn.verify.backward import verify_backward
    from exactattn.verify.backward_impls import load_backward
    call = Call.random(64, 64, seed=1, heads=4, kv_heads=2, policy=Policy(causal=True))
    impl = load_impl("torch", device="cuda", backend=backend)
    for dt in impl.dtypes:
        assert verify(impl, call, dt).passed is True
        assert verify_backward(load_backward(impl), call, dt).passed is True


@needs_cuda
def test_cuda_flex_passes():
    call = Call.random(64, 64, seed=1, heads=4, kv_heads=2, policy=Policy(causal=True, softcap="5"))
    from exactattn.verify.backward import verify_backward
    from exactattn.verify.backward_impls import load_backward
    impl = load_impl("flex", device="cuda", mask_mod=lambda b, h, q, kv: q >= kv)
    assert verify(impl, call, "bfloat16").passed is True
    assert verify_backward(load_backward(impl), call, "bfloat16").passed is True


def test_one_exact_reference_serves_every_backend_and_dtype():
    """Entries that are floats of every dtype: one Reference, the same verdicts as fresh ones."""
    from exactattn.reference.reference import Reference
    q = [[0.5, -1.25], [2, 0.75], [-0.375, 1]]
    call = Call(q, q, [[1, 2], [-0.5, 0.25], [3, -1]], floats="exact", policy=Policy(causal=True))
    ref = Reference(call)
    for backend in ("math", "flash"):
        impl = load_impl("torch", backend=backend)
        for dt in ("float32", "float16", "bfloat16"):
            shared, fresh = verify(impl, call, dt, reference=ref), verify(impl, call, dt)
            assert shared.reference is ref and fresh.reference is not ref
            assert [(e.rounded, e.got, e.ulps) for e in shared.entries] == \
                [(e.rounded, e.got, e.ulps) for e in fresh.entries]
    # the bulk judge decides most entries from floats; what the exact side encloses, once
    assert len(getattr(ref, "_block_balls", {})) <= 1
    with pytest.raises(InputError, match="reference must be Reference"):
        verify("numpy", Call.random(2, 2), "float32", reference=ref)


@pytest.mark.parametrize("policy, got", [
    (Policy(), None),
    (Policy(causal=True), None),
    (Policy(window=(2, 0), causal=True), "window"),
    (Policy(alibi=Alibi(8)), "alibi"),
    (Policy(sink="0"), "sink"),
    (Policy(causal=True, alignment="top_left"), "top_left causal with L != S"),
])
def test_flash_attn_refuses_what_its_adapter_cannot_run_by_name(policy, got):
    # the refusal runs before flash_attn is imported, so it is checked without a GPU; every
    # field of the capability table is read from the call's policy (FloatCall has no window,
    # query_offset or alibi attribute of its own)
    from exactattn.verify.adapter import make_call
    from exactattn.verify.impls import FlashAttnImpl
    n_keys = 3 if got == "top_left causal with L != S" else 2
    call = make_call(Call.random(2, 2, seed=1, n_keys=n_keys, policy=policy), "float16")
    impl = object.__new__(FlashAttnImpl)
    if got is None:
        assert impl.refuse(call) is None
        return
    with pytest.raises(InputError) as e:
        impl.refuse(call)
    assert str(e.value) == (
        f"call must have no mask, window, query_offset, alibi, sink, dropout or top_left causal "
        f"with L != S for impl flash-attn (got {got}); use --impl torch or flex")
