"""GGUF out (Policy.save_gguf / rlp_policy_save_gguf): the written file
loads back with the same logprobs (F32: the same weights bit for bit, so
exactly equal), its metadata has the keys and value types llama.cpp reads
(checked with gguf-py's GGUFReader when `gguf` is importable), its
quantized tensors are byte for byte what gguf-py's quantizer makes from the
same fp32 weights, and llama.cpp (llama-cpp-python, when importable) gives
the same greedy tokens and logprobs within tolerance as our policy on
SmolLM2. Tests that need gguf, llama_cpp or the SmolLM2 file skip without
them."""
import math
import os
from pathlib import Path

import pytest

import rlpost

from conftest import ROOT

TINY = ROOT / "tests" / "reference" / "fixtures" / "tiny_tied.gguf"
GEMMA3 = Path(os.environ.get("RLPOST_MODEL_DIR") or ROOT / "models") / "gemma-3-270m-q4_k_m.gguf"


def test_save_gguf_round_trip_tiny(ctx, tmp_path):
    out = tmp_path / "tiny.gguf"
    seq = [([0, 1, 2, 3, 4, 5, 1, 2], 1)]
    with rlpost.Policy(ctx, TINY) as p:
        want = list(p.logprobs(seq))
        p.save_gguf(out, type="F32", name="tiny")
        with rlpost.Policy(ctx, out) as q:
            assert list(q.logprobs(seq)) == want  # same weights bit for bit: same floats
            assert list(q.tokenizer.encode("ab")) == list(p.tokenizer.encode("ab"))
        # every type is accepted by name and by enum (rows of 4: F16 fallback for the block types)
        for t in ("f16", "bf16", "q8_0", rlpost.GGUFType.Q4_0):
            p.save_gguf(out, type=t, embed_type="f32")
            with rlpost.Policy(ctx, out) as q:
                got = list(q.logprobs(seq))
                assert max(abs(a - b) for a, b in zip(got, want)) < 0.05
        assert rlpost.gguf_type("Q8_0") == rlpost.GGUFType.Q8_0
        # bad input: a clear error, nothing written
        bad = tmp_path / "bad.gguf"
        with pytest.raises(rlpost.InvalidArgumentError, match="q5_k"):
            p.save_gguf(bad, type="q5_k")
        with pytest.raises(rlpost.InvalidArgumentError, match="type 3"):
            p.save_gguf(bad, type=3)
        with pytest.raises(rlpost.IOError, match="no-such-dir"):
            p.save_gguf(tmp_path / "no-such-dir" / "x.gguf", type="f32")
        assert not bad.exists() and sorted(os.listdir(tmp_path)) == ["tiny.gguf"]
        with pytest.raises(rlpost.FormatError, match="not a GGUF"):
            p.save_gguf(bad, tokenizer_gguf=ROOT / "README.md")
        # a policy whose tokenizer came from tokenizer.json (an HF folder, as a
        # resumed checkpoint): its keys are built from the tokenizer, or copied
        # from a GGUF named apart
        p.save(tmp_path / "hf")
    with rlpost.Policy(ctx, tmp_path / "hf") as h:
        for tg in (None, TINY):
            h.save_gguf(bad, type="f32", tokenizer_gguf=tg)
            with rlpost.Policy(ctx, bad) as q:
                assert list(q.logprobs(seq)) == want
                assert list(q.tokenizer.encode("abab")) == list(h.tokenizer.encode("abab"))


def test_chat_template_in_use_is_written(ctx, tmp_path):
    """The template the policy renders with goes into the GGUF: a built-in
    kind chosen on a tokenizer that shipped none is written as its Jinja
    source, which the reloaded tokenizer recognises as the same kind."""
    out = tmp_path / "chat.gguf"
    with rlpost.Policy(ctx, TINY) as p:
        p.save_gguf(out, type="f32")
        with rlpost.Policy(ctx, out) as q:
            assert q.tokenizer.chat_template == p.tokenizer.chat_template
        for name in ("chatml", "qwen3", "gemma3"):
            p.tokenizer.set_chat_template(name)
            p.save_gguf(out, type="f32")
            with rlpost.Policy(ctx, out) as q:
                assert q.tokenizer.chat_template == name
    gguf = pytest.importorskip("gguf")
    assert "<start_of_turn>" in gguf.GGUFReader(out).fields["tokenizer.chat_template"].contents()


def _field(reader, key):
    f = reader.fields[key]
    return f, f.types


