/* safetensors reading (validate the whole header, then convert) and atomic
 * writing. The layout rules follow the reference implementation: the data
 * section is covered exactly, tensor by tensor, without gaps or overlaps. */
#include "model/safetensors.h"

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/half.h"
#include "core/json_guard.h"
#include "core/mapfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies little-endian file data directly; port it for big-endian hosts"
#endif

/* ---- metadata map ------------------------------------------------------ */

void rlpi_st_metadata_init(rlpi_st_metadata *m)
{
    memset(m, 0, sizeof *m);
}

void rlpi_st_metadata_free(rlpi_st_metadata *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->values[i]);
    }
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

const char *rlpi_st_metadata_get(const rlpi_st_metadata *m, const char *key)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (!strcmp(m->keys[i], key))
            return m->values[i];
    return NULL;
}

int rlpi_st_metadata_set(rlpi_st_metadata *m, const char *key, const char *value)
{
    char *v = strdup(value);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < m->n; i++) {
        if (!strcmp(m->keys[i], key)) {
            free(m->values[i]);
            m->values[i] = v;
            return RLP_OK;
        }
    }
    char *k = strdup(key);
    char **nk = realloc(m->keys, (m->n + 1) * sizeof *nk);
    if (nk)
        m->keys = nk;
    char **nv = nk ? realloc(m->values, (m->n + 1) * sizeof *nv) : NULL;
    if (nv)
        m->values = nv;
    if (!k || !nk || !nv) {
        free(k);
        free(v);
        return rlpi_error_set(RLP_E_NOMEM, "safetensors: out of memory");
    }
    m->keys[m->n] = k;
    m->values[m->n] = v;
    m->n++;
    return RLP_OK;
}

/* ---- dtypes ------------------------------------------------------------ */

const char *rlpi_st_dtype_name(rlpi_st_dtype d)
{
    switch (d) {
    case RLPI_ST_F16:
        return "F16";
    case RLPI_ST_BF16:
        return "BF16";
    default:
        return "F32";
    }
}

/* Returns the element size of a dtype we convert, 0 for a dtype the format
 * defines but we do not convert, -1 for a string that is no dtype at all. */
static int dtype_size(const char *s, rlpi_st_dtype *out)
{
    if (!strcmp(s, "F32")) {
        *out = RLPI_ST_F32;
        return 4;
    }
    if (!strcmp(s, "F16")) {
        *out = RLPI_ST_F16;
        return 2;
    }
    if (!strcmp(s, "BF16")) {
        *out = RLPI_ST_BF16;
        return 2;
    }
    static const char *const known[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16",
                                        "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                        "F6_E3M2", "F4", "C64"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(s, known[i]))
            return 0;
    return -1;
}

/* ---- reading ----------------------------------------------------------- */

typedef struct st_entry {
    const char *name; /* borrowed from the JSON tree */
    rlpi_st_dtype dtype;
    int32_t n_dims;
    int64_t shape[RLPI_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static int cmp_entry(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int read_metadata(json_t *obj, const char *source, rlpi_st_metadata *meta)
{
    if (!json_is_object(obj))
        return rlpi_error_set(RLP_E_FORMAT, "%s: __metadata__ is not an object", source);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        if (!json_is_string(v))
            return rlpi_error_set(RLP_E_FORMAT, "%s: __metadata__ value of '%s' is not a string",
                                  source, k);
        if (meta) {
            int rc = rlpi_st_metadata_set(meta, k, json_string_value(v));
            if (rc)
                return rc;
        }
    }
    return RLP_OK;
}

/* Reads a non-negative JSON integer. */
static int get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_entry(const char *name, json_t *v, const char *source, uint64_t data_len,
                       st_entry *e)
{
#define BAD(...) return rlpi_error_set(RLP_E_FORMAT, __VA_ARGS__)
    if (!name[0])
        BAD("%s: tensor with an empty name", source);
    if (!json_is_object(v))
        BAD("%s: tensor '%s': entry is not an object", source, name);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        BAD("%s: tensor '%s': dtype missing or not a string", source, name);
    if (!json_is_array(js))
        BAD("%s: tensor '%s': shape missing or not an array", source, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        BAD("%s: tensor '%s': data_offsets must be an array of 2 integers", source, name);
    if (get_u64(json_array_get(jo, 0), &e->begin) || get_u64(json_array_get(jo, 1), &e->end))
        BAD("%s: tensor '%s': data_offsets must be non-negative integers", source, name);
    if (e->end < e->begin)
        BAD("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
            source, name, e->begin, e->end);
    if (e->end > data_len)
        BAD("%s: tensor '%s': data_offsets end %" PRIu64 " past the data section (%" PRIu64
            " bytes)",
            source, name, e->end, data_len);
    size_t nd = json_array_size(js);
    uint64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (get_u64(json_array_get(js, i), &d))
            BAD("%s: tensor '%s': shape[%zu] is not a non-negative integer", source, name, i);
        if (!rlpi_mul_u64(&n, n, d))
            BAD("%s: tensor '%s': element count overflows", source, name);
        if (i < RLPI_MAX_DIMS)
            e->shape[i] = (int64_t)d; /* d <= INT64_MAX: it came from a json_int_t >= 0 */
    }
    const char *ds = json_string_value(jd);
    int esize = dtype_size(ds, &e->dtype);
    if (esize < 0)
        BAD("%s: tensor '%s': unknown dtype '%.16s'", source, name, ds);
    if (esize == 0)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16 are)",
                              source, name, ds);
    uint64_t bytes;
    if (!rlpi_mul_u64(&bytes, n, (uint64_t)esize))
        BAD("%s: tensor '%s': byte size overflows", source, name);
    if (bytes != e->end - e->begin)
        BAD("%s: tensor '%s': %s shape needs %" PRIu64 " bytes but data_offsets span %" PRIu64,
            source, name, ds, bytes, e->end - e->begin);
    if (nd == 0 || nd > RLPI_MAX_DIMS)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (1..%d supported)",
                              source, name, nd, RLPI_MAX_DIMS);
    e->n_dims = (int32_t)nd;
    e->name = name;
    return RLP_OK;
#undef BAD
}

