/* rlpost.h compiles as strict C11 with every warning an error, and the
 * run-time version matches the header. */
#include "rlpost.h"

#include <stdio.h>

int main(void)
{
    rlp_context_options opts = RLP_CONTEXT_OPTIONS_INIT;
    if (opts.version != RLP_CONTEXT_OPTIONS_VERSION)
        return 1;
    rlp_buffer_options bopts = RLP_BUFFER_OPTIONS_INIT;
    rlp_sync_options sopts = RLP_SYNC_OPTIONS_INIT;
    if (bopts.version != RLP_BUFFER_OPTIONS_VERSION || sopts.version != RLP_SYNC_OPTIONS_VERSION)
        return 1;
    if (rlp_version_number() != RLP_VERSION_NUMBER)
        return 1;
    printf("C11: librlpost %s\n", rlp_version_string());
    return 0;
}
