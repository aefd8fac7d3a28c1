"""exactattn: attention heads evaluated in exact arithmetic, with certified digits.

Data flows one way: tokens -> x -> queries/keys/values -> scores -> shares ->
outputs, recorded in a :class:`Trace` that the tables, the cost module and the
checks read.  One :class:`Policy` describes an attention call (scale, which
keys a query sees, masks, empty rows, GQA); exact shares and outputs are
:class:`ExpRatio` values that compare, order and hash like ``Fraction``.
"""

import os as _os

# python-flint switches sympy's ground types when it is installed; say so
# explicitly so results and speed never depend on what happens to be there.
_os.environ.setdefault("SYMPY_GROUND_TYPES", "flint")

from .call import Mask, Policy
from .errors import ExactAttnError, FloatInputError, InputError, ShapeError, SpecError
from .exact import to_exact
from .head import Head, attend
from .softmax import ExpRatio, SoftmaxRow
from .trace import Trace

__version__ = "0.1.0"

__all__ = [
    "ExactAttnError",
    "ExpRatio",
    "FloatInputError",
    "Head",
    "InputError",
    "Mask",
    "Policy",
    "ShapeError",
    "SoftmaxRow",
    "SpecError",
    "Trace",
    "__version__",
    "attend",
    "to_exact",
]