static void convert(float *dst, const uint8_t *src, size_t n, rlpi_st_dtype dt)
{
    if (dt == RLPI_ST_F32) {
        memcpy(dst, src, n * sizeof(float)); /* src may be unaligned */
        return;
    }
    /* through an aligned block so the loops below vectorize */
    uint16_t blk[2048];
    for (size_t i = 0; i < n; i += 2048) {
        size_t m = n - i < 2048 ? n - i : 2048;
        memcpy(blk, src + 2 * i, 2 * m);
        if (dt == RLPI_ST_BF16)
            for (size_t j = 0; j < m; j++)
                dst[i + j] = rlpi_bf16_to_f32(blk[j]);
        else
            for (size_t j = 0; j < m; j++)
                dst[i + j] = rlpi_f16_to_f32(blk[j]);
    }
}

int rlpi_safetensors_parse(const uint8_t *buf, size_t len, const char *source, rlpi_weights *w,
                           rlpi_st_metadata *meta)
{
    if (len < 8)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %zu bytes, too short for the header length",
                              source, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > RLPI_ST_MAX_HEADER)
        return rlpi_error_set(RLP_E_FORMAT, "%s: header length %" PRIu64 " exceeds the %" PRIu64
                                            "-byte limit",
                              source, hlen, RLPI_ST_MAX_HEADER);
    if (hlen > len - 8)
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s: header length %" PRIu64 " runs past the end of the %zu-byte file",
                              source, hlen, len);
    if (hlen == 0 || buf[8] != '{')
        return rlpi_error_set(RLP_E_FORMAT, "%s: header does not start with '{'", source);
    json_t *root;
    int rc = rlpi_json_load_guarded((const char *)buf + 8, (size_t)hlen, RLPI_JSON_MAX_DEPTH,
                                    source, &root);
    if (rc)
        return rc;
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    st_entry *ents = NULL;
    if (!json_is_object(root)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: header is not a JSON object", source);
        goto out;
    }
    size_t n_ent = 0;
    ents = calloc(json_object_size(root) + 1, sizeof *ents);
    if (!ents) {
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", source);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__"))
            rc = read_metadata(val, source, meta);
        else
            rc = parse_entry(key, val, source, data_len, &ents[n_ent++]);
        if (rc)
            goto out;
    }
    /* The data section must be tiled exactly: sort by offset and walk. */
    qsort(ents, n_ent, sizeof *ents, cmp_entry);
    uint64_t at = 0;
    for (size_t i = 0; i < n_ent; i++) {
        if (ents[i].begin < at) {
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensors '%s' and '%s' overlap", source,
                                ents[i - 1].name, ents[i].name);
            goto out;
        }
        if (ents[i].begin > at) {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "%s: %" PRIu64 " unindexed bytes before tensor '%s' in the data "
                                "section",
                                source, ents[i].begin - at, ents[i].name);
            goto out;
        }
        at = ents[i].end;
    }
    if (at != data_len) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %" PRIu64 " trailing bytes not covered by any tensor",
                            source, data_len - at);
        goto out;
    }
    for (size_t i = 0; i < n_ent; i++) {
        rlpi_tensor *t;
        rc = rlpi_weights_add(w, ents[i].name, ents[i].n_dims, ents[i].shape, &t);
        if (rc)
            goto out;
        convert(t->data, data + ents[i].begin, t->n_elems, ents[i].dtype);
        snprintf(t->src_dtype, sizeof t->src_dtype, "%s", rlpi_st_dtype_name(ents[i].dtype));
    }
