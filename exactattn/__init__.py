"""exactattn: attention heads evaluated in exact arithmetic, with certified digits.

Data flows one way: tokens -> x -> queries/keys/values -> scores -> shares ->
outputs, recorded in a :class:`Trace` that the tables, the cost module and the
checks read.
"""

import os as _os

# python-flint switches sympy's ground types when it is installed; say so
# explicitly so results and speed never depend on what happens to be there.
_os.environ.setdefault("SYMPY_GROUND_TYPES", "flint")

from .errors import ExactAttnError, FloatInputError, InputError, ShapeError, SpecError
from .exact import to_exact
from .head import Head, Trace, attend

__version__ = "0.1.0"

__all__ = [
    "ExactAttnError",
    "FloatInputError",
    "Head",
    "InputError",
    "ShapeError",
    "SpecError",
    "Trace",
    "__version__",
    "attend",
    "to_exact",
]