def test_gguf_reader_metadata(ctx, tmp_path):
    gguf = pytest.importorskip("gguf")
    out = tmp_path / "tiny.gguf"
    with rlpost.Policy(ctx, TINY) as p:
        p.save_gguf(out, type="f16", name="tiny-test")
    r = gguf.GGUFReader(out)
    V = gguf.GGUFValueType
    want = {
        "general.architecture": V.STRING, "general.name": V.STRING, "general.file_type": V.UINT32,
        "llama.block_count": V.UINT32, "llama.context_length": V.UINT32, "llama.embedding_length": V.UINT32,
        "llama.feed_forward_length": V.UINT32, "llama.attention.head_count": V.UINT32,
        "llama.attention.head_count_kv": V.UINT32, "llama.attention.key_length": V.UINT32,
        "llama.attention.value_length": V.UINT32, "llama.rope.dimension_count": V.UINT32,
        "llama.vocab_size": V.UINT32, "llama.rope.freq_base": V.FLOAT32,
        "llama.attention.layer_norm_rms_epsilon": V.FLOAT32, "tokenizer.ggml.model": V.STRING,
        "tokenizer.ggml.tokens": V.ARRAY, "tokenizer.ggml.bos_token_id": V.UINT32,
    }
    for key, t in want.items():
        f, types = _field(r, key)
        assert types[0] == t, key
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["general.name"].contents() == "tiny-test"
    assert r.fields["general.file_type"].contents() == 1  # MOSTLY_F16
    assert r.fields["llama.block_count"].contents() == 1
    assert r.fields["llama.embedding_length"].contents() == 4
    assert abs(r.fields["llama.attention.layer_norm_rms_epsilon"].contents() - 1e-5) < 1e-12
    assert r.fields["tokenizer.ggml.tokens"].types == [V.ARRAY, V.STRING]
    src = gguf.GGUFReader(TINY)
    assert r.fields["tokenizer.ggml.tokens"].contents() == src.fields["tokenizer.ggml.tokens"].contents()
    assert r.fields["tokenizer.ggml.merges"].contents() == src.fields["tokenizer.ggml.merges"].contents()
    names = {t.name: t for t in r.tensors}
    assert "output.weight" not in names  # tied head
    assert set(names) == {t.name for t in src.tensors}
    for t in r.tensors:  # GGUF dims: innermost first, as in the source; 1-D in F32
        assert list(t.shape) == list(next(s for s in src.tensors if s.name == t.name).shape)
        assert t.tensor_type == (gguf.GGMLQuantizationType.F32 if len(t.shape) == 1 else gguf.GGMLQuantizationType.F16)


@pytest.fixture(scope="module")
def smollm2_files(smollm2_path, tmp_path_factory):
    """SmolLM2 loaded by us, saved as F32 and in each quantized type."""
    d = tmp_path_factory.mktemp("gguf_out")
    files = {}
    with rlpost.Context(n_threads=2, seed=1) as c, rlpost.Policy(c, smollm2_path, trainable=False) as p:
        for t in ("f32", "q8_0", "q4_0", "bf16", "q4_k"):
            files[t] = d / ("smollm2-%s.gguf" % t)
            p.save_gguf(files[t], type=t)
    return files


