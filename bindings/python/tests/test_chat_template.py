"""Chat options (rlp_chat_options: Qwen3's enable_thinking) through the
bindings, and the canonical Jinja sources of the built-in templates
(lib/model/chat_template_jinja.c, what GGUF files we write carry): jinja2,
set up as transformers' apply_chat_template sets it up, renders every
fixture conversation exactly as our C code does. The jinja2 check is
skipped where jinja2 is not installed (pip install jinja2)."""
import json
import os
import re
from pathlib import Path

import pytest

import rlpost

ROOT = Path(os.environ.get("RLPOST_SOURCE_ROOT") or Path(__file__).resolve().parents[3])
FIXTURES = ROOT / "tests" / "reference" / "fixtures"
SMOLLM2_JSON = FIXTURES / "smollm2" / "tokenizer.json"


def test_enable_thinking_switch():
    with rlpost.Tokenizer(str(SMOLLM2_JSON)) as tok:
        msgs = [{"role": "user", "content": "What is 2+2?"}]
        tok.set_chat_template("qwen3")
        base = tok.decode(tok.apply_chat_template(msgs))
        assert tok.decode(tok.apply_chat_template(msgs, enable_thinking=True)) == base
        off = tok.decode(tok.apply_chat_template(msgs, enable_thinking=False))
        assert off == base + "<think>\n\n</think>\n\n"
        # without a generation prompt there is nothing to switch off
        assert tok.decode(tok.apply_chat_template(msgs, False, enable_thinking=False)) == \
            tok.decode(tok.apply_chat_template(msgs, False))
        # other templates ignore it
        for name in ("chatml", "smollm2", "llama3", "gemma3"):
            tok.set_chat_template(name)
            assert list(tok.apply_chat_template(msgs, enable_thinking=False)) == list(tok.apply_chat_template(msgs))


def _jinja_sources():
    """name -> Jinja source, from the C string literals of chat_template_jinja.c."""
    src = (ROOT / "lib" / "model" / "chat_template_jinja.c").read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r"static const char jinja_(\w+)\[\] =\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+);", src):
        parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(2))
        text = "".join(parts)
        out[m.group(1)] = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), text)
    return out


def _conversations():
    convs = []
    for name in ("chat_qwen3.jsonl", "chat_smollm2.jsonl", "chat_gemma3.jsonl", "chat_qwen3_nothink.jsonl"):
        with open(FIXTURES / name, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                convs.append((row["messages"], row["add_generation_prompt"]))
    return convs


def test_jinja_sources_render_as_we_do():
    jinja2 = pytest.importorskip("jinja2")
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    # transformers' settings (utils/chat_template_utils.py)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    sources = _jinja_sources()
    assert set(sources) == {"chatml", "smollm2", "qwen3", "llama3", "llama2", "gemma3"}
    convs = _conversations()
    assert len(convs) >= 60
    with rlpost.Tokenizer(str(SMOLLM2_JSON)) as tok:
        bos = tok.token_text(tok.special_id(rlpost.TokenRole.BOS)).decode()
        eos = tok.token_text(tok.special_id(rlpost.TokenRole.EOS)).decode()
        for name, source in sources.items():
            tok.set_chat_template(source)
            assert tok.chat_template == name
            template = env.from_string(source)
            rendered = 0
            for messages, gen in convs:
                for thinking in (True, False):
                    try:
                        # Llama-3's BOS is its own <|begin_of_text|>, which our
                        # renderer writes whatever the vocabulary
                        want = template.render(messages=messages, add_generation_prompt=gen,
                                               bos_token="<|begin_of_text|>" if name == "llama3" else bos,
                                               eos_token=eos, enable_thinking=thinking)
                    except jinja2.exceptions.TemplateError:
                        want = None
                    try:
                        got = tok.decode(tok.apply_chat_template(messages, gen, enable_thinking=thinking))
                    except rlpost.InvalidArgumentError:
                        got = None
                    # a failed render fails on both sides, except that Llama-2
                    # and Gemma 3 refuse a role other than user/assistant
                    # after the first message, which their Jinja writes
                    # anyway (Gemma 3) or drops (Llama-2)
                    if got is None and want is not None and name in ("llama2", "gemma3"):
                        assert any(m["role"] not in ("user", "assistant") for m in messages[1:])
                        continue
                    assert got == want, (name, messages, gen, thinking)
                    rendered += want is not None
            assert rendered >= 20, name
