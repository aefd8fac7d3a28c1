"""Attention kernels in numpy that each get one convention another way (docs/identify.md).

``attention`` is softmax(scale q k^T) v in float64, rounded once to the inputs' dtype,
in SDPA's signature with the modifiers ``exactattn identify`` hands over; each kernel
below is it with one convention changed, the way real kernels differ.
"""

import math
from functools import partial

import numpy as np


def _slopes(h):
    def rule(n):
        return [2.0 ** (-8 * k / n) for k in range(1, n + 1)]
    p = 1 << (h.bit_length() - 1)
    return rule(h) if p == h else rule(p) + rule(2 * p)[0::2][:h - p]


def _rotate(x, theta, layout):
    d, pos = x.shape[-1], np.arange(x.shape[-2], dtype=float)[:, None]
    out = x.copy()
    for k in range(d // 2):
        a, b = (k, k + d // 2) if layout == "half" else (2 * k, 2 * k + 1)
        c, s = np.cos(pos[:, 0] * theta ** (-2 * k / d)), np.sin(pos[:, 0] * theta ** (-2 * k / d))
        out[..., a], out[..., b] = x[..., a] * c - x[..., b] * s, x[..., a] * s + x[..., b] * c
    return out


def attention(query, key, value, *, attn_mask=None, is_causal=False, scale=None,
              enable_gqa=False, window=None, softcap=None, sink=None, alibi_slopes=None,
              rope_theta=None, rope_layout=None, return_lse=False,
              scale_rule="sqrt", causal="top_left", bounds=(0, 0), heads_map="interleave",
              empty=0.0, lse_base=math.e, sink_in_lse=True, cap_raw=False, symmetric=False,
              theta=None, layout=None):
    dt = query.dtype
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (query, key, value))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v = ((np.tile(a, (g, 1, 1)) if heads_map == "tile" else np.repeat(a, g, axis=-3))
                for a in (k, v))
    if rope_theta is not None:
        q, k = (_rotate(a, theta or rope_theta, layout or rope_layout) for a in (q, k))
    if scale is None:
        scale = {"sqrt": 1 / math.sqrt(E), "d": 1 / E}[scale_rule]
    raw = q @ np.swapaxes(k, -1, -2)
    s = raw * scale
    if softcap is not None:
        s = scale * softcap * np.tanh(raw / softcap) if cap_raw else softcap * np.tanh(s / softcap)
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    if alibi_slopes is not None:
        s = s + np.asarray(alibi_slopes)[:, None, None] * (-np.abs(i - j) if symmetric else j - i)
    keep = np.ones((L, S), dtype=bool)
    if is_causal:
        keep &= j <= i + (S - L if causal == "bottom_right" else 0)
    if window is not None:
        keep &= (j >= i - window[0] + bounds[0]) & (j <= i + window[1] - bounds[1])
    if attn_mask is not None:
        keep = keep & attn_mask
    s = np.where(keep, s, -np.inf)
    cols = s if sink is None else np.concatenate([s, np.full(s.shape[:-1] + (1,), sink)], -1)
    top = np.max(cols, axis=-1, keepdims=True)
    hit = ~np.isfinite(top)
    top = np.where(hit, 0, top)
    den = np.exp(cols - top).sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(hit, empty, (np.exp(cols - top) / den)[..., :S])
        out = (p @ v).astype(dt)
        if not return_lse:
            return out
        lse = top + np.log(den if sink_in_lse else np.exp(s - top).sum(-1, keepdims=True))
    return out, (lse[..., 0] / math.log(lse_base)).astype(dt)


def alibi_by_heads(query, key, value, *, scale=None, alibi_heads=None):
    """Derives its ALiBi slopes from the head count, as the first h of 8 heads' (2^-k)."""
    slopes = [2.0 ** -k for k in range(1, alibi_heads + 1)] if alibi_heads else None
    return attention(query, key, value, scale=scale, alibi_slopes=slopes)


one_over_d = partial(attention, scale_rule="d")            # scale 1/d_k
flash_causal = partial(attention, causal="bottom_right")   # causal aligned bottom-right
right_exclusive = partial(attention, bounds=(0, 1))        # window keys p - left .. p + right - 1
tiled = partial(attention, heads_map="tile")                     # head h reads key/value head h % H_kv
lse_bits = partial(attention, lse_base=2.0)                # the log-sum-exp in base 2
sink_outside = partial(attention, sink_in_lse=False)       # the sink left out of the lse
cap_before_scale = partial(attention, cap_raw=True)        # scale * cap * tanh(q.k / cap)
symmetric_alibi = partial(attention, symmetric=True)       # -m |i - j|
interleaved = partial(attention, layout="interleaved")     # RoPE pairs (2k, 2k + 1)
llama3_base = partial(attention, theta=500000.0)           # RoPE base 500000 whatever is asked


def ignores_mask(query, key, value, *, attn_mask=None, scale=None):
    """Takes attn_mask and never applies it."""
    return attention(query, key, value, scale=scale)


def batch_variant(query, key, value, *, attn_mask=None, scale=None):
    """In the inputs' dtype; the normaliser summed left to right when the batch holds more than
    two entries (another reduction order for another batch size: not batch-invariant)."""
    s = (query @ np.swapaxes(key, -1, -2)) * query.dtype.type(scale or 1 / np.sqrt(query.shape[-1]))
    if attn_mask is not None:
        s = np.where(attn_mask, s, query.dtype.type(-np.inf))
    e = np.exp(s - s.max(-1, keepdims=True))
    big = query.ndim == 4 and query.shape[0] > 2
    return (e / (np.cumsum(e, -1)[..., -1:] if big else e.sum(-1, keepdims=True))) @ value


def split_kv(query, key, value, *, scale=None, num_splits=1):
    """Split-KV in the inputs' dtype: the keys in num_splits blocks, the blocks' sums added."""
    s = (query @ np.swapaxes(key, -1, -2)) * query.dtype.type(scale or 1 / np.sqrt(query.shape[-1]))
    e = np.exp(s - s.max(-1, keepdims=True))
    blocks = np.array_split(np.arange(key.shape[-2]), num_splits)
    return sum(e[..., b] @ value[..., b, :] for b in blocks) / sum(
        e[..., b].sum(-1, keepdims=True) for b in blocks)
