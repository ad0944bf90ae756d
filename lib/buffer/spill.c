/* Spill file of the replay buffer: record encoding, the bounds-checked
 * reader, and the file operations (see spill.h for the layout). Every
 * count read from the file is checked against the bytes left before any
 * allocation, so a forged count cannot make the reader allocate more than
 * a small multiple of the file's size. */
#include "buffer/spill.h"

#include "core/checked.h"
#include "core/crc32.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t FILE_MAGIC[8] = {'R', 'L', 'P', 'S', 'P', 'I', 'L', 'L'};
static const uint8_t RECORD_MAGIC[4] = {'R', 'L', 'P', 'R'};
/* The format written. 2 added provenance (flag bit 1 and its block), 3
 * the episode record (flag bit 3 and its block) and the loss mask (flag
 * bit 2: one byte per completion token after the token rewards). An older
 * file is the same layout without those flags, so it is read (its
 * trajectories have no provenance, episode or mask) and rewritten in the
 * current format at open. */
#define FORMAT_VERSION 3u
#define FORMAT_OLDEST 1u

/* Fixed part of a trajectory: two u64, eight 32-bit fields. */
#define TRAJ_FIXED_BYTES 48u
/* Smallest encoded trajectory: fixed part, two counts, four string lengths. */
#define TRAJ_MIN_BYTES (TRAJ_FIXED_BYTES + 8u + 8u + 4u * 8u)
#define GROUP_HEADER_BYTES 16u
#define TRAJ_HAS_TOKEN_REWARDS 1u
#define TRAJ_HAS_PROVENANCE 2u
#define TRAJ_HAS_LOSS_MASK 4u
#define TRAJ_HAS_EPISODE 8u
/* Provenance block (format 2, flag TRAJ_HAS_PROVENANCE): u32 version, u32 0,
 * u64 prompt_index, epoch, position, sampling_seed, batch. */
#define PROVENANCE_BYTES 48u
/* Episode block (format 3, flag TRAJ_HAS_EPISODE, after the provenance):
 * u32 version, turns, tool_calls, tool_errors, tool_timeouts,
 * observation_tokens, observations_cut, i32 end, f64 tool_seconds. */
#define EPISODE_BYTES 40u

/* ---- groups ---------------------------------------------------------------- */

uint64_t rlpi_group_version(const rlpi_traj *trajs, size_t n)
{
    uint64_t v = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const rlpi_traj *t = &trajs[i];
        if (t->policy_version < v)
            v = t->policy_version;
        for (size_t k = 0; t->versions && k < t->n_tokens; k++)
            if (t->versions[k] < v)
                v = t->versions[k];
    }
    return n ? v : 0;
}

void rlpi_group_free(rlpi_group *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++)
        rlpi_traj_clear(&g->trajs[i]);
    free(g->trajs);
    free(g);
}

/* ---- little-endian encoding ------------------------------------------------- */