out:
    free(ents);
    json_decref(root);
    return rc;
}

int rlpi_safetensors_read(const char *path, rlpi_weights *w, rlpi_st_metadata *meta)
{
    rlpi_mapped_file m;
    int rc = rlpi_map_file(path, &m);
    if (rc)
        return rc;
    static const uint8_t empty[1];
    rc = rlpi_safetensors_parse(m.data ? m.data : empty, m.size, path, w, meta);
    rlpi_unmap_file(&m);
    return rc;
}

/* ---- sharded checkpoints ----------------------------------------------- */

static int shard_name_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < 256 && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") &&
           strcmp(s, "..");
}

int rlpi_safetensors_read_index(const char *index_path, rlpi_weights *w, rlpi_st_metadata *meta)
{
    rlpi_mapped_file m;
    int rc = rlpi_map_file(index_path, &m);
    if (rc)
        return rc;
    json_t *root = NULL;
    rc = rlpi_json_load_guarded(m.data ? (const char *)m.data : "", m.size, RLPI_JSON_MAX_DEPTH,
                                index_path, &root);
    rlpi_unmap_file(&m);
    if (rc)
        return rc;
    char *dir = NULL, *path = NULL;
    const char **shards = NULL;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: weight_map missing, empty or not an object",
                            index_path);
        goto out;
    }
    size_t n_shards = 0;
    shards = calloc(json_object_size(map), sizeof *shards);
    const char *slash = strrchr(index_path, '/');
    size_t dlen = slash ? (size_t)(slash - index_path) : 1;
    dir = slash ? strndup(index_path, dlen) : strdup(".");
    if (!shards || !dir) {
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", index_path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        if (!json_is_string(val) || !shard_name_ok(json_string_value(val))) {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "%s: weight_map entry '%s' is not a plain file name in the same "
                                "folder",
                                index_path, key);
            goto out;
        }
        const char *s = json_string_value(val);
        size_t j = 0;
        while (j < n_shards && strcmp(shards[j], s))
            j++;
        if (j == n_shards)
            shards[n_shards++] = s;
    }
    size_t before = w->n;
    for (size_t j = 0; j < n_shards; j++) {
        size_t plen = strlen(dir) + strlen(shards[j]) + 2;
        free(path);
        path = malloc(plen);
        if (!path) {
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", index_path);
            goto out;
        }
        snprintf(path, plen, "%s/%s", dir, shards[j]);
        size_t n0 = w->n;
        rc = rlpi_safetensors_read(path, w, j == 0 ? meta : NULL);
        if (rc)
            goto out;
        for (size_t i = n0; i < w->n; i++) {
            const char *want = json_string_value(json_object_get(map, w->tensors[i].name));
            if (!want || strcmp(want, shards[j])) {
                rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' is in %s but weight_map says %s",
                                    index_path, w->tensors[i].name, shards[j],
                                    want ? want : "nothing");
                goto out;
            }
        }
    }
    /* each tensor found was listed for its shard and names are unique, so
     * equal counts mean every listed tensor was found */
    if (w->n - before != json_object_size(map)) {
        json_object_foreach(map, key, val) {
            if (!rlpi_weights_find(w, key)) {
                rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' listed for %s is not in it",
                                    index_path, key, json_string_value(val));
                goto out;
            }
        }
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: shards and weight_map disagree", index_path);
    }
out:
    free(path);
    free(dir);
    free(shards);
    json_decref(root);
    return rc;
}

/* ---- writing ----------------------------------------------------------- */

static int dtype_bytes(rlpi_st_dtype d)
{
    return d == RLPI_ST_F32 ? 4 : 2;
}

