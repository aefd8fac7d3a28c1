"""``exactattn model check --model llama-tiny``: rotary embeddings and GQA in the exact path.

A seeded Llama built by transformers from a ``LlamaConfig`` (4 query heads over 2 key/value
heads, rope theta 10000, causal).  The exact side applies the rotation itself (the ``half``
layout: transformers' ``rotate_half``) and maps query head h to key/value head h // 2; a
wrong pairing, base or head map would put the probabilities far off (tens of percent), not
within a few dozen float32 ULPs.  The verdict judges the attention operation on the model's
own float q, k, v; the drift of its float projections is reported apart.
"""

import json
import random
from importlib.util import find_spec

import numpy as np
import pytest

from exactattn.call.policy import Rope
from exactattn.errors import InputError
from exactattn.models.presets import rope_from_config

needs_models = pytest.mark.skipif(find_spec("torch") is None or find_spec("transformers") is None,
                                  reason="the [models] extra runs the model (torch, transformers)")
TEXT = "the bank lent money"          # 19 UTF-8 bytes: 19 tokens of llama-tiny


@pytest.fixture(scope="module")
def eager():
    from exactattn.models.run import run_model
    return run_model("llama-tiny", TEXT)


@pytest.mark.parametrize("seed", range(8))
def test_the_oracle_agrees_on_llama_calls(seed):
    """Rotary (half layout) + GQA + causal + query offsets: the oracle against every path."""
    from oracle_cases import _llama
    from oracle_paths import compare
    case = _llama(random.Random(seed).choice)
    assert case["rope"]["layout"] == "half" and case["causal"] is True
    assert len(case["query"][0]) > len(case["key"][0])
    rep = compare(case, (6, 12))
    assert not rep.failed, rep.message()
    assert rep.checked > 0


@needs_models
def test_llama_tiny_verdict_on_the_models_own_q_k_v(eager):
    from exactattn.models.check import check_layer
    from exactattn.models.run import LLAMA_TINY
    from exactattn.models.report import result_line
    run = eager
    n, H = len(run.tokens), LLAMA_TINY["num_attention_heads"]
    assert (run.arch, run.causal, run.heads, run.kv_heads) == ("llama", True, H, 2)
    assert run.rope == Rope(10000, "half") and n == 19
    cap = run.layers[0]
    assert (cap.q.shape, cap.k.shape, cap.v.shape) == ((n, 64), (n, 32), (n, 32))
    assert cap.q.dtype == np.float32
    checks = []
    for k in range(LLAMA_TINY["num_hidden_layers"]):
        check = check_layer(run, k, 4)
        checks.append(check)
        assert run.layer(k).kv_of == [0, 0, 1, 1]
        assert check.over == 0 and list(check.drift) == ["q", "k", "v"]
        assert [d.count for d in check.drift.values()] == [n * 64, n * 32, n * 32]
        # the float projections drift: most entries are not the correctly rounded projection
        assert all(type(d.max_ulps) is int and d.max_ulps > 0
                   and 0 < d.count - d.histogram.get(0, 0) <= d.count for d in check.drift.values())
        for h in check.heads:
            assert h.probs.count == n * n and h.probs.hard == 0 and h.probs.over == 0
            assert h.probs.max_ulps < 200 and h.probs.max_rel < 1e-5, (k, h.head, h.probs.max_ulps)
            assert h.outputs.over == 0 and h.outputs.max_terms < check.budget
            assert h.chain.count == n * 16 and h.chain.max_rel < 1e-2
    assert result_line(checks) == "result: PASS"
    # one head's outputs moved by 1e-3: that head, and only it, goes over its tolerance
    cap.before[:, 16:32] += np.float32(1e-3)
    try:
        bad = check_layer(run, 0, 4)
    finally:
        cap.before[:, 16:32] -= np.float32(1e-3)
    assert [h.over for h in bad.heads] == [False, True, False, False]
    assert result_line([bad, checks[1]]) == "result: FAIL (1 of 8 heads over their tolerance)"


@needs_models
@pytest.mark.slow
def test_without_the_rotation_the_probabilities_are_far_off(eager):
    from exactattn.models.check import check_layer
    run = eager
    saved, run.rope = run.rope, None          # the exact side without the rotation
    try:
        check = check_layer(run, 0, 4)
    finally:
        run.rope = saved
    assert max(h.probs.max_rel for h in check.heads) > 1e-2
    assert check.over == 4


@needs_models
@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_check_command_passes_against_eager_and_sdpa(cli, implementation):
    status, out, err = cli("model", "check", "--model", "llama-tiny", "--text", TEXT,
                           "--attn-implementation", implementation)
    assert status == 0, err
    assert out.rstrip("\n").splitlines()[-1] == "result: PASS"
    assert "rope(theta=10000, half)" in out and "2 layers of 4 heads (2 key/value)" in out
    assert "llama-tiny: the model's float projections vs exact" in out
    assert ("attention probabilities, float32" in out) == (implementation == "eager")
    status, out, err = cli("model", "check", "--model", "llama-tiny", "--text", TEXT,
                           "--attn-implementation", implementation, "--format", "json")
    doc = json.loads(out)
    assert status == 0 and doc["result"] == "result: PASS"
    summary = next(t for t in doc["tables"] if t["name"] == "model/summary")
    assert (summary["data"]["heads"], summary["data"]["over"], summary["data"]["passed"]) == \
        (8, 0, True)
    drift = next(t for t in doc["tables"] if t["name"] == "model/drift")["data"]["layers"]
    assert [sorted(d["projections"]) for d in drift] == [["k", "q", "v"]] * 2


