/* A CUDA request on a machine without a GPU (or a build without CUDA) must
 * come back as RLP_E_BACKEND with a reason, never a crash; on a machine
 * with one it must give a working context. Runs everywhere. */
#include "rlpost.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
    int avail = rlp_backend_available(RLP_BACKEND_CUDA);
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", rlp_error_last());
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.backend = RLP_BACKEND_CUDA;
    rlp_context *ctx = NULL;
    int rc = rlp_context_create(&ctx, &o);
    if (avail == 1) {
        if (rc != RLP_OK || !ctx) {
            fprintf(stderr, "CUDA available but context failed: %s\n", rlp_error_last());
            return 1;
        }
        printf("CUDA context: %s\n", rlp_context_device_name(ctx));
        rlp_context_free(ctx);
        return 0;
    }
    if (avail != 0 || rc != RLP_E_BACKEND || ctx != NULL || reason[0] == '\0' ||
        strlen(rlp_error_last()) == 0) {
        fprintf(stderr, "bad no-GPU behaviour: avail=%d rc=%d msg='%s'\n", avail, rc, rlp_error_last());
        return 1;
    }
    printf("CUDA unavailable, as expected here: %s\n", rlp_error_last());
    return 0;
}
