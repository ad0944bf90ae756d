"""Tokenizers (rlp_tokenizer) and streaming decoders (rlp_detokenizer)."""
import ctypes
import enum
from ctypes import POINTER, byref, c_char, c_int32, c_size_t, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import CArray, empty, finish, options, text, to_bytes, to_path
from .errors import STATUS_OVERFLOW

F = _ffi.F


class TokenRole(enum.IntEnum):
    """rlp_token_role"""
    BOS = 0
    EOS = 1
    PAD = 2
    UNK = 3


class EncodeFlags(enum.IntFlag):
    """rlp_encode_flags"""
    ADD_BOS = 1
    PARSE_SPECIAL = 2


class DecodeFlags(enum.IntFlag):
    """rlp_decode_flags"""
    SKIP_SPECIAL = 1


def _messages(messages):
    """[{"role": r, "content": c}] or [(r, c)] -> (ChatMessage array, keepalive)."""
    items = []
    for i, m in enumerate(messages):
        if isinstance(m, dict):
            try:
                role, content = m["role"], m["content"]
            except KeyError as e:
                raise ValueError("messages[%d] has no %s" % (i, e)) from None
        else:
            role, content = m
        items.append((to_bytes(role, "role"), to_bytes(content, "content")))
    arr = (_ffi.ChatMessage * max(len(items), 1))()
    for i, (r, c) in enumerate(items):
        arr[i].role = r
        arr[i].content = c
    return arr, len(items), items


