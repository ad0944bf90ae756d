/* A host program built against an installed librlpost through pkg-config
 * or CMake: it must compile, link and run. */
#include <rlpost.h>

#include <stdio.h>

int main(void)
{
    rlp_context *ctx = NULL;
    if (rlp_context_create(&ctx, NULL) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    printf("consumer linked librlpost %s on %s\n", rlp_version_string(), rlp_context_device_name(ctx));
    /* reach the tokenizer code (PCRE2, ICU) so a static link needs its deps */
    rlp_tokenizer *tok = NULL;
    if (rlp_tokenizer_load(&tok, "/nonexistent/tokenizer.json") != RLP_E_IO)
        return 1;
    rlp_context_free(ctx);
    return rlp_version_number() == RLP_VERSION_NUMBER ? 0 : 1;
}