void rlpi_bytes_free(rlpi_bytes *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int bytes_reserve(rlpi_bytes *b, size_t more)
{
    size_t need;
    if (!rlpi_add_size(&need, b->len, more))
        return rlpi_error_set(RLP_E_OVERFLOW, "spill: record too large");
    if (need <= b->cap)
        return RLP_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return rlpi_error_set(RLP_E_NOMEM, "spill: out of memory");
    b->p = p;
    b->cap = cap;
    return RLP_OK;
}

static void put_u32_at(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64_at(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64_at(const uint8_t *p)
{
    return (uint64_t)get_u32_at(p) | (uint64_t)get_u32_at(p + 4) << 32;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Callers reserve first; these only write. */
static void put_u32(rlpi_bytes *b, uint32_t v)
{
    put_u32_at(b->p + b->len, v);
    b->len += 4;
}

static void put_u64(rlpi_bytes *b, uint64_t v)
{
    put_u64_at(b->p + b->len, v);
    b->len += 8;
}

static void put_str(rlpi_bytes *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_u64(b, s ? (uint64_t)n + 1 : 0);
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
}

static size_t str_bytes(const char *s)
{
    return 8 + (s ? strlen(s) : 0);
}

static size_t traj_bytes(const rlpi_traj *t)
{
    size_t per_token = 4 + 4 + 8 + (t->token_rewards ? 4 : 0) + (t->loss_mask ? 1 : 0);
    return TRAJ_FIXED_BYTES + (t->has_provenance ? PROVENANCE_BYTES : 0) + (t->has_episode ? EPISODE_BYTES : 0) +
        8 + 4 * t->n_prompt + 8 +
        per_token * t->n_tokens + str_bytes(t->prompt_text) + str_bytes(t->text) + str_bytes(t->error) +
        str_bytes(t->metadata);
}

static void put_traj(rlpi_bytes *b, const rlpi_traj *t)
{
    put_u64(b, t->group_id);
    put_u64(b, t->policy_version);
    put_u32(b, (uint32_t)t->finish_reason);
    put_u32(b, (uint32_t)t->stop_index);
    put_u32(b, f32_bits(t->temperature));
    put_u32(b, f32_bits(t->reward));
    put_u32(b, t->valid ? 1u : 0u);
    put_u32(b, t->sample_index);
    put_u32(b, (t->token_rewards ? TRAJ_HAS_TOKEN_REWARDS : 0) | (t->has_provenance ? TRAJ_HAS_PROVENANCE : 0) |
                   (t->loss_mask ? TRAJ_HAS_LOSS_MASK : 0) | (t->has_episode ? TRAJ_HAS_EPISODE : 0));
    put_u32(b, 0);
    if (t->has_provenance) {
        put_u32(b, t->provenance.version);
        put_u32(b, 0);
        put_u64(b, t->provenance.prompt_index);
        put_u64(b, t->provenance.epoch);
        put_u64(b, t->provenance.position);
        put_u64(b, t->provenance.sampling_seed);
        put_u64(b, t->provenance.batch);
    }
    if (t->has_episode) {
        const rlp_episode_stats *e = &t->episode;
        put_u32(b, e->version);
        put_u32(b, e->turns);
        put_u32(b, e->tool_calls);
        put_u32(b, e->tool_errors);
        put_u32(b, e->tool_timeouts);
        put_u32(b, e->observation_tokens);
        put_u32(b, e->observations_cut);
        put_u32(b, (uint32_t)e->end);
        uint64_t bits;
        memcpy(&bits, &e->tool_seconds, sizeof bits);
        put_u64(b, bits);
    }
    put_u64(b, t->n_prompt);
    for (size_t i = 0; i < t->n_prompt; i++)
        put_u32(b, (uint32_t)t->prompt[i]);
    put_u64(b, t->n_tokens);
    for (size_t i = 0; i < t->n_tokens; i++)
        put_u32(b, (uint32_t)t->tokens[i]);
    for (size_t i = 0; i < t->n_tokens; i++)
        put_u32(b, f32_bits(t->logprobs[i]));
    for (size_t i = 0; i < t->n_tokens; i++)
        put_u64(b, t->versions ? t->versions[i] : t->policy_version);
    for (size_t i = 0; t->token_rewards && i < t->n_tokens; i++)
        put_u32(b, f32_bits(t->token_rewards[i]));
    if (t->loss_mask) {
        if (t->n_tokens)
            memcpy(b->p + b->len, t->loss_mask, t->n_tokens);
        b->len += t->n_tokens;
    }
    put_str(b, t->prompt_text);
    put_str(b, t->text);
    put_str(b, t->error);
    put_str(b, t->metadata);
}

static uint64_t push_payload_bytes(rlpi_group *const *groups, size_t n)
{
    uint64_t total = 8;
    for (size_t g = 0; g < n; g++) {
        total += GROUP_HEADER_BYTES;
        for (size_t i = 0; i < groups[g]->n; i++)
            total += traj_bytes(&groups[g]->trajs[i]);
    }
    return total;
}

int rlpi_spill_push_size(uint64_t *out, rlpi_group *const *groups, size_t n)
{
    uint64_t payload = push_payload_bytes(groups, n);
    if (payload > RLPI_SPILL_MAX_PAYLOAD || n > UINT32_MAX)
        return rlpi_error_set(RLP_E_OVERFLOW, "spill: a push of %llu bytes is larger than a record may be",
                              (unsigned long long)payload);
    *out = RLPI_SPILL_RECORD_HEADER_BYTES + payload;
    return RLP_OK;
}

/* Fills in the record header in front of a payload of `payload_len` bytes
 * that starts at b->p + start + RECORD_HEADER_BYTES. */
static void seal_record(rlpi_bytes *b, size_t start, uint32_t type, size_t payload_len)
{
    uint8_t *h = b->p + start;
    memcpy(h, RECORD_MAGIC, 4);
    put_u32_at(h + 4, type);
    put_u64_at(h + 8, payload_len);
    put_u32_at(h + 16, rlpi_crc32(0, h + RLPI_SPILL_RECORD_HEADER_BYTES, payload_len));
    put_u32_at(h + 20, rlpi_crc32(0, h, 20));
}

int rlpi_spill_encode_push(rlpi_bytes *out, rlpi_group *const *groups, size_t n)
{
    uint64_t total;
    int rc = rlpi_spill_push_size(&total, groups, n);
    if (rc)
        return rc;
    if (total > SIZE_MAX || (rc = bytes_reserve(out, (size_t)total)))
        return rc ? rc : rlpi_error_set(RLP_E_OVERFLOW, "spill: record too large");
    size_t start = out->len;
    out->len += RLPI_SPILL_RECORD_HEADER_BYTES;
    put_u32(out, (uint32_t)n);
    put_u32(out, 0);
    for (size_t g = 0; g < n; g++) {
        put_u64(out, groups[g]->seq);
        put_u32(out, (uint32_t)groups[g]->n);
        put_u32(out, 0);
        for (size_t i = 0; i < groups[g]->n; i++)
            put_traj(out, &groups[g]->trajs[i]);
    }
    seal_record(out, start, RLPI_SPILL_PUSH, out->len - start - RLPI_SPILL_RECORD_HEADER_BYTES);
    return RLP_OK;
}

int rlpi_spill_encode_retire(rlpi_bytes *out, const uint64_t *consumed, size_t n_consumed, const uint64_t *dropped,
                             size_t n_dropped)
{
    size_t n = n_consumed + n_dropped, payload;
    if (n < n_consumed || !rlpi_mul_size(&payload, n, 8) || !rlpi_add_size(&payload, payload, 16) ||
        payload > RLPI_SPILL_MAX_PAYLOAD)
        return rlpi_error_set(RLP_E_OVERFLOW, "spill: retire record too large");
    int rc = bytes_reserve(out, RLPI_SPILL_RECORD_HEADER_BYTES + payload);
    if (rc)
        return rc;
    size_t start = out->len;
    out->len += RLPI_SPILL_RECORD_HEADER_BYTES;
    put_u64(out, n_consumed);
    put_u64(out, n_dropped);
    for (size_t i = 0; i < n_consumed; i++)
        put_u64(out, consumed[i]);
    for (size_t i = 0; i < n_dropped; i++)
        put_u64(out, dropped[i]);
    seal_record(out, start, RLPI_SPILL_RETIRE, payload);
    return RLP_OK;
}

/* ---- reader ---------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static bool take_u32(cursor *c, uint32_t *v)
{
    if (c->left < 4)
        return false;
    *v = get_u32_at(c->p);
    c->p += 4;
    c->left -= 4;
    return true;
}

static bool take_u64(cursor *c, uint64_t *v)
{
    if (c->left < 8)
        return false;
    *v = get_u64_at(c->p);
    c->p += 8;
    c->left -= 8;
    return true;
}

/* A count of elements of `elem` bytes each that must fit in what is left. */
static bool take_count(cursor *c, size_t elem, size_t *n)
{
    uint64_t v;
    if (!take_u64(c, &v) || v > c->left / elem)
        return false;
    *n = (size_t)v;
    return true;
}

/* 0: read (NULL for an absent string); 1: malformed; 2: out of memory. */
static int take_str(cursor *c, char **out)
{
    uint64_t v;
    *out = NULL;
    if (!take_u64(c, &v))
        return 1;
    if (v == 0)
        return 0;
    uint64_t len = v - 1;
    if (len > c->left || memchr(c->p, '\0', (size_t)len))
        return 1;
    if (!(*out = malloc((size_t)len + 1)))
        return 2;
    memcpy(*out, c->p, (size_t)len);
    (*out)[len] = '\0';
    c->p += len;
    c->left -= (size_t)len;
    return 0;
}

const char *rlpi_spill_check_traj(const rlpi_traj *t)
{
    if (t->finish_reason < RLP_FINISH_NONE || t->finish_reason > RLP_FINISH_ERROR)
        return "finish_reason out of range";
    if (!isfinite(t->temperature) || t->temperature < 0)
        return "temperature not finite and >= 0";
    if (t->valid && !isfinite(t->reward))
        return "a valid trajectory without a finite reward (score it first)";
    if (t->n_prompt && !t->prompt)
        return "prompt tokens missing";
    if (t->n_tokens && (!t->tokens || !t->logprobs))
        return "completion tokens or logprobs missing";
    for (size_t i = 0; i < t->n_prompt; i++)
        if (t->prompt[i] < 0)
            return "negative prompt token id";
    for (size_t i = 0; i < t->n_tokens; i++) {
        if (t->tokens[i] < 0)
            return "negative completion token id";
        if (!isfinite(t->logprobs[i]))
            return "a logprob that is not finite";
        if (t->token_rewards && !isfinite(t->token_rewards[i]))
            return "a token reward that is not finite";
        if (t->loss_mask && t->loss_mask[i] > 1)
            return "a loss mask value other than 0 and 1";
    }
    if (t->has_provenance && t->provenance.version != RLP_PROVENANCE_VERSION)
        return "provenance of an unknown version";
    if (t->has_episode &&
        (t->episode.version != RLP_EPISODE_STATS_VERSION || t->episode.end < RLP_EPISODE_RUNNING ||
         t->episode.end > RLP_EPISODE_ABORT || !isfinite(t->episode.tool_seconds) || t->episode.tool_seconds < 0))
        return "an episode record of an unknown version, end out of range or tool_seconds not finite and >= 0";
    return NULL;
}

/* Reads one trajectory of a file of format `format`; `why` names the first
 * broken rule. */
static int take_traj(cursor *c, uint32_t format, rlpi_traj *t, const char **why)
{
    memset(t, 0, sizeof *t);
    uint32_t u[8];
    if (c->left < TRAJ_MIN_BYTES) {
        *why = "trajectory truncated";
        return RLP_E_FORMAT;
    }
    take_u64(c, &t->group_id);
    take_u64(c, &t->policy_version);
    for (int i = 0; i < 8; i++)
        take_u32(c, &u[i]);
    t->finish_reason = (int32_t)u[0];
    t->stop_index = (int32_t)u[1];
    t->temperature = bits_f32(u[2]);
    t->reward = bits_f32(u[3]);
    t->valid = (int32_t)u[4];
    t->sample_index = u[5];
    uint32_t flags = u[6];
    uint32_t known = TRAJ_HAS_TOKEN_REWARDS | (format >= 2 ? TRAJ_HAS_PROVENANCE : 0) |
                     (format >= 3 ? TRAJ_HAS_LOSS_MASK | TRAJ_HAS_EPISODE : 0);
    if ((flags & ~known) || u[7] != 0 || (t->valid != 0 && t->valid != 1)) {
        *why = "unknown flags or a reserved field set";
        return RLP_E_FORMAT;
    }
    if (flags & TRAJ_HAS_PROVENANCE) {
        uint32_t pv, zero;
        if (c->left < PROVENANCE_BYTES) {
            *why = "provenance past the record";
            return RLP_E_FORMAT;
        }
        take_u32(c, &pv);
        take_u32(c, &zero);
        if (pv != RLP_PROVENANCE_VERSION || zero != 0) {
            *why = "provenance of an unknown version or with its reserved field set";
            return RLP_E_FORMAT;
        }
        t->has_provenance = true;
        t->provenance.version = pv;
        take_u64(c, &t->provenance.prompt_index);
        take_u64(c, &t->provenance.epoch);
        take_u64(c, &t->provenance.position);
        take_u64(c, &t->provenance.sampling_seed);
        take_u64(c, &t->provenance.batch);
    }
    if (flags & TRAJ_HAS_EPISODE) {
        if (c->left < EPISODE_BYTES) {
            *why = "episode record past the record";
            return RLP_E_FORMAT;
        }
        rlp_episode_stats *e = &t->episode;
        uint32_t end;
        uint64_t bits;
        take_u32(c, &e->version);
        take_u32(c, &e->turns);
        take_u32(c, &e->tool_calls);
        take_u32(c, &e->tool_errors);
        take_u32(c, &e->tool_timeouts);
        take_u32(c, &e->observation_tokens);
        take_u32(c, &e->observations_cut);
        take_u32(c, &end);
        take_u64(c, &bits);
        e->end = (int32_t)end;
        memcpy(&e->tool_seconds, &bits, sizeof bits);
        t->has_episode = true; /* its fields are checked with the rest below */
    }
    size_t n;
    if (!take_count(c, 4, &n)) {
        *why = "prompt length past the record";
        return RLP_E_FORMAT;
    }
    if (n && !(t->prompt = malloc(n * sizeof *t->prompt)))
        return RLP_E_NOMEM;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        take_u32(c, &v);
        t->prompt[i] = (int32_t)v;
    }
    t->n_prompt = n;
    size_t per_token = 16 + ((flags & TRAJ_HAS_TOKEN_REWARDS) ? 4 : 0) + ((flags & TRAJ_HAS_LOSS_MASK) ? 1 : 0);
    if (!take_count(c, per_token, &n)) {
        *why = "completion length past the record";
        return RLP_E_FORMAT;
    }
    if (n) {
        t->tokens = malloc(n * sizeof *t->tokens);
        t->logprobs = malloc(n * sizeof *t->logprobs);
        t->versions = malloc(n * sizeof *t->versions);
        if (!t->tokens || !t->logprobs || !t->versions)
            return RLP_E_NOMEM;
        t->n_tokens = t->cap = n;
        for (size_t i = 0; i < n; i++) {
            take_u32(c, &v);
            t->tokens[i] = (int32_t)v;
        }
        for (size_t i = 0; i < n; i++) {
            take_u32(c, &v);
            t->logprobs[i] = bits_f32(v);
        }
        for (size_t i = 0; i < n; i++)
            take_u64(c, &t->versions[i]);
    }
    if (flags & TRAJ_HAS_TOKEN_REWARDS) {
        /* present even when empty: rlp_batch_set_token_rewards keeps one for n = 0 */
        if (!(t->token_rewards = malloc((n ? n : 1) * sizeof *t->token_rewards)))
            return RLP_E_NOMEM;
        for (size_t i = 0; i < n; i++) {
            take_u32(c, &v);
            t->token_rewards[i] = bits_f32(v);
        }
    }
    if (flags & TRAJ_HAS_LOSS_MASK) {
        /* n bytes: fits, take_count counted them in per_token; values checked below */
        if (!(t->loss_mask = malloc(n ? n : 1)))
            return RLP_E_NOMEM;
        if (n)
            memcpy(t->loss_mask, c->p, n);
        c->p += n;
        c->left -= n;
    }
    char **strs[4] = {&t->prompt_text, &t->text, &t->error, &t->metadata};
    for (int i = 0; i < 4; i++) {
        int r = take_str(c, strs[i]);
        if (r == 2)
            return RLP_E_NOMEM;
        if (r) {
            *why = "string length past the record or an embedded NUL";
            return RLP_E_FORMAT;
        }
    }
    /* what a push would not have accepted is not restored either */
    if ((*why = rlpi_spill_check_traj(t)))
        return RLP_E_FORMAT;
    return RLP_OK;
}

static void scan_clear(rlpi_spill_scan *s)
{
    for (size_t i = 0; i < s->n_groups; i++)
        rlpi_group_free(s->groups[i]);
    free(s->groups);
    memset(s, 0, sizeof *s);
}

void rlpi_spill_scan_free(rlpi_spill_scan *s)
{
    if (s)
        scan_clear(s);
}

/* Parses a push record's payload into new groups appended to s. */
static int read_push(const uint8_t *p, size_t len, uint64_t off, const char *src, rlpi_spill_scan *s,
                     size_t *cap)
{
    cursor c = {p, len};
    uint32_t n_groups, zero;
    if (!take_u32(&c, &n_groups) || !take_u32(&c, &zero) || zero != 0 || n_groups == 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: push record at offset %llu: bad group count", src,
                              (unsigned long long)off);
    if (n_groups > c.left / (GROUP_HEADER_BYTES + TRAJ_MIN_BYTES))
        return rlpi_error_set(RLP_E_FORMAT, "%s: push record at offset %llu: %u groups cannot fit in %zu bytes",
                              src, (unsigned long long)off, n_groups, c.left);
    for (uint32_t g = 0; g < n_groups; g++) {
        uint64_t seq;
        uint32_t n_traj;
        const uint8_t *gstart = c.p;
        take_u64(&c, &seq); /* fits: checked against the group minimum below */
        if (!take_u32(&c, &n_traj) || !take_u32(&c, &zero) || zero != 0 || n_traj == 0 ||
            n_traj > c.left / TRAJ_MIN_BYTES)
            return rlpi_error_set(RLP_E_FORMAT, "%s: push record at offset %llu, group %u: bad trajectory count",
                                  src, (unsigned long long)off, g);
        if (seq < s->next_seq || seq == UINT64_MAX)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "%s: push record at offset %llu, group %u: sequence number %llu does not "
                                  "increase (expected >= %llu)",
                                  src, (unsigned long long)off, g, (unsigned long long)seq,
                                  (unsigned long long)s->next_seq);
        rlpi_group *grp = calloc(1, sizeof *grp);
        rlpi_traj *trajs = calloc(n_traj, sizeof *trajs);
        if (!grp || !trajs) {
            free(grp);
            free(trajs);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", src);
        }
        grp->seq = seq;
        grp->trajs = trajs;
        int rc = RLP_OK;
        const char *why = NULL;
        for (uint32_t i = 0; i < n_traj && rc == RLP_OK; i++) {
            rc = take_traj(&c, s->format, &trajs[i], &why);
            grp->n = i + 1; /* the partly read one is cleared with the group */
            if (rc == RLP_OK && trajs[i].group_id != trajs[0].group_id) {
                why = "trajectories of one group with different group ids";
                rc = RLP_E_FORMAT;
            }
        }
        if (rc) {
            rlpi_group_free(grp);
            if (rc == RLP_E_NOMEM)
                return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", src);
            return rlpi_error_set(RLP_E_FORMAT, "%s: push record at offset %llu, group %u: %s", src,
                                  (unsigned long long)off, g, why ? why : "malformed");
        }
        grp->version = rlpi_group_version(grp->trajs, grp->n);
        grp->spill_bytes = RLPI_SPILL_RECORD_HEADER_BYTES + 8 + (uint64_t)(c.p - gstart);
        if (s->n_groups == *cap) {
            size_t nc = *cap ? 2 * *cap : 64;
            rlpi_group **ng = realloc(s->groups, nc * sizeof *ng);
            if (!ng) {
                rlpi_group_free(grp);
                return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", src);
            }
            s->groups = ng;
            *cap = nc;
        }
        s->groups[s->n_groups++] = grp;
        s->next_seq = seq + 1;
    }
    if (c.left != 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: push record at offset %llu: %zu bytes after the last group", src,
                              (unsigned long long)off, c.left);
    return RLP_OK;
}

/* Finds seq among the groups (sorted by seq); frees and marks it retired. */
static void retire_seq(rlpi_spill_scan *s, uint64_t seq)
{
    size_t lo = 0, hi = s->n_groups;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->groups[mid]->seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n_groups && s->groups[lo]->seq == seq && s->groups[lo]->n) {
        rlpi_group *g = s->groups[lo];
        for (size_t i = 0; i < g->n; i++)
            rlpi_traj_clear(&g->trajs[i]);
        free(g->trajs);
        g->trajs = NULL;
        g->n = 0; /* tombstone: keeps its seq for the search, dropped at the end */
        s->n_retired++;
    }
}

static int read_retire(const uint8_t *p, size_t len, uint64_t off, const char *src, rlpi_spill_scan *s)
{
    cursor c = {p, len};
    uint64_t a, b;
    if (!take_u64(&c, &a) || !take_u64(&c, &b) || a > c.left / 8 || b > c.left / 8 || a + b != c.left / 8 ||
        c.left % 8 != 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: retire record at offset %llu: counts do not match its length", src,
                              (unsigned long long)off);
    for (uint64_t i = 0; i < a + b; i++) {
        uint64_t seq;
        take_u64(&c, &seq);
        /* a seq that is not (or no longer) in the file is fine: compaction
         * may have dropped the group before this record was written */
        retire_seq(s, seq);
    }
    return RLP_OK;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static void mark_torn(rlpi_spill_scan *s, uint64_t off, const char *why)
{
    s->torn = 1;
    s->valid_bytes = off;
    snprintf(s->torn_reason, sizeof s->torn_reason, "%s at offset %llu", why, (unsigned long long)off);
}

int rlpi_spill_scan_image(const uint8_t *data, size_t size, const char *source, rlpi_spill_scan *out)
{
    memset(out, 0, sizeof *out);
    const char *src = source ? source : "spill";
    if (size < RLPI_SPILL_HEADER_BYTES) {
        /* a crash while the file was being created: an empty spill */
        if (memcmp(data ? data : FILE_MAGIC, FILE_MAGIC, size < 8 ? size : 8) != 0 && !all_zero(data, size))
            return rlpi_error_set(RLP_E_FORMAT, "%s: not a librlpost spill file (%zu bytes, bad magic)", src, size);
        if (size > 0)
            mark_torn(out, 0, "file header cut short");
        out->image_bytes = size;
        return RLP_OK;
    }
    if (memcmp(data, FILE_MAGIC, 8) != 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: not a librlpost spill file (bad magic)", src);
    if (get_u32_at(data + 12) != rlpi_crc32(0, data, 12))
        return rlpi_error_set(RLP_E_FORMAT, "%s: file header checksum mismatch", src);
    uint32_t format = get_u32_at(data + 8);
    if (format < FORMAT_OLDEST || format > FORMAT_VERSION)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: spill format %u (this library reads %u to %u)", src, format,
                              FORMAT_OLDEST, FORMAT_VERSION);
    out->format = format;
    size_t off = RLPI_SPILL_HEADER_BYTES, cap = 0;
    out->valid_bytes = off;
    int rc = RLP_OK;
    while (off < size) {
        size_t left = size - off;
        const uint8_t *h = data + off;
        if (left < RLPI_SPILL_RECORD_HEADER_BYTES) {
            mark_torn(out, off, "partial record header");
            break;
        }
        if (memcmp(h, RECORD_MAGIC, 4) != 0 || get_u32_at(h + 20) != rlpi_crc32(0, h, 20)) {
            if (all_zero(h, left)) {
                mark_torn(out, off, "zero-filled tail");
                break;
            }
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: corrupt record header at offset %zu (not the file's end)", src,
                                off);
            break;
        }
        uint32_t type = get_u32_at(h + 4);
        uint64_t len = get_u64_at(h + 8);
        if (len > RLPI_SPILL_MAX_PAYLOAD) {
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: record at offset %zu declares %llu bytes", src, off,
                                (unsigned long long)len);
            break;
        }
        if (len > left - RLPI_SPILL_RECORD_HEADER_BYTES) {
            mark_torn(out, off, "record cut short");
            break;
        }
        const uint8_t *payload = h + RLPI_SPILL_RECORD_HEADER_BYTES;
        if (get_u32_at(h + 16) != rlpi_crc32(0, payload, (size_t)len)) {
            if (RLPI_SPILL_RECORD_HEADER_BYTES + len == left) {
                mark_torn(out, off, "last record's checksum mismatch");
                break;
            }
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: record at offset %zu fails its checksum (not the last record)",
                                src, off);
            break;
        }
        if (type == RLPI_SPILL_PUSH)
            rc = read_push(payload, (size_t)len, off, src, out, &cap);
        else if (type == RLPI_SPILL_RETIRE)
            rc = read_retire(payload, (size_t)len, off, src, out);
        else
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: record at offset %zu has unknown type %u", src, off, type);
        if (rc)
            break;
        out->n_records++;
        off += RLPI_SPILL_RECORD_HEADER_BYTES + (size_t)len;
        out->valid_bytes = off;
    }
    if (rc) {
        scan_clear(out);
        return rc;
    }
    /* squeeze out the tombstones of retired groups */
    size_t k = 0;
    for (size_t i = 0; i < out->n_groups; i++) {
        if (out->groups[i]->n) {
            out->live_bytes += out->groups[i]->spill_bytes;
            out->groups[k++] = out->groups[i];
        } else {
            rlpi_group_free(out->groups[i]);
        }
    }
    out->n_groups = k;
    out->image_bytes = size;
    return RLP_OK;
}