/* Builds the header JSON and pads it; *out_len is a multiple of 8. */
static int build_header(const rlpi_weights *w, const rlpi_st_write_opts *o, char **out,
                        size_t *out_len)
{
    json_t *root = json_object();
    int rc = RLP_OK;
    if (!root)
        return rlpi_error_set(RLP_E_NOMEM, "safetensors: out of memory");
    if (o->meta && o->meta->n > 0) {
        json_t *jm = json_object();
        if (!jm || json_object_set_new(root, "__metadata__", jm)) {
            rc = RLP_E_NOMEM;
            goto out;
        }
        for (size_t i = 0; i < o->meta->n; i++)
            if (json_object_set_new(jm, o->meta->keys[i], json_string(o->meta->values[i]))) {
                rc = rlpi_error_set(RLP_E_INVALID_ARG,
                                    "safetensors: metadata '%s' is not valid UTF-8",
                                    o->meta->keys[i]);
                goto out;
            }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const rlpi_tensor *t = &w->tensors[i];
        if (t->alias_of >= 0 && o->skip_aliases)
            continue;
        uint64_t bytes, end;
        if (!rlpi_mul_u64(&bytes, t->n_elems, (uint64_t)dtype_bytes(o->dtype)) ||
            !rlpi_add_u64(&end, off, bytes)) {
            rc = rlpi_error_set(RLP_E_OVERFLOW, "safetensors: size of '%s' overflows", t->name);
            goto out;
        }
        json_t *e = json_object();
        json_t *shape = json_array();
        json_t *offs = json_array();
        if (!e || !shape || !offs) {
            json_decref(e);
            json_decref(shape);
            json_decref(offs);
            rc = RLP_E_NOMEM;
            goto out;
        }
        for (int d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)end));
        json_object_set_new(e, "dtype", json_string(rlpi_st_dtype_name(o->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t->name, e)) {
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "safetensors: tensor name '%s' is not valid UTF-8",
                                t->name);
            goto out;
        }
        off = end;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) {
        rc = RLP_E_NOMEM;
        goto out;
    }
    size_t n = strlen(s), padded;
    if (!rlpi_add_size(&padded, n, (8 - n % 8) % 8) || padded > RLPI_ST_MAX_HEADER) {
        free(s);
        rc = rlpi_error_set(RLP_E_OVERFLOW, "safetensors: header of %zu bytes is too large", n);
        goto out;
    }
    char *p = realloc(s, padded + 1);
    if (!p) {
        free(s);
        rc = RLP_E_NOMEM;
        goto out;
    }
    memset(p + n, ' ', padded - n); /* the format allows trailing spaces */
    p[padded] = '\0';
    *out = p;
    *out_len = padded;
out:
    json_decref(root);
    if (rc == RLP_E_NOMEM)
        rlpi_error_set(RLP_E_NOMEM, "safetensors: out of memory building the header");
    return rc;
}

static int write_tensor(rlpi_atomic_file *f, const float *src, size_t n, rlpi_st_dtype dt,
                        uint16_t *scratch, size_t chunk)
{
    if (dt == RLPI_ST_F32)
        return rlpi_atomic_write(f, src, n * sizeof(float));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        for (size_t j = 0; j < m; j++)
            scratch[j] = dt == RLPI_ST_F16 ? rlpi_f32_to_f16(src[i + j]) : rlpi_f32_to_bf16(src[i + j]);
        int rc = rlpi_atomic_write(f, scratch, m * 2);
        if (rc)
            return rc;
    }
    return RLP_OK;
}

int rlpi_safetensors_write(const char *path, const rlpi_weights *w, const rlpi_st_write_opts *opts)
{
    rlpi_st_write_opts def = {RLPI_ST_F32, NULL, false};
    const rlpi_st_write_opts *o = opts ? opts : &def;
    if (!path || !w || o->dtype < RLPI_ST_F32 || o->dtype > RLPI_ST_BF16)
        return rlpi_error_set(RLP_E_INVALID_ARG, "safetensors: bad write arguments");
    char *hdr = NULL;
    size_t hlen = 0;
    int rc = build_header(w, o, &hdr, &hlen);
    if (rc)
        return rc;
    enum { CHUNK = 1 << 16 };
    uint16_t *scratch = o->dtype == RLPI_ST_F32 ? NULL : malloc(CHUNK * sizeof *scratch);
    if (o->dtype != RLPI_ST_F32 && !scratch) {
        free(hdr);
        return rlpi_error_set(RLP_E_NOMEM, "safetensors: out of memory");
    }
    rlpi_atomic_file f;
    rc = rlpi_atomic_open(&f, path);
    if (rc)
        goto out;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    rc = rlpi_atomic_write(&f, le, 8);
    if (!rc)
        rc = rlpi_atomic_write(&f, hdr, hlen);
    for (size_t i = 0; !rc && i < w->n; i++) {
        const rlpi_tensor *t = &w->tensors[i];
        if (t->alias_of >= 0 && o->skip_aliases)
            continue;
        rc = write_tensor(&f, rlpi_tensor_data(w, t), t->n_elems, o->dtype, scratch, CHUNK);
    }
    if (rc)
        rlpi_atomic_abort(&f);
    else
        rc = rlpi_atomic_commit(&f);
out:
    free(scratch);
    free(hdr);
    return rc;
}
