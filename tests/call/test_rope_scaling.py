"""RoPE scalings as transformers defines them: exact frequencies, every path against the
independent oracle, transformers' own inverse frequencies (slow), two public bugs caught."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_cases import SCALINGS, self_case  # noqa: E402
from oracle_paths import compare  # noqa: E402

from exactattn import Call, Policy
from exactattn.call.modifiers import Rope, check_scaling
from exactattn.errors import InputError
from exactattn.verify import Reference

X = [["1", "0", "1/2", "-1"], ["0", "1", "2", "1/4"], ["1", "1", "-1", "0"], ["1/2", "2", "0", "1"]]
V = [["1"], ["-2"], ["3"], ["1/2"]]
LLAMA3 = {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
          "original_max_position_embeddings": 16}


@pytest.mark.parametrize("k", range(len(SCALINGS)))
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_every_path_agrees_with_the_oracle_under_each_scaling(k, layout):
    case = self_case(X, X, V, causal=True,
                     rope={"theta": "10000", "layout": layout, "scaling": SCALINGS[k]})
    rep = compare(case, (6, 12))
    assert not rep.failed, rep.message()
    assert rep.checked > 100


def test_exact_frequencies_of_each_band():
    # theta 10000, d 4: w = 1 (wavelength 2 pi: between 16/4 and 16/1, the blend) and 1/100
    # (wavelength 628 > 16: divided by 8); the blend is a w + b w^2 / pi, exactly
    f = Rope(scaling=LLAMA3).frequencies(4)
    assert f == [(0, 2, (Fraction(1, 8) - Fraction(7, 8) / 3, (), (Fraction(7, 8) * 16 / 6, ()))),
                 (1, 3, (Fraction(1, 800), ()))]
    assert Rope(scaling={"rope_type": "linear", "factor": "5/2"}).frequencies(2) == \
        [(0, 1, (Fraction(2, 5), ()))]
    dyn = Rope(scaling={"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 8})
    # length 16: base 10000 * (2 * 16/8 - 1)^(4/2): pair 1 turns by 10000^(-1/2) / 3
    assert dyn.at_length(16).frequencies(4)[1][2] == (Fraction(1, 300), ())
    assert dyn.at_length(5).frequencies(4) == Rope().frequencies(4)       # within the context
    yarn = Rope(scaling={"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64})
    assert yarn.gain == (4, 1, 0) and Rope(scaling={**SCALINGS[6]}).gain == Fraction(36, 25)


def test_a_scaled_score_prints_its_pi_and_log_terms():
    rope = Rope(scaling=LLAMA3)
    ref = Reference(Call([[1, 0, 0, 0], [1, 0, 0, 0]], [[1, 0, 0, 0], [1, 0, 0, 0]], [[1], [0]],
                         policy=Policy(rope=rope, causal=True)))
    assert "cos(-1/6 + 7/3/pi)" in ref.share(0, 0, 1, 0).text()
    y = Rope(scaling={"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64})
    ref = Reference(Call([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1], [0]],
                         policy=Policy(rope=y, causal=True, divisor_squared=None)))
    assert ref.share(0, 0, 1, 1).text().startswith("exp((1 + (1/10)*log(4))^2)")



@pytest.mark.parametrize("k", range(len(SCALINGS)))
def test_a_problem_file_keeps_the_scaling(k):
    # problem_text wrote the rope without its scaling: the file read back checked the plain rope
    from exactattn.call.spec import loads_problem, problem_text
    call = Call(X, X, V, policy=Policy(rope=Rope(scaling=SCALINGS[k]), causal=True))
    back, policy, _ = loads_problem(problem_text(call))
    assert back.policy == call.policy and policy.rope.scaling == check_scaling(SCALINGS[k])
    outputs = [[Reference(c).output(0, 0, i, 0).decimal(12) for i in range(4)]
               for c in (call, back, call.with_policy(Policy(rope=Rope(), causal=True)))]
    assert outputs[0] == outputs[1] != outputs[2]


def test_the_reports_name_the_scaling(tmp_path, capsys):
    from exactattn.cli import main
    assert Policy(rope=Rope(scaling=LLAMA3)).describe().endswith(
        "rope={theta: 10000, layout: half, scaling: {rope_type: llama3, factor: 8, "
        "high_freq_factor: 4, low_freq_factor: 1, original_max_position_embeddings: 16}}")
    assert Policy(rope=Rope()).describe().endswith("rope={theta: 10000, layout: half}")
    spec = {"tokens": [{"x": r} for r in X], "W_Q": np.eye(4, dtype=int).tolist(),
            "W_K": np.eye(4, dtype=int).tolist(), "W_V": [[1, 0, 2, 1]], "causal": True,
            "policy": {"rope": {"theta": "10000", "scaling": LLAMA3}}}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert main(["square", "--spec", str(tmp_path / "s.json"), "--width", "200"]) == 0
    assert main(["scores", "--spec", str(tmp_path / "s.json"), "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "(Su et al. 2021, sec. 3.4); frequencies scaled: llama3 factor=8 high_freq_factor=4 " \
           "low_freq_factor=1\n  original_max_position_embeddings=16\n" in out
    assert "modifiers: rope={theta: 10000, layout: half, scaling: {rope_type: llama3, factor: 8," in out



@pytest.mark.parametrize("layout, offset", [("half", None), ("interleaved", 5)])
def test_a_dynamic_rope_is_bound_once_by_the_call_for_every_path(layout, offset):
    # the call's length (its largest position + 1) is bound where the Call is built: row
    # blocks and verify's backward took the unbound rope and refused it
    dyn = SCALINGS[3]
    assert dyn["rope_type"] == "dynamic"
    call = Call(X, X, V, policy=Policy(rope=Rope(scaling=dyn), query_offset=offset))
    assert call.policy.rope.scaling.length == (4 if offset is None else 9)
    case = self_case(X, X, V, query_offset=offset,
                     rope={"theta": "10000", "layout": layout, "scaling": dyn},
                     d_out=[[[["1"], ["-1/2"], ["2"], ["0"]]]], d_lse=[[["1/3", "0", "-1", "2"]]])
    rep = compare(case, (6, 12))
    assert not rep.failed, rep.message()
    results = rep.run.results(6)
    assert len(results["blocks"]["outputs"]) == 4 and len(results["verify-backward"]["dQ"]) == 16
    assert not [s for s in rep.skipped if s[0] in ("blocks", "verify-backward")]


@pytest.mark.parametrize("bad, message", [
    ({"rope_type": "llama3", "factor": 8}, "rope scaling llama3 needs low_freq_factor; add it"),
    ({"rope_type": "linear", "factor": 2, "beta": 1}, "rope scaling linear has unknown key 'beta';"
                                                      " its keys are factor"),
    ({"rope_type": "linear", "factor": 0.5}, "rope scaling factor must be exact (got the binary"),
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 8, "truncate": False},
     "rope scaling yarn truncate must be true"),
    ({"rope_type": "longrope"}, "rope scaling rope_type must be one of default, linear"),
    ({"rope_type": "linear", "factor": "-1"}, "rope scaling factor must be positive"),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1,
      "original_max_position_embeddings": 8}, "rope scaling llama3 needs low_freq_factor <")])
def test_a_bad_scaling_is_one_line_naming_the_key(bad, message):
    with pytest.raises(InputError) as e:
        check_scaling(bad)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("make", [
    lambda x: Rope("10000", scaling={"rope_type": "linear", "factor": x}),
    lambda x: Policy(softcap=x)])
@pytest.mark.parametrize("x", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_float_is_one_line_naming_it(make, x):
    with pytest.raises(InputError) as e:
        make(x)
    assert str(e.value).endswith(f"must be finite (got {x!r}); NaN and infinities have no exact "
                                 "value: write a finite number")


@pytest.mark.parametrize("word", ["Infinity", "-Infinity", "NaN"])
def test_the_command_line_scaling_refuses_non_finite_numbers(capsys, word):
    from exactattn.cli import main
    with pytest.raises(SystemExit) as e:
        main(["verify", "--n", "4", "--d-k", "4", "--rope", "10000", "--rope-scaling",
              f'{{"rope_type": "linear", "factor": {word}}}', "--probes", "none"])
    assert e.value.code == 2 and capsys.readouterr().err == f"exactattn: error: --rope-scaling numbers must be " \
        f"finite (got {word}); NaN and infinities have no exact value: write a finite number\n"


def test_spec_and_command_line_take_the_scaling(tmp_path):
    from exactattn.cli import main
    spec = {"tokens": [{"x": [1, 0, 1, 1]}, {"x": [0, 1, 1, 0]}, {"x": [1, 1, 0, 1]}],
            "W_Q": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
            "W_K": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
            "W_V": [[1, 0, 2, 1]], "causal": True,
            "policy": {"rope": {"theta": "10000", "scaling": LLAMA3}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    from exactattn.engines.spec import load
    assert load(str(path)).head.policy.rope.scaling == check_scaling(LLAMA3)
    plain = {**spec, "policy": {"rope": {"theta": "10000"}}}
    (tmp_path / "p.json").write_text(json.dumps(plain))
    outs = []
    for args in (["--spec", str(path)], ["--spec", str(tmp_path / "p.json"), "--rope-scaling",
                                        json.dumps(LLAMA3)], ["--spec", str(tmp_path / "p.json")]):
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["scores", *args, "--format", "json"]) == 0
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] != outs[2]


# ----------------------------------------------------------------- two public bugs, caught
def _inv_freq(theta, d, scaling):
    """A float64 llama3 table as transformers computes it (numpy)."""
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    f, lf, hf, old = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"))
    wave = 2 * np.pi / inv
    scaled = np.where(wave > old / lf, inv / f, inv)
    smooth = (old / wave - lf) / (hf - lf)
    mid = ~(wave < old / hf) & ~(wave > old / lf)
    return np.where(mid, (1 - smooth) * scaled / f + smooth * scaled, scaled)


def _kernel(table):
    def kernel(q, k, v):                     # SDPA on queries and keys rotated by ``table``
        n, d = q.shape
        ang = np.arange(n)[:, None] * table[None, :]
        def rot(x):
            a, b = x[:, :d // 2], x[:, d // 2:]
            return np.concatenate([a * np.cos(ang) - b * np.sin(ang),
                                   a * np.sin(ang) + b * np.cos(ang)], axis=1)
        s = rot(q) @ rot(k).T / np.sqrt(d)
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        return (p / p.sum(1, keepdims=True)) @ v
    return kernel


@pytest.mark.parametrize("bug", ["unscaled table returned", "factor 8 where the config says 32"])
def test_two_public_rope_scaling_bugs_fail(bug):
    from exactattn.testing import assert_attention_close
    cfg = {"rope_type": "llama3", "factor": 32, "low_freq_factor": 1, "high_freq_factor": 4,
           "original_max_position_embeddings": 16}
    rng = np.random.default_rng(0)
    n, d = 12, 8
    q, k, v = (rng.integers(-4, 5, (n, w)).astype(np.float64) / 2 for w in (d, d, 2))
    rope = Rope(10000, "half", None, cfg)
    good = _kernel(_inv_freq(10000.0, d, cfg))
    assert_attention_close(good(q, k, v), q, k, v, is_causal=True, rope=rope,
                           accumulation="float64")
    table = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d) if bug.startswith("unscaled") else \
        _inv_freq(10000.0, d, {**cfg, "factor": 8})
    with pytest.raises(AssertionError):
        assert_attention_close(_kernel(table)(q, k, v), q, k, v, is_causal=True, rope=rope,
                               accumulation="float64")


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(SCALINGS) - 1))
def test_frequencies_match_transformers_rope_init_functions(k):
    """transformers' own ROPE_INIT_FUNCTIONS (float32 inv_freq) within float32 rounding of the
    certified frequencies, and its attention factor."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    scaling = {key: float(Fraction(v)) if isinstance(v, str) and key != "rope_type" else v
               for key, v in SCALINGS[k].items()}
    theta, d, seq = 10000, 16, 40
    cfg = transformers.LlamaConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d,
                                   max_position_embeddings=scaling.get("max_position_embeddings", 64),
                                   rope_parameters={**scaling, "rope_theta": float(theta)})
    inv, factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu", seq_len=seq)
    rope = Rope(theta, "half", None, SCALINGS[k]).at_length(seq)
    ours = np.array(rope.float_frequencies(d))
    assert np.allclose(inv.numpy().astype(np.float64), ours, rtol=3e-7, atol=0), (inv, ours)
    assert abs(float(factor) - rope.float_gain()) < 1e-6
    assert inv.dtype == torch.float32


