"""The bindings cannot fall behind include/rlpost.h: this parses the header
and the headers of include/rlpost/ that it includes, in its order
(comments stripped, simple regexes over RLP_API prototypes, typedef'd
structs and enums, #defines) and checks that

- every RLP_API function is declared with argtypes/restype that match
  its prototype parameter for parameter, and nothing else is declared;
- every struct with a body has a ctypes Structure with the same fields, in
  the same order, of matching types, and the same *_VERSION;
- sizeof and every offsetof agree with tests/abi/struct_layout.txt, the
  table the C test abi_struct_layout checks against the compiler;
- every enum of the header has a Python enum with the same members and
  values, and every status code an exception class.
"""
import ctypes
import re
from ctypes import POINTER

import pytest

import rlpost
from rlpost import _ffi, errors

from conftest import ROOT

HEADER = ROOT / "include" / "rlpost.h"
SUBHEADERS = re.findall(r'^#include "(rlpost/\w+\.h)"', HEADER.read_text(), re.M)


def _source():
    """rlpost.h with each `#include "rlpost/NAME.h"` replaced by that header."""
    src = re.sub(r'^#include "(rlpost/\w+\.h)"',
                 lambda m: (ROOT / "include" / m.group(1)).read_text(), HEADER.read_text(), flags=re.M)
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


SRC = _source()
DEFINES = {m.group(1): m.group(2).strip() for m in re.finditer(r"^#define\s+(RLP_\w+)[ \t]+([^\n\\]+)$", SRC, re.M)}
OPAQUE = set(re.findall(r"typedef\s+struct\s+(rlp_\w+)\s+\1\s*;", SRC))
STRUCTS = {m.group(1): m.group(2) for m in
           re.finditer(r"typedef\s+struct\s+(rlp_\w+)\s*\{(.*?)\}\s*\1\s*;", SRC, re.S)}
ENUMS = {m.group(1): m.group(2) for m in
         re.finditer(r"typedef\s+enum\s+(rlp_\w+)\s*\{(.*?)\}\s*\1\s*;", SRC, re.S)}
FNPTRS = {m.group(1) for m in re.finditer(r"typedef\s+\w+\s*\(\s*\*\s*(rlp_\w+)\s*\)", SRC)}
PROTOS = [" ".join(m.group(1).split()) for m in re.finditer(r"^RLP_API\s+([^;]*?)\s*;", SRC, re.M | re.S)]

SCALARS = {"int": ctypes.c_int, "unsigned": ctypes.c_uint, "int32_t": ctypes.c_int32,
           "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
           "uint8_t": ctypes.c_uint8, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
           "double": ctypes.c_double, "char": ctypes.c_char}
CALLBACKS = {"rlp_log_fn": _ffi.LogFn, "rlp_loss_fn": _ffi.LossFn, "rlp_stream_fn": _ffi.StreamFn,
             "rlp_reward_callback": _ffi.RewardCallback, "rlp_reward_batch_callback": _ffi.RewardBatchCallback,
             "rlp_trainer_batch_fn": _ffi.TrainerBatchFn}
PY_STRUCTS = {cls._c_name_: cls for cls in vars(_ffi).values()
              if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and hasattr(cls, "_c_name_")}


def _split_type(decl):
    """'const rlp_policy *const *name' -> ('rlp_policy', 2, 'name')."""
    decl = decl.strip()
    m = re.match(r"^(.*?)(\w+)$", decl)
    assert m, decl
    type_part, name = m.group(1), m.group(2)
    depth = type_part.count("*")
    words = [w for w in re.split(r"[\s*]+", type_part) if w and w != "const"]
    assert len(words) == 1, "cannot parse type of %r" % decl
    return words[0], depth, name


def _expected(base, depth):
    """The ctypes types that may stand for a C type (a set)."""
    if depth == 0:
        if base in SCALARS:
            return {SCALARS[base]}
        if base in CALLBACKS:
            return {CALLBACKS[base]}
        if base in PY_STRUCTS:
            return {PY_STRUCTS[base]}
        raise AssertionError("no mapping for C type %s" % base)
    if depth == 1:
        if base == "char":
            return {ctypes.c_char_p, POINTER(ctypes.c_char)}
        if base == "void" or base in OPAQUE:
            return {ctypes.c_void_p}
        if base in STRUCTS:
            assert base in PY_STRUCTS, "struct %s has no ctypes Structure" % base
            return {POINTER(PY_STRUCTS[base])}
        return {POINTER(t) for t in _expected(base, 0)}
    if depth == 2:
        if base in OPAQUE:
            return {POINTER(ctypes.c_void_p)}
        return {POINTER(t) for t in _expected(base, 1)}
    raise AssertionError("pointer depth %d of %s" % (depth, base))


