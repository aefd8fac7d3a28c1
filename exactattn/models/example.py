"""A real head as a worked :class:`~exactattn.examples.Example`: weights file + tokens file.

The computation behind ``exactattn model``: read the checkpoint
(:func:`~exactattn.models.weights.read_tensors`), build layer L
(:func:`~exactattn.models.presets.load_layer`), pick head H, and read the
tokens (n x d_model numbers: the layer's input hidden states) exactly.
"""

from __future__ import annotations

import json
import os

from ..errors import InputError, ShapeError, shorten
from ..examples import Example, Token
from ..numbers.exact import to_matrix
from ..engines.layer import Layer
from .presets import load_layer, preset
from .weights import exact_matrix, read_json, read_tensors

#: the file beside saved inputs that names their tokens (``model check --save-inputs``)
TOKEN_TEXTS = "tokens.json"

#: what every real-head output says about its numbers
DYADIC_NOTE = ("weights and tokens stored as binary floats ({dtypes}) are read as their exact "
               "binary values (dyadic rationals m * 2**e); nothing is rounded")


def read_tokens(path: str) -> list[list]:
    """Token rows (n x d_model) from ``.npy``, ``.npz`` (its only or first array) or ``.json``
    (a list of rows; numbers as strings are read exactly, binary floats as their binary values)."""
    if not isinstance(path, str) or not os.path.isfile(path):
        raise InputError(f"tokens must name a file that exists (got {shorten(repr(path))})")
    if path.endswith(".json"):
        doc = read_json(path, "tokens must be a JSON list of rows")
        rows = doc.get("x") if isinstance(doc, dict) else doc
        return to_matrix(rows, name="tokens", floats="exact")
    if not path.endswith((".npy", ".npz")):
        raise InputError(f"tokens must be a .npy, .npz or .json file (got {shorten(repr(path))})")
    a = next(iter(read_tensors(path).values()))     # an .npz's first array
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2:
        raise ShapeError(f"tokens must be n x d_model (got shape {a.shape})")
    return exact_matrix(a, "tokens")


def save_token_texts(path: str, tokens, source: str) -> None:
    """Write the tokens' texts (and vocabulary ids) to ``path`` as JSON:
    ``{"source": ..., "tokens": [text, ...], "ids": [id or null, ...]}``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"source": source, "tokens": [t.text for t in tokens],
                   "ids": [t.id for t in tokens]}, f, ensure_ascii=False, indent=1)
        f.write("\n")


def read_token_texts(path: str, n: int) -> list[Token] | None:
    """The token labels for ``n`` token rows read from ``path``: the ``"tokens"`` list of a
    JSON tokens file itself, else the :data:`TOKEN_TEXTS` file beside it; None without either.

    Raises:
        InputError: a token list that is not n texts (``--save-inputs`` of another run?).

    >>> read_token_texts("no/such/layer0.npy", 3) is None
    True
    """
    where = path
    doc = read_json(path, "tokens must be a JSON list of rows") \
        if path.endswith(".json") and os.path.isfile(path) else None
    if not (isinstance(doc, dict) and "tokens" in doc):
        where = os.path.join(os.path.dirname(os.path.abspath(path)), TOKEN_TEXTS)
        if not os.path.isfile(where):
            return None
        doc = read_json(where, f"{where} must be a JSON token list")
    texts = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise InputError(f"tokens in {where} must be a list of texts (got "
                         f"{shorten(texts, quote=True)})")
    if len(texts) != n:
        raise InputError(f"tokens in {where} must name the {n} token rows of the tokens file "
                         f"(got {len(texts)} texts); save them again with the inputs "
                         "(model check --save-inputs) or remove the file")
    ids = doc.get("ids")
    if not isinstance(ids, list) or len(ids) != n:
        ids = [None] * n
    return [Token(t, i if isinstance(i, int) else None) for t, i in zip(texts, ids)]


def load_model_head(weights: str, arch, layer: int, head: int, tokens: str, *,
                    heads: int | None = None, kv_heads: int | None = None,
                    rotary: str = "refuse", out_projection: bool = False
                    ) -> tuple[Layer, Example, str]:
    """Layer ``layer``'s head ``head`` (0-based) of the checkpoint ``weights`` on ``tokens``:
    the loaded layer (:class:`~exactattn.engines.layer.Layer`), an example of the one head on
    the tokens, and how the stored floats were read (a note).

    The tokens are labelled by their texts when the tokens file carries them (a JSON
    ``"tokens"`` list) or has a :data:`TOKEN_TEXTS` beside it (:func:`read_token_texts`),
    else ``t1 .. tn``.  ``out_projection``: read W_O (+ b_O) too (the layer mode); one head
    needs only W_Q, W_K, W_V.

    Raises:
        InputError: a file, name or index that is not there (what is there is listed).
    """
    tensors = read_tensors(weights)
    names = preset(arch)
    built = load_layer(tensors, names, layer, heads=heads, kv_heads=kv_heads, rotary=rotary,
                       out_projection=out_projection)
    if not 0 <= head < len(built.heads):
        raise InputError(f"head must be from 0 to {len(built.heads) - 1} in layer {layer} "
                         f"(got {head})")
    x = read_tokens(tokens)
    labels = read_token_texts(tokens, len(x)) or [Token(f"t{i + 1}") for i in range(len(x))]
    if len(x[0]) != built.d_model:
        raise ShapeError(f"tokens must have d_model = {built.d_model} numbers each "
                         f"(got {len(x[0])})")
    label = arch if isinstance(arch, str) else "name map"
    ex = Example(name=f"{label}-L{layer}-H{head}",
                 title=f"{os.path.basename(weights)}: {label} layer {layer}, head {head}",
                 head=built.heads[head], tokens=labels,
                 x=x, source=weights)
    return built, ex, DYADIC_NOTE.format(dtypes=tensors.stored())
