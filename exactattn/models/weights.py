"""Weights from files, read exactly: every binary float is its own dyadic rational.

A float32, float16 or bfloat16 weight is a number ``m * 2**e`` exactly; reading
it as that rational (:func:`exact_matrix`) changes nothing.  Widening to
float64 on the way is exact too (every float16/bfloat16/float32 value is a
float64 value), so :func:`read_tensors` returns numpy arrays of the stored
values: float64 for the float formats (the dtype they were stored in is kept
in :attr:`Tensors.dtypes`), integers as they are.

Formats: ``.npy`` (one array, named after the file), ``.npz``,
``.safetensors`` (the ``safetensors`` package: ``pip install exactattn[models]``)
and PyTorch state dicts ``.pt``/``.pth``/``.bin`` (``torch``; read with
``weights_only=True``).
"""

from __future__ import annotations

import json
import os
from fractions import Fraction

from ..errors import InputError, ShapeError, shorten

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class Tensors(dict):
    """Named arrays read from one file; ``dtypes[name]`` is the stored dtype ('bfloat16', ...)."""

    def __init__(self, arrays: dict, dtypes: dict, path: str):
        super().__init__(arrays)
        self.dtypes = dtypes
        self.path = path

    def stored(self) -> str:
        """The stored float dtypes, in words: 'float32' or 'bfloat16, float32'."""
        return ", ".join(sorted({d for d in self.dtypes.values() if d in FLOAT_DTYPES})) or "none"


def read_json(path: str, refusal: str):
    """The JSON document in the file ``path``; one that cannot be read or parsed is refused in
    one line, ``refusal`` followed by the reason (``(got ...)``)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{refusal} (got {shorten(str(e))})") from None


def names_hint(names, wanted: str, limit: int = 12) -> str:
    """Up to ``limit`` names, those sharing the most dot-separated parts with ``wanted`` first."""
    parts = set(wanted.split("."))
    ranked = sorted(names, key=lambda k: (-len(parts & set(k.split("."))), k))
    more = len(ranked) - limit
    return ", ".join(ranked[:limit]) + (f" ... ({more} more)" if more > 0 else "")


def _widen(a, dtype: str):
    import numpy as np
    return a.astype(np.float64) if dtype in FLOAT_DTYPES else a


def _read_torch(path: str):
    try:
        import torch
    except ImportError:
        raise InputError(f"weights {shorten(path, quote=True)} must be read with torch "
                         "(not installed); pip install torch, or save them as .safetensors "
                         "or .npz") from None
    return tensors_from_state_dict(torch.load(path, map_location="cpu", weights_only=True), path)


def tensors_from_state_dict(state, source: str) -> Tensors:
    """A PyTorch state dict (or a module) as :class:`Tensors`, floats widened exactly.

    ``source`` names where it came from (a file, a model) in messages.

    Raises:
        InputError: not a state dict.
    """
    import torch
    if hasattr(state, "state_dict"):
        state = state.state_dict()
    if not isinstance(state, dict):
        raise InputError(f"weights must be a state dict of tensors (got {type(state).__name__})")
    arrays, dtypes = {}, {}
    for k, t in state.items():
        if not hasattr(t, "dtype"):
            continue
        dtypes[k] = str(t.dtype).replace("torch.", "")
        arrays[k] = t.detach().to(torch.float64).numpy() if t.is_floating_point() \
            else t.numpy()
    return Tensors(arrays, dtypes, source)


def _read_safetensors(path: str):
    """The ``safetensors`` package reads (and checks) the file; bfloat16 tensors, which numpy
    lacks, are read from their checked byte ranges as the top 16 bits of a float32 (exact)."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise InputError(f"weights {shorten(path, quote=True)} must be read with the safetensors "
                         "package (not installed); pip install 'exactattn[models]'") from None
    arrays, dtypes, bf16 = {}, {}, []
    try:
        with safe_open(path, framework="numpy") as f:
            for k in f.keys():
                kind = f.get_slice(k).get_dtype()
                try:
                    a = None if kind == "BF16" else f.get_tensor(k)
                except (TypeError, ValueError, AttributeError):     # a type numpy lacks
                    raise InputError(f"tensor {k} must be a float or integer type numpy reads "
                                     f"(got {kind})") from None
                if a is None:
                    bf16.append(k)
                    continue
                dtypes[k] = str(a.dtype)
                arrays[k] = _widen(a, str(a.dtype))
    except SafetensorError as e:
        raise InputError(f"weights {shorten(path, quote=True)} must be a valid .safetensors file "
                         f"({e})") from None
    if bf16:
        import numpy as np
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
            for k in bf16:
                a, b = header[k]["data_offsets"]
                f.seek(8 + size + a)
                raw = np.frombuffer(f.read(b - a), dtype="<u2").astype(np.uint32) << 16
                arrays[k] = raw.view(np.float32).astype(np.float64).reshape(header[k]["shape"])
                dtypes[k] = "bfloat16"
    return arrays, dtypes


def read_tensors(path: str) -> Tensors:
    """Every tensor in ``path`` by name, with float values widened exactly to float64.

    Raises:
        InputError: a missing file, an unknown suffix, a reader not installed.
    """
    import numpy as np
    if not isinstance(path, str) or not os.path.isfile(path):
        raise InputError(f"weights must name a file that exists (got {shorten(repr(path))})")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        a = np.load(path, allow_pickle=False)
        name = os.path.splitext(os.path.basename(path))[0]
        arrays, dtypes = {name: _widen(a, str(a.dtype))}, {name: str(a.dtype)}
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            dtypes = {k: str(z[k].dtype) for k in z.files}
            arrays = {k: _widen(z[k], dtypes[k]) for k in z.files}
    elif suffix == ".safetensors":
        arrays, dtypes = _read_safetensors(path)
    elif suffix in (".pt", ".pth", ".bin"):
        return _read_torch(path)
    else:
        raise InputError(f"weights must be a .safetensors, .npz, .npy, .pt, .pth or .bin file "
                         f"(got {shorten(repr(path))})")
    return Tensors(arrays, dtypes, path)


def exact_row(a) -> list[Fraction]:
    """A 1-D float array as exact ``Fraction`` entries (each float's binary value)."""
    return [Fraction(*v.as_integer_ratio()) for v in a.astype("float64").tolist()]


def exact_matrix(a, name: str = "weight") -> list[list[Fraction]]:
    """A 2-D float array as rows of exact ``Fraction`` entries (binary values, no rounding).

    >>> import numpy as np
    >>> exact_matrix(np.array([[0.1]], dtype=np.float32))
    [[Fraction(13421773, 134217728)]]
    """
    if getattr(a, "ndim", None) != 2:
        raise ShapeError(f"{name} must be a 2-D array (got shape {getattr(a, 'shape', None)})")
    import numpy as np
    bad = np.argwhere(~np.isfinite(a.astype("float64")))
    if len(bad):
        i, j = bad[0].tolist()
        raise InputError(f"{name} must be finite (got {float(a[i, j])} at row {i}, column {j})")
    return [exact_row(r) for r in a]
