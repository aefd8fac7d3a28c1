"""``exactattn model check --model llama-tiny``: rotary embeddings and GQA in the exact path.

A seeded Llama built by transformers from a ``LlamaConfig`` (4 query heads over 2 key/value
heads, rope theta 10000, causal).  The exact side applies the rotation itself (the ``half``
layout: transformers' ``rotate_half``) and maps query head h to key/value head h // 2; a
wrong pairing, base or head map would put the probabilities far off (tens of percent), not
within a few dozen float32 ULPs.
"""

from importlib.util import find_spec

import pytest

from exactattn.call.policy import Rope
from exactattn.errors import InputError
from exactattn.models.presets import rope_from_config

needs_models = pytest.mark.skipif(find_spec("torch") is None or find_spec("transformers") is None,
                                  reason="the [models] extra runs the model (torch, transformers)")


@needs_models
def test_llama_tiny_probabilities_agree_with_the_exact_rotary_gqa_heads():
    from exactattn.models.check import check_layer
    from exactattn.models.run import LLAMA_TINY, run_model
    run = run_model("llama-tiny", "the bank lent money")
    n, H = len(run.tokens), LLAMA_TINY["num_attention_heads"]
    assert (run.arch, run.causal, run.heads, run.kv_heads) == ("llama", True, H, 2)
    assert run.rope == Rope(10000, "half") and n == 19
    for k in range(LLAMA_TINY["num_hidden_layers"]):
        check = check_layer(run, k, 4)
        assert run.layer(k).kv_of == [0, 0, 1, 1]
        for h in check.heads:
            assert h.probs.entries == n * n and h.probs.hard == 0
            assert h.probs.ulps < 200 and h.probs.rel < 1e-4, (k, h.head, h.probs.ulps)
            assert h.outputs.rel < 1e-2


@needs_models
def test_without_the_rotation_the_probabilities_are_far_off():
    from exactattn.models.check import check_layer
    from exactattn.models.run import run_model
    from exactattn.call.policy import Policy
    from exactattn.models.presets import load_layer
    run = run_model("llama-tiny", "the bank lent money")
    run._layers = {0: load_layer(run.tensors, "llama", 0, heads=4, kv_heads=2,
                                 policy=Policy(causal=True), rotary="ignore")}
    check = check_layer(run, 0, 4)
    assert max(h.probs.rel for h in check.heads) > 1e-2


@pytest.mark.parametrize("cfg, message", [
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
     "rope scaling must be the plain rotary (rope_type default) in config.json (got 'llama3')"),
    ({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}},
     "rope scaling must be the plain rotary (rope_type default) in config.json (got 'linear')"),
    ({"rope_theta": 1e4, "partial_rotary_factor": 0.5},
     "partial_rotary_factor must be 1 in config.json (got 0.5)")])
def test_rotary_settings_it_does_not_implement_are_refused_by_name(cfg, message):
    with pytest.raises(InputError) as e:
        rope_from_config(cfg)
    assert str(e.value).startswith(message)


def test_rotary_settings_are_read_exactly():
    assert rope_from_config({"rope_theta": 500000.0}) == Rope(500000, "half")
    assert rope_from_config({}) == Rope(10000, "half")
    assert rope_from_config({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"},
                             "rope_scaling": None}) == Rope(10 ** 6, "half")
