/* libFuzzer target: the replay buffer's spill reader on arbitrary bytes.
 * It must return a status (never crash, leak or read outside the image);
 * what it accepts must hold groups the buffer can use unchecked (whole,
 * increasing sequence numbers, trajectories a push would accept), and
 * those groups written back must read back the same. Each input is read
 * twice: as is, and with every checksum recomputed, so that mutations
 * reach the payload parser instead of stopping at a CRC. The round trip
 * keeps the input's header: groups read from a format-1 file have no
 * provenance (nor a format-2 file's a loss mask or an episode record), so
 * their records are valid under it. Built by
 * tests/fuzz/run-fuzzers.sh; seeds from tests/reference/make_spill_fixtures.py. */
#include "buffer/spill.h"
#include "core/crc32.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_groups(const rlpi_spill_scan *s)
{
    for (size_t i = 0; i < s->n_groups; i++) {
        const rlpi_group *g = s->groups[i];
        if (!g || g->n == 0 || !g->trajs || (i && g->seq <= s->groups[i - 1]->seq) || g->seq >= s->next_seq ||
            g->version != rlpi_group_version(g->trajs, g->n))
            abort();
        for (size_t k = 0; k < g->n; k++)
            if (rlpi_spill_check_traj(&g->trajs[k]) || g->trajs[k].group_id != g->trajs[0].group_id)
                abort();
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes the file header's and every record's CRCs in place, walking
 * records by their (unchecked) lengths as far as they stay in bounds. */
static void fix_checksums(uint8_t *b, size_t size)
{
    if (size < RLPI_SPILL_HEADER_BYTES)
        return;
    put32(b + 12, rlpi_crc32(0, b, 12));
    size_t off = RLPI_SPILL_HEADER_BYTES;
    while (size - off >= RLPI_SPILL_RECORD_HEADER_BYTES) {
        uint8_t *h = b + off;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)h[8 + i] << (8 * i);
        if (len > size - off - RLPI_SPILL_RECORD_HEADER_BYTES)
            break;
        put32(h + 16, rlpi_crc32(0, h + RLPI_SPILL_RECORD_HEADER_BYTES, (size_t)len));
        put32(h + 20, rlpi_crc32(0, h, 20));
        off += RLPI_SPILL_RECORD_HEADER_BYTES + (size_t)len;
    }
}

static void one(const uint8_t *data, size_t size, int fix)
{
    /* an exact-size copy so ASan flags a read one past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    if (fix)
        fix_checksums(buf, size);
    rlpi_spill_scan s;
    int rc = rlpi_spill_scan_image(buf, size, "fuzz", &s);
    if (rc != 0) {
        if (s.groups || s.n_groups)
            abort();
        free(buf);
        return;
    }
    if (s.valid_bytes > size || s.image_bytes != size || (s.torn == 0 && s.valid_bytes != size && size >= 16))
        abort();
    check_groups(&s);
    /* round trip: header + one push record of the live groups */
    if (s.n_groups) {
        rlpi_bytes img = {0};
        uint8_t head[RLPI_SPILL_HEADER_BYTES];
        memcpy(head, buf, sizeof head); /* the header was accepted */
        if (rlpi_spill_encode_push(&img, s.groups, s.n_groups) == 0) {
            uint8_t *file = malloc(sizeof head + img.len);
            if (file) {
                memcpy(file, head, sizeof head);
                memcpy(file + sizeof head, img.p, img.len);
                rlpi_spill_scan r;
                if (rlpi_spill_scan_image(file, sizeof head + img.len, "fuzz-rt", &r) != 0 || r.torn ||
                    r.n_groups != s.n_groups)
                    abort();
                for (size_t i = 0; i < r.n_groups; i++) {
                    if (r.groups[i]->seq != s.groups[i]->seq || r.groups[i]->n != s.groups[i]->n ||
                        r.groups[i]->version != s.groups[i]->version)
                        abort();
                    for (size_t k = 0; k < r.groups[i]->n; k++) {
                        const rlpi_traj *a = &s.groups[i]->trajs[k], *b = &r.groups[i]->trajs[k];
                        const rlp_provenance *pa = &a->provenance, *pb = &b->provenance;
                        if (a->has_provenance != b->has_provenance || pa->version != pb->version ||
                            pa->prompt_index != pb->prompt_index || pa->epoch != pb->epoch ||
                            pa->position != pb->position || pa->sampling_seed != pb->sampling_seed ||
                            pa->batch != pb->batch)
                            abort();
                        /* the loss mask and the episode record (format 3) too */
                        if ((a->loss_mask == NULL) != (b->loss_mask == NULL) ||
                            (a->loss_mask && a->n_tokens && memcmp(a->loss_mask, b->loss_mask, a->n_tokens)) ||
                            a->has_episode != b->has_episode ||
                            memcmp(&a->episode, &b->episode, sizeof a->episode))
                            abort();
                    }
                }
                rlpi_spill_scan_free(&r);
                free(file);
            }
        }
        rlpi_bytes_free(&img);
    }
    rlpi_spill_scan_free(&s);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, 0);
    one(data, size, 1);
    return 0;
}
