"""Architecture presets: which tensors hold layer L's query, key, value and output weights.

===========  ============================================  ==========  =======  =====
arch         query weight (layer L)                        layout      biases   GQA
===========  ============================================  ==========  =======  =====
``bert``     ``encoder.layer.L.attention.self.query``      slots       yes      no
``gpt2``     ``h.L.attn.c_attn`` (Q, K, V fused, Conv1D)   rows        yes      no
``llama``    ``layers.L.self_attn.q_proj``                 slots       no       yes
===========  ============================================  ==========  =======  =====

``slots``: ``nn.Linear.weight``, out x in.  ``rows``: GPT-2's ``Conv1D``,
in x out.  Any prefix before these names (``bert.``, ``transformer.``,
``model.``) is found.  A head count the weights cannot tell (H query heads,
H_kv key/value heads) comes from ``heads=``/``kv_heads=`` or a ``config.json``
beside the weights.  An explicit name map (a dict of :data:`FIELDS`) names other checkpoints.

Llama heads rotate queries and keys by position (rotary embeddings): the base comes from
the ``config.json`` beside the weights (:func:`rope_from_config`: a partial rotary factor
turns the first ``int(head_dim * f)`` entries; a rope scaling as transformers defines it),
or from the policy given; ``rotary="ignore"``
evaluates the projections without the rotation (then the scores are NOT the model's).
"""

from __future__ import annotations

import os

from ..call.policy import Policy
from ..errors import InputError, ShapeError, shorten
from ..engines.head import Head
from ..engines.layer import Layer
from .weights import Tensors, exact_matrix, exact_row, names_hint, read_json


#: a name map's fields and their defaults: the tensor names of layer ``{layer}`` (``q``, ``k``,
#: ``v``, ``o`` weights, or ``fused``: Q|K|V side by side on the output axis; their ``*_bias``),
#: the weights' ``layout`` and whether the heads rotate queries and keys (``rotary``)
FIELDS = {**dict.fromkeys(("q", "k", "v", "o", "q_bias", "k_bias", "v_bias", "o_bias", "fused",
                           "fused_bias")), "layout": "slots", "rotary": False}
_BERT = "encoder.layer.{layer}.attention."
_LLAMA = "layers.{layer}.self_attn."
#: each architecture's name map: the fields it sets
ARCHS = {
    "bert": {"q": _BERT + "self.query.weight", "k": _BERT + "self.key.weight",
             "v": _BERT + "self.value.weight", "o": _BERT + "output.dense.weight",
             "q_bias": _BERT + "self.query.bias", "k_bias": _BERT + "self.key.bias",
             "v_bias": _BERT + "self.value.bias", "o_bias": _BERT + "output.dense.bias"},
    "gpt2": {"fused": "h.{layer}.attn.c_attn.weight", "fused_bias": "h.{layer}.attn.c_attn.bias",
             "o": "h.{layer}.attn.c_proj.weight", "o_bias": "h.{layer}.attn.c_proj.bias",
             "layout": "rows"},
    "llama": {"q": _LLAMA + "q_proj.weight", "k": _LLAMA + "k_proj.weight",
              "v": _LLAMA + "v_proj.weight", "o": _LLAMA + "o_proj.weight", "rotary": True},
}


def preset(arch) -> dict:
    """The name map of ``arch`` (a name in :data:`ARCHS`, or a dict of :data:`FIELDS`), every
    field filled (a field not given: its default); unknown fields are refused by name."""
    if isinstance(arch, dict):
        bad = sorted(set(arch) - set(FIELDS))
        if bad:
            raise InputError(f"name map fields must be among {', '.join(sorted(FIELDS))} "
                             f"(got {shorten(', '.join(bad))})")
    elif not isinstance(arch, str) or arch not in ARCHS:
        raise InputError(f"arch must be one of {', '.join(ARCHS)} or a name map "
                         f"(got {shorten(arch, quote=True)})")
    return {**FIELDS, **(arch if isinstance(arch, dict) else ARCHS[arch])}


def _find(tensors: Tensors, template: str | None, layer: int, field: str | None = None):
    """The tensor ``template`` names for ``layer`` (the name, or one name ending in it);
    ``field`` (``q``, ``fused``, ...) names the name map's field of a required tensor (None: an
    optional one, None when the map or the file has none).

    Raises:
        InputError: a required tensor without a name in the map, or not in the file (the
            names that are there are listed); a name that several names end in.
    """
    name = template and template.format(layer=layer)
    found = [name] if name in tensors else [k for k in tensors if name and k.endswith("." + name)]
    if len(found) > 1:
        raise InputError(f"tensor {name} must be found once (got {len(found)}: "
                         f"{shorten(', '.join(found))})")
    if found or field is None:
        return tensors[found[0]] if found else None
    if template is None:
        raise InputError(f"name map field {field} must name a tensor (got none); names in "
                         f"{os.path.basename(tensors.path)}: {names_hint(tensors, field)}")
    raise InputError(f"tensor must be named {name} (or end in it) for {field} in "
                     f"{os.path.basename(tensors.path)} (got no such name); names there: "
                     f"{names_hint(tensors, name)}")


