"""Real heads from files: readers, presets (bert, gpt2, llama, a name map), exact vs float."""

import json
from fractions import Fraction as F

import numpy as np
import pytest

from exactattn.errors import InputError
from exactattn.engines.layer import attend_layer
from exactattn.models import load_layer, read_tensors
from exactattn.models.weights import exact_matrix

torch = pytest.importorskip("torch", reason="torch builds the float references (nn.Linear)")

D, H, DH = 4, 2, 2        # square projections: a transposed load passes every shape check
X = np.array([[0.5, -1.0, 0.25, 2.0], [1.0, 0.0, -0.5, 0.75], [-0.25, 1.5, 1.0, 0.0]])


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _attention(Q, K, V, kv_of, keep=None):
    """Float64 heads (torch), concatenated: Q n x H*DH, K/V n x H_kv*DH."""
    outs = []
    for a, g in enumerate(kv_of):
        q, k, v = Q[:, a * DH:(a + 1) * DH], K[:, g * DH:(g + 1) * DH], V[:, g * DH:(g + 1) * DH]
        s = q @ k.T / DH ** 0.5
        if keep is not None:
            s = s.masked_fill(~torch.tensor(keep)[None, :], float("-inf"))
        outs.append(torch.softmax(s, dim=-1) @ v)
    return torch.cat(outs, dim=1)


def _linear(w, b):
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=b is not None, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(w, dtype=torch.float64))
        if b is not None:
            lin.bias.copy_(torch.tensor(b, dtype=torch.float64))
    return lin


def _close(run, want):
    got = np.array([[float(v) for v in r] for r in run.outputs])
    assert np.allclose(got, np.asarray(want), rtol=1e-12, atol=1e-12), (got, want)


def _save(path, tensors):
    if str(path).endswith(".safetensors"):
        from safetensors.numpy import save_file
        save_file(tensors, str(path))
    else:
        np.savez(path, **tensors)
    return read_tensors(str(path))


@pytest.fixture(params=["safetensors", "npz"])
def suffix(request):
    if request.param == "safetensors":
        pytest.importorskip("safetensors", reason="the [models] extra reads .safetensors")
    return request.param


def test_bert_slots_layout_against_nn_linear(tmp_path, suffix):
    rng = np.random.default_rng(0)
    p = "bert.encoder.layer.1.attention."
    t = {p + "self." + n + ".weight": _f32(rng, D, D) for n in ("query", "key", "value")}
    t |= {p + "self." + n + ".bias": _f32(rng, D) for n in ("query", "key", "value")}
    t |= {p + "output.dense.weight": _f32(rng, D, D), p + "output.dense.bias": _f32(rng, D)}
    tensors = _save(tmp_path / f"bert.{suffix}", t)
    layer = load_layer(tensors, "bert", 1, heads=H)
    x = torch.tensor(X)
    q, k, v = (_linear(t[p + f"self.{n}.weight"], t[p + f"self.{n}.bias"])
                  for n in ("query", "key", "value"))
    o = _linear(t[p + "output.dense.weight"], t[p + "output.dense.bias"])
    with torch.no_grad():
        want = o(_attention(q(x), k(x), v(x), [0, 1]))
    run = attend_layer(layer, exact_matrix(X))
    _close(run, want)
    # the same square weights read transposed pass the shape checks but not the reference
    wrong = load_layer(tensors, dict(q=p + "self.query.weight", k=p + "self.key.weight",
                                     v=p + "self.value.weight", o=p + "output.dense.weight",
                                     q_bias=p + "self.query.bias",
                                     k_bias=p + "self.key.bias",
                                     v_bias=p + "self.value.bias",
                                     o_bias=p + "output.dense.bias", layout="rows"), 1, heads=H)
    got = np.array([[float(e) for e in r] for r in attend_layer(wrong, exact_matrix(X)).outputs])
    assert not np.allclose(got, want.numpy(), atol=1e-3)
    # the weights are their float32 values exactly (dyadic rationals)
    w = t[p + "self.query.weight"]
    assert layer.heads[1].W_Q[0][2] == F(float(w[2, 2]))
    assert layer.heads[1].W_Q[0][2].denominator & (layer.heads[1].W_Q[0][2].denominator - 1) == 0
    assert tensors.stored() == "float32"


