/* The TCP rendezvous of a process group (torch's init_method "env://" and
 * "tcp://HOST:PORT"): ranks meet through the key-value store of
 * dist/store.c, which rank 0 serves, instead of a file every rank sees.
 *
 * The meeting, over the store:
 *   every rank   ADD rlpost/join/<rank> 1   (a second process with the same
 *                                            rank reads 2: it alone is refused)
 *                SET rlpost/hello/<rank>    "<world> <transport>"
 *   rank 0       GET every hello, compares them with its own, then
 *                SET rlpost/go              "ok <world> <transport> <nccl id hex>"
 *                                           or "error <rlp_status> <why>"
 *   others       GET rlpost/go, and check rank 0's world and transport;
 *                after an "error": ADD rlpost/seen 1
 * so a rank that never comes times rank 0 out naming it, and every other
 * rank fails with rank 0's reason (and status) rather than its own timeout.
 * Rank 0 reads only the hellos of the ranks it expects: a rank beyond its
 * world size learns the mismatch from the "ok" answer. A rank 0 that
 * refuses keeps its store up until the others have read why (see
 * linger()): closing at once would leave a rank still on its way with a
 * closed connection, or no server until its own timeout. The store
 * stays open for the group's life (Gloo reads its peers' addresses from
 * it while it connects); rlp_comm_free closes it. */
#include "dist/comm.h"

#include "core/error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool rlpi_rendezvous_is_tcp(const char *r)
{
    return r && (!strcmp(r, "env://") || !strncmp(r, "tcp://", 6));
}

static int parse_port(const char *s, const char *what, int *port)
{
    char *end;
    errno = 0;
    long p = strtol(s, &end, 10);
    if (!*s || errno || *end || p < 1 || p > 65535)
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: %s \"%s\" is not a port (1 to 65535)", what, s);
    *port = (int)p;
    return RLP_OK;
}

/* host (copied into `host`) and port of the store the rendezvous names */
static int store_address(const char *r, char *host, size_t cap, int *port)
{
    if (!strcmp(r, "env://")) {
        const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        if (!a || !*a || !p || !*p)
            return rlpi_error_set(RLP_E_INVALID_ARG, "process group: the env:// rendezvous needs MASTER_ADDR and "
                                  "MASTER_PORT (rank 0's address and a free port on it)%s%s",
                                  !a || !*a ? "; MASTER_ADDR is unset" : "", !p || !*p ? "; MASTER_PORT is unset" : "");
        if (strlen(a) >= cap)
            return rlpi_error_set(RLP_E_INVALID_ARG, "process group: MASTER_ADDR is too long");
        strcpy(host, a);
        return parse_port(p, "MASTER_PORT", port);
    }
    const char *h = r + 6, *colon;
    size_t hl;
    if (*h == '[') { /* tcp://[v6]:port */
        const char *close = strchr(h, ']');
        if (!close || close[1] != ':')
            return rlpi_error_set(RLP_E_INVALID_ARG, "process group: rendezvous \"%s\": expected tcp://[ADDRESS]:PORT", r);
        h++;
        hl = (size_t)(close - h);
        colon = close + 1;
    }
    else {
        colon = strrchr(h, ':');
        if (!colon)
            return rlpi_error_set(RLP_E_INVALID_ARG, "process group: rendezvous \"%s\": expected tcp://HOST:PORT", r);
        hl = (size_t)(colon - h);
    }
    if (hl == 0 || hl >= cap)
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: rendezvous \"%s\": no host, or one too long", r);
    memcpy(host, h, hl);
    host[hl] = '\0';
    return parse_port(colon + 1, "the rendezvous port", port);
}

/* How long a refusing rank 0 waits for the other ranks to read why: ranks
 * already parked on the answer read it at once; this is for those still
 * on their way (started a moment later), and bounds what a rank that never
 * comes adds to rank 0's failure. */
#define LINGER_S 2.0

/* A positive wait for the store (it refuses 0): what is left, or a moment. */
static double left_s(double deadline)
{
    double left = deadline - rlpi_now_s();
    return left > 1e-3 ? left : 1e-3;
}

/* rank 0: every other rank's hello, checked; the first disagreement */
static int gather_hellos(rlp_comm *c, double deadline, char *why, size_t why_cap)
{
    for (int32_t r = 1; r < c->world; r++) {
        char key[64];
        snprintf(key, sizeof key, "rlpost/hello/%d", r);
        void *v = NULL;
        size_t len = 0;
        int rc = rlpi_store_get(c->store, key, &v, &len, left_s(deadline));
        if (rc == RLP_E_TIMEOUT) {
            snprintf(why, why_cap, "rank %d did not arrive within %.0f s", r, c->timeout_ms / 1e3);
            return rlpi_error_set(RLP_E_TIMEOUT, "process group: %s", why);
        }
        if (rc)
            return rc;
        int world = 0, transport = -1;
        int ok = sscanf((const char *)v, "%d %d", &world, &transport) == 2;
        free(v);
        if (!ok || world != c->world || transport != c->transport) {
            snprintf(why, why_cap, "rank %d joined a group of %d ranks over %s, rank 0 one of %d over %s", r, world,
                     rlpi_comm_transport_name(transport), c->world, rlpi_comm_transport_name(c->transport));
            return rlpi_error_set(RLP_E_INVALID_ARG, "process group: %s", why);
        }
    }
    return RLP_OK;
}

/* Rank 0 refused the group: waits, polling, until the other ranks have
 * read its answer (rlpost/seen), at most LINGER_S. After a disagreement
 * it waits for all world − 1 (the rest are likely on their way); after a
 * timeout only for those that joined (rlpost/joined): the missing rank
 * will not come. */