def _config(weights_path: str) -> dict | None:
    """The ``config.json`` beside the weights, or None without one."""
    path = os.path.join(os.path.dirname(os.path.abspath(weights_path)), "config.json")
    if not os.path.isfile(path):
        return None
    cfg = read_json(path, "config.json beside the weights must be a JSON object")
    if not isinstance(cfg, dict):
        raise InputError("config.json beside the weights must be a JSON object (got "
                         f"{type(cfg).__name__})")
    return cfg


def rope_from_config(cfg: dict, where: str = "config.json"):
    """The :class:`~exactattn.call.policy.Rope` a Llama-family config describes.

    Reads the base from ``rope_theta`` (or transformers 5's ``rope_parameters``), the head
    width from ``head_dim`` (or ``hidden_size / num_attention_heads``); the pairing is
    transformers' ``rotate_half`` (the ``half`` layout).

    A rope scaling (``rope_scaling``, or ``rope_parameters``' ``rope_type``: linear,
    dynamic, llama3, yarn) becomes the rope's :class:`~exactattn.call.modifiers.RopeScaling`,
    its floats read as the decimals the file holds.

    Raises:
        InputError: a rope scaling exactattn does not take (longrope, say) or a malformed one;
            a partial rotary factor that does not turn an even number of entries.

    A ``partial_rotary_factor`` f < 1 turns the first ``int(head_dim * f)`` entries (as
    transformers computes ``rotary_ndims``); the rest pass through.

    >>> rope_from_config({"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}})
    Rope(theta=Fraction(500000, 1), layout='half', dims=None, scaling=None)
    >>> rope_from_config({"head_dim": 64, "partial_rotary_factor": 0.25}).dims
    16
    """
    from fractions import Fraction
    from ..call.policy import Rope
    from ..call.modifiers import check_scaling
    params = dict(cfg.get("rope_parameters") or {})
    scaling = {k: Fraction(repr(v)) if isinstance(v, float) else v      # the file's decimals
               for k, v in {**(cfg.get("rope_scaling") or {}), **params}.items()
               if k not in ("rope_theta", "partial_rotary_factor")}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "dynamic":      # transformers reads the config's max_position_embeddings
        scaling.setdefault("max_position_embeddings", cfg.get("max_position_embeddings"))
    if kind == "yarn" and scaling.get("factor") is None and cfg.get("max_position_embeddings"):
        scaling["factor"] = Fraction(cfg["max_position_embeddings"]) / \
            scaling.get("original_max_position_embeddings", 1)
    try:
        scaling = check_scaling(scaling) if scaling else None
    except InputError as e:
        raise InputError(f"{e} in {where}; fix it or pass --no-rotary") from None
    partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1))
    dims = None
    if partial not in (1, 1.0, None):
        head_dim = cfg.get("head_dim") or (
            cfg["hidden_size"] // cfg["num_attention_heads"]
            if cfg.get("hidden_size") and cfg.get("num_attention_heads") else None)
        ok = isinstance(partial, (int, float)) and not isinstance(partial, bool) and 0 < partial < 1
        if not ok or not head_dim:
            raise InputError(f"partial_rotary_factor must be a number in (0, 1] with head_dim "
                             f"(or hidden_size and num_attention_heads) in {where} (got "
                             f"{shorten(partial)}, head width {head_dim}); fix config.json")
        dims = int(head_dim * partial)    # transformers: int(head_dim * partial_rotary_factor)
        if dims < 2 or dims % 2:
            raise InputError(f"partial_rotary_factor must turn an even number of entries in "
                             f"{where} (got {shorten(partial)} x head_dim {head_dim} = {dims}); "
                             "fix config.json")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000))
    if isinstance(theta, float):
        theta = Fraction(repr(theta))     # the decimal the config file holds, exactly
    return Rope(theta, "half", dims, scaling)


def _split(m, parts: int, axis_out: int, name: str) -> list:
    size = m.shape[axis_out]
    if size % parts:
        raise ShapeError(f"{name} must split into {parts} heads ({size} output numbers "
                         f"is not a multiple of {parts})")
    step = size // parts
    return [m[a * step:(a + 1) * step] if axis_out == 0 else m[:, a * step:(a + 1) * step]
            for a in range(parts)]