def test_a_kernel_that_scales_by_itself_is_handed_rope_scaling():
    # a kernel taking rope_theta and rope_layout got no scaling: a correct one failed
    from exactattn.verify import verify
    from exactattn.verify.adapter import FunctionImpl
    cfg = {**LLAMA3, "factor": 32}
    seen = []

    def table(theta, d, scaling):           # transformers' llama3 table (plain: no scaling)
        return _inv_freq(theta, d, scaling) if scaling else 1.0 / theta ** (np.arange(0, d, 2) / d)

    def scaled(query, key, value, *, scale=None, is_causal=False, rope_theta, rope_layout,
               rope_scaling):
        seen.append((rope_theta, rope_layout, rope_scaling))
        return _kernel(table(rope_theta, query.shape[-1], rope_scaling))(query, key, value)

    def ignored(query, key, value, *, scale=None, is_causal=False, rope_theta, rope_layout,
                rope_scaling):
        return _kernel(table(rope_theta, query.shape[-1], None))(query, key, value)

    def unscaled(query, key, value, *, scale=None, is_causal=False, rope_theta, rope_layout):
        return _kernel(table(rope_theta, query.shape[-1], None))(query, key, value)
    rng = np.random.default_rng(0)
    q, k, v = (rng.integers(-4, 5, (12, w)).astype(np.float64) / 2 for w in (8, 8, 2))
    call = Call(q, k, v, policy=Policy(rope=Rope(10000, "half", None, cfg), causal=True),
                floats="exact")
    assert verify(FunctionImpl(scaled), call, "float64").passed
    assert seen[0] == (10000.0, "half", {"rope_type": "llama3", "factor": 32, "high_freq_factor": 4,
                                         "low_freq_factor": 1,
                                         "original_max_position_embeddings": 16})
    assert not verify(FunctionImpl(ignored), call, "float64").passed
    with pytest.raises(InputError, match=r"\.unscaled must take rope_scaling= for this call \(got a "
                                         r"function without it\)"):
        verify(FunctionImpl(unscaled), call, "float64")