/* ---- file operations ------------------------------------------------------- */

rlpi_spill_test_hooks rlpi_spill_test;

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        size_t n = len;
        if (rlpi_spill_test.chunk && n > rlpi_spill_test.chunk) {
            n = rlpi_spill_test.chunk;
            if (rlpi_spill_test.delay_us && p != buf)
                usleep(rlpi_spill_test.delay_us);
        }
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

void rlpi_spill_file_header(uint8_t h[RLPI_SPILL_HEADER_BYTES])
{
    memcpy(h, FILE_MAGIC, 8);
    put_u32_at(h + 8, FORMAT_VERSION);
    put_u32_at(h + 12, rlpi_crc32(0, h, 12));
}

static void fsync_parent(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(copy);
}

/* Temporary files of a compaction that did not finish: "<name>.tmp.XXXXXX". */
static void remove_leftovers(const char *path)
{
    char *d = strdup(path), *b = strdup(path);
    if (!d || !b) {
        free(d);
        free(b);
        return;
    }
    const char *dir = dirname(d), *base = basename(b);
    size_t bl = strlen(base);
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        if (strncmp(e->d_name, base, bl) == 0 && strncmp(e->d_name + bl, ".tmp.", 5) == 0 &&
            strlen(e->d_name + bl + 5) == 6) {
            char full[4096];
            if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < sizeof full)
                unlink(full);
        }
    }
    if (dh)
        closedir(dh);
    free(d);
    free(b);
}

