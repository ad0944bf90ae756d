#!/usr/bin/env python3
"""Reference token ids and greedy continuations of the real Gemma 3 270M GGUF
(models/gemma-3-270m-q4_k_m.gguf, from `scripts/fetch-model.sh gemma3-270m`)
computed by llama.cpp (llama-cpp-python) on the same file, for
tests/unit/test_gemma3.c.

Writes tests/reference/fixtures/gemma3.jsonl, one JSON object a line:
  {"text": ..., "ids": [...], "ids_plain": [...]}   tokenizer cases: "ids" with
      special-token text parsed (llama_tokenize special=True), "ids_plain"
      with it off (special=False); neither adds BOS (our encode never does);
      "decoded": llama.cpp's detokenize(ids, special=True) (the text, except
      that a literal U+2581 comes back as a space)
  {"greedy": prompt, "prompt_ids": [...], "generated": [...]}  BOS + the
      prompt (specials parsed), then 16 tokens of temperature-0 (argmax)
      decoding by llama.cpp, stopping early only at EOS / <end_of_turn>.
      Where llama.cpp cannot decode (llama-cpp-python 0.3.36 built with its
      defaults segfaults in llama_decode on CPUs that report AMX inside a VM;
      build it with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON
      -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF" to avoid that),
      they come from transformers' Gemma3ForCausalLM in fp32 on gguf-py's
      dequantization instead, with "reference" saying so and "margins" (the
      top-1 minus top-2 logit per step) so a near-tie can be told apart

Rerun (CPU is enough; takes under a minute):
    source /work/venv-ref/env.sh   # or: pip install llama-cpp-python gguf torch transformers
    scripts/fetch-model.sh gemma3-270m
    python3 tests/reference/make_gemma3_fixtures.py models/gemma-3-270m-q4_k_m.gguf tests/reference/fixtures
"""
import json
import os
import subprocess
import sys

import llama_cpp

TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t tab\tand  spaces   here    ",
    "Hello world",
    " Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "line one\nline two\r\nline three\n\nend",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "1234567890 3.14159 -42 1e-5 0x1F 2026-12-04",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd",
    "emoji \U0001f600\U0001f680\U0001f44d\U0001f3fd and \u2764\ufe0f flags \U0001f1fa\U0001f1f8",
    "math: \u2211 x\u00b2 \u2264 \u221e, \u03b1\u03b2\u03b3",
    "def f(x):\n    return x * 2  # double\n\nprint(f(21))\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n",
    "text with <end_of_turn> inside and <pad> too",
    "<unused0> <mask> [multimodal]",
    "https://example.com/path?q=1&r=two#frag",
    "ALL CAPS SHOUTING and MiXeD CaSe",
    "trailing spaces   ",
    "   leading spaces",
    "\u2581already has the sentencepiece marker",
    "a" * 40 + " " + "ab" * 20,
]

GREEDY = [
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "The quick brown fox",
    "def fibonacci(n):\n",
]
N_NEW = 16


def greedy(model, out_path):
    """The greedy continuations, in a child process: llama-cpp-python 0.3.36
    as built in /work/venv-ref crashes (SIGSEGV in llama_decode, AMX/repack
    CPU path) on this machine, and the tokenizer cases must not be lost."""
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=2, verbose=False)
    eos = {llm.token_eos()}
    eot = llm.tokenize(b"<end_of_turn>", add_bos=False, special=True)
    if len(eot) == 1:
        eos.add(eot[0])
    with open(out_path, "w", encoding="utf-8") as f:
        for p in GREEDY:
            prompt = [llm.token_bos()] + llm.tokenize(p.encode("utf-8"), add_bos=False, special=True)
            llm.reset()
            gen = []
            for tok in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
                gen.append(int(tok))
                if tok in eos or len(gen) >= N_NEW:
                    break
            f.write(json.dumps({"greedy": p, "prompt_ids": prompt, "generated": gen,
                                "generated_text": llm.detokenize(gen).decode("utf-8", "replace")},
                               ensure_ascii=False) + "\n")