static void linger(rlp_comm *c, bool timed_out)
{
    double until = rlpi_now_s() + LINGER_S;
    for (;;) {
        int64_t seen = 0, want = c->world - 1;
        if (rlpi_store_add(c->store, "rlpost/seen", 0, &seen) != RLP_OK)
            return;
        if (timed_out && rlpi_store_add(c->store, "rlpost/joined", 0, &want) == RLP_OK)
            want -= 1; /* rank 0 itself */
        if (seen >= want || rlpi_now_s() >= until)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int rlpi_rendezvous_tcp_join(rlp_comm *c, const char *rendezvous, const unsigned char *nccl_id,
                             unsigned char nccl_id_out[128])
{
    char host[256];
    int port;
    int rc = store_address(rendezvous, host, sizeof host, &port);
    if (rc)
        return rc;
    char where[300]; /* host:port for messages, an IPv6 address in brackets */
    snprintf(where, sizeof where, strchr(host, ':') && host[0] != '[' ? "[%s]:%d" : "%s:%d", host, port);
    double deadline = rlpi_now_s() + c->timeout_ms / 1e3;
    if ((rc = rlpi_store_open(host, port, c->rank == 0, c->timeout_ms / 1e3, &c->store)) != RLP_OK)
        return rlpi_error_wrap("process group: rendezvous at %s", where);

    char key[64], hello[64];
    int64_t joined = 0;
    snprintf(key, sizeof key, "rlpost/join/%d", c->rank);
    if ((rc = rlpi_store_add(c->store, key, 1, &joined)) != RLP_OK)
        goto fail;
    if (joined != 1) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "process group: rank %d joined twice (another process already "
                            "took that rank at %s)", c->rank, where);
        goto fail; /* the first process of that rank goes on with the group */
    }
    if ((rc = rlpi_store_add(c->store, "rlpost/joined", 1, NULL)) != RLP_OK)
        goto fail;
    snprintf(key, sizeof key, "rlpost/hello/%d", c->rank);
    snprintf(hello, sizeof hello, "%d %d", c->world, c->transport);
    if ((rc = rlpi_store_set(c->store, key, hello, strlen(hello))) != RLP_OK)
        goto fail;

    if (c->rank == 0) {
        char why[200] = "", go[64 + 2 * 128 + 1];
        rc = gather_hellos(c, deadline, why, sizeof why);
        if (rc == RLP_OK) {
            int w = snprintf(go, sizeof go, "ok %d %d ", c->world, c->transport);
            for (size_t i = 0; i < 128; i++)
                snprintf(go + w + 2 * i, 3, "%02x", nccl_id ? nccl_id[i] : 0);
        }
        else
            snprintf(go, sizeof go, "error %d %s", rc, why[0] ? why : "rank 0 failed");
        int src = rlpi_store_set(c->store, "rlpost/go", go, strlen(go));
        if (rc != RLP_OK && src == RLP_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", rlp_error_last()); /* linger's requests must not replace it */
            linger(c, rc == RLP_E_TIMEOUT);
            rlpi_error_set(rc, "%s", msg);
        }
        if (rc == RLP_OK)
            rc = src;
        if (rc)
            goto fail;
        if (nccl_id_out && nccl_id)
            memcpy(nccl_id_out, nccl_id, 128);
        return RLP_OK;
    }
    void *v = NULL;
    size_t len = 0;
    rc = rlpi_store_get(c->store, "rlpost/go", &v, &len, left_s(deadline));
    if (rc == RLP_E_TIMEOUT)
        rc = rlpi_error_set(RLP_E_TIMEOUT, "process group: rank 0 did not open the group within %.0f s",
                            c->timeout_ms / 1e3);
    if (rc)
        goto fail;
    const char *g = v; /* NUL-terminated by the store */
    int code = 0, world = 0, transport = -1, used = 0;
    if (len >= 6 && !strncmp(g, "error ", 6)) {
        /* rank 0's status: a rank that never came is a timeout here too */
        if (sscanf(g + 6, "%d %n", &code, &used) != 1 || code >= 0 || code < RLP_E_INTERNAL)
            code = RLP_E_INVALID_ARG, used = 0;
        rc = rlpi_error_set(code, "process group: rank 0 refused the group: %s", g + 6 + used);
        free(v);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rlp_error_last());
        if (rlpi_store_add(c->store, "rlpost/seen", 1, NULL) != RLP_OK) /* rank 0 may close its store now */
            rlpi_error_set(rc, "%s", msg);
        goto fail;
    }
    if (strncmp(g, "ok ", 3) || sscanf(g + 3, "%d %d %n", &world, &transport, &used) != 2 ||
        len != 3 + (size_t)used + 256) {
        free(v);
        rc = rlpi_error_set(RLP_E_FORMAT, "process group: the store at %s answered the rendezvous with something "
                            "that is not rlpost's", where);
        goto fail;
    }
    if (world != c->world || transport != c->transport) {
        free(v);
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "process group: rank %d joined a group of %d ranks over %s, rank 0 "
                            "opened one of %d over %s", c->rank, c->world, rlpi_comm_transport_name(c->transport), world,
                            rlpi_comm_transport_name(transport));
        goto fail;
    }
    g += 3 + used;
    for (size_t i = 0; nccl_id_out && i < 128; i++) {
        unsigned int b;
        if (sscanf(g + 2 * i, "%2x", &b) != 1) {
            free(v);
            rc = rlpi_error_set(RLP_E_FORMAT, "process group: a malformed NCCL id in the rendezvous");
            goto fail;
        }
        nccl_id_out[i] = (unsigned char)b;
    }
    free(v);
    return RLP_OK;
fail:
    rlpi_store_close(c->store);
    c->store = NULL;
    return rc;
}
