/* `rlpost version`: library and ABI version and which backends this machine
 * can use (with the device and the precision matmul_precision "auto" picks
 * there), as one JSON object on stdout. */
#include "cli_args.h"
#include "commands.h"
#include "json_out.h"

#include "rlpost.h"

#include <stdio.h>

int cmd_version(int argc, char **argv)
{
    (void)argv;
    if (argc > 2) {
        fprintf(stderr, "usage: rlpost version\n");
        return EXIT_USAGE;
    }
    if (rlp_version_number() / 10000 != RLP_VERSION_MAJOR) {
        fprintf(stderr, "rlpost: built against librlpost %s but loaded %s\n", RLP_VERSION_STRING,
                rlp_version_string());
        return 1;
    }
    printf("{\"version\": \"%s\", \"abi\": %u, \"backends\": {", rlp_version_string(), rlp_abi_version());
    for (int kind = 0; kind < RLP_BACKEND_COUNT; kind++) {
        int avail = rlp_backend_available(kind);
        int devices = 0;
        rlp_backend_device_count(&devices, kind);
        printf("%s\"%s\": {\"available\": %s, \"devices\": %d", kind ? ", " : "", rlp_backend_name(kind),
               avail == 1 ? "true" : "false", devices);
        if (avail == 1) {
            rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
            o.backend = kind;
            o.matmul_precision = RLP_MATMUL_AUTO;
            rlp_context *ctx;
            if (rlp_context_create(&ctx, &o) == RLP_OK) {
                /* what matmul_precision "auto" takes on this machine */
                int mm = RLP_MATMUL_FP32;
                rlp_context_matmul_precision(&mm, ctx);
                printf(", \"device\": ");
                json_print_string(stdout, rlp_context_device_name(ctx));
                printf(", \"matmul_auto\": \"%s\"", cli_matmul_name(mm));
                rlp_context_free(ctx);
            }
        } else {
            printf(", \"reason\": ");
            json_print_string(stdout, rlp_error_last());
        }
        printf("}");
    }
    printf("}}\n");
    return 0;
}
