/* The SHM transport of rlp_comm: ranks on one machine share one POSIX
 * shared-memory object (shm_open + mmap), found through the rendezvous
 * file. Synchronisation is a sense-reversing barrier on a futex in the
 * shared header (FUTEX_WAIT with a timeout, so a dead peer becomes
 * RLP_E_TIMEOUT and a peer that leaves or fails becomes RLP_E_CLOSED
 * within one wait slice instead of a hang).
 *
 * Data moves through two sets of world_size slots (rlpi_comm_slot_bytes),
 * used alternately, so one barrier separates a chunk's writes from its
 * reads and the next chunk needs no extra barrier before it overwrites:
 *
 *   all-reduce of one chunk: every rank copies its chunk into its slot;
 *   barrier; rank r combines part r of the chunk over slots 0, 1, …, W−1
 *   in that order (so every element is combined in rank order whichever
 *   rank does it, and all ranks read back the same bits) into slot 0;
 *   barrier; every rank copies slot 0 out.
 *
 * Each rank also posts a descriptor (call number, operation, dtype, count,
 * root) with every chunk; all ranks compare them after the chunk's first
 * barrier, so a rank that calls with another size fails everyone with
 * RLP_E_INVALID_ARG rather than reading past a buffer. */
#include "dist/comm.h"

#include "core/error.h"
#include "core/log.h"
#include "backend/context.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x524c5053u /* "RLPS" */
#define MAX_WORLD 1024

enum { OP_ALL_REDUCE = 1, OP_BROADCAST = 2, OP_BARRIER = 3 };

/* What a rank is doing: the collective's number on this rank (so a
 * descriptor left from an earlier call never matches), kind and shape. */
typedef struct desc {
    uint64_t seq;
    uint32_t kind, dtype, op;
    int32_t root;
    uint64_t n;
} desc;

typedef struct shm_header {
    uint32_t magic, world;
    uint64_t slot_bytes, total_bytes;
    _Atomic uint32_t joined;         /* futex word while joining */
    _Atomic uint32_t barrier_count;
    _Atomic uint32_t barrier_gen;    /* futex word of the barrier */
    _Atomic uint32_t closing;        /* claimed by the first rank to close */
    _Atomic uint32_t closed;         /* rank + 1 of who closed the group, 0 while open */
    char why[232];                   /* written by the closer before `closed` */
    /* followed by present[world] (_Atomic uint32_t), pid[world] (int32_t) and desc[world] */
} shm_header;

typedef struct shm_comm {
    rlp_comm *c;
    shm_header *h;
    _Atomic uint32_t *present;
    volatile int32_t *pids;          /* each rank's process, for the liveness check */
    desc *descs;
    unsigned char *data;
    size_t map_bytes;
    uint64_t seq;                    /* chunks moved so far: picks the slot set */
    uint64_t calls;                  /* collectives started by this rank */
    int32_t rank, world;
} shm_comm;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void wake_all(_Atomic uint32_t *addr)
{
    futex(addr, FUTEX_WAKE, INT32_MAX, NULL);
}

/* Sleeps while *addr == val, at most `slice` seconds. */
static void wait_on(_Atomic uint32_t *addr, uint32_t val, double slice)
{
    if (slice <= 0)
        return;
    struct timespec ts = {(time_t)slice, (long)((slice - (double)(time_t)slice) * 1e9)};
    futex(addr, FUTEX_WAIT, val, &ts);
}

/* Whether process `pid` has exited: gone, or a zombie its parent has not
 * reaped yet (the test runner and some launchers reap late). */
