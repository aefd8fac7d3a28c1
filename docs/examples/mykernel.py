"""A kernel that keeps the softmax denominator as a running float16 sum (docs/verify.md, Probes):
over 4096 keys its shares come out about 16% too large, yet its random outputs pass "at terms"."""
import numpy as np


def running16(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    q, k, v = (np.asarray(a) for a in (query, key, value))
    dt = q.dtype
    s = (q @ np.swapaxes(k, -1, -2)) * dt.type(scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    e = np.exp(s - s.max(axis=-1, keepdims=True)).astype(dt)
    total = np.zeros(e.shape[:-1] + (1,), np.float16)
    for j in range(e.shape[-1]):                 # the normaliser as a running float16 sum
        total = (total + e[..., j:j + 1].astype(np.float16)).astype(np.float16)
    return ((e.astype(np.float32) @ v.astype(np.float32)) / total.astype(np.float32)).astype(dt)
