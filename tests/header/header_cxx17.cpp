// rlpost.h compiles as C++17 with every warning an error (extern "C",
// no C-only constructs), and links from C++.
#include "rlpost.h"

#include <cstdio>
#include <string>

int main()
{
    rlp_context_options opts = RLP_CONTEXT_OPTIONS_INIT;
    if (rlp_context_options_init(&opts, RLP_CONTEXT_OPTIONS_VERSION) != RLP_OK)
        return 1;
    rlp_buffer_options bopts = RLP_BUFFER_OPTIONS_INIT;
    rlp_sync_options sopts = RLP_SYNC_OPTIONS_INIT;
    if (bopts.version != RLP_BUFFER_OPTIONS_VERSION || sopts.version != RLP_SYNC_OPTIONS_VERSION)
        return 1;
    if (std::string(rlp_version_string()) != RLP_VERSION_STRING)
        return 1;
    std::printf("C++17: librlpost %s\n", rlp_version_string());
    return 0;
}