static bool process_gone(pid_t pid)
{
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the command name may hold anything */
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

static int closed_error(shm_comm *s)
{
    uint32_t who = atomic_load(&s->h->closed);
    return rlpi_error_set(RLP_E_CLOSED, "process group: rank %u %s", who - 1, s->h->why);
}

static void shm_close_group(shm_comm *s, const char *why)
{
    uint32_t expect = 0;
    if (!atomic_compare_exchange_strong(&s->h->closing, &expect, 1))
        return; /* someone closed it first: keep their reason */
    snprintf(s->h->why, sizeof s->h->why, "%s", why);
    atomic_store(&s->h->closed, (uint32_t)s->rank + 1);
    wake_all(&s->h->barrier_gen);
    wake_all(&s->h->joined);
}

static int barrier(shm_comm *s, const char *what)
{
    shm_header *h = s->h;
    uint32_t gen = atomic_load(&h->barrier_gen);
    if (atomic_load(&h->closed))
        return closed_error(s);
    if (atomic_fetch_add(&h->barrier_count, 1) == (uint32_t)s->world - 1) {
        atomic_store(&h->barrier_count, 0);
        atomic_fetch_add(&h->barrier_gen, 1);
        wake_all(&h->barrier_gen);
        return RLP_OK;
    }
    double timeout = s->c->timeout_ms / 1e3, deadline = rlpi_now_s() + timeout, next_check = 0;
    while (atomic_load(&h->barrier_gen) == gen) {
        /* a peer may complete this barrier and then leave between our two
         * loads: the barrier counts as passed when its generation moved */
        if (atomic_load(&h->closed))
            return atomic_load(&h->barrier_gen) != gen ? RLP_OK : closed_error(s);
        double t = rlpi_now_s();
        if (t >= next_check) {
            /* a rank killed outright never leaves: look for it (one machine,
             * so its pid says), once a second, instead of waiting out the timeout */
            next_check = t + 1.0;
            for (int32_t r = 0; r < s->world; r++) {
                pid_t pid = (pid_t)s->pids[r];
                if (pid > 0 && process_gone(pid)) {
                    if (atomic_load(&h->barrier_gen) != gen)
                        return RLP_OK; /* it passed this barrier before it exited */
                    char why[160];
                    snprintf(why, sizeof why, "saw rank %d (process %ld) exit without leaving the group", r,
                             (long)pid);
                    shm_close_group(s, why);
                    return closed_error(s);
                }
            }
        }
        double left = deadline - rlpi_now_s();
        if (left <= 0) {
            char why[160];
            snprintf(why, sizeof why, "timed out after %.0f s waiting for the other ranks in %s", timeout, what);
            shm_close_group(s, why);
            return rlpi_error_set(RLP_E_TIMEOUT, "process group: rank %d %s", s->rank, why);
        }
        wait_on(&h->barrier_gen, gen, left < 0.1 ? left : 0.1);
    }
    return RLP_OK;
}

static unsigned char *slot(shm_comm *s, uint64_t set, int32_t r)
{
    return s->data + ((set & 1) * (uint64_t)s->world + (uint64_t)r) * s->h->slot_bytes;
}

static const char *kind_name(uint32_t k)
{
    return k == OP_ALL_REDUCE ? "all-reduce" : k == OP_BROADCAST ? "broadcast" : k == OP_BARRIER ? "barrier" : "?";
}

/* After a barrier: every rank posted the same descriptor as this one. */
static int check_descs(shm_comm *s, const desc *mine)
{
    for (int32_t r = 0; r < s->world; r++) {
        const desc *d = &s->descs[r];
        if (memcmp(d, mine, sizeof *d) != 0)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "process group: ranks disagree on a collective (rank %d: call %llu, %s of %llu "
                                  "elements, dtype %u, op %u, root %d; rank %d: call %llu, %s of %llu elements, "
                                  "dtype %u, op %u, root %d)",
                                  s->rank, (unsigned long long)mine->seq, kind_name(mine->kind),
                                  (unsigned long long)mine->n, mine->dtype, mine->op, mine->root, r,
                                  (unsigned long long)d->seq, kind_name(d->kind), (unsigned long long)d->n, d->dtype,
                                  d->op, d->root);
    }
    return RLP_OK;
}

#define COMBINE(T)                                                                        \
    static void combine_##T(shm_comm *s, uint64_t set, size_t lo, size_t hi, int op)      \
    {                                                                                     \
        T *out = (T *)(void *)slot(s, set, 0);                                            \
        for (int32_t r = 1; r < s->world; r++) {                                          \
            const T *in = (const T *)(const void *)slot(s, set, r);                       \
            if (op == RLP_REDUCE_SUM)                                                     \
                for (size_t j = lo; j < hi; j++)                                          \
                    out[j] += in[j];                                                      \
            else if (op == RLP_REDUCE_MAX)                                                \
                for (size_t j = lo; j < hi; j++)                                          \
                    out[j] = in[j] > out[j] || in[j] != in[j] ? in[j] : out[j];           \
            else                                                                          \
                for (size_t j = lo; j < hi; j++)                                          \
                    out[j] = in[j] < out[j] || in[j] != in[j] ? in[j] : out[j];           \
        }                                                                                 \
    }
