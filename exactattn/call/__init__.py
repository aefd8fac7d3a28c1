"""The call layer: what one attention call is, before anything is computed.

* :mod:`~exactattn.call.policy`: :class:`Policy`, what libraries disagree on
  (scale, causal alignment, empty rows, mask kind, GQA, every modifier);
* :mod:`~exactattn.call.masks`: :class:`Mask`, an explicit mask in one of three kinds;
* :mod:`~exactattn.call.modifiers`: :class:`Alibi`, :class:`Rope` and the modifiers' checks;
* :mod:`~exactattn.call.inputs`: :class:`Call`, the exact query, key and value with
  their policy, mask and dropout keep-mask: the one input of every evaluator and check;
* :mod:`~exactattn.call.limits`: how much one call may hold, checked before reading.

>>> from exactattn.call import Call
>>> Call([[1]], [[1]], [[2]], policy=Policy(scale="none")).shape["E_v"]
1
"""

from .policy import (ALIGNMENTS, DEFAULT_SCALE, EMPTY_ROWS, GQA_MAPS, MASK_KINDS, MODIFIER_FIELDS,
                     POSITION_FIELDS, PRESETS, SCORE_FIELDS, UNSUPPORTED, Alibi, Mask, Policy, Rope,
                     divisor_text, float_scale, parse_divisor, parse_scale, preset)

__all__ = ["ALIGNMENTS", "Alibi", "Call", "DEFAULT_SCALE", "EMPTY_ROWS", "GQA_MAPS", "MASK_KINDS",
           "MODIFIER_FIELDS", "Mask", "POSITION_FIELDS", "PRESETS", "Policy", "Rope",
           "SCORE_FIELDS", "UNSUPPORTED", "divisor_text", "empty_rows", "float_scale", "keys_read",
           "parse_divisor", "parse_scale", "preset"]

_INPUTS = ("Call", "empty_rows", "keys_read")


def __getattr__(name: str):
    # the inputs need numpy: loaded on first use, so `exactattn --help` starts without it
    if name in _INPUTS:
        from . import inputs
        return getattr(inputs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