def test_gpt2_fused_rows_layout_against_conv1d(tmp_path, suffix):
    rng = np.random.default_rng(1)
    t = {"transformer.h.0.attn.c_attn.weight": _f32(rng, D, 3 * D),
         "transformer.h.0.attn.c_attn.bias": _f32(rng, 3 * D),
         "transformer.h.0.attn.c_proj.weight": _f32(rng, D, D),
         "transformer.h.0.attn.c_proj.bias": _f32(rng, D)}
    tensors = _save(tmp_path / f"gpt2.{suffix}", t)
    layer = load_layer(tensors, "gpt2", 0, heads=H)
    assert layer.heads[0].layout == "rows"
    x = torch.tensor(X)
    w, b = (torch.tensor(t["transformer.h.0.attn.c_attn." + n], dtype=torch.float64)
            for n in ("weight", "bias"))
    qkv = x @ w + b                 # Conv1D: in x out
    Q, K, V = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
    wo, bo = (torch.tensor(t["transformer.h.0.attn.c_proj." + n], dtype=torch.float64)
              for n in ("weight", "bias"))
    _close(attend_layer(layer, exact_matrix(X)), _attention(Q, K, V, [0, 1]) @ wo + bo)


def test_llama_gqa_refuses_rotary_and_matches_without_it(tmp_path, suffix):
    rng = np.random.default_rng(2)
    p = "model.layers.0.self_attn."
    t = {p + "q_proj.weight": _f32(rng, D, D), p + "k_proj.weight": _f32(rng, DH, D),
         p + "v_proj.weight": _f32(rng, DH, D), p + "o_proj.weight": _f32(rng, D, D)}
    tensors = _save(tmp_path / f"llama.{suffix}", t)
    with pytest.raises(InputError, match="rotary position embeddings must be applied"):
        load_layer(tensors, "llama", 0, heads=H, kv_heads=1)
    layer = load_layer(tensors, "llama", 0, heads=H, kv_heads=1, rotary="ignore")
    assert layer.kv_of == [0, 0] and layer.heads[0].b_Q is None
    x = torch.tensor(X)
    Q, K, V, O = (_linear(t[p + n + "_proj.weight"], None) for n in "qkvo")
    keep = [True, True, False]
    with torch.no_grad():
        want = O(_attention(Q(x), K(x), V(x), [0, 0], keep=keep))
    from exactattn.engines.layer import padding_mask
    _close(attend_layer(layer, exact_matrix(X), mask=padding_mask(keep)), want)


def test_heads_from_config_and_wrong_names_listed(tmp_path):
    rng = np.random.default_rng(3)
    t = {"h.0.attn.c_attn.weight": _f32(rng, D, 3 * D),
         "h.0.attn.c_proj.weight": _f32(rng, D, D)}
    np.savez(tmp_path / "w.npz", **t)
    (tmp_path / "config.json").write_text(json.dumps({"n_head": 2}))
    tensors = read_tensors(str(tmp_path / "w.npz"))
    assert len(load_layer(tensors, "gpt2", 0).heads) == 2
    with pytest.raises(InputError, match=r"tensor must be named h\.3\.attn\.c_attn\.weight .*"
                                         r"names there: h\.0\.attn\.c_attn\.weight"):
        load_layer(tensors, "gpt2", 3)
    with pytest.raises(InputError, match="arch must be one of bert, gpt2, llama"):
        load_layer(tensors, "t5", 0)
    with pytest.raises(InputError, match=r"arch must be one of .* \(got \['q'\]\)"):
        load_layer(tensors, ["q"], 0)       # a JSON name map that is not an object
    with pytest.raises(InputError, match=r"name map fields must be among fused, .* \(got kk\)"):
        load_layer(tensors, {"fused": "h.{layer}.attn.c_attn.weight", "kk": 1}, 0)