COMBINE(float)
COMBINE(double)

static int shm_all_reduce_host(void *impl, void *data, size_t n, int dtype, int op)
{
    shm_comm *s = impl;
    size_t es = rlpi_dt_size(dtype), per = s->h->slot_bytes / es;
    desc mine = {++s->calls, OP_ALL_REDUCE, (uint32_t)dtype, (uint32_t)op, 0, n};
    size_t done = 0;
    int rc;
    do {
        size_t len = n - done < per ? n - done : per;
        uint64_t set = s->seq++;
        if (len)
            memcpy(slot(s, set, s->rank), (unsigned char *)data + done * es, len * es);
        s->descs[s->rank] = mine;
        if ((rc = barrier(s, "all_reduce")) != RLP_OK)
            return rc;
        if ((rc = check_descs(s, &mine)) != RLP_OK) {
            barrier(s, "all_reduce");
            return rc;
        }
        size_t lo = len * (size_t)s->rank / (size_t)s->world, hi = len * ((size_t)s->rank + 1) / (size_t)s->world;
        /* rank 0's own part is combined in place in slot 0, the others read
         * slot 0's part too: every element is rank0 ∘ rank1 ∘ … in order */
        if (dtype == RLPI_DT_F32)
            combine_float(s, set, lo, hi, op);
        else
            combine_double(s, set, lo, hi, op);
        if ((rc = barrier(s, "all_reduce")) != RLP_OK)
            return rc;
        if (len)
            memcpy((unsigned char *)data + done * es, slot(s, set, 0), len * es);
        done += len;
    } while (done < n);
    return RLP_OK;
}

static int shm_broadcast_host(void *impl, void *data, size_t nbytes, int root)
{
    shm_comm *s = impl;
    size_t per = s->h->slot_bytes, done = 0;
    desc mine = {++s->calls, OP_BROADCAST, RLPI_DT_BYTES, 0, root, nbytes};
    int rc;
    do {
        size_t len = nbytes - done < per ? nbytes - done : per;
        uint64_t set = s->seq++;
        if (s->rank == root && len)
            memcpy(slot(s, set, 0), (unsigned char *)data + done, len);
        s->descs[s->rank] = mine;
        if ((rc = barrier(s, "broadcast")) != RLP_OK)
            return rc;
        if ((rc = check_descs(s, &mine)) != RLP_OK) {
            barrier(s, "broadcast");
            return rc;
        }
        if (s->rank != root && len)
            memcpy((unsigned char *)data + done, slot(s, set, 0), len);
        if ((rc = barrier(s, "broadcast")) != RLP_OK)
            return rc;
        done += len;
    } while (done < nbytes);
    return RLP_OK;
}

/* A barrier is a collective like the others: it posts a descriptor, so a
 * rank in a barrier never pairs with a peer in an all-reduce. */
static int shm_barrier(void *impl)
{
    shm_comm *s = impl;
    desc mine = {++s->calls, OP_BARRIER, 0, 0, 0, 0};
    s->descs[s->rank] = mine;
    int rc = barrier(s, "barrier");
    if (rc)
        return rc;
    rc = check_descs(s, &mine);
    int rc2 = barrier(s, "barrier"); /* nobody posts the next descriptor before all have checked this one */
    return rc ? rc : rc2;
}

static void shm_abort(void *impl, const char *why)
{
    shm_close_group(impl, why);
}

static void shm_destroy(void *impl)
{
    shm_comm *s = impl;
    if (!s)
        return;
    if (s->h) {
        shm_close_group(s, "left the group");
        munmap(s->h, s->map_bytes);
    }
    free(s);
}

static const rlpi_comm_ops shm_ops = {
    .name = "shm",
    .all_reduce_host = shm_all_reduce_host,
    .broadcast_host = shm_broadcast_host,
    .barrier = shm_barrier,
    .abort = shm_abort,
    .destroy = shm_destroy,
};

static size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

/* Where the header's per-rank arrays and the slots start, in bytes from
 * the header: one layout for the size of the mapping and its pointers. */