def _parse_proto(proto):
    m = re.match(r"^(.*?)\b(rlp_\w+)\s*\((.*)\)$", proto)
    assert m, proto
    ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
    ret_depth = ret.count("*")
    ret_base = [w for w in re.split(r"[\s*]+", ret) if w and w != "const"][0]
    args = [] if params in ("void", "") else [_split_type(p) for p in params.split(",")]
    return name, (ret_base, ret_depth), args


def test_header_is_parsed():
    # guards the regexes themselves: the header's size class is known
    assert len(PROTOS) >= 121
    assert len(STRUCTS) >= 30 and len(ENUMS) >= 19 and len(OPAQUE) >= 10


def test_every_function_is_declared_with_matching_types():
    declared = {n: (rt, at) for n, rt, at in _ffi.FUNCTIONS}
    header_names = []
    problems = []
    for proto in PROTOS:
        name, (rbase, rdepth), args = _parse_proto(proto)
        header_names.append(name)
        if name not in declared:
            problems.append("%s: not declared in rlpost/_ffi.py" % name)
            continue
        f = getattr(_ffi.lib, name)  # the CDLL's function object itself
        if f.argtypes is None:
            problems.append("%s: argtypes not set" % name)
            continue
        want_ret = {None} if (rbase == "void" and rdepth == 0) else _expected(rbase, rdepth)
        if f.restype not in want_ret:
            problems.append("%s: restype %r, header says %s%s" % (name, f.restype, rbase, "*" * rdepth))
        if len(f.argtypes) != len(args):
            problems.append("%s: %d argtypes for %d parameters" % (name, len(f.argtypes), len(args)))
            continue
        for i, ((base, depth, pname), got) in enumerate(zip(args, f.argtypes)):
            if got not in _expected(base, depth):
                problems.append("%s: parameter %d (%s) is %r, header says %s%s"
                                % (name, i, pname, got, base, "*" * depth))
    extra = set(declared) - set(header_names)
    if extra:
        problems.append("declared but not in the header: %s" % ", ".join(sorted(extra)))
    assert not problems, "\n".join(problems)
    assert not _ffi.MISSING, "the library lacks %s" % _ffi.MISSING
    assert len(header_names) == len(declared) == len(set(header_names))


def _fields(body):
    """[(name, base, depth, array_len or None)] of a struct body."""
    out = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        fp = re.match(r"^(.*)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", decl)
        if fp:
            out.append((fp.group(2), "fnptr:" + " ".join(fp.group(1).split()) + "(" + fp.group(3) + ")", 0, None))
            continue
        m = re.match(r"^((?:const\s+)?\w+)\s+(.*)$", decl)
        assert m, decl
        base = m.group(1).replace("const ", "")
        for d in m.group(2).split(","):
            d = d.strip()
            depth = d.count("*")
            d = re.sub(r"\bconst\b", "", d.replace("*", "")).strip()
            arr = re.match(r"^(\w+)\s*\[\s*(\w+)\s*\]$", d)
            n = None
            if arr:
                d, size = arr.group(1), arr.group(2)
                n = int(DEFINES.get(size, size))
            out.append((d, base, depth, n))
    return out


# Function-pointer fields other than void (*)(void *payload): their ctypes type and parameter count.
FNPTR_FIELDS = {("rlp_env_callbacks", "reset"): (_ffi.EnvResetFn, 4),
                ("rlp_env_callbacks", "step"): (_ffi.EnvStepFn, 7),
                ("rlp_env_callbacks", "close"): (_ffi.EnvCloseFn, 2),
                ("rlp_env_callbacks", "free_user"): (_ffi.EnvFreeUserFn, 1)}