def test_readers_keep_exact_binary_values(tmp_path):
    a = np.array([[0.1, -3.5], [1e-30, 2.0]], dtype=np.float32)
    np.save(tmp_path / "w.npy", a)
    t = read_tensors(str(tmp_path / "w.npy"))
    assert exact_matrix(t["w"]) == [[F(float(v)) for v in r] for r in a]
    assert exact_matrix(t["w"])[0][0] == F(13421773, 2 ** 27)
    half = np.array([[0.1, 65504.0]], dtype=np.float16)
    np.savez(tmp_path / "h.npz", h=half)
    assert exact_matrix(read_tensors(str(tmp_path / "h.npz"))["h"])[0][0] == F(1638, 2 ** 14)
    torch.save({"w": torch.tensor([[0.1]], dtype=torch.bfloat16)}, tmp_path / "s.pt")
    t = read_tensors(str(tmp_path / "s.pt"))
    assert exact_matrix(t["w"]) == [[F(205, 2048)]] and t.stored() == "bfloat16"
    with pytest.raises(InputError, match="weights must name a file that exists"):
        read_tensors(str(tmp_path / "missing.safetensors"))


def test_safetensors_bfloat16_is_read_bit_for_bit(tmp_path):
    pytest.importorskip("safetensors", reason="the [models] extra reads .safetensors")
    from safetensors.torch import save_file
    w = torch.tensor([[0.1, -2.75e-3], [3.0e38, 1.0]], dtype=torch.bfloat16)
    save_file({"w": w}, str(tmp_path / "b.safetensors"))
    t = read_tensors(str(tmp_path / "b.safetensors"))
    assert t.dtypes["w"] == "bfloat16"
    assert exact_matrix(t["w"]) == [[F(float(v)) for v in r] for r in w.float()]


