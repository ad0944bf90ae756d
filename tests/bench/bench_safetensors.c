/* safetensors write and read throughput (F32, F16, BF16) on a checkpoint of
 * SmolLM2-135M's size (~135M parameters, 540 MB fp32), next to a plain
 * memcpy of the same bytes as the in-process baseline. Write includes
 * fsync, so it also measures the disk. Usage: bench_safetensors [dir]
 * [millions-of-params]. Reports MB/s of fp32 data and the ratio to memcpy. */
#include "core/error.h"
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double mparams = argc > 2 ? atof(argv[2]) : 135.0;
    size_t per = 1 << 20, n_t = (size_t)(mparams * 1e6) / per;
    if (n_t < 1)
        n_t = 1;
    rlpi_weights w;
    rlpi_weights_init(&w);
    for (size_t i = 0; i < n_t; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%zu.mlp.up_proj.weight", i);
        int64_t shape[2] = {1024, 1024};
        rlpi_tensor *t;
        if (rlpi_weights_add(&w, name, 2, shape, &t)) {
            fprintf(stderr, "%s\n", rlp_error_last());
            return 1;
        }
        for (size_t k = 0; k < t->n_elems; k++)
            t->data[k] = (float)((k * 2654435761u) % 1000) * 1e-3f - 0.5f;
    }
    double mb = (double)(n_t * per * 4) / 1e6;
    /* baseline: copy every tensor into freshly allocated memory, which is
     * what a reader has to do at least (page faults included) */
    float **dst = calloc(n_t, sizeof *dst);
    double t0 = now();
    for (size_t i = 0; i < n_t; i++) {
        dst[i] = malloc(per * 4);
        memcpy(dst[i], w.tensors[i].data, per * 4);
    }
    double base = mb / (now() - t0);
    float sink = 0;
    for (size_t i = 0; i < n_t; i++) {
        sink += dst[i][i % per];
        free(dst[i]);
    }
    free(dst);
    printf("{\"bench\":\"malloc+memcpy\",\"mb\":%.0f,\"mb_per_s\":%.0f,\"sink\":%g}\n", mb, base,
           (double)sink);
    char path[512];
    snprintf(path, sizeof path, "%s/bench_%d.safetensors", dir, (int)getpid());
    const rlpi_st_dtype dts[3] = {RLPI_ST_F32, RLPI_ST_F16, RLPI_ST_BF16};
    for (int d = 0; d < 3; d++) {
        rlpi_st_write_opts o = {dts[d], NULL, false};
        t0 = now();
        if (rlpi_safetensors_write(path, &w, &o)) {
            fprintf(stderr, "%s\n", rlp_error_last());
            return 1;
        }
        double tw = now() - t0;
        rlpi_weights r;
        rlpi_weights_init(&r);
        /* second read: the file is then surely in the page cache */
        double tr = 0;
        for (int rep = 0; rep < 2; rep++) {
            rlpi_weights_init(&r);
            t0 = now();
            if (rlpi_safetensors_read(path, &r, NULL)) {
                fprintf(stderr, "%s\n", rlp_error_last());
                return 1;
            }
            tr = now() - t0;
            rlpi_weights_free(&r);
        }
        printf("{\"bench\":\"safetensors\",\"dtype\":\"%s\",\"params_m\":%.1f,"
               "\"write_s\":%.3f,\"write_mb_per_s\":%.0f,\"read_s\":%.3f,\"read_mb_per_s\":%.0f,"
               "\"read_vs_memcpy\":%.3f}\n",
               rlpi_st_dtype_name(dts[d]), (double)(n_t * per) / 1e6, tw, mb / tw, tr, mb / tr,
               (mb / tr) / base);
    }
    unlink(path);
    rlpi_weights_free(&w);
    return 0;
}
