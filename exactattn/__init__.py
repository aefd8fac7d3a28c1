"""exactattn: attention heads evaluated in exact arithmetic, with certified digits.

Data flows one way: tokens -> x -> queries/keys/values -> scores -> shares ->
outputs, recorded in a :class:`Trace` that the tables, the cost module and the
checks read.  One :class:`Call` holds an attention call's exact inputs and its
:class:`Policy` (scale, which keys a query sees, masks, empty rows, GQA,
modifiers); :class:`Reference` is its exact answer.  Exact shares and outputs
are :class:`ExpRatio` values that compare, order and hash like ``Fraction``.

>>> from exactattn import Call, Policy, Reference
>>> r = Reference(Call([["1", "0"]], [["1", "0"], ["0", "1"]], [["1"], ["0"]],
...                    policy=Policy(scale="none")))
>>> r.share(0, 0, 0, 1).decimal(4), r.output(0, 0, 0, 0).decimal(4), r.lse(0, 0, 0).decimal(4)
('0.2689', '0.7311', '1.3133')
>>> r.share(0, 0, 0, 0) + r.share(0, 0, 0, 1) == 1
True
>>> r.gradients([["1"]]).value("dQ", 0, 0, 0, 0).decimal(4)
'0.1966'
"""

import os as _os

# python-flint switches sympy's ground types when it is installed; say so
# explicitly so results and speed never depend on what happens to be there.
_os.environ.setdefault("SYMPY_GROUND_TYPES", "flint")

from .call.policy import Mask, Policy
from .errors import ExactAttnError, FloatInputError, InputError, ShapeError, SpecError
from .numbers.exact import to_exact
from .engines.head import Head, attend
from .numbers.softmax import ExpRatio, SoftmaxRow
from .engines.trace import Trace

__version__ = "0.1.0"


def __getattr__(name: str):
    # Call and Reference need numpy and python-flint: loaded on first use, so the command
    # line's help and option errors start without them
    if name == "Call":
        from .call.inputs import Call
        return Call
    if name == "Reference":
        from .reference.reference import Reference
        return Reference
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "Call",
    "ExactAttnError",
    "ExpRatio",
    "FloatInputError",
    "Head",
    "InputError",
    "Mask",
    "Policy",
    "Reference",
    "ShapeError",
    "SoftmaxRow",
    "SpecError",
    "Trace",
    "__version__",
    "attend",
    "to_exact",
]
