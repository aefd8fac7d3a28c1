"""Real heads from real models: weights read exactly from files, architecture presets, layers.

* :mod:`~exactattn.models.weights`: ``.npy``/``.npz`` (numpy), ``.safetensors``
  (read with numpy, bfloat16 too) and PyTorch state dicts
  (``torch``), every float32/float16/bfloat16 weight read as its exact binary
  value (a dyadic rational).
* :mod:`~exactattn.models.presets`: which tensors make layer L's heads in
  ``bert``, ``gpt2`` and ``llama`` checkpoints, or in an explicit name map.
* :mod:`~exactattn.models.run` (torch, transformers): a real model run on
  text in float32, every attention layer's input and results captured;
  :mod:`~exactattn.models.check`: every head of a captured layer evaluated
  exactly and compared; :mod:`~exactattn.models.report`: their tables
  (``exactattn model check``).
"""

from .presets import load_layer
from .weights import read_tensors

__all__ = ["load_layer", "read_tensors"]