def test_malformed_or_unreadable_safetensors_are_refused_in_one_line(tmp_path):
    """The safetensors package checks the header (here: two tensors over the same bytes, which a
    hand-read header would return as equal weights); a float8 tensor numpy cannot hold."""
    pytest.importorskip("safetensors", reason="the [models] extra reads .safetensors")
    from safetensors.torch import save_file
    save_file({"q": torch.ones(2), "k": torch.zeros(2)}, str(tmp_path / "g.safetensors"))
    raw = (tmp_path / "g.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    header["k"]["data_offsets"] = header["q"]["data_offsets"]
    text = json.dumps(header, separators=(",", ":")).encode().ljust(size)
    (tmp_path / "bad.safetensors").write_bytes(raw[:8] + text + raw[8 + size:])
    with pytest.raises(InputError, match=r"must be a valid \.safetensors file \(.*invalid offset"):
        read_tensors(str(tmp_path / "bad.safetensors"))
    save_file({"w": torch.ones(2, dtype=torch.float8_e4m3fn)}, str(tmp_path / "f8.safetensors"))
    with pytest.raises(InputError, match=r"^tensor w must be a float or integer type numpy reads "
                                         r"\(got F8_E4M3\)$"):
        read_tensors(str(tmp_path / "f8.safetensors"))


def test_model_command_tables_and_layer(tmp_path, capsys):
    from exactattn.cli import main
    rng = np.random.default_rng(4)
    t = {"h.0.attn.c_attn.weight": _f32(rng, D, 3 * D), "h.0.attn.c_attn.bias": _f32(rng, 3 * D),
         "h.0.attn.c_proj.weight": _f32(rng, D, D)}
    np.savez(tmp_path / "g.npz", **t)
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    base = ["--weights", str(tmp_path / "g.npz"), "--arch", "gpt2", "--heads", "2",
            "--tokens", str(tmp_path / "x.npy")]
    assert main(["model", "walkthrough", "--head", "1"] + base) == 0
    out = capsys.readouterr().out
    assert "Multiply-adds" in out and "dyadic rationals" in out
    assert main(["model", "layer", "--format", "json"] + base) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layer"] == 0 and "float32" in doc["exactness"]
    assert main(["model", "layer", "--head", "2"] + base) == 2
    assert "head must be from 0 to 1 in layer 0 (got 2)" in capsys.readouterr().err



SPEC = {"tokens": [{"text": "a", "x": [1, "1/2"]}, {"text": "b", "x": [0, 2]}],
        "W_Q": [[1, 0], [0, 1]], "W_K": [[0, 1], [1, 0]], "W_V": [[1, 0], [0, 1]],
        "b_Q": ["1/2", 0.1], "b_V": [1, "-3/4"], "divisor": "sqrt(2)"}


@pytest.mark.parametrize("layout", ["slots", "rows"])
def test_spec_biases_are_exact_in_both_layouts(layout):
    from exactattn.engines.spec import loads
    ex = loads(json.dumps(dict(SPEC, layout=layout)))
    assert ex.head.b_Q == [F(1, 2), F(1, 10)] and ex.head.b_K is None
    assert ex.head.b_V == [F(1), F(-3, 4)]
    assert all(type(v) is F for v in ex.head.b_Q + ex.head.b_V)
    # 0.1 in the file is exactly 1/10 (read from its text), never a binary float
    toml = "\n".join(["layout = '%s'" % layout, "b_K = [0.1, '2']",
                      "W_Q = [[1, 0], [0, 1]]", "W_K = [[1, 0], [0, 1]]", "W_V = [[1, 0], [0, 1]]",
                      "[[tokens]]", "x = [1, 2]"])
    head = loads(toml, fmt="toml").head
    assert head.b_K == [F(1, 10), F(2)] and type(head.b_K[1]) is F


def test_spec_bias_errors_name_the_key():
    from exactattn.errors import ShapeError, SpecError
    from exactattn.engines.spec import loads
    with pytest.raises(ShapeError, match="b_Q must have 2 numbers"):
        loads(json.dumps(dict(SPEC, b_Q=[1, 2, 3])))
    with pytest.raises(SpecError, match="b_V must be a list of numbers \\(got null\\)"):
        loads(json.dumps(dict(SPEC, b_V=None)))


def _tables(spec: dict, mode: str):
    from exactattn.engines.spec import loads
    from exactattn.present.tables import attend_example, build
    ex = loads(json.dumps(spec))
    return build(mode, ex, attend_example(ex))


def test_bias_rows_in_the_weights_and_projection_tables():
    rows_layout = _tables(dict(SPEC, layout="rows"), "weights")
    q, k, v = rows_layout
    assert q.rows[-1] == ["+ b_Q", "1/2", "1/10"] and q.columns == ["input", "slot 1", "slot 2"]
    assert k.rows == [["1", "0", "1"], ["2", "1", "0"]] and "b_K" not in k.data
    assert v.rows[-1] == ["+ b_V", "1", "-3/4"] and v.data["b_V"] == ["1", "-3/4"]
    assert "v = x @ W_V + b_V" in v.notes[-2]
    q, _, _ = _tables(dict(SPEC, layout="slots"), "weights")
    assert q.columns == ["slot", "x1", "x2", "+ b_Q"]
    assert q.rows == [["1", "1", "0", "1/2"], ["2", "0", "1", "1/10"]]
    assert "q = W_Q x + b_Q" in q.notes[-1]
    (proj,) = _tables(dict(SPEC, layout="slots"), "project")
    # token 1: x = (1, 1/2); q = W_Q x + b_Q = (3/2, 3/5), k = (1/2, 1), v = (2, -1/4)
    assert list(proj.rows[0])[1:] == ["(3/2, 3/5)", "(1/2, 1)", "(2, -1/4)"]
    assert list(proj.rows[-1]) == ["+ bias", "(1/2, 1/10)", "-", "(1, -3/4)"]
    assert len(proj.rows) == 3
    assert proj.notes[-1].endswith("plus the biases: the same numbers: true")
    assert proj.data["biases"] == {"b_Q": ["1/2", "1/10"], "b_K": None, "b_V": ["1", "-3/4"]}


def test_heads_without_biases_print_no_bias_rows():
    plain = {k: v for k, v in SPEC.items() if not k.startswith("b_")}
    q, k, v = _tables(plain, "weights")
    assert q.columns == ["slot", "x1", "x2"] and len(q.rows) == 2 and not q.notes
    (proj,) = _tables(plain, "project")
    assert len(proj.rows) == 2 and "biases" not in proj.data
    assert proj.notes[1].startswith("the projection equals a row of bias-free neurons")


def test_one_head_needs_only_q_k_v_and_a_layer_names_the_missing_w_o(tmp_path, cli):
    """The table modes read W_Q, W_K, W_V; only the layer mode reads W_O, and a missing
    tensor is named by its field with the tensors the file holds."""
    rng = np.random.default_rng(5)
    p = "bert.encoder.layer.0.attention.self."
    t = {p + n + ".weight": _f32(rng, D, D) for n in ("query", "key", "value")}
    np.savez(tmp_path / "qkv.npz", **t)
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    base = ["--weights", str(tmp_path / "qkv.npz"), "--heads", "2",
            "--tokens", str(tmp_path / "x.npy")]
    status, out, err = cli("model", "walkthrough", "--arch", "bert", *base)
    assert status == 0, err
    assert "Multiply-adds" in out and "t1" in out
    status, out, err = cli("model", "layer", "--arch", "bert", *base)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert ("tensor must be named encoder.layer.0.attention.output.dense.weight (or end in it) "
            "for o in qkv.npz (got no such name); names there: ") in err
    assert p + "query.weight" in err
    names = {"q": "bert.encoder.layer.{layer}.attention.self.query.weight",
             "k": "bert.encoder.layer.{layer}.attention.self.key.weight",
             "v": "bert.encoder.layer.{layer}.attention.self.value.weight"}
    (tmp_path / "map.json").write_text(json.dumps(names))
    status, out, err = cli("model", "scores", "--names", str(tmp_path / "map.json"), *base)
    assert status == 0, err
    status, out, err = cli("model", "layer", "--names", str(tmp_path / "map.json"), *base)
    assert status == 2 and "weight must be a 2-D array" not in err
    assert err.strip().endswith(
        "name map field o must name a tensor (got none); names in qkv.npz: " +
        ", ".join(sorted(t)))
    layer = load_layer(read_tensors(str(tmp_path / "qkv.npz")), names, 0, heads=2,
                       out_projection=False)
    assert layer.W_O is None and layer.b_O is None and len(layer.heads) == 2
    run = attend_layer(layer, exact_matrix(X))       # the heads alone: concatenated
    assert run.macs["out_projection"] == 0 and run.bias_adds == 0
    assert [[v.terms for v in r] for r in run.outputs] == \
        [[(e,) for e in r0 + r1] for r0, r1 in zip(*run.head_outputs)]


def test_llama_config_head_dim_must_match_the_heads(tmp_path):
    rng = np.random.default_rng(6)
    p = "model.layers.0.self_attn."
    t = {p + "q_proj.weight": _f32(rng, D, D), p + "k_proj.weight": _f32(rng, DH, D),
         p + "v_proj.weight": _f32(rng, DH, D)}
    np.savez(tmp_path / "llama.npz", **t)
    cfg = {"num_attention_heads": 2, "num_key_value_heads": 1, "rope_theta": 10000.0,
           "head_dim": 2}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = read_tensors(str(tmp_path / "llama.npz"))
    layer = load_layer(tensors, "llama", 0, out_projection=False)
    assert layer.kv_of == [0, 0] and layer.policy.rope.theta == 10000 and layer.W_O is None
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, head_dim=4)))
    from exactattn.errors import ShapeError
    with pytest.raises(ShapeError, match=r"head_dim in config.json must be 2, the width of each "
                                         r"of the 2 heads the weights split into \(got 4\)"):
        load_layer(tensors, "llama", 0, out_projection=False)


def test_non_finite_tokens_and_weights_are_refused_in_one_line(tmp_path):
    from exactattn.models.example import read_tokens
    np.save(tmp_path / "x.npy", np.array([[1.0, np.nan]], dtype=np.float32))
    with pytest.raises(InputError, match=r"^tokens must be finite \(got nan at row 0, column 1\)$"):
        read_tokens(str(tmp_path / "x.npy"))
    with pytest.raises(InputError, match=r"^weight must be finite \(got -inf at row 1, column 0\)$"):
        exact_matrix(np.array([[0.5], [-np.inf]]))
    # a tokens file that is not JSON: one line naming the reason (it raised JSONDecodeError)
    (tmp_path / "x.json").write_text("[[1, 2")
    with pytest.raises(InputError, match=r"^tokens must be a JSON list of rows \(got Expecting "):
        read_tokens(str(tmp_path / "x.json"))
