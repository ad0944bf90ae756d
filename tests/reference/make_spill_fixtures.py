#!/usr/bin/env python3
"""Seed corpus of the replay-buffer spill reader (tests/fuzz/fuzz_spill.c),
written by an independent encoder of the format in docs/buffer-sync.md:
Python's struct and zlib.crc32 (the same CRC-32 as lib/core/crc32.c).

Regenerate (from the repository root; needs only the standard library):
    python3 tests/reference/make_spill_fixtures.py

Writes tests/fuzz/corpus/spill/*.spill: well-formed files (empty, pushes,
retires, every optional field, provenance, an episode record and a loss
mask, several groups per record, files of the older formats 1 and 2), files with a torn or corrupt last record (which
the reader cuts), and hostile files (counts and lengths past the end, a
corrupt record in the middle, sequence numbers that do not increase, bad
floats, unknown types and flags, provenance cut short, of an unknown version
or in a format-1 file; an episode record or a loss mask cut short, of an
unknown version, out of range or in a format-2 file) that must be refused
without reading out of bounds. The files are of format 3 (the one the
library writes) unless named format1_* or format2_*. The output is
deterministic.
"""
import os
import struct
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "spill")

PUSH, RETIRE = 1, 2
FORMAT = 3  # the format written; 2 is the same without mask and episode, 1 also without provenance
HAS_TOKEN_REWARDS, HAS_PROVENANCE, HAS_LOSS_MASK, HAS_EPISODE = 1, 2, 4, 8


def crc(b):
    return zlib.crc32(b) & 0xFFFFFFFF


def file_header(fmt=FORMAT):
    h = b"RLPSPILL" + struct.pack("<I", fmt)
    return h + struct.pack("<I", crc(h))


def record(rtype, payload, break_payload_crc=False, break_header_crc=False):
    pc = crc(payload) ^ (1 if break_payload_crc else 0)
    h = b"RLPR" + struct.pack("<IQI", rtype, len(payload), pc)
    hc = crc(h) ^ (1 if break_header_crc else 0)
    return h + struct.pack("<I", hc) + payload


def string(s):
    if s is None:
        return struct.pack("<Q", 0)
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b) + 1) + b


def traj(gid, version=0, prompt=(1, 2), tokens=(3, 4), logprobs=(-0.5, -1.0), versions=None,
         token_rewards=None, reward=1.0, valid=1, finish=1, temperature=1.0, flags=None,
         texts=("prompt", "completion", None, '{"reference":"4"}'), stop_index=-1, sample=0,
         n_prompt=None, n_tokens=None, provenance=None, provenance_version=1, loss_mask=None, episode=None):
    """provenance: (prompt_index, epoch, position, sampling_seed, batch) or None;
    loss_mask: one 0/1 per completion token or None; episode: (version, turns,
    tool_calls, tool_errors, tool_timeouts, observation_tokens,
    observations_cut, end, tool_seconds) or None."""
    versions = versions if versions is not None else [version] * len(tokens)
    fl = ((HAS_TOKEN_REWARDS if token_rewards is not None else 0) |
          (HAS_PROVENANCE if provenance is not None else 0) |
          (HAS_LOSS_MASK if loss_mask is not None else 0) |
          (HAS_EPISODE if episode is not None else 0)) if flags is None else flags
    b = struct.pack("<QQiiffIIII", gid, version, finish, stop_index, temperature, reward, valid, sample, fl, 0)
    if provenance is not None:
        b += struct.pack("<II5Q", provenance_version, 0, *provenance)
    if episode is not None:
        b += struct.pack("<7Iid", *episode)
    b += struct.pack("<Q", len(prompt) if n_prompt is None else n_prompt)
    b += b"".join(struct.pack("<i", t) for t in prompt)
    b += struct.pack("<Q", len(tokens) if n_tokens is None else n_tokens)
    b += b"".join(struct.pack("<i", t) for t in tokens)
    b += b"".join(struct.pack("<f", x) for x in logprobs)
    b += b"".join(struct.pack("<Q", v) for v in versions)
    if token_rewards is not None:
        b += b"".join(struct.pack("<f", x) for x in token_rewards)
    if loss_mask is not None:
        b += bytes(loss_mask)
    for s in texts:
        b += string(s)
    return b


def group(seq, trajs, n_traj=None):
    return struct.pack("<QII", seq, len(trajs) if n_traj is None else n_traj, 0) + b"".join(trajs)


def push(groups, n_groups=None):
    return struct.pack("<II", len(groups) if n_groups is None else n_groups, 0) + b"".join(groups)