def test_every_struct_matches():
    problems = []
    for cname, body in STRUCTS.items():
        cls = PY_STRUCTS.get(cname)
        if cls is None:
            problems.append("%s: no ctypes Structure" % cname)
            continue
        want = _fields(body)
        got = cls._fields_
        if [w[0] for w in want] != [g[0] for g in got]:
            problems.append("%s: fields %s, header has %s" % (cname, [g[0] for g in got], [w[0] for w in want]))
            continue
        for (fname, base, depth, n), (_, t) in zip(want, got):
            if base.startswith("fnptr:") and (cname, fname) in FNPTR_FIELDS:
                want_t, n_params = FNPTR_FIELDS[(cname, fname)]
                ok = t is want_t and len(t._argtypes_) == n_params == base.count(",") + 1
            elif base.startswith("fnptr:"):
                ok = (issubclass(t, ctypes._CFuncPtr) and base == "fnptr:void(void *payload)"
                      and t._restype_ is None and t._argtypes_ == (ctypes.c_void_p,))
            elif n is not None:
                ok = issubclass(t, ctypes.Array) and t._length_ == n and t._type_ in _expected(base, depth)
            else:
                ok = t in _expected(base, depth)
            if not ok:
                problems.append("%s.%s: %r, header says %s%s%s" % (cname, fname, t, base, "*" * depth,
                                                                   "[%d]" % n if n else ""))
    extra = set(PY_STRUCTS) - set(STRUCTS)
    if extra:
        problems.append("Structures not in the header: %s" % sorted(extra))
    assert not problems, "\n".join(problems)


def test_struct_versions_match_the_macros():
    checked = 0
    for macro, value in DEFINES.items():
        m = re.match(r"^RLP_(\w+)_VERSION$", macro)
        if not m or macro in ("RLP_ABI_VERSION",):
            continue
        cname = "rlp_" + m.group(1).lower()
        if cname not in STRUCTS:
            continue
        assert PY_STRUCTS[cname]._version_ == int(value), macro
        checked += 1
    assert checked >= 15


def test_constants_match_the_macros():
    assert int(DEFINES["RLP_REWARD_REASON_MAX"]) == _ffi.REWARD_REASON_MAX
    assert int(DEFINES["RLP_BUFFER_STALENESS_BINS"]) == _ffi.BUFFER_STALENESS_BINS
    assert int(DEFINES["RLP_TRAINER_MAX_METRICS"]) == _ffi.TRAINER_MAX_METRICS
    assert int(DEFINES["RLP_SERVER_URL_MAX"]) == _ffi.SERVER_URL_MAX
    assert DEFINES["RLP_WAIT_FOREVER"] == "UINT32_MAX" and rlpost.WAIT_FOREVER == 2 ** 32 - 1
    assert DEFINES["RLP_STALENESS_UNBOUNDED"] == "UINT32_MAX" and rlpost.STALENESS_UNBOUNDED == 2 ** 32 - 1
    assert int(DEFINES["RLP_BACKEND_COUNT"]) == len(rlpost.Backend)


ENUM_MAP = {
    "rlp_backend_kind": (rlpost.Backend, "RLP_BACKEND_"), "rlp_log_level": (rlpost.LogLevel, "RLP_LOG_"),
    "rlp_matmul_precision": (rlpost.MatmulPrecision, "RLP_MATMUL_"),
    "rlp_token_role": (rlpost.TokenRole, "RLP_TOKEN_"), "rlp_encode_flags": (rlpost.EncodeFlags, "RLP_ENCODE_"),
    "rlp_decode_flags": (rlpost.DecodeFlags, "RLP_DECODE_"), "rlp_lr_schedule": (rlpost.LRSchedule, "RLP_LR_"),
    "rlp_dtype": (rlpost.DType, "RLP_DTYPE_"), "rlp_gguf_type": (rlpost.GGUFType, "RLP_GGUF_"), "rlp_finish_reason": (rlpost.FinishReason, "RLP_FINISH_"),
    "rlp_logprobs_mode": (rlpost.LogprobsMode, "RLP_LOGPROBS_"),
    "rlp_interrupt_mode": (rlpost.InterruptMode, "RLP_INTERRUPT_"),
    "rlp_rollout_weights": (rlpost.RolloutWeights, "RLP_ROLLOUT_WEIGHTS_"),
    "rlp_advantage": (rlpost.Advantage, "RLP_ADV_"), "rlp_policy_loss": (rlpost.PolicyLoss, "RLP_LOSS_"),
    "rlp_kl_estimator": (rlpost.KLEstimator, "RLP_KL_"), "rlp_loss_agg": (rlpost.LossAgg, "RLP_AGG_"),
    "rlp_is_level": (rlpost.ISLevel, "RLP_IS_"), "rlp_whiten": (rlpost.Whiten, "RLP_WHITEN_"),
    "rlp_reward_refine_mode": (rlpost.RefineMode, "RLP_REFINE_"),
    "rlp_buffer_full_policy": (rlpost.BufferFullPolicy, "RLP_BUFFER_FULL_"),
    "rlp_sync_mode": (rlpost.SyncMode, "RLP_SYNC_"), "rlp_sync_transport": (rlpost.SyncTransport, "RLP_TRANSPORT_"),
    "rlp_comm_transport": (rlpost.CommTransport, "RLP_COMM_"), "rlp_reduce_op": (rlpost.ReduceOp, "RLP_REDUCE_"),
    "rlp_train_mode": (rlpost.TrainMode, "RLP_TRAIN_"),
    "rlp_episode_end": (rlpost.EpisodeEnd, "RLP_EPISODE_"),
}


