# capmods.py
import torch

def softcap(score, b, h, q_idx, kv_idx):
    return 5 * torch.tanh(score / 5)

def softcap_nodiv(score, b, h, q_idx, kv_idx):      # the division forgotten
    return 5 * torch.tanh(score)

def window(b, h, q_idx, kv_idx):                    # causal, the query and 2 keys before it
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 2)
