/* libFuzzer target: rlpi_dataset_parse on arbitrary bytes. The first byte
 * picks the mapping (GSM8K-style, K&K benchmark, skip-invalid with a small
 * line limit). An accepted dataset must hold what the task layer uses
 * unchecked: at least one record, non-empty NUL-free UTF-8 prompts,
 * references where the mapping has a reference field, K&K names and
 * solutions of one length; a rejected one must leave nothing behind.
 * Built by run-fuzzers.sh. */
#include "task/dataset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s, int nonempty)
{
    size_t n = strlen(s);
    if ((nonempty && n == 0) || rlpi_utf8_check((const unsigned char *)s, n) != n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    rlpi_dataset_mapping m;
    memset(&m, 0, sizeof m);
    switch (data[0] % 3) {
    case 0:
        m.prompt_field = "question";
        m.reference_field = "answer";
        m.extra_fields[m.n_extra++] = "meta";
        break;
    case 1:
        m.prompt_field = "quiz";
        m.reference_field = "solution_text_format";
        m.kk = 1;
        m.extra_fields[m.n_extra++] = "names";
        m.extra_fields[m.n_extra++] = "solution";
        break;
    default:
        m.prompt_field = "q";
        m.skip_invalid = 1;
        m.max_line_bytes = 64;
        m.max_records = 8;
        break;
    }
    size_t len = size - 1;
    /* an exact-size copy, so ASan sees any read past the text */
    char *buf = malloc(len ? len : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, len);
    rlpi_dataset *d = (rlpi_dataset *)buf; /* must be overwritten with NULL on failure */
    if (rlpi_dataset_parse(&d, buf, len, &m, "fuzz") == 0) {
        if (!d || d->n == 0 || (m.max_records && d->n > m.max_records))
            abort();
        for (size_t i = 0; i < d->n; i++) {
            check_text(rlpi_dataset_prompt(d, i), 1);
            const char *ref = rlpi_dataset_reference(d, i);
            if (m.reference_field ? !ref : ref != NULL)
                abort();
            if (ref)
                check_text(ref, 0);
            if (m.kk) {
                json_t *e = d->extras[i];
                if (json_array_size(json_object_get(e, "names")) == 0 ||
                    json_array_size(json_object_get(e, "names")) !=
                        json_array_size(json_object_get(e, "solution")))
                    abort();
            }
        }
        rlpi_dataset_free(d);
    } else if (d) {
        abort();
    }
    free(buf);
    return 0;
}