typedef struct regions {
    size_t present, pids, descs, data, total;
} regions;

static regions regions_of(int32_t world)
{
    regions g;
    g.present = align64(sizeof(shm_header));
    g.pids = align64(g.present + (size_t)world * sizeof(uint32_t));
    g.descs = align64(g.pids + (size_t)world * sizeof(int32_t));
    g.data = align64(g.descs + (size_t)world * sizeof(desc));
    g.total = g.data + 2 * (size_t)world * rlpi_comm_slot_bytes(world);
    return g;
}

static void layout(shm_comm *s, int32_t world)
{
    regions g = regions_of(world);
    unsigned char *base = (unsigned char *)s->h;
    s->present = (_Atomic uint32_t *)(void *)(base + g.present);
    s->pids = (volatile int32_t *)(void *)(base + g.pids);
    s->descs = (desc *)(void *)(base + g.descs);
    s->data = base + g.data;
}

/* The creator's part: the header of a fresh mapping (zeroed by the kernel). */
static void init_header(shm_comm *s)
{
    layout(s, s->world);
    s->h->world = (uint32_t)s->world;
    s->h->slot_bytes = rlpi_comm_slot_bytes(s->world);
    s->h->total_bytes = s->map_bytes;
    atomic_thread_fence(memory_order_seq_cst);
    s->h->magic = SHM_MAGIC; /* last: a joiner that sees it sees the rest */
}

/* Waits until all ranks have set their present flag (joined == world). */
static int wait_joined(shm_comm *s, double deadline)
{
    for (;;) {
        uint32_t j = atomic_load(&s->h->joined);
        if (j >= (uint32_t)s->world)
            return RLP_OK;
        if (atomic_load(&s->h->closed)) /* all may have joined before the one that closed left */
            return atomic_load(&s->h->joined) >= (uint32_t)s->world ? RLP_OK : closed_error(s);
        double left = deadline - rlpi_now_s();
        if (left <= 0)
            return rlpi_error_set(RLP_E_TIMEOUT,
                                  "process group: rank %d: only %u of %d ranks joined within %.0f s "
                                  "(are the other ranks started with the same rendezvous path and world size?)",
                                  s->rank, j, s->world, s->c->timeout_ms / 1e3);
        wait_on(&s->h->joined, j, left < 0.1 ? left : 0.1);
    }
}

static int join(shm_comm *s)
{
    uint32_t expect = 0;
    if (!atomic_compare_exchange_strong(&s->present[s->rank], &expect, 1))
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: rank %d joined twice (two processes were given "
                              "the same rank)", s->rank);
    s->pids[s->rank] = (int32_t)getpid();
    atomic_fetch_add(&s->h->joined, 1);
    wake_all(&s->h->joined);
    return RLP_OK;
}

/* Is the object /dev/shm/NAME one this user's dead rank 0 left behind?
 * Names are "rlpost-u<uid>-p<pid>-<nonce>" (and the older
 * "rlpost-<pid>-<nonce>"): rank 0 unlinks its object once every rank has
 * mapped it, so one that outlives its creator is a leak from a rank 0
 * killed during the rendezvous. The uid in the name, checked against the
 * object's owner as well, keeps the sweep off other users' objects (it
 * could not unlink them anyway, but must not even try to judge them); a
 * live pid, or one reused by another process, keeps the object — erring
 * towards a leak rather than pulling memory from under a running group. */
static bool shm_leaked(int dir_fd, const char *name)
{
    unsigned uid = 0;
    long pid = 0;
    int end = 0;
    char nonce[17];
    if (sscanf(name, "rlpost-u%u-p%ld-%16[0-9a-f]%n", &uid, &pid, nonce, &end) == 3 && name[end] == 0 &&
        strlen(nonce) == 16) {
        if (uid != (unsigned)geteuid())
            return false;
    }
    else if (!(sscanf(name, "rlpost-%ld-%16[0-9a-f]%n", &pid, nonce, &end) == 2 && name[end] == 0 &&
               strlen(nonce) == 16))
        return false;
    struct stat st;
    if (pid <= 0 || fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
        return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

size_t rlpi_comm_shm_sweep(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0; /* no POSIX shm filesystem to look at: nothing is swept */
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!shm_leaked(dirfd(d), e->d_name))
            continue;
        char name[NAME_MAX + 2];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0)
            n++;
    }
    closedir(d);
    return n;
}

