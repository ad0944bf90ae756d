/* The replay buffer's durable spill: an append-only file of checksummed
 * records (groups accepted by a push; sequence numbers retired by a pull),
 * its reader, and the file operations (create, lock, append + fdatasync,
 * truncate a torn tail, compact by rewriting to a temporary name and
 * renaming). The file is untrusted input: the reader checks every length
 * and count before use. Knows nothing about waiting or staleness (that is
 * replay_buffer.c).
 *
 * Layout, all integers little-endian:
 *   file header (16 bytes): "RLPSPILL", u32 format = 3, u32 CRC-32 of the first 12 bytes
 *   record header (24 bytes): u32 magic "RLPR", u32 type, u64 payload length,
 *                             u32 payload CRC-32, u32 CRC-32 of header bytes [0, 20)
 *   type 1 (push) payload: u32 n_groups, u32 0, then per group:
 *       u64 seq, u32 n_traj, u32 0, then n_traj trajectories (see spill.c)
 *   type 2 (retire) payload: u64 n_consumed, u64 n_dropped, u64 seq[n_consumed + n_dropped]
 * Sequence numbers of push records strictly increase through the file.
 * Format 2 added a trajectory's provenance (a flag and a block after its
 * fixed part), format 3 its episode record (a flag and a block after the
 * provenance) and loss mask (a flag and one byte per completion token after
 * the token rewards); formats 1 and 2, the same without them, are still
 * read and are rewritten as format 3 when a buffer opens them. */
#ifndef RLPI_BUFFER_SPILL_H
#define RLPI_BUFFER_SPILL_H

#include "core/batch.h"
#include "core/log.h"

#include <stddef.h>
#include <stdint.h>

#define RLPI_SPILL_HEADER_BYTES 16
#define RLPI_SPILL_RECORD_HEADER_BYTES 24
#define RLPI_SPILL_PUSH 1u
#define RLPI_SPILL_RETIRE 2u
/* A record payload larger than this is refused by reader and writer. */
#define RLPI_SPILL_MAX_PAYLOAD ((uint64_t)1 << 32)

/* One group of trajectories as the buffer holds it. */
typedef struct rlpi_group {
    uint64_t seq;            /* unique within the buffer and its spill; increases in push order */
    uint64_t version;        /* min over its trajectories' token versions (and policy versions) */
    rlpi_traj *trajs;        /* (n) owned */
    size_t n;
    uint64_t spill_bytes;    /* bytes of its push record when written alone (0 without a spill) */
    struct rlpi_group *prev, *next;
} rlpi_group;

/* The version a group is tagged with (see rlpi_group::version). */
uint64_t rlpi_group_version(const rlpi_traj *trajs, size_t n);
/* NULL when the trajectory may be pushed (and read back), else the rule it
 * breaks: finish_reason in range, temperature finite and >= 0, a valid
 * trajectory's reward finite, token ids >= 0, logprobs and token rewards
 * finite, loss mask values 0 or 1, an episode record of a known version
 * with its end in range. The reader holds restored trajectories to the
 * same rules. */
const char *rlpi_spill_check_traj(const rlpi_traj *t);
/* Frees the trajectories and the group. NULL is a no-op. */
void rlpi_group_free(rlpi_group *g);

/* The file header of the current format. */
void rlpi_spill_file_header(uint8_t h[RLPI_SPILL_HEADER_BYTES]);

/* A growable byte buffer for encoding. */
typedef struct rlpi_bytes {
    uint8_t *p;
    size_t len, cap;
} rlpi_bytes;

void rlpi_bytes_free(rlpi_bytes *b);

/* Size of the push record (header included) holding exactly the groups
 * given; RLP_E_OVERFLOW past RLPI_SPILL_MAX_PAYLOAD. */
int rlpi_spill_push_size(uint64_t *out, rlpi_group *const *groups, size_t n);
/* Appends a push record of `groups` (their seq fields as set) to `out`. */
int rlpi_spill_encode_push(rlpi_bytes *out, rlpi_group *const *groups, size_t n);
/* Appends a retire record. */
int rlpi_spill_encode_retire(rlpi_bytes *out, const uint64_t *consumed, size_t n_consumed, const uint64_t *dropped,
                             size_t n_dropped);

/* What a scan of a spill image found. */
typedef struct rlpi_spill_scan {
    rlpi_group **groups;     /* (n_groups) live groups in seq order, owned */
    size_t n_groups;
    uint64_t next_seq;       /* one past the largest seq in the file (0 if none) */
    uint64_t image_bytes;    /* length of the image scanned */
    uint64_t valid_bytes;    /* length of the well-formed prefix (header + whole records) */
    uint64_t live_bytes;     /* sum of the live groups' spill_bytes */
    uint64_t n_records, n_retired;
    uint32_t format;         /* the file header's format (0 when there was no whole header) */
    int torn;                /* 1: bytes after valid_bytes are a torn or corrupt last record */
    char torn_reason[96];
} rlpi_spill_scan;

/* Reads a whole spill image. RLP_OK (check `torn`); RLP_E_FORMAT when the
 * header is not ours, a record in the middle is corrupt, or a record whose
 * checksum holds breaks a rule (message names the offset and field);
 * RLP_E_NOMEM. A torn tail is: a partial record header, a payload that runs
 * past the end, the last record's payload failing its CRC, or all-zero
 * bytes (a filesystem's zero fill after a crash). On failure `out` holds
 * nothing. `source` names the file in messages. */
int rlpi_spill_scan_image(const uint8_t *data, size_t size, const char *source, rlpi_spill_scan *out);
void rlpi_spill_scan_free(rlpi_spill_scan *s);

/* Test hook: when chunk > 0, appends are written `chunk` bytes per
 * write() with delay_us between them, as a slow disk would, so that a
 * crash test's kill lands inside records and leaves torn tails. Set it
 * before any buffer is created; never set by the library. */
typedef struct rlpi_spill_test_hooks {
    size_t chunk;
    unsigned delay_us;
} rlpi_spill_test_hooks;
extern rlpi_spill_test_hooks rlpi_spill_test;

/* An open, locked spill file. */
typedef struct rlpi_spill {
    int fd;
    char *path;
    uint64_t bytes;          /* file length: the next record goes here */
    const rlpi_logger *log;  /* borrowed */
} rlpi_spill;

/* Opens or creates `path`, takes an exclusive lock (RLP_E_STATE when
 * another buffer holds it), scans it into `scan`, truncates a torn tail
 * with a warning, and removes temporary files a crashed compaction left.
 * A file of an older format is rewritten (as a compaction is) in the
 * current one, so that what is appended later matches its header.
 * RLP_E_IO, RLP_E_FORMAT, RLP_E_UNSUPPORTED, RLP_E_NOMEM. */
int rlpi_spill_open(rlpi_spill *s, const char *path, const rlpi_logger *log, rlpi_spill_scan *scan);
/* Writes `len` bytes at the end and fdatasyncs. On failure the file is
 * cut back to its previous length (best effort) and RLP_E_IO returned. */
int rlpi_spill_append(rlpi_spill *s, const void *data, size_t len);
/* Replaces the file by a header plus `image` (records), through a
 * temporary file that is fsynced, locked and renamed over the old one. */
int rlpi_spill_rewrite(rlpi_spill *s, const void *image, size_t len);
void rlpi_spill_close(rlpi_spill *s);

#endif