int rlpi_spill_open(rlpi_spill *s, const char *path, const rlpi_logger *log, rlpi_spill_scan *scan)
{
    memset(s, 0, sizeof *s);
    memset(scan, 0, sizeof *scan);
    s->fd = -1;
    s->log = log;
    if (!(s->path = strdup(path)))
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        rlpi_spill_close(s);
        return rlpi_error_set(RLP_E_IO, "%s: cannot open spill file: %s", path, strerror(e));
    }
    s->fd = fd;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        rlpi_spill_close(s);
        return rlpi_error_set(e == EWOULDBLOCK ? RLP_E_STATE : RLP_E_IO, "%s: spill file is in use: %s", path,
                              e == EWOULDBLOCK ? "another replay buffer holds its lock" : strerror(e));
    }
    remove_leftovers(path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        rlpi_spill_close(s);
        return rlpi_error_set(RLP_E_IO, "%s: not a regular file (%s)", path, strerror(e));
    }
    int rc = RLP_OK;
    bool upgraded = false;
    if (st.st_size > 0) {
        if ((uintmax_t)st.st_size > SIZE_MAX) {
            rlpi_spill_close(s);
            return rlpi_error_set(RLP_E_OVERFLOW, "%s: too large to map", path);
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            rlpi_spill_close(s);
            return rlpi_error_set(RLP_E_IO, "%s: cannot map: %s", path, strerror(e));
        }
        rc = rlpi_spill_scan_image(m, (size_t)st.st_size, path, scan);
        if (rc == RLP_OK && scan->format && scan->format < FORMAT_VERSION) {
            /* its records are valid in the current format: rewrite them
             * under a current header (temporary file + rename, so a crash
             * leaves one whole file), which also cuts a torn tail */
            rlpi_log(log, RLP_LOG_INFO, "%s: spill format %u; rewriting it in format %u", path, scan->format,
                     FORMAT_VERSION);
            rc = rlpi_spill_rewrite(s, (const uint8_t *)m + RLPI_SPILL_HEADER_BYTES,
                                    (size_t)scan->valid_bytes - RLPI_SPILL_HEADER_BYTES);
            if (rc)
                rlpi_spill_scan_free(scan);
            else
                upgraded = true;
        }
        munmap(m, (size_t)st.st_size);
        if (rc) {
            rlpi_spill_close(s);
            return rc;
        }
    }
    if (scan->torn)
        rlpi_log(log, RLP_LOG_WARN, "%s: %s; truncating %llu bytes (a push that never returned)", path,
                 scan->torn_reason, (unsigned long long)((uint64_t)st.st_size - scan->valid_bytes));
    if (upgraded) {
        /* rlpi_spill_rewrite set s->fd and s->bytes */
    } else if (st.st_size == 0 || scan->valid_bytes < RLPI_SPILL_HEADER_BYTES) {
        uint8_t h[RLPI_SPILL_HEADER_BYTES];
        rlpi_spill_file_header(h);
        if (ftruncate(fd, 0) != 0 || write_all(fd, h, sizeof h, 0) != 0 || fsync(fd) != 0) {
            int e = errno;
            rlpi_spill_scan_free(scan);
            rlpi_spill_close(s);
            return rlpi_error_set(RLP_E_IO, "%s: cannot write the header: %s", path, strerror(e));
        }
        fsync_parent(path);
        s->bytes = RLPI_SPILL_HEADER_BYTES;
    } else {
        if (scan->torn && (ftruncate(fd, (off_t)scan->valid_bytes) != 0 || fsync(fd) != 0)) {
            int e = errno;
            rlpi_spill_scan_free(scan);
            rlpi_spill_close(s);
            return rlpi_error_set(RLP_E_IO, "%s: cannot truncate the torn tail: %s", path, strerror(e));
        }
        s->bytes = scan->valid_bytes;
    }
    return RLP_OK;
}

