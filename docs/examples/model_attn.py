"""Model code that broadcasts its own mask (docs/verify.md, "Masks in the caller's shape"):
queries reshaped to (B, H_kv, rep, L, E), the (B, 1, L, S) mask to (B, 1, 1, L, S)."""
import numpy as np


def attention(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    B, H, L, E = query.shape
    G = key.shape[1]
    q = query.reshape(B, G, H // G, L, E)
    s = q @ key[:, :, None].swapaxes(-1, -2) / np.sqrt(E).astype(query.dtype)
    s = np.where(attn_mask[:, :, None], s, -np.inf)          # (B, 1, L, S) -> (B, 1, 1, L, S)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return (w @ value[:, :, None]).reshape(B, H, L, -1)


def wrong_axis(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    """The mask broadcast over the wrong axis: batch 0's mask meets batch 1's queries."""
    return attention(query, key, value, attn_mask=attn_mask.swapaxes(0, 1), scale=scale)
