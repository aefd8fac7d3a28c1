"""The attention calls the FLOP-counter audit runs, described once for both sides.

Each :class:`AuditCall` says what the torch side builds (an SDPA call, an
explicit matmul attention, ``nn.MultiheadAttention``, a ``transformers``
BERT self-attention layer or a GPT-2 attention block, built from small
configs, nothing downloaded) and gives the derived side its
:class:`~exactattn.cost.sizes.CallShape` (shapes, :class:`~exactattn.call.policy.
Policy`, explicit mask, projections).  The band mask of the windowed call
and GPT-2's causal mask are made from the same ``Policy.keep`` rows the
derived side reads.  Pure data: no torch here.

The sizes are small enough to check by hand: the bottom-right causal call
(4 queries, 10 keys, d_k 8, d_v 16) runs 7 + 8 + 9 + 10 = 34 pairs, so
34 x (8 + 16) = 816 MACs, where the full 4 x 10 square is 960 MACs (1920
FLOPs).

>>> [c.key for c in AUDIT_CALLS][:3]
['sdpa_top_left', 'sdpa_bottom_right', 'sdpa_window']
>>> call("sdpa_bottom_right").shape.pairs()
34
"""

from __future__ import annotations

from dataclasses import dataclass

from ..call.policy import Policy
from ..call.masks import Mask
from ..options import check_choice
from .sizes import CallShape

__all__ = ["call"]

def band_mask(n: int, window: int) -> Mask:
    """A sliding window as an explicit mask: query i sees keys i - window + 1 .. i.

    The rows of ``Policy(causal=True, window=(window - 1, 0)).keep(n, n)``
    (the one visibility rule), handed over as a mask, as the audit's torch call does.

    >>> band_mask(3, 2).rows
    ((True, False, False), (True, True, False), (False, True, True))
    """
    band = Policy(causal=True, window=(window - 1, 0))
    return Mask("bool_keep", band.keep(n, n).tolist())


@dataclass(frozen=True)
class AuditCall:
    """One call of the audit.

    ``key`` names it (``sdpa_bottom_right``); ``title`` says it in words;
    ``kind`` is how the torch side computes it (``sdpa``, ``matmul``, ``mha``,
    ``bert`` or ``gpt2``); ``shape`` its :class:`~exactattn.cost.sizes.CallShape`;
    ``impl`` the ``transformers`` attention implementation (``eager`` or
    ``sdpa``); ``ops`` the elementwise operations the implementation runs
    outside its matrix products (``softmax``, ``scale_scores``,
    ``scale_queries``, ``mask_add``: a separate softmax, a scaling of the
    scores or of the queries, an additive mask); ``bias`` whether its
    projections add biases; ``code`` the torch call, as a person would write it.
    """

    key: str
    title: str
    kind: str
    shape: CallShape
    code: str
    impl: str = ""
    ops: tuple = ()
    bias: bool = False


def _sdpa(key, title, q, k, v, code, policy=Policy(), mask=None, kind="sdpa", ops=()):
    return AuditCall(key, title, kind, CallShape(q, k, v, policy, mask), code, ops=ops)


def _layer(key, title, kind, code, *, causal=False, impl="", out_projection=True, ops=()):
    d_model, heads, tokens = 10, 2, 8
    head = (1, heads, tokens, d_model // heads)
    return AuditCall(key, title, kind,
                     CallShape(head, head, head, Policy(causal=causal), d_model=d_model,
                               out_projection=out_projection), code, impl=impl, ops=ops,
                     bias=True)


_BR = Policy(causal=True, alignment="bottom_right")
_EAGER = ("softmax", "scale_scores")

AUDIT_CALLS = (
    _sdpa("sdpa_top_left", "SDPA causal top_left, q 1x1x4x8, k 1x1x10x8, v 1x1x10x16",
          (1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
          "F.scaled_dot_product_attention(q, k, v, is_causal=True)", Policy(causal=True)),
    _sdpa("sdpa_bottom_right", "SDPA causal bottom_right, q 1x1x4x8, k 1x1x10x8, v 1x1x10x16",
          (1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
          "F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(4, 10))", _BR),
    _sdpa("sdpa_window", "SDPA windowed (band of 3, explicit mask), q k v 1x1x6x4",
          (1, 1, 6, 4), (1, 1, 6, 4), (1, 1, 6, 4),
          "F.scaled_dot_product_attention(q, k, v, attn_mask=band)", mask=band_mask(6, 3)),
    _sdpa("sdpa_gqa", "SDPA GQA, q 1x4x4x8, k v 1x2x4x8",
          (1, 4, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8),
          "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)"),
    _sdpa("sdpa_batched", "SDPA batched, q k v 2x3x4x8",
          (2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("sdpa_broadcast_query", "SDPA query broadcast, q 1x1x2x4, k v 3x1x5x4",
          (1, 1, 2, 4), (3, 1, 5, 4), (3, 1, 5, 4), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("sdpa_broadcast_kv", "SDPA key/value broadcast, q 3x1x2x4, k v 1x1x5x4",
          (3, 1, 2, 4), (1, 1, 5, 4), (1, 1, 5, 4), "F.scaled_dot_product_attention(q, k, v)"),
    _sdpa("matmul_broadcast_query", "matmul attention, query broadcast, q 1x1x2x4, "
          "k v 3x1x5x4", (1, 1, 2, 4), (3, 1, 5, 4), (3, 1, 5, 4),
          "torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 4 ** -0.5, -1), v)",
          kind="matmul", ops=_EAGER),
    _layer("mha", "nn.MultiheadAttention(10, 2), x 8x1x10", "mha",
           "nn.MultiheadAttention(10, 2)(x, x, x)", ops=("softmax", "scale_queries")),
    _layer("bert_eager", "BERT self-attention (eager), hidden 10, 2 heads, x 1x8x10", "bert",
           "BertSelfAttention(BertConfig(hidden_size=10, num_attention_heads=2))(x)",
           impl="eager", out_projection=False, ops=_EAGER),
    _layer("bert_sdpa", "BERT self-attention (sdpa), hidden 10, 2 heads, x 1x8x10", "bert",
           "BertSelfAttention(BertConfig(hidden_size=10, num_attention_heads=2))(x)",
           impl="sdpa", out_projection=False),
    _layer("gpt2_eager", "GPT-2 attention (eager, causal mask), n_embd 10, 2 heads, x 1x8x10",
           "gpt2", "GPT2Attention(GPT2Config(n_embd=10, n_head=2))(x, attention_mask=causal)",
           causal=True, impl="eager", ops=_EAGER + ("mask_add",)),
    _layer("gpt2_sdpa", "GPT-2 attention (sdpa, is_causal), n_embd 10, 2 heads, x 1x8x10",
           "gpt2", "GPT2Attention(GPT2Config(n_embd=10, n_head=2))(x)", causal=True,
           impl="sdpa"),
)

_BY_KEY = {c.key: c for c in AUDIT_CALLS}


def call(key: str) -> AuditCall:
    """The audit call named ``key``.

    Raises:
        InputError: an unknown name.
    """
    return _BY_KEY[check_choice(key, "call", tuple(_BY_KEY))]
