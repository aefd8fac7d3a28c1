"""Check a float attention implementation against the exact answer, in ULPs of its dtype.

One attention call ``outputs = softmax(scale * query @ key^T + mask) @ value``
(Vaswani et al. 2017, sec. 3.2.1; PyTorch ``scaled_dot_product_attention``
shapes: query B x H_q x L x E, key B x H_kv x S x E, value B x H_kv x S x E_v)
is run twice: once by the implementation under test in its float dtype, once
exactly here, under a :class:`~exactattn.call.policy.Policy` (scale, causal
alignment, empty rows, mask kind, GQA map).  The report gives, for every
output, the exact value (certified), the implementation's value, the error in
ULPs of the output dtype and the relative error.

The modules, in the order data flows through them:

* :mod:`~exactattn.numbers.formats`: float formats, rounding exact values into
  them (:func:`round_to_format`), ULP distances, text forms;
* :mod:`~exactattn.reference.reference`: :class:`Reference`, the exact answer
  (every modifier of the call model through :func:`exactattn.reference.logits.softmax_row`);
* :mod:`~exactattn.reference.enclose`: whole-head ``arb`` enclosures of the outputs
  and log-sum-exps, rounded to a dtype;
* :mod:`~exactattn.verify.impls`: the implementations under test;
* :mod:`~exactattn.verify.check`: :func:`verify`, :class:`Entry`, :class:`Report`;
* :mod:`~exactattn.verify.search`: :func:`search`, the worst input, shrunk;
* :mod:`~exactattn.verify.split`: :func:`check_split_merge`, a split-KV
  kernel's per-block (output, LSE) pairs and their merge; :func:`verify_split`,
  a kernel's blocks and merge run on a whole call (``verify --split-merge``);
* :mod:`~exactattn.call.limits`: how much one check or search may read, hold
  and take, estimated before it starts (one place for every limit);
* :mod:`exactattn.testing.report`: :func:`~exactattn.testing.report.report_sections`, the
  tables (built beside the renderer's layer, which verify does not import).

Spec files (JSON or TOML) are read and written by :mod:`exactattn.call.spec`
(``load_problem``, ``problem_text``).

Exactness: the inputs are the implementation's own inputs, floats of the
dtype, read as their exact binary values; spec-file numbers that are not
floats of the dtype are rounded to it first, and the report says how many
were.  Scores are exact rationals; shares and outputs are exact closed forms;
each is rounded to the dtype correctly (Ziv 1991; IEEE 754-2019 sec. 4.3.1).

>>> from exactattn.call import Call
>>> p = Call([[0], [0]], [[0], [0]], [[1], [3]])
>>> report = verify("numpy", p, dtype="float64")
>>> [e.exact.decimal(4) for e in report.entries], report.passed
(['2.0000', '2.0000'], True)
"""

from .check import verify
from ..numbers.formats import DTYPES, certified_scientific, round_to_format, ulp_index, ulps_between
from .impls import FunctionImpl, Impl, flop_counts, load_impl
from ..reference.reference import Reference
from .search import SearchResult, search
from .split import check_split_merge, verify_split

__all__ = ["FunctionImpl", "Impl", "Reference", "SearchResult", "check_split_merge", "load_impl",
           "round_to_format", "search", "verify", "verify_split"]
