"""A kernel in a package of your own: ``exactattn verify --impl mypkg.kernels:attention``
(run from the folder that holds ``mypkg/``).  SDPA itself here, so the check passes."""
import torch.nn.functional as F


def attention(query, key, value, *, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
