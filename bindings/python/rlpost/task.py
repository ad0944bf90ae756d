"""Tasks (rlp_task: problem generators and JSONL datasets with a resumable
cursor) and the prompt sets they serve (rlp_prompt_set)."""
import ctypes
import json
from ctypes import byref, c_int32, c_size_t, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import Record, from_c, json_text, struct_record, text, to_bytes, to_path
from .errors import STATUS_OVERFLOW

F = _ffi.F


class Task(Handle):
    """A source of prompts with a resumable cursor.

    Task(name, options=None) makes a generator ("kk" or "countdown");
    Task.open_jsonl(path, options=None) opens a JSONL dataset. Options as a
    dict or JSON text (see rlp_task_create() in rlpost.h for the keys).
    """

    _free = "rlp_task_free"

    def __init__(self, name, options=None):
        out = c_void_p()
        check(F.rlp_task_create(byref(out), to_bytes(name, "name"), json_text(options)), "rlp_task_create")
        Handle.__init__(self, out.value)

    @classmethod
    def open_jsonl(cls, path, options=None):
        out = c_void_p()
        check(F.rlp_task_open_jsonl(byref(out), to_path(path), json_text(options)), "rlp_task_open_jsonl")
        t = cls.__new__(cls)
        Handle.__init__(t, out.value)
        return t

    def _u64(self, fname):
        v = c_uint64()
        with self._use() as p:
            check(getattr(F, fname)(byref(v), p), fname)
        return v.value

    @property
    def size(self):
        """Items per epoch (0: an endless generator)."""
        return self._u64("rlp_task_size")

    @property
    def skipped(self):
        """Lines a JSONL task skipped at open ("skip_invalid")."""
        return self._u64("rlp_task_skipped")

    @property
    def epoch(self):
        """Epoch of the next item to serve."""
        return self._u64("rlp_task_epoch")

    @property
    def position(self):
        """Position of the next item within its epoch."""
        return self._u64("rlp_task_position")

    def next_batch(self, n, tokenizer=None):
        """Serves the next @p n items as a PromptSet for
        RolloutEngine.generate(); with a tokenizer (and a "chat" template)
        the prompts are rendered through its chat template."""
        out = c_void_p()
        with self._use() as p:
            if tokenizer is not None:
                with tokenizer._use() as t:
                    check(F.rlp_task_next_batch(byref(out), p, int(n), t), "rlp_task_next_batch")
            else:
                check(F.rlp_task_next_batch(byref(out), p, int(n), None), "rlp_task_next_batch")
        return PromptSet(out.value)

    def cursor_save(self):
        """The cursor as JSON text (restore it into a task made the same way)."""
        with self._use() as p:
            n = c_size_t()
            cap = 512
            while True:
                buf = ctypes.create_string_buffer(cap)
                rc = F.rlp_task_cursor_save(p, buf, cap, byref(n))
                if rc == STATUS_OVERFLOW and n.value + 1 > cap:
                    cap = n.value + 1
                    continue
                check(rc, "rlp_task_cursor_save")
                return buf.raw[:n.value].decode()

    def cursor_restore(self, cursor):
        """Continues from a cursor_save() text (str, bytes or a dict)."""
        b = json_text(cursor, "cursor")
        with self._use() as p:
            check(F.rlp_task_cursor_restore(p, b, len(b)), "rlp_task_cursor_restore")


class PromptSet(Handle):
    """Prompts served by Task.next_batch(); pass it to
    RolloutEngine.generate(). It does not depend on its task: it stays
    valid after the task is closed. len(), [i] (a Record with text,
    tokens, group_id, metadata_json) and item(i) read it."""

    _free = "rlp_prompt_set_free"

    def __init__(self, ptr):
        Handle.__init__(self, ptr)

    def __len__(self):
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_prompt_set_size(byref(n), p), "rlp_prompt_set_size")
        return n.value

    def __getitem__(self, index):
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("prompt index %d out of range (set of %d)" % (index, n))
        with self._use() as p:
            arr = F.rlp_prompt_set_prompts(p)
            if not arr:
                check(F.rlp_error_last_code() or -1, "rlp_prompt_set_prompts")
            c = arr[index]
            return Record(text=text(c.text), tokens=from_c(c.tokens, c.n_tokens, c_int32) if c.tokens else None,
                          group_id=c.group_id, metadata_json=text(c.metadata_json))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def item(self, index):
        """Where prompt @p index came from: epoch, position, index,
        question, reference, metadata_json (and `metadata`, parsed)."""
        it = _ffi.TaskItem()
        it.version = it._version_
        with self._use() as p:
            check(F.rlp_prompt_set_item(byref(it), p, int(index)), "rlp_prompt_set_item")
            r = struct_record(it)
        r.metadata = None if r.metadata_json is None else json.loads(r.metadata_json)
        return r
