"""Two torch kernels with a shape bug each, for ``exactattn verify --search`` (docs/verify.md)."""
import torch.nn.functional as F


def gqa_tiled(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    """Grouped heads repeated with repeat (head h reads h % H_kv), not repeat_interleave."""
    if enable_gqa:
        rep = query.shape[-3] // key.shape[-3]
        key, value = key.repeat(1, rep, 1, 1), value.repeat(1, rep, 1, 1)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale)


def batch0_mask(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    """Batch 0's mask used for every batch."""
    if attn_mask is not None and attn_mask.dim() == 4:
        attn_mask = attn_mask[:1]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale,
                                          enable_gqa=enable_gqa)