int rlpi_spill_append(rlpi_spill *s, const void *data, size_t len)
{
    if (write_all(s->fd, data, len, s->bytes) != 0 || fdatasync(s->fd) != 0) {
        int e = errno;
        /* leave no partial record for the next append to bury in the middle */
        if (ftruncate(s->fd, (off_t)s->bytes) == 0)
            (void)fdatasync(s->fd);
        return rlpi_error_set(RLP_E_IO, "%s: append failed: %s", s->path, strerror(e));
    }
    s->bytes += len;
    return RLP_OK;
}

int rlpi_spill_rewrite(rlpi_spill *s, const void *image, size_t len)
{
    size_t n = strlen(s->path) + sizeof ".tmp.XXXXXX";
    char *tmp = malloc(n);
    if (!tmp)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", s->path);
    snprintf(tmp, n, "%s.tmp.XXXXXX", s->path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return rlpi_error_set(RLP_E_IO, "%s: cannot create a temporary file: %s", s->path, strerror(e));
    }
    (void)fchmod(fd, 0644);
    uint8_t h[RLPI_SPILL_HEADER_BYTES];
    rlpi_spill_file_header(h);
    const char *step = "write";
    int ok = write_all(fd, h, sizeof h, 0) == 0 && write_all(fd, image, len, sizeof h) == 0;
    if (ok && !(ok = fsync(fd) == 0))
        step = "fsync";
    /* lock the new inode before it takes the name, so no other buffer can
     * open it between the rename and our use of it */
    if (ok && !(ok = flock(fd, LOCK_EX | LOCK_NB) == 0))
        step = "lock";
    if (ok && !(ok = rename(tmp, s->path) == 0))
        step = "rename";
    if (!ok) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return rlpi_error_set(RLP_E_IO, "%s: compaction failed (%s): %s", s->path, step, strerror(e));
    }
    free(tmp);
    fsync_parent(s->path);
    close(s->fd);
    s->fd = fd;
    s->bytes = RLPI_SPILL_HEADER_BYTES + len;
    return RLP_OK;
}

void rlpi_spill_close(rlpi_spill *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->path);
    s->path = NULL;
}