int rlpi_comm_shm_create(rlp_comm *c, const char *rendezvous)
{
    if (c->world > MAX_WORLD)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "process group: the shm transport takes at most %d ranks",
                              MAX_WORLD);
    shm_comm *s = calloc(1, sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "process group: out of memory");
    s->c = c;
    s->rank = c->rank;
    s->world = c->world;
    s->map_bytes = regions_of(c->world).total;
    double deadline = rlpi_now_s() + c->timeout_ms / 1e3;
    rlpi_rendezvous_info info = {.world = c->world, .transport = RLP_COMM_SHM, .pid = (long)getpid()};
    int rc = RLP_OK, fd = -1;
    if (c->world == 1) {
        /* a group of one: private memory, no rendezvous */
        void *p = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            int rc0 = rlpi_error_set(RLP_E_NOMEM, "process group: mmap of %zu bytes: %s", s->map_bytes,
                                     strerror(errno));
            free(s);
            return rc0;
        }
        s->h = p;
        init_header(s);
        join(s);
        c->impl = s;
        c->ops = &shm_ops;
        return RLP_OK;
    }
    if (c->rank == 0) {
        uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
            nonce = (uint64_t)(rlpi_now_s() * 1e9) ^ (uint64_t)(uintptr_t)s;
        /* what earlier groups of this user leaked (a rank 0 killed in
         * its rendezvous) goes first: 16 MiB and more each */
        size_t swept = rlpi_comm_shm_sweep();
        if (swept)
            rlpi_log(&c->ctx->log, RLP_LOG_WARN, "process group: removed %zu shared-memory object%s left by exited "
                     "processes", swept, swept == 1 ? "" : "s");
        snprintf(info.shm_name, sizeof info.shm_name, "/rlpost-u%u-p%ld-%016llx", (unsigned)geteuid(), info.pid,
                 (unsigned long long)nonce);
        unlink(rendezvous); /* a stale file of an earlier run must not be joined */
        fd = shm_open(info.shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0)
            rc = rlpi_error_set(RLP_E_IO, "process group: shm_open(%s): %s", info.shm_name, strerror(errno));
        else if (ftruncate(fd, (off_t)s->map_bytes) != 0)
            rc = rlpi_error_set(RLP_E_NOMEM, "process group: cannot size shared memory to %zu bytes: %s",
                                s->map_bytes, strerror(errno));
    }
    else {
        for (;;) {
            if ((rc = rlpi_rendezvous_wait(rendezvous, c->world, RLP_COMM_SHM, deadline, &info)) != RLP_OK)
                break;
            fd = shm_open(info.shm_name, O_RDWR, 0);
            if (fd >= 0)
                break;
            /* a rendezvous whose memory is gone (an old run): wait for the fresh one */
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (rc == RLP_OK) {
        void *p = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            rc = rlpi_error_set(RLP_E_NOMEM, "process group: mmap of %zu bytes: %s", s->map_bytes, strerror(errno));
        else
            s->h = p;
    }
    if (fd >= 0)
        close(fd);
    if (rc == RLP_OK) {
        if (c->rank == 0) {
            init_header(s);
            rc = rlpi_rendezvous_publish(rendezvous, &info);
        }
        else {
            layout(s, c->world);
            if (s->h->magic != SHM_MAGIC || s->h->world != (uint32_t)c->world || s->h->total_bytes != s->map_bytes)
                rc = rlpi_error_set(RLP_E_FORMAT, "process group: shared memory %s does not hold a %d-rank group",
                                    info.shm_name, c->world);
        }
    }
    if (rc == RLP_OK)
        rc = join(s);
    if (rc == RLP_OK)
        rc = wait_joined(s, deadline);
    if (c->rank == 0 && info.shm_name[0]) {
        /* everyone has it mapped (or the join failed): the name is no longer needed */
        shm_unlink(info.shm_name);
        unlink(rendezvous);
    }
    if (rc != RLP_OK) {
        shm_destroy(s);
        return rc;
    }
    c->impl = s;
    c->ops = &shm_ops;
    return RLP_OK;
}