def layer_arrays(tensors: Tensors, arch, layer: int, out_projection: bool = True) -> tuple:
    """Layer ``layer``'s float arrays as stored (in the name map's layout, not split into
    heads): ``((W_Q, W_K, W_V), (b_Q, b_K, b_V), W_O, b_O)``, a bias None where the map or
    the file has none, W_O and b_O None unless ``out_projection``.

    Raises:
        InputError: an unknown arch, a tensor name that is not there.
        ShapeError: a fused projection that does not split in three.
    """
    names = preset(arch)
    out_axis = 0 if names["layout"] == "slots" else 1
    if names["fused"] is not None:
        fused = _find(tensors, names["fused"], layer, "fused")
        ws = _split(fused, 3, out_axis, names["fused"].format(layer=layer))
        fb = _find(tensors, names["fused_bias"], layer)
        bs = (None,) * 3 if fb is None else tuple(fb[k * len(fb) // 3:(k + 1) * len(fb) // 3]
                                                  for k in range(3))
    else:
        ws = tuple(_find(tensors, names[f], layer, f) for f in "qkv")
        bs = tuple(_find(tensors, names[f + "_bias"], layer) for f in "qkv")
    w_o = _find(tensors, names["o"], layer, "o") if out_projection else None
    b_o = _find(tensors, names["o_bias"], layer) if out_projection else None
    return ws, bs, w_o, b_o


def _heads(ws, bs, counts: tuple, picks: tuple, axis: int) -> list:
    """Per projection (Q, K, V): the exact matrices and bias rows (None: no bias) of the
    heads ``picks[p]`` (None: all) of its weight split into ``counts[p]`` heads."""
    out = []
    for w, b, count, pick, what in zip(ws, bs, counts, picks, ("W_Q", "W_K", "W_V")):
        chosen = range(count) if pick is None else (pick,)
        m, r = _split(w, count, axis, what), b if b is None else _split(b, count, 0, what + " bias")
        out.append(([exact_matrix(m[k]) for k in chosen], r and [exact_row(r[k]) for k in chosen]))
    return out


def load_head(tensors: Tensors, arch, layer: int, head: int, *, heads: int, kv_heads: int,
              policy: Policy) -> Head:
    """Query head ``head`` of layer ``layer`` alone, as :func:`load_layer` builds it
    (``layer.heads[head]``, the policy's ``head`` advanced by ``head``), reading only its own
    weights and those of its key/value head."""
    names = preset(arch)
    g = policy.kv_head(head, heads, kv_heads)
    ws, bs, _, _ = layer_arrays(tensors, names, layer, out_projection=False)
    (q, b_q), (k, b_k), (v, b_v) = _heads(ws, bs, (heads, kv_heads, kv_heads), (head, g, g),
                                          0 if names["layout"] == "slots" else 1)
    return Head(q[0], k[0], v[0], b_Q=b_q and b_q[0], b_K=b_k and b_k[0], b_V=b_v and b_v[0],
                layout=names["layout"]).with_policy(policy.replace(head=policy.head + head))


def load_layer(tensors: Tensors, arch, layer: int, *, heads: int | None = None,
               kv_heads: int | None = None, policy: Policy | None = None,
               rotary: str = "refuse", out_projection: bool = True) -> Layer:
    """Layer ``layer`` of the checkpoint ``tensors`` as an exact :class:`~exactattn.engines.layer.Layer`.

    Every weight is its stored binary value (a dyadic rational).  ``heads``
    (H) and ``kv_heads`` (H_kv, default H) split the projections; without
    them a ``config.json`` beside the weights is read.  ``out_projection=False`` leaves W_O
    (and b_O) unread: the heads alone (``layer.W_O`` is None), for one head's tables.

    Raises:
        InputError: an unknown arch, a tensor name that is not there (the names
            that are there are listed), rotary heads without ``rotary="ignore"``.
        ShapeError: a projection that does not split into the heads.
    """
    names = preset(arch)
    cfg = _config(tensors.path) if names["rotary"] or heads is None else None
    if names["rotary"] and rotary != "ignore" and (policy is None or policy.rope is None):
        if cfg is None:
            raise InputError("rotary position embeddings must be applied to llama queries and "
                             "keys (got no config.json beside the weights to read them from); "
                             "put the model's config.json there, or pass --no-rotary to evaluate "
                             "the projections without them (not the model's scores)")
        policy = (policy or Policy(causal=True)).replace(rope=rope_from_config(cfg))
    if heads is None:
        heads = (cfg or {}).get("num_attention_heads", (cfg or {}).get("n_head"))
        kv_heads = kv_heads or (cfg or {}).get("num_key_value_heads", heads)
        if heads is None:
            raise InputError("heads must be given (got none, and no config.json beside the "
                             "weights); pass --heads H")
    kv_heads = kv_heads or heads
    ws, bs, w_o, b_o = layer_arrays(tensors, names, layer, out_projection)
    (qs, bqs), (ks, bks), (vs, bvs) = _heads(ws, bs, (heads, kv_heads, kv_heads), (None,) * 3,
                                             0 if names["layout"] == "slots" else 1)
    built = Layer(qs, ks, vs, None if w_o is None else exact_matrix(w_o), b_Q=bqs, b_K=bks,
                  b_V=bvs, b_O=None if b_o is None else exact_row(b_o), layout=names["layout"],
                  policy=policy)
    width = (cfg or {}).get("head_dim") if names["rotary"] else None
    if width is not None and width != built.heads[0].d_k:
        raise ShapeError(f"head_dim in config.json must be {built.heads[0].d_k}, the width of "
                         f"each of the {len(qs)} heads the weights split into (got {width}); "
                         "pass --heads H to match the checkpoint")
    return built