def _enum_members(body):
    out = {}
    for item in body.split(","):
        item = item.strip()
        if item:
            name, value = (s.strip() for s in item.split("="))
            out[name] = int(value)
    return out


def test_every_enum_matches():
    problems = []
    for cname, body in ENUMS.items():
        members = _enum_members(body)
        if cname == "rlp_status":
            for name, value in members.items():
                const = getattr(errors, "STATUS_" + name[len("RLP_E_"):] if name != "RLP_OK" else "STATUS_OK", None)
                if const != value:
                    problems.append("%s: errors.STATUS_* is %r" % (name, const))
                if value < 0 and errors.BY_STATUS.get(value) is None:
                    problems.append("%s has no exception class" % name)
            continue
        if cname not in ENUM_MAP:
            problems.append("enum %s has no Python enum" % cname)
            continue
        py, prefix = ENUM_MAP[cname]
        want = {n[len(prefix):]: v for n, v in members.items()}
        got = {m.name: int(m.value) for m in py}
        got.pop("NONE", None) if cname == "rlp_kl_estimator" else None  # 0 = no KL is not an enum value in C
        if want != got:
            problems.append("%s: Python %s, header %s" % (cname, got, want))
    assert not problems, "\n".join(problems)


LAYOUT_TABLE = ROOT / "tests" / "abi" / "struct_layout.txt"


def _ctypes_layout(cls, designator):
    """(offset, size) of a member designator ("a", "a.b", "a[0].b") of a
    ctypes Structure, walked the way the C compiler's offsetof does."""
    offset, t = 0, cls
    for part in designator.split("."):
        m = re.match(r"^(\w+)(?:\[(\d+)\])?$", part)
        name, index = m.group(1), m.group(2)
        ftype = dict(t._fields_)[name]
        offset += getattr(t, name).offset
        t = ftype
        if index is not None:
            t = ftype._type_
            offset += int(index) * ctypes.sizeof(t)
    return offset, ctypes.sizeof(t)


def test_layouts_match_the_abi_table():
    """sizeof and offsetof of every struct and field against the committed
    table that the C test abi_struct_layout checks against the compiler
    (tests/abi/struct_layout.txt, docs/ABI.md): the bindings and the C side
    answer to the same baseline, so a layout moved in one place fails."""
    if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_long) != 8:
        pytest.skip("the committed layout table is for LP64 targets")
    problems = []
    rows = 0
    covered = {}
    for line in LAYOUT_TABLE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cname, field, offset, size = line.split()
        rows += 1
        cls = PY_STRUCTS.get(cname)
        if cls is None:
            problems.append("%s: in the table, no ctypes Structure" % cname)
            continue
        covered.setdefault(cname, set()).add(field)
        if field == "-":
            got = (0, ctypes.sizeof(cls))
        else:
            try:
                got = _ctypes_layout(cls, field)
            except KeyError:
                problems.append("%s.%s: in the table, not a field of the ctypes Structure" % (cname, field))
                continue
        if got != (int(offset), int(size)):
            problems.append("%s %s: ctypes offset %d size %d, table offset %s size %s"
                            % (cname, field, got[0], got[1], offset, size))
    for cname, cls in PY_STRUCTS.items():
        missing = {f for f, _ in cls._fields_} - covered.get(cname, set())
        if missing:
            problems.append("%s: fields %s not in the table" % (cname, sorted(missing)))
    assert not problems, "\n".join(problems)
    assert rows > 200


def test_every_public_header_is_read():
    """rlpost.h includes every header of include/rlpost/ (so this test and a
    host that includes rlpost.h see all of them), and the parse found the API."""
    on_disk = sorted("rlpost/" + p.name for p in (ROOT / "include" / "rlpost").glob("*.h"))
    assert sorted(SUBHEADERS) == on_disk
    assert len(SUBHEADERS) == len(set(SUBHEADERS))
    assert len(PROTOS) > 100 and len(STRUCTS) > 30 and "rlp_policy" in OPAQUE
