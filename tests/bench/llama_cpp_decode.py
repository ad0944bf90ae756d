"""Decode speed of llama.cpp (through llama-cpp-python's low-level API) on a
GGUF, the baseline of bench_decode. At every batch size B the sequences are
decoded the way llama.cpp serves several at once: one context with
n_seq_max = B, B prompts prefilled in one llama_decode, then each step one
llama_batch holding one token per sequence (sequence id s at its own
position), one llama_decode call for all B, greedy argmax of each row.
Batch 1 is the same path with one sequence.
Prints one JSON line per batch size:
{"batch": B, "decode_tok_s": ..., "prefill_tok_s": ..., "n_threads": ..., "new_tokens": ...}
Usage: llama_cpp_decode.py MODEL.gguf THREADS NEW_TOKENS [BATCHES, e.g. 1,8,32,64]"""
import ctypes
import json
import sys
import time

import numpy as np
import llama_cpp as lc

PROMPT = b"Once upon a time, in a land far away, there lived a"


def _quiet_log(level, text, user_data):
    pass


_log_cb = lc.llama_log_callback(_quiet_log)  # kept alive for the process


def tokenize(vocab, text):
    buf = (lc.llama_token * 256)()
    n = lc.llama_tokenize(vocab, text, len(text), buf, 256, True, False)
    if n < 0:
        raise RuntimeError("tokenize failed")
    return list(buf[:n])


def run_batch(model, vocab, n_vocab, prompt, n_seq, threads, new):
    cp = lc.llama_context_default_params()
    per_seq = len(prompt) + new + 8
    cp.n_seq_max = n_seq
    cp.n_ctx = ((per_seq * n_seq + 255) // 256) * 256
    cp.n_batch = max(512, len(prompt) * n_seq)
    cp.n_ubatch = 512
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.no_perf = True
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError("llama_init_from_model failed")
    cap = max(len(prompt) * n_seq, n_seq)
    batch = lc.llama_batch_init(cap, 0, 1)
    try:
        # prefill: every sequence's prompt in one call, logits of each last token
        k = 0
        for s in range(n_seq):
            for p, t in enumerate(prompt):
                batch.token[k] = t
                batch.pos[k] = p
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = s
                batch.logits[k] = p == len(prompt) - 1
                k += 1
        batch.n_tokens = k
        t0 = time.perf_counter()
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("prefill llama_decode failed")
        lc.llama_synchronize(ctx)
        t1 = time.perf_counter()
        # the outputs are in batch order: sequence s's row is output s
        logits = np.ctypeslib.as_array(lc.llama_get_logits(ctx), shape=(n_seq, n_vocab))
        toks = logits.argmax(axis=1)
        pos = len(prompt)
        t2 = time.perf_counter()
        for _ in range(new):
            for s in range(n_seq):
                batch.token[s] = int(toks[s])
                batch.pos[s] = pos
                batch.n_seq_id[s] = 1
                batch.seq_id[s][0] = s
                batch.logits[s] = True
            batch.n_tokens = n_seq
            if lc.llama_decode(ctx, batch) != 0:
                raise RuntimeError("decode llama_decode failed")
            logits = np.ctypeslib.as_array(lc.llama_get_logits(ctx), shape=(n_seq, n_vocab))
            toks = logits.argmax(axis=1)
            pos += 1
        t3 = time.perf_counter()
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
    return n_seq * new / (t3 - t2), len(prompt) * n_seq / (t1 - t0)


def main():
    path, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4].split(",")] if len(sys.argv) > 4 else [1]
    lc.llama_log_set(_log_cb, ctypes.c_void_p())
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError("cannot load " + path)
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    prompt = tokenize(vocab, PROMPT)
    run_batch(model, vocab, n_vocab, prompt, 1, threads, 4)  # warm-up: page the weights in
    for b in batches:
        dec, pre = run_batch(model, vocab, n_vocab, prompt, b, threads, new)
        print(json.dumps({"batch": b, "decode_tok_s": dec, "prefill_tok_s": pre,
                          "n_threads": threads, "new_tokens": new}), flush=True)
    lc.llama_model_free(model)


if __name__ == "__main__":
    main()
