/* The rendezvous file of a process group: rank 0 writes one small JSON
 * document (atomically: temporary name, fsync, rename) naming what the
 * other ranks need to join (the shared-memory object, or the NCCL unique
 * id); they poll for it. The file is untrusted input like any other: it is
 * parsed through the guarded JSON reader and every field is checked. */
#include "dist/comm.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_guard.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RENDEZVOUS_MAX_BYTES 4096


static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int rlpi_rendezvous_publish(const char *path, const rlpi_rendezvous_info *info)
{
    char hex[2 * sizeof info->nccl_id + 1];
    for (size_t i = 0; i < sizeof info->nccl_id; i++)
        snprintf(hex + 2 * i, 3, "%02x", info->nccl_id[i]);
    json_t *o = json_pack("{s:i, s:i, s:s, s:I, s:s, s:s}", "rlpost_rendezvous", 1, "world_size", (int)info->world,
                          "transport", rlpi_comm_transport_name(info->transport), "pid", (json_int_t)info->pid, "shm",
                          info->shm_name, "nccl_id", info->transport == RLP_COMM_NCCL ? hex : "");
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return rlpi_error_set(RLP_E_NOMEM, "process group: out of memory");
    int rc = rlpi_atomic_write_file(path, text, strlen(text));
    free(text);
    if (rc != RLP_OK)
        return rlpi_error_wrap("process group: writing the rendezvous file %s", path);
    return RLP_OK;
}

int rlpi_rendezvous_parse(const char *buf, size_t len, const char *source, int32_t world, int32_t transport,
                          rlpi_rendezvous_info *info)
{
    json_t *o = NULL;
    if (len >= RENDEZVOUS_MAX_BYTES)
        return rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s is larger than %d bytes", source,
                              RENDEZVOUS_MAX_BYTES);
    if (rlpi_json_load_guarded(buf, len, 2, source, &o) != RLP_OK)
        return rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s is not a rendezvous document", source);
    int rc = RLP_E_AGAIN;
    const json_t *mark = json_object_get(o, "rlpost_rendezvous"), *w = json_object_get(o, "world_size"),
                 *t = json_object_get(o, "transport"), *pid = json_object_get(o, "pid"),
                 *shm = json_object_get(o, "shm"), *id = json_object_get(o, "nccl_id");
    if (!json_is_object(o) || !json_is_integer(mark) || json_integer_value(mark) != 1 || !json_is_integer(w) ||
        !json_is_string(t) || !json_is_integer(pid) || !json_is_string(shm) || !json_is_string(id))
        rc = rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s lacks its fields", source);
    else if (json_integer_value(pid) <= 0 || json_integer_value(pid) > INT32_MAX)
        rc = rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s has a bad pid", source);
    else if (json_integer_value(w) != world || strcmp(json_string_value(t), rlpi_comm_transport_name(transport)) != 0) {
        /* another group's file (an old run, or a misconfigured rank): wait
         * for rank 0 to replace it, and say so if it never does */
        rlpi_error_set(RLP_E_INVALID_ARG,
                       "process group: rendezvous file %s is for %lld ranks over %s, this rank expects %d over %s",
                       source, (long long)json_integer_value(w), json_string_value(t), world,
                       rlpi_comm_transport_name(transport));
        info->pid = (long)json_integer_value(pid); /* whose it is: the caller may ask whether it runs */
        rc = RLP_E_AGAIN;
    }
    else if (strlen(json_string_value(shm)) >= sizeof info->shm_name ||
             (transport == RLP_COMM_SHM && json_string_value(shm)[0] != '/') ||
             (transport == RLP_COMM_NCCL && strlen(json_string_value(id)) != 2 * sizeof info->nccl_id))
        rc = rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s has malformed names", source);
    else {
        memset(info, 0, sizeof *info);
        info->world = world;
        info->transport = transport;
        info->pid = (long)json_integer_value(pid);
        strcpy(info->shm_name, json_string_value(shm));
        const char *hex = json_string_value(id);
        rc = RLP_OK;
        for (size_t i = 0; transport == RLP_COMM_NCCL && i < sizeof info->nccl_id; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                rc = rlpi_error_set(RLP_E_FORMAT, "process group: rendezvous file %s has a malformed NCCL id", source);
                break;
            }
            info->nccl_id[i] = (unsigned char)(hi << 4 | lo);
        }
    }
    json_decref(o);
    return rc;
}

/* RLP_OK when `path` holds a valid rendezvous (into *info); RLP_E_AGAIN when
 * it is absent, partial, stale or for another group; other codes for a
 * file that can never become valid. */
static int try_read(const char *path, int32_t world, int32_t transport, rlpi_rendezvous_info *info)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? RLP_E_AGAIN
                               : rlpi_error_set(RLP_E_IO, "process group: cannot read the rendezvous file %s: %s",
                                                path, strerror(errno));
    char buf[RENDEZVOUS_MAX_BYTES];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    info->pid = 0;
    int rc = rlpi_rendezvous_parse(buf, len, path, world, transport, info);
    if (rc == RLP_E_AGAIN && transport == RLP_COMM_SHM && info->pid > 0 && kill((pid_t)info->pid, 0) == 0) {
        /* another group's file whose writer is alive here: a live rank 0 that
         * disagrees on the world size or transport will not replace it */
        char why[512];
        snprintf(why, sizeof why, "%s", rlp_error_last());
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s (its rank 0, process %ld, is running: the ranks disagree)", why,
                              info->pid);
    }
    if (rc == RLP_OK && transport == RLP_COMM_SHM && kill((pid_t)info->pid, 0) != 0 && errno == ESRCH) {
        rlpi_error_set(RLP_E_TIMEOUT, "process group: rendezvous file %s was written by process %ld, which has "
                       "exited (a stale file)", path, info->pid);
        rc = RLP_E_AGAIN;
    }
    return rc;
}

int rlpi_rendezvous_wait(const char *path, int32_t world, int32_t transport, double deadline,
                         rlpi_rendezvous_info *info)
{
    for (;;) {
        rlpi_error_set(RLP_E_TIMEOUT, "process group: rendezvous file %s did not appear", path);
        int rc = try_read(path, world, transport, info);
        /* a FORMAT error may be a file caught mid-replacement by a non-atomic
         * writer: retry it too until the deadline */
        if (rc == RLP_OK)
            return RLP_OK;
        if (rc != RLP_E_AGAIN && rc != RLP_E_FORMAT)
            return rc;
        if (rlpi_now_s() >= deadline) {
            char why[512];
            snprintf(why, sizeof why, "%s", rlp_error_last());
            return rlpi_error_set(RLP_E_TIMEOUT, "%s (gave up waiting for rank 0)", why);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