class Tokenizer(Handle):
    """Encode/decode, special tokens and chat templates.

    Tokenizer(path) loads a tokenizer.json or a llama2.c tokenizer.bin.
    Policy.tokenizer and RolloutEngine.tokenizer give the tokenizer that
    came with a model: borrowed, it is closed with its owner and its own
    close() only forgets it.
    """

    _free = "rlp_tokenizer_free"

    def __init__(self, path):
        out = c_void_p()
        check(F.rlp_tokenizer_load(byref(out), to_path(path)), "rlp_tokenizer_load")
        Handle.__init__(self, out.value)

    @classmethod
    def _borrowed(cls, ptr, owner):
        tok = cls.__new__(cls)
        Handle.__init__(tok, ptr, parents=(owner,), owned=False)
        return tok

    def encode(self, text_, add_bos=False, parse_special=False):
        """Token ids of a str (or UTF-8 bytes). Only put parse_special on
        text you wrote: it turns spellings like "<|im_end|>" into control
        tokens."""
        b = to_bytes(text_, "text")
        flags = (EncodeFlags.ADD_BOS if add_bos else 0) | (EncodeFlags.PARSE_SPECIAL if parse_special else 0)
        cap = len(b) + 8
        with self._use() as p:
            while True:
                arr, ptr = empty(cap, c_int32)
                n = c_size_t()
                rc = F.rlp_tokenizer_encode(p, b, len(b), int(flags), ptr, cap, byref(n))
                if rc == STATUS_OVERFLOW and n.value > cap:
                    cap = n.value
                    continue
                check(rc, "rlp_tokenizer_encode")
                return finish(arr, n.value)

    def decode(self, ids, skip_special=False):
        """Text of token ids (ill-formed UTF-8 becomes U+FFFD)."""
        a = CArray(ids, c_int32, "ids")
        flags = int(DecodeFlags.SKIP_SPECIAL) if skip_special else 0
        cap = 8 * a.n + 16
        with self._use() as p:
            while True:
                buf = ctypes.create_string_buffer(cap)
                n = c_size_t()
                rc = F.rlp_tokenizer_decode(p, a.ptr, a.n, flags, buf, cap, byref(n))
                if rc == STATUS_OVERFLOW and n.value + 1 > cap:
                    cap = n.value + 1
                    continue
                check(rc, "rlp_tokenizer_decode")
                return buf.raw[:n.value].decode("utf-8", "replace")

    def token_text(self, id_):
        """The bytes one token decodes to (may be partial UTF-8, may hold NUL)."""
        out = POINTER(c_char)()
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_tokenizer_token_text(byref(out), byref(n), p, int(id_)), "rlp_tokenizer_token_text")
            return ctypes.string_at(out, n.value)

    @property
    def vocab_size(self):
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_tokenizer_vocab_size(byref(n), p), "rlp_tokenizer_vocab_size")
        return n.value

    def special_id(self, role):
        """The id of a special token (TokenRole); NotFoundError if it has none."""
        i = c_int32()
        with self._use() as p:
            check(F.rlp_tokenizer_special_id(byref(i), p, int(role)), "rlp_tokenizer_special_id")
        return i.value

    def set_chat_template(self, name_or_source):
        """A template name ("chatml", "qwen3", "smollm2", "llama3", "llama2",
        "gemma3") or a model's Jinja source."""
        with self._use() as p:
            check(F.rlp_tokenizer_set_chat_template(p, to_bytes(name_or_source, "template")),
                  "rlp_tokenizer_set_chat_template")

    @property
    def chat_template(self):
        """Name of the chat template in use, or None."""
        with self._use() as p:
            return text(F.rlp_tokenizer_chat_template(p))

    def apply_chat_template(self, messages, add_generation_prompt=True, enable_thinking=None):
        """Token ids of a conversation rendered with the chat template.
        messages: [{"role": "user", "content": "..."}, ...] or [(role, content)].
        Message content is never parsed for special tokens.
        enable_thinking: None or True renders as the template's default;
        False gives Qwen3's non-thinking generation prompt (an empty, closed
        <think> block); other templates ignore it (rlp_chat_options)."""
        arr, n_msgs, keep = _messages(messages)
        cap = 64 + sum(len(c) for _, c in keep) * 2
        opts = None
        if enable_thinking is not None:
            opts = options(_ffi.ChatOptions, "rlp_chat_options_init",
                           {"add_generation_prompt": bool(add_generation_prompt),
                            "enable_thinking": bool(enable_thinking)}, [], what="apply_chat_template")
        with self._use() as p:
            while True:
                ids, ptr = empty(cap, c_int32)
                n = c_size_t()
                if opts is None:
                    name = "rlp_tokenizer_apply_chat_template"
                    rc = F.rlp_tokenizer_apply_chat_template(p, arr, n_msgs, 1 if add_generation_prompt else 0,
                                                             ptr, cap, byref(n))
                else:
                    name = "rlp_tokenizer_apply_chat_template_opts"
                    rc = F.rlp_tokenizer_apply_chat_template_opts(p, arr, n_msgs, byref(opts), ptr, cap, byref(n))
                if rc == STATUS_OVERFLOW and n.value > cap:
                    cap = n.value
                    continue
                check(rc, name)
                return finish(ids, n.value)

    def detokenizer(self, skip_special=False):
        """A streaming decoder over this tokenizer."""
        return Detokenizer(self, skip_special)


class Detokenizer(Handle):
    """Turns ids arriving one at a time into text deltas that never split a
    character: "".join(pushes) + flush() == tokenizer.decode(all ids)."""

    _free = "rlp_detokenizer_free"

    def __init__(self, tokenizer, skip_special=False):
        out = c_void_p()
        flags = int(DecodeFlags.SKIP_SPECIAL) if skip_special else 0
        with tokenizer._use() as t:
            check(F.rlp_detokenizer_create(byref(out), t, flags), "rlp_detokenizer_create")
            Handle.__init__(self, out.value, parents=(tokenizer,))

    def push(self, id_):
        """Feeds one id; returns the text it completes (possibly "")."""
        out = POINTER(c_char)()
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_detokenizer_push(byref(out), byref(n), p, int(id_)), "rlp_detokenizer_push")
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")

    def flush(self):
        """Ends the stream: the held-back bytes (lossily), and a reset."""
        out = POINTER(c_char)()
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_detokenizer_flush(byref(out), byref(n), p), "rlp_detokenizer_flush")
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
