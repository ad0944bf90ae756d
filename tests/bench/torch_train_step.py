#!/usr/bin/python3
"""The PyTorch baseline of bench_train: the same SmolLM2-shaped model, the
same 8 x 256-token batch shape and the same step (forward over packed
sequences, logprobs of the completion tokens, token-mean NLL, backward,
clip, AdamW), fp32, on the same number of threads. Prints one JSON line.
Usage: torch_train_step.py THREADS SEQS SEQ_LEN PROMPT_LEN REPEATS"""
import json
import math
import sys
import time

import torch

threads, n_seq, seq_len, n_prompt, reps = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(threads)
torch.manual_seed(0)
L, d, H, KV, hd, F, V = 30, 576, 9, 3, 64, 1536, 49152


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, H * hd, bias=False)
        self.k = torch.nn.Linear(d, KV * hd, bias=False)
        self.v = torch.nn.Linear(d, KV * hd, bias=False)
        self.o = torch.nn.Linear(H * hd, d, bias=False)
        self.n2 = torch.nn.Parameter(torch.ones(d))
        self.g = torch.nn.Linear(d, F, bias=False)
        self.u = torch.nn.Linear(d, F, bias=False)
        self.dn = torch.nn.Linear(F, d, bias=False)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


emb = torch.nn.Parameter(torch.randn(V, d) * 0.02)
blocks = torch.nn.ModuleList([Block() for _ in range(L)])
norm = torch.nn.Parameter(torch.ones(d))
params = [emb, norm] + list(blocks.parameters())
opt = torch.optim.AdamW(params, lr=1e-5)
tokens = torch.randint(0, V, (n_seq, seq_len))
inv = 1.0 / (100000.0 ** (torch.arange(0, hd, 2).float() / hd))
ang = torch.arange(seq_len).float()[:, None] * inv[None, :]
cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()


def rope(x):  # (B, h, T, hd)
    h2 = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h2:], x[..., :h2]), -1) * sin


def step(train):
    x = emb[tokens]
    B, T = tokens.shape
    for b in blocks:
        h = rms(x, b.n1)
        q = rope(b.q(h).view(B, T, H, hd).transpose(1, 2))
        k = rope(b.k(h).view(B, T, KV, hd).transpose(1, 2)).repeat_interleave(H // KV, 1)
        v = b.v(h).view(B, T, KV, hd).transpose(1, 2).repeat_interleave(H // KV, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        x = x + b.o((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd))
        h = rms(x, b.n2)
        x = x + b.dn(torch.nn.functional.silu(b.g(h)) * b.u(h))
    h = rms(x, norm)[:, n_prompt - 1:-1]  # positions that predict completion tokens
    logp = (h @ emb.T).log_softmax(-1).gather(-1, tokens[:, n_prompt:, None])
    loss = -logp.mean()
    if train:
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return loss


with torch.no_grad():
    step(False)
t0 = time.time()
with torch.no_grad():
    for _ in range(reps):
        step(False)
fwd = (time.time() - t0) / reps
step(True)
t0 = time.time()
for _ in range(reps):
    step(True)
train = (time.time() - t0) / reps
print(json.dumps({"torch": torch.__version__, "threads": threads, "forward_s": fwd, "train_s": train,
                  "tokens": n_seq * seq_len}))
