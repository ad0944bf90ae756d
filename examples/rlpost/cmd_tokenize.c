/* `rlpost tokenize MODEL TEXT [--special] [--bos] [--chat]`: the token ids
 * as a JSON array on stdout. --special matches special-token text,
 * --chat wraps TEXT as one user message of the model's chat template. */
#include "commands.h"
#include "model_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    uint32_t flags = 0;
    int chat = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--special"))
            flags |= RLP_ENCODE_PARSE_SPECIAL;
        else if (!strcmp(argv[i], "--bos"))
            flags |= RLP_ENCODE_ADD_BOS;
        else if (!strcmp(argv[i], "--chat"))
            chat = 1;
        else if (!model)
            model = argv[i];
        else if (!text)
            text = argv[i];
        else
            model = NULL, i = argc; /* too many arguments */
    }
    if (!model || !text) {
        fprintf(stderr, "usage: rlpost tokenize MODEL TEXT [--special] [--bos] [--chat]\n");
        return EXIT_USAGE;
    }
    rlp_tokenizer *t = load_model_tokenizer(model);
    if (!t)
        return 1;
    size_t n = 0;
    int32_t *ids = chat ? encode_chat(t, text, &n) : encode_text(t, text, flags, &n);
    if (!ids) {
        rlp_tokenizer_free(t);
        return 1;
    }
    printf("[");
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
    free(ids);
    rlp_tokenizer_free(t);
    return 0;
}
