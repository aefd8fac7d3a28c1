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

from .policy import Policy, preset

__all__ = ["Call", "Policy", "preset"]


def __getattr__(name: str):
    # the inputs need numpy: loaded on first use, so `exactattn --help` starts without it
    if name == "Call":
        from .inputs import Call
        return Call
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
