/* libFuzzer target: the HTTP environment's answer reader (env/env_http.h)
 * on arbitrary bytes. Byte 0 picks the call (even: /reset, odd: /step)
 * and a small max_observation_bytes (bit 1). An accepted answer must
 * leave a reply within its byte cap (and a reset an episode id); a
 * refused one a message that names the URL. Built by run-fuzzers.sh. */
#include "env/env_http.h"
#include "env/env_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int kind = data[0] & 1 ? RLPI_ENV_HTTP_STEP : RLPI_ENV_HTTP_RESET;
    size_t len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size: ASan sees reads past the body */
    if (!body)
        return 0;
    memcpy(body, data + 1, len);
    rlp_env_reply r;
    memset(&r, 0, sizeof r);
    r.max_bytes = data[0] & 2 ? 16 : 65536;
    rlpi_env_reply_clear(&r);
    char msg[512], *id = NULL;
    int rc = rlpi_env_http_read_answer(&r, kind, "http://fuzz/x", body, len, kind == RLPI_ENV_HTTP_RESET ? &id : NULL,
                                       msg, sizeof msg);
    if (!memchr(msg, '\0', sizeof msg))
        abort();
    if (rc == RLP_OK) {
        if (r.bytes > r.max_bytes)
            abort();
        if (kind == RLPI_ENV_HTTP_RESET && (!id || !*id))
            abort();
        size_t total = 0;
        for (size_t i = 0; i < r.n_pieces; i++)
            total += r.pieces[i].is_tokens ? 4 * r.pieces[i].n : r.pieces[i].len;
        if (total != r.bytes)
            abort();
    } else if (!strstr(msg, "http://fuzz/x")) {
        abort();
    }
    free(id);
    rlpi_env_reply_clear(&r);
    free(body);
    return 0;
}
