"""A numpy kernel that takes ALiBi slopes and a query offset (docs/modifiers.md):
``exactattn verify --impl mykern:attention --spec decode.json --alibi 12 --query-offset 511``."""
import numpy as np


def attention(query, key, value, *, attn_mask=None, is_causal=False, scale=None,
              alibi_slopes=None, query_offset=None):
    """softmax(scale q.k - slope (p_i - j)) v, the row maximum subtracted; query i sits at
    position p_i = query_offset + i (a decode step: the query after the cached keys)."""
    dt = query.dtype
    L, S = query.shape[-2], key.shape[-2]
    s = query @ np.swapaxes(key, -1, -2) * dt.type(1 / np.sqrt(query.shape[-1]) if scale is None else scale)
    p = np.arange(L)[:, None] + (query_offset or 0)
    j = np.arange(S)[None, :]
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes).reshape((-1, 1, 1) if s.ndim >= 3 else (1, 1))
        s = s - (slopes * (p - j)).astype(dt)
    if attn_mask is not None:
        s = np.where(attn_mask, s, -np.inf) if attn_mask.dtype == bool else s + attn_mask
    if is_causal:
        s = np.where(j <= p, s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ value