def greedy_transformers(model, out_path):
    """The same continuations from Hugging Face transformers' Gemma3ForCausalLM
    in float32 on the file's weights dequantized by gguf-py (independent of
    our dequantizer and of llama.cpp's quantized matmuls), used when llama.cpp
    cannot decode here. HF holds Gemma's norm weights as w with scale 1 + w,
    the GGUF 1 + w: 1 is taken off. "margins" is the gap between the best and
    the second-best logit at each step, so a mismatch on a near-tie shows."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.set_num_threads(2)
    r = GGUFReader(model)
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")
         or k.endswith("_id")}
    n_layers = f["gemma3.block_count"]
    cfg = Gemma3TextConfig(
        vocab_size=r.get_tensor(0).shape[-1] if False else len(r.fields["tokenizer.ggml.tokens"].data),
        hidden_size=f["gemma3.embedding_length"], intermediate_size=f["gemma3.feed_forward_length"],
        num_hidden_layers=n_layers, num_attention_heads=f["gemma3.attention.head_count"],
        num_key_value_heads=f["gemma3.attention.head_count_kv"], head_dim=f["gemma3.attention.key_length"],
        max_position_embeddings=f["gemma3.context_length"], rms_norm_eps=f["gemma3.attention.layer_norm_rms_epsilon"],
        sliding_window=f["gemma3.attention.sliding_window"], query_pre_attn_scalar=f["gemma3.attention.key_length"],
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n_layers)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": f["gemma3.rope.freq_base"]},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        tie_word_embeddings=True, final_logit_softcapping=None, attn_logit_softcapping=None,
        bos_token_id=f["tokenizer.ggml.bos_token_id"], eos_token_id=f["tokenizer.ggml.eos_token_id"],
        pad_token_id=f["tokenizer.ggml.padding_token_id"])
    cfg._attn_implementation = "eager"
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    per = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
           "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
           "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {}
    for t in r.tensors:
        if t.name in names:
            hf = names[t.name]
        else:
            _, l, rest = t.name.split(".", 2)
            hf = "model.layers.%s.%s.weight" % (l, per[rest.rsplit(".", 1)[0]])
        a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        a = a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim != len(t.shape) else a
        w = torch.from_numpy(np.ascontiguousarray(a))
        if hf.endswith(("norm.weight", "layernorm.weight")):
            w = w - 1.0
        sd[hf] = w
    m = Gemma3ForCausalLM(cfg)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    m.tie_weights()
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    m.eval()
    llm = llama_cpp.Llama(model_path=model, n_ctx=64, vocab_only=True, verbose=False)
    eos = {llm.token_eos()}
    eot = llm.tokenize(b"<end_of_turn>", add_bos=False, special=True)
    if len(eot) == 1:
        eos.add(eot[0])
    with open(out_path, "w", encoding="utf-8") as out, torch.no_grad():
        for p in GREEDY:
            prompt = [llm.token_bos()] + llm.tokenize(p.encode("utf-8"), add_bos=False, special=True)
            cur, gen, margins = list(prompt), [], []
            for _ in range(N_NEW):
                logits = m(torch.tensor([cur])).logits[0, -1].double()
                top = torch.topk(logits, 2)
                tok = int(top.indices[0])
                gen.append(tok)
                margins.append(round(float(top.values[0] - top.values[1]), 4))
                cur.append(tok)
                if tok in eos:
                    break
            out.write(json.dumps({"greedy": p, "prompt_ids": prompt, "generated": gen, "margins": margins,
                                  "reference": "transformers Gemma3ForCausalLM fp32 on gguf-py dequantized weights",
                                  "generated_text": llm.detokenize(gen, special=True).decode("utf-8", "replace")},
                                 ensure_ascii=False) + "\n")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--greedy":
        greedy(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--greedy-transformers":
        greedy_transformers(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model, out_dir = sys.argv[1], sys.argv[2]
    llm = llama_cpp.Llama(model_path=model, n_ctx=64, vocab_only=True, verbose=False)
    lines = []
    for t in TEXTS:
        b = t.encode("utf-8")
        ids = llm.tokenize(b, add_bos=False, special=True) if b else []
        plain = llm.tokenize(b, add_bos=False, special=False) if b else []
        dec = llm.detokenize(ids, special=True).decode("utf-8", "replace") if ids else ""
        lines.append(json.dumps({"text": t, "ids": ids, "ids_plain": plain, "decoded": dec}, ensure_ascii=False))
    path = os.path.join(out_dir, "gemma3.jsonl")
    tmp = path + ".greedy.tmp"
    r = subprocess.run([sys.executable, __file__, "--greedy", model, tmp])
    n_greedy = 0
    if r.returncode == 0:
        with open(tmp, encoding="utf-8") as f:
            g = [x.rstrip("\n") for x in f if x.strip()]
        lines += g
        n_greedy = len(g)
    else:
        print(f"llama.cpp cannot decode here (exit {r.returncode}); greedy continuations from transformers",
              file=sys.stderr)
        r = subprocess.run([sys.executable, __file__, "--greedy-transformers", model, tmp])
        if r.returncode == 0:
            with open(tmp, encoding="utf-8") as f:
                g = [x.rstrip("\n") for x in f if x.strip()]
            lines += g
            n_greedy = len(g)
        else:
            print("greedy continuations FAILED; written without them", file=sys.stderr)
    if os.path.exists(tmp):
        os.unlink(tmp)
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    print(f"wrote {path}: {len(TEXTS)} tokenizer cases, {n_greedy} greedy continuations")


if __name__ == "__main__":
    main()
