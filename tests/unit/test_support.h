/* Helpers shared by the model-file tests: where the source tree (fixtures)
 * and the model folder are. Test-only. */
#ifndef RLPI_TEST_SUPPORT_H
#define RLPI_TEST_SUPPORT_H

#include <stdio.h>
#include <stdlib.h>

/* <source root>/<rel>; meson passes RLPOST_SOURCE_ROOT in the test's env. */
static inline const char *source_path(char *buf, size_t n, const char *rel)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    snprintf(buf, n, "%s/%s", root ? root : ".", rel);
    return buf;
}

/* $RLPOST_MODEL_DIR/<file>, else <source root>/models/<file>. */
static inline const char *model_path(char *buf, size_t n, const char *file)
{
    const char *dir = getenv("RLPOST_MODEL_DIR");
    if (dir && *dir) {
        snprintf(buf, n, "%s/%s", dir, file);
        return buf;
    }
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", file);
    return source_path(buf, n, rel);
}

#endif
