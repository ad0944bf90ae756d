/* A trainer stand-in for the relay tests and benchmark, on the public API
 * only: loads MODEL, takes VERSION supervised steps (NLL on a fixed token
 * sequence, so that every version has different weights) and publishes
 * the result through the FILE transport into DIR, as `rlpost train` with
 * sync.weights_dir does. Prints {"version": V, "bytes": B, "publish_s": T,
 * "unix": U} with U the wall time at which the manifest was in place.
 * Usage: relay_publish MODEL DIR VERSION [f32|bf16] */
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: relay_publish MODEL DIR VERSION [f32|bf16]\n");
        return 2;
    }
    long target = strtol(argv[3], NULL, 10);
    int dtype = argc > 4 && !strcmp(argv[4], "bf16") ? RLP_DTYPE_BF16 : RLP_DTYPE_F32;
    rlp_context *ctx = NULL;
    rlp_policy *p = NULL;
    rlp_synchronizer *s = NULL;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 1;
    int rc = rlp_context_create(&ctx, &co);
    if (!rc)
        rc = rlp_policy_load(&p, ctx, argv[1], &po);
    int32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = 1 + (i * 7) % 200;
    rlp_sequence seq = {toks, 16, 4};
    for (long v = 0; !rc && v < target; v++)
        rc = rlp_policy_train_step(p, &seq, 1, rlp_loss_nll, NULL, NULL, NULL);
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_FILE;
    so.dir = argv[2];
    so.keep_versions = 2;
    so.dtype = dtype;
    if (!rc)
        rc = rlp_synchronizer_create(&s, &so);
    if (!rc)
        rc = rlp_synchronizer_publish(s, p);
    if (rc) {
        fprintf(stderr, "relay_publish: %s\n", rlp_error_last());
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rlp_sync_stats st = {0};
        rlp_synchronizer_stats(&st, s);
        printf("{\"version\": %llu, \"bytes\": %llu, \"publish_s\": %.3f, \"unix\": %.3f}\n",
               (unsigned long long)st.policy_version, (unsigned long long)st.bytes_published, st.publish_seconds,
               (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    }
    rlp_synchronizer_free(s);
    rlp_policy_free(p);
    rlp_context_free(ctx);
    return rc ? 1 : 0;
}
