"""Backends, contexts (with a Python log callback) and tokenizers."""
import threading

import pytest

import rlpost
from rlpost import HAVE_NUMPY


def test_backends():
    assert rlpost.backend_available(rlpost.Backend.CPU) is True
    assert rlpost.backend_name(rlpost.Backend.CPU) == "cpu" and rlpost.backend_name(rlpost.Backend.CUDA) == "cuda"
    assert rlpost.backend_name(7) is None
    assert rlpost.backend_device_count(rlpost.Backend.CPU) == 1
    n = rlpost.backend_device_count(rlpost.Backend.CUDA)
    assert n >= 0 and (n > 0) == rlpost.backend_available(rlpost.Backend.CUDA)
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.backend_available(5)
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.backend_device_count(-1)


def test_context_properties():
    with rlpost.Context(n_threads=1, seed=99) as ctx:
        assert ctx.backend == rlpost.Backend.CPU and ctx.n_threads == 1 and ctx.seed == 99
        assert ctx.device_name.startswith("cpu")
        ctx.set_log_level(rlpost.LogLevel.ERROR)
        with pytest.raises(rlpost.InvalidArgumentError):
            ctx.set_log_level(17)
    with pytest.raises(TypeError, match="unexpected"):
        rlpost.Context(threads=2)


def test_matmul_precision():
    with rlpost.Context(n_threads=1, matmul_precision=rlpost.MatmulPrecision.BF16) as ctx:
        # followed by the path: "(oneDNN)" or the emulation (rlpi_cpu_bf16_path)
        assert ", bf16 GEMMs" in ctx.device_name
        assert ctx.matmul_precision == rlpost.MatmulPrecision.BF16
        native = "bf16 GEMMs (oneDNN)" in ctx.device_name
    with rlpost.Context(n_threads=1, matmul_precision=rlpost.MatmulPrecision.TF32) as ctx:
        assert "GEMMs" not in ctx.device_name  # the CPU has no TF32: fp32
        assert ctx.matmul_precision == rlpost.MatmulPrecision.FP32
    # AUTO: bf16 exactly where it runs on the CPU's bf16 instructions
    with rlpost.Context(n_threads=1, matmul_precision=rlpost.MatmulPrecision.AUTO) as ctx:
        want = rlpost.MatmulPrecision.BF16 if native else rlpost.MatmulPrecision.FP32
        assert ctx.matmul_precision == want, ctx.device_name
    with rlpost.Context(n_threads=1) as ctx:
        assert ctx.matmul_precision == rlpost.MatmulPrecision.FP32
    with pytest.raises(rlpost.InvalidArgumentError, match="matmul_precision"):
        rlpost.Context(n_threads=1, matmul_precision=7)


def test_log_callback_receives_messages():
    got = []
    with rlpost.Context(n_threads=1, log=lambda level, msg: got.append((level, msg, threading.get_ident())),
                        log_level=rlpost.LogLevel.DEBUG) as ctx:
        assert ctx.n_threads == 1
    assert any(level == rlpost.LogLevel.INFO and msg.startswith("context on") for level, msg, _ in got), got


def test_log_callback_exception_is_reported_not_raised(capfd):
    def bad(level, msg):
        raise RuntimeError("log sink broke")
    with rlpost.Context(n_threads=1, log=bad, log_level=rlpost.LogLevel.DEBUG):
        pass
    assert "log sink broke" in capfd.readouterr().err


def test_tokenizer_basics(tok512):
    ids = tok512.encode("hello there")
    assert (type(ids).__name__ == "ndarray") == HAVE_NUMPY
    assert tok512.decode(ids) == "hello there"
    assert len(ids) < len("hello there")  # letter pairs merge
    bos = tok512.encode("hi", add_bos=True)
    assert bos[0] == tok512.special_id(rlpost.TokenRole.BOS) and list(bos[1:]) == list(tok512.encode("hi"))
    # None: the tokenizer's own add_bos (a llama2.c tokenizer.bin is SentencePiece: yes)
    assert list(tok512.encode("hi", add_bos=None)) == list(bos)
    assert tok512.vocab_size == 512
    # the pieces' bytes (decode drops the SentencePiece leading space)
    assert b"".join(tok512.token_text(i) for i in ids).lstrip(b" ") == b"hello there"
    assert isinstance(tok512.token_text(ids[0]), bytes)
    assert tok512.encode("") is not None and len(tok512.encode("")) == 0
    assert tok512.decode([]) == ""
    long = "the quick brown fox " * 200
    assert tok512.decode(tok512.encode(long)) == long  # bigger than the first guessed buffers
    assert tok512.chat_template == "llama2"  # what its special tokens imply
    chat = tok512.decode(tok512.apply_chat_template([{"role": "user", "content": "hi"}]))
    assert "[INST]" in chat and "hi" in chat
    with pytest.raises(ValueError, match="no 'content'"):
        tok512.apply_chat_template([{"role": "user"}])
    with pytest.raises(rlpost.InvalidArgumentError):
        tok512.token_text(100000)


def test_detokenizer_streams_what_decode_gives(tok512):
    text = "once upon a time, a cat!"
    ids = tok512.encode(text)
    with tok512.detokenizer() as det:
        out = "".join(det.push(i) for i in ids) + det.flush()
        assert out == tok512.decode(ids) == text
        assert det.flush() == ""


def test_smollm2_tokenizer_and_chat_template(ctx, smollm2_path):
    with rlpost.Policy(ctx, smollm2_path, trainable=False) as pol:
        tok = pol.tokenizer
        assert tok is pol.tokenizer  # one borrowed object
        assert tok.chat_template == "smollm2"
        msgs = [{"role": "user", "content": "What is 2+2? <|im_end|>"}]
        ids = tok.apply_chat_template(msgs)
        text = tok.decode(ids)
        assert text.endswith("<|im_start|>assistant\n") and "<|im_end|>" in text
        # content spelling a control token stays text: one fewer <|im_end|> id than in the text
        im_end = tok.encode("<|im_end|>", parse_special=True)
        assert len(im_end) == 1
        assert list(ids).count(im_end[0]) == text.count("<|im_end|>") - 1
        assert list(tok.apply_chat_template([("user", "hi")], add_generation_prompt=False)) != list(
            tok.apply_chat_template([("user", "hi")]))
        tok.set_chat_template("chatml")
        assert tok.chat_template == "chatml"
        assert tok.special_id(rlpost.TokenRole.EOS) == im_end[0]
        s = "naïve café — 東京"
        assert tok.decode(tok.encode(s)) == s
        det = tok.detokenizer(skip_special=True)
        ids = tok.encode(s + "<|im_end|>", parse_special=True)
        assert "".join(det.push(i) for i in ids) + det.flush() == s
        tok.close()  # borrowed: forgets it, frees nothing
        assert tok.closed and not pol.closed
        assert pol.tokenizer.vocab_size == 49152
    assert det.closed  # closed with the policy that owns its tokenizer