def retire(consumed, dropped=()):
    return struct.pack("<QQ", len(consumed), len(dropped)) + b"".join(struct.pack("<Q", s) for s in
                                                                      list(consumed) + list(dropped))


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    g0 = group(0, [traj(10, sample=0), traj(10, sample=1, valid=0, reward=float("nan"),
                                            texts=(None, "x", "verifier failed", None))])
    g1 = group(1, [traj(11, version=3, versions=[3, 4], token_rewards=[0.5, -0.25], finish=2, temperature=0.7)])
    g2 = group(2, [traj(12, prompt=(), tokens=(), logprobs=(), texts=(None, "", None, None))])
    r_push = record(PUSH, push([g0]))
    # well-formed
    files["empty_header.spill"] = file_header()
    files["one_push.spill"] = file_header() + r_push
    files["push_retire.spill"] = file_header() + r_push + record(PUSH, push([g1, g2])) + record(RETIRE, retire([0], [2]))
    files["retire_unknown_seq.spill"] = file_header() + r_push + record(RETIRE, retire([77, 1 << 60]))
    files["utf8_and_metadata.spill"] = file_header() + record(PUSH, push([group(5, [traj(
        99, texts=("Q: \u00e9?", "A: \u2713", None, '{"a":[1,2,{"b":null}]}'))])]))
    # torn or corrupt last record: cut with a warning
    files["torn_header.spill"] = file_header() + r_push + r_push[:10]
    files["torn_payload.spill"] = file_header() + r_push + record(PUSH, push([g1]))[:-9]
    files["last_crc_bad.spill"] = file_header() + r_push + record(PUSH, push([g1]), break_payload_crc=True)
    files["zero_tail.spill"] = file_header() + r_push + bytes(300)
    files["header_only_prefix.spill"] = b"RLPSP"
    # hostile: refused
    files["bad_magic.spill"] = b"NOTSPILL" + bytes(8)
    files["future_format.spill"] = file_header(fmt=9)
    files["middle_crc_bad.spill"] = file_header() + record(PUSH, push([g0]), break_payload_crc=True) + \
        record(PUSH, push([g1]))
    files["middle_header_crc_bad.spill"] = file_header() + record(PUSH, push([g0]), break_header_crc=True) + \
        record(PUSH, push([g1]))
    files["seq_not_increasing.spill"] = file_header() + record(PUSH, push([g1])) + record(PUSH, push([g0]))
    files["huge_record_len.spill"] = file_header() + b"RLPR" + struct.pack("<IQI", PUSH, 1 << 40, 0) + \
        struct.pack("<I", crc(b"RLPR" + struct.pack("<IQI", PUSH, 1 << 40, 0))) + bytes(64)
    files["huge_group_count.spill"] = file_header() + record(PUSH, push([g0], n_groups=0xFFFFFFFF))
    files["huge_traj_count.spill"] = file_header() + record(PUSH, push([group(0, [traj(1)], n_traj=1 << 31)]))
    files["prompt_len_past_end.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, n_prompt=1 << 61)])]))
    files["token_len_past_end.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, n_tokens=1 << 62)])]))
    files["string_len_past_end.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, texts=(None, None, None, None))[:-8] + struct.pack("<Q", (1 << 64) - 1)])]))
    files["string_embedded_nul.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, texts=(b"a\x00b", None, None, None))])]))
    files["nan_logprob.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, logprobs=(float("nan"), -1))])]))
    files["valid_unscored.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, reward=float("inf"))])]))
    files["negative_token.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, tokens=(-5, 4))])]))
    files["bad_finish.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, finish=9)])]))
    files["unknown_flags.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, flags=0x31)])]))
    files["mixed_group_ids.spill"] = file_header() + record(PUSH, push([group(0, [traj(1), traj(2)])]))
    files["unknown_type.spill"] = file_header() + record(7, b"abc") + r_push
    files["retire_count_mismatch.spill"] = file_header() + r_push + record(RETIRE, struct.pack("<QQ", 5, 0) +
                                                                           struct.pack("<Q", 0))
    files["trailing_bytes_in_push.spill"] = file_header() + record(PUSH, push([g0]) + b"xyz")
    # provenance (format 2): a group with it (two samples sharing one) and one without
    prov = (12345, 2, 17, (1 << 64) - 3, 41)
    g_prov = group(0, [traj(20, provenance=prov), traj(20, sample=1, provenance=prov, token_rewards=[0.5, 1.0])])
    files["provenance.spill"] = file_header() + record(PUSH, push([g_prov, group(1, [traj(21)])]))
    files["provenance_bad_version.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, provenance=prov, provenance_version=2)])]))
    # the fixed part and the provenance block, then nothing (a reader that
    # skipped the block would read it as the prompt count)
    files["provenance_cut_short.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, provenance=prov)[:48 + 48]])]))
    # format 1 (before provenance): read, without provenance; its flag there is refused
    files["format1_push.spill"] = file_header(fmt=1) + r_push + record(RETIRE, retire([77]))
    files["format1_provenance_flag.spill"] = file_header(fmt=1) + record(PUSH, push([group(0, [
        traj(1, provenance=prov)])]))
    # format 2 (before loss masks and episodes): read, without them; their flags there are refused
    files["format2_provenance.spill"] = file_header(fmt=2) + record(PUSH, push([g_prov])) + record(RETIRE, retire([0]))
    files["format2_mask_flag.spill"] = file_header(fmt=2) + record(PUSH, push([group(0, [
        traj(1, loss_mask=[1, 0])])]))
    # loss mask and episode record (format 3): a multi-turn group, model and observation tokens
    ep = (1, 3, 2, 1, 0, 3, 1, 1, 0.75)
    mt = traj(30, prompt=(5, 6), tokens=(7, 8, 9, 10, 11, 12), logprobs=(-0.5, -0.25, 0.0, 0.0, 0.0, -1.5),
              loss_mask=[1, 1, 0, 0, 0, 1], episode=ep, provenance=prov, token_rewards=[0, 0, 0, 0, 0, 1])
    files["episode_mask.spill"] = file_header() + record(PUSH, push([group(0, [
        mt, traj(30, sample=1, loss_mask=[1, 1], episode=(1, 1, 0, 0, 0, 0, 0, 2, 0.0))]), group(1, [traj(31)])]))
    files["mask_value_2.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, loss_mask=[1, 2])])]))
    files["mask_cut_short.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, loss_mask=[1, 0], texts=(None, None, None, None))[:-33]])]))
    files["episode_bad_version.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, episode=(2,) + ep[1:])])]))
    files["episode_bad_end.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, episode=ep[:7] + (9, 0.5))])]))
    files["episode_nan_seconds.spill"] = file_header() + record(PUSH, push([group(0, [
        traj(1, episode=ep[:8] + (float("nan"),))])]))
    files["episode_cut_short.spill"] = file_header() + record(PUSH, push([group(0, [traj(1, episode=ep)[:48 + 40]])]))
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
