"""Decode speed of llama.cpp (through llama-cpp-python) on a GGUF at batch 1,
the baseline of bench_decode. Prints one JSON line:
{"decode_tok_s": ..., "prefill_tok_s": ..., "n_threads": ..., "weights": "<GGUF types>"}
Usage: llama_cpp_decode.py MODEL.gguf THREADS NEW_TOKENS"""
import json
import sys
import time

from llama_cpp import Llama

path, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
            verbose=False, seed=0)
prompt = llm.tokenize(b"Once upon a time, in a land far away, there lived a", add_bos=True)
# warm-up (page in the weights)
llm.reset()
llm.eval(prompt)
llm.reset()
t0 = time.perf_counter()
llm.eval(prompt)
t1 = time.perf_counter()
tok = prompt[-1]
n = 0
t2 = time.perf_counter()
for _ in range(new):
    llm.eval([tok])
    logits = llm.scores[llm.n_tokens - 1]
    tok = int(logits.argmax())
    n += 1
t3 = time.perf_counter()
print(json.dumps({"decode_tok_s": n / (t3 - t2), "prefill_tok_s": len(prompt) / (t1 - t0),
                  "n_threads": threads}))
