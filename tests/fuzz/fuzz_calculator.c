/* libFuzzer target: the calculator tool (rlpi_calc_eval), which reads
 * expressions a model wrote. It must never crash, recurse past its depth
 * limit or return a non-finite value; an accepted expression must format,
 * and must evaluate to the same value again (no hidden state). */
#include "tools/calculator.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1); /* exact size for ASan */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    double v = 0, w = 0;
    char msg[160], out[64];
    int rc = rlpi_calc_eval(buf, size, &v, msg, sizeof msg);
    if (rc == 0) {
        if (!isfinite(v))
            abort();
        rlpi_calc_format(v, out, sizeof out);
        if (rlpi_calc_eval(buf, size, &w, msg, sizeof msg) != 0 || memcmp(&v, &w, sizeof v) != 0)
            abort();
    } else if (rc != -1 || msg[0] == '\0') {
        abort(); /* a failure always says why */
    }
    free(buf);
    return 0;
}