def test_quantized_bytes_equal_gguf_py(smollm2_files):
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    from gguf import quants
    ref = {t.name: t for t in gguf.GGUFReader(smollm2_files["f32"]).tensors}
    Q = gguf.GGMLQuantizationType
    for name, qt in (("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("bf16", Q.BF16)):
        n_checked = 0
        for t in gguf.GGUFReader(smollm2_files[name]).tensors:
            f32 = np.asarray(ref[t.name].data, dtype=np.float32)
            if len(t.shape) == 1:
                assert t.tensor_type == Q.F32 and np.array_equal(np.asarray(t.data), f32), t.name
                continue
            assert t.tensor_type == qt, t.name
            want = quants.quantize(f32, qt)
            got = np.asarray(t.data)
            assert got.tobytes() == want.tobytes(), "%s %s" % (name, t.name)
            n_checked += 1
        assert n_checked == 30 * 7 + 1  # every layer's 7 matrices and the embedding


def test_tokenizer_keys_from_tokenizer_json(smollm2_path, tmp_path):
    """SmolLM2 saved as an HF folder (tokenizer.json written from the GGUF),
    loaded back, saved as GGUF: the tokenizer keys llama.cpp reads equal the
    original GGUF's (the merges, rebuilt from the tokenizer's table, in the
    same order)."""
    gguf = pytest.importorskip("gguf")
    with rlpost.Context(n_threads=2, seed=1) as c:
        with rlpost.Policy(c, smollm2_path, trainable=False) as p:
            p.save(tmp_path / "hf", rlpost.DType.BF16)
        with rlpost.Policy(c, tmp_path / "hf", trainable=False) as h:
            h.save_gguf(tmp_path / "out.gguf", type="bf16")
    a, b = gguf.GGUFReader(smollm2_path), gguf.GGUFReader(tmp_path / "out.gguf")
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.add_bos_token"):
        assert b.fields[key].contents() == a.fields[key].contents(), key
    assert b.fields["tokenizer.chat_template"].contents() == a.fields["tokenizer.chat_template"].contents()


def test_q4_k_bytes_equal_llama_cpp(smollm2_files, tmp_path):
    """Q4_K (no importance matrix) is byte for byte what llama.cpp's own
    quantizer (llama_model_quantize, Q4_K_S, pure) makes from our F32 file,
    for every tensor both write in Q4_K (SmolLM2's rows of 1536; rows of 576
    are not whole 256-blocks: llama.cpp falls back to Q5_0, we to Q8_0)."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    llama_cpp = pytest.importorskip("llama_cpp")
    import ctypes
    ref = tmp_path / "llama-q4_k.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 14  # LLAMA_FTYPE_MOSTLY_Q4_K_S
    params.pure = True
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(smollm2_files["f32"]).encode(), str(ref).encode(),
                                          ctypes.byref(params)) == 0
    Q = gguf.GGMLQuantizationType
    ours = {t.name: t for t in gguf.GGUFReader(smollm2_files["q4_k"]).tensors}
    n = 0
    for t in gguf.GGUFReader(ref).tensors:
        if t.tensor_type != Q.Q4_K:
            continue
        assert ours[t.name].tensor_type == Q.Q4_K, t.name
        assert np.asarray(ours[t.name].data).tobytes() == np.asarray(t.data).tobytes(), t.name
        n += 1
    assert n == 30  # every layer's ffn_down
    for name, t in ours.items():
        if len(t.shape) == 2:
            assert t.tensor_type == (Q.Q4_K if t.shape[0] % 256 == 0 else Q.Q8_0), name


PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a little"]
N_NEW = 16


def _llama_logprobs(llm, tokens, n_prompt):
    """llama.cpp's logprob of tokens[n_prompt:] and its argmax at each of those positions."""
    np = pytest.importorskip("numpy")
    llm.reset()
    llm.eval(tokens)
    scores = np.asarray(llm.scores[:len(tokens)], dtype=np.float64)
    lp, argmax, gap = [], [], []
    for i in range(n_prompt, len(tokens)):
        row = scores[i - 1]
        m = row.max()
        lse = m + math.log(np.exp(row - m).sum())
        lp.append(row[tokens[i]] - lse)
        argmax.append(int(row.argmax()))
        gap.append(m - row[tokens[i]])
    return lp, argmax, gap


def _llama(llama_cpp, path):
    """llama.cpp on `path`, KV cache in F32 (no fp16 rounding of K and V),
    without ggml's extra CPU buffer types: their AMX matmul crashes in this
    llama-cpp-python build on this machine's CPU (SIGSEGV in
    ggml_backend_amx_mul_mat, for llama.cpp's own Q4_1 SmolLM2 file too);
    the plain CPU kernels compute the same products."""
    import llama_cpp.llama as impl
    default = impl.llama_cpp.llama_model_default_params

    def params():
        p = default()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p
    impl.llama_cpp.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(path), n_ctx=256, logits_all=True, n_threads=2, verbose=False,
                               type_k=0, type_v=0)
    finally:
        impl.llama_cpp.llama_model_default_params = default


@pytest.mark.parametrize("type_,tol", [("f32", 1e-3), ("bf16", 0.1), ("q8_0", 0.25), ("q4_0", 0.5), ("q4_k", 0.5)])
def test_llama_cpp_matches_our_policy(smollm2_files, type_, tol):
    """Our greedy completion of each prompt (policy loaded from the written
    file), scored by llama.cpp on the same file: every greedy token equals
    llama.cpp's argmax there (so its greedy decode is the same), and the
    logprobs agree within `tol` nats (F32, with llama.cpp's KV cache in F32
    too: summation order only, 1.4e-5 seen; BF16: llama.cpp rounds the
    activations to bf16 in its BF16 matmuls, 2.9e-2 seen; Q8_0: to 8 bits
    in its Q8_0 matmuls, 0.13 seen; Q4_0: likewise, 0.31 seen, and one of
    the 48 positions a near tie that llama.cpp's rounding tips the other
    way: there our token is within `tol` of llama.cpp's best)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    path = smollm2_files[type_]
    llm = _llama(llama_cpp, path)
    worst, worst_gap, n_tok, n_same = 0.0, 0.0, 0, 0
    with rlpost.Context(n_threads=2, seed=1) as c, rlpost.Policy(c, path, trainable=False) as p, \
            rlpost.RolloutEngine(p, max_batch=4, max_seq_len=128) as eng:
        for text in PROMPTS:
            prompt = p.tokenizer.encode(text)
            assert llm.tokenize(text.encode(), add_bos=False) == list(prompt)
            b = eng.generate([list(prompt)], temperature=0.0, max_new_tokens=N_NEW, ignore_eos=True)
            comp = list(b[0].completion_tokens)
            ours = list(p.logprobs([(list(prompt) + comp, len(prompt))]))
            theirs, argmax, gap = _llama_logprobs(llm, list(prompt) + comp, len(prompt))
            n_tok += len(comp)
            n_same += sum(a == t for a, t in zip(argmax, comp))
            worst_gap = max(worst_gap, max(gap))
            worst = max(worst, max(abs(a - b) for a, b in zip(ours, theirs)))
    print("llama.cpp vs rlpost on SmolLM2 %s: %d/%d greedy tokens equal, max |dlogprob| %.2e, "
          "largest shortfall of our greedy token from llama.cpp's best %.2e"
          % (type_, n_same, n_tok, worst, worst_gap))
    assert n_same == n_tok if type_ not in ("q4_0", "q4_k") else n_same >= n_tok - 2
    assert worst < tol and worst_gap < tol


def test_llama2c_without_tokenizer_is_refused(policy, tmp_path):
    """stories260K (llama2.c) has no tokenizer: a GGUF without one would
    load nowhere, so it is refused by name, with nothing written."""
    with pytest.raises(rlpost.UnsupportedError, match="no tokenizer"):
        policy.save_gguf(tmp_path / "s.gguf", type="f32")
    assert not (tmp_path / "s.gguf").exists()


def _compare_with_llama_cpp(llama_cpp, path, add_bos):
    """(greedy tokens equal, tokens, max |dlogprob|, largest shortfall)."""
    llm = _llama(llama_cpp, path)
    worst, worst_gap, n_tok, n_same = 0.0, 0.0, 0, 0
    with rlpost.Context(n_threads=2, seed=1) as c, rlpost.Policy(c, path, trainable=False) as p, \
            rlpost.RolloutEngine(p, max_batch=4, max_seq_len=128) as eng:
        for text in PROMPTS:
            prompt = list(p.tokenizer.encode(text, add_bos=add_bos))
            assert llm.tokenize(text.encode(), add_bos=add_bos) == prompt
            comp = list(eng.generate([prompt], temperature=0.0, max_new_tokens=N_NEW, ignore_eos=True)[0]
                        .completion_tokens)
            ours = list(p.logprobs([(prompt + comp, len(prompt))]))
            theirs, argmax, gap = _llama_logprobs(llm, prompt + comp, len(prompt))
            n_tok += len(comp)
            n_same += sum(a == t for a, t in zip(argmax, comp))
            worst = max(worst, max(abs(a - b) for a, b in zip(ours, theirs)))
            worst_gap = max(worst_gap, max(gap))
    return n_same, n_tok, worst, worst_gap


def test_llama_cpp_gemma3_f32(tmp_path):
    """The real Gemma 3 270M through our GGUF out (F32: sandwich norms, q/k
    norms, sliding-window layers, SentencePiece vocabulary copied): llama.cpp
    greedy-decodes what our policy does, logprobs within 1e-2 nats (2.9e-3
    seen; llama.cpp's GELU is a table lookup in fp16)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    pytest.importorskip("numpy")
    if not GEMMA3.is_file():
        pytest.skip("no %s (scripts/fetch-model.sh gemma3-270m)" % GEMMA3)
    out = tmp_path / "gemma3-f32.gguf"
    with rlpost.Context(n_threads=2, seed=1) as c, rlpost.Policy(c, GEMMA3, trainable=False) as p:
        p.save_gguf(out, type="f32")
    n_same, n_tok, worst, gap = _compare_with_llama_cpp(llama_cpp, out, add_bos=True)
    print("llama.cpp vs rlpost on Gemma 3 270M f32: %d/%d greedy tokens equal, max |dlogprob| %.2e"
          % (n_same, n_tok, worst))
    assert n_same == n_tok and worst < 1e-2