@needs_models
@pytest.mark.slow
def test_saved_inputs_walk_through_with_their_token_texts(cli, tmp_path, eager):
    """--save-inputs writes tokens.json beside the arrays; walkthrough reads the texts back;
    the weights and config.json that transformers saves give the same rotary head."""
    import torch
    from safetensors.torch import save_file
    from exactattn.models.run import LLAMA_TINY
    import transformers
    status, out, err = cli("model", "check", "--model", "llama-tiny", "--text", TEXT,
                           "--save-inputs", str(tmp_path / "in"))
    assert status == 0, err
    doc = json.loads((tmp_path / "in" / "tokens.json").read_text())
    assert doc["tokens"] == list(TEXT) and doc["ids"] == list(TEXT.encode())
    cfg = dict(LLAMA_TINY)
    torch.manual_seed(cfg.pop("seed"))
    model = transformers.LlamaModel(transformers.LlamaConfig(**cfg))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    model.config.to_json_file(str(tmp_path / "config.json"))
    base = ["--weights", str(tmp_path / "model.safetensors"), "--arch", "llama", "--layer", "1",
            "--head", "2", "--tokens", str(tmp_path / "in" / "layer1.npy")]
    status, out, err = cli("model", "row", *base)
    assert status == 0, err
    rows = [ln.split() for ln in out.splitlines() if ln[:1].isdigit()]
    assert [r[:4] for r in rows[:3]] == [["1", "116", "1", "t"], ["2", "104", "1", "h"],
                                        ["3", "101", "1", "e"]]
    # a token list of another length: one line, exit 2
    (tmp_path / "in" / "tokens.json").write_text(json.dumps({"tokens": ["a", "b"]}))
    status, out, err = cli("model", "row", *base)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "must name the 19 token rows of the tokens file (got 2 texts)" in err
    # a malformed rope scaling: refused in one line naming the missing key
    cfg_doc = json.loads((tmp_path / "config.json").read_text())
    cfg_doc["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(cfg_doc))
    status, out, err = cli("model", "row", *base)
    assert status == 2 and len(err.strip().splitlines()) == 1 and \
        "rope scaling llama3 needs low_freq_factor" in err


@pytest.mark.parametrize("cfg, message", [
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
     "rope scaling llama3 needs factor; add it (its keys: factor, low_freq_factor, "
     "high_freq_factor, original_max_position_embeddings) in config.json"),
    ({"rope_theta": 1e4, "rope_scaling": {"type": "longrope", "factor": 2.0}},
     "rope scaling rope_type must be one of default, linear, dynamic, llama3, yarn, inv_freq "
     "(got 'longrope') in config.json"),
    ({"rope_theta": 1e4, "partial_rotary_factor": 0.5},
     "partial_rotary_factor must be a number in (0, 1] with head_dim (or hidden_size and "
     "num_attention_heads) in config.json (got 0.5, head width None)"),
    ({"head_dim": 10, "partial_rotary_factor": 0.5},
     "partial_rotary_factor must turn an even number of entries in config.json (got 0.5 x "
     "head_dim 10 = 5)"),
    ({"head_dim": 8, "partial_rotary_factor": "half"},
     "partial_rotary_factor must be a number in (0, 1]")])
def test_rotary_settings_it_does_not_implement_are_refused_by_name(cfg, message):
    with pytest.raises(InputError) as e:
        rope_from_config(cfg)
    assert str(e.value).startswith(message)


def test_rotary_settings_are_read_exactly():
    # partial rotary (GPT-NeoX, Phi): transformers turns int(head_dim * factor) entries
    assert rope_from_config({"head_dim": 64, "partial_rotary_factor": 0.25}) == Rope(10000, "half", 16)
    assert rope_from_config({"hidden_size": 256, "num_attention_heads": 4,
                             "rope_parameters": {"partial_rotary_factor": 0.5}}).dims == 32
    assert rope_from_config({"head_dim": 64, "partial_rotary_factor": 1.0}).dims is None
    assert rope_from_config({"rope_theta": 500000.0}) == Rope(500000, "half")
    # a scaling (transformers' keys; the old key "type" too), its floats read as written
    assert rope_from_config({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.5}}) \
        == Rope(10000, "half", None, {"rope_type": "linear", "factor": "5/2"})
    assert rope_from_config({"max_position_embeddings": 64, "rope_parameters": {
        "rope_type": "dynamic", "factor": 2.0}}).scaling.params == \
        (("factor", 2), ("max_position_embeddings", 64))
    assert rope_from_config({}) == Rope(10000, "half")
    assert rope_from_config({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"},
                             "rope_scaling": None}) == Rope(10 ** 6, "half")
