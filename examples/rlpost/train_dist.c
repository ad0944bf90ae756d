/* `rlpost train` on several ranks (data parallelism over rlp_comm): the
 * torchrun-style launcher and the per-rank setup. Every rank loads the
 * model, serves the same prompts from the same task cursor, generates and
 * scores its share of them, and takes the data-parallel RL step together
 * with the others (the library all-reduces the gradients); rank 0 alone
 * writes metrics, evaluations and checkpoints, so a run's folder looks the
 * same whatever the world size. */
#include "train.h"
#include "train_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 64

static pid_t children[MAX_RANKS];
static int n_children;

/* The ranks run in a process group of their own, so an interrupt from the
 * terminal (or kill to the launcher's group) reaches the launcher alone,
 * which passes it on exactly once: one Ctrl-C stops the run at a step
 * boundary with a checkpoint, a second one ends it at once. */
static void forward(int sig)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0)
            kill(children[i], sig);
}

/* the first of the variables that is set and not empty, or NULL */
static const char *first_env(const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Ranks started by another launcher: torchrun's variables, or an MPI
 * launcher's (mpirun: OMPI_COMM_WORLD_*; srun/Hydra: PMI_*). */
static int env_rank(long *rank, long *world)
{
    static const char *const rank_vars[] = {"RLPOST_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    static const char *const world_vars[] = {"RLPOST_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    const char *rs = first_env(rank_vars, 4), *ws = first_env(world_vars, 4);
    if (!rs)
        return 0;
    char *end;
    *rank = strtol(rs, &end, 10);
    if (*end || !ws || !*ws)
        return -1;
    *world = strtol(ws, &end, 10);
    return *end ? -1 : 1;
}

int train_dist_resolve(run *r)
{
    long world = (long)cfg_int(r->cfg, "distributed.world_size"), rank = 0, ew = 0;
    r->rank = 0;
    r->world = 1;
    int in_env = env_rank(&rank, &ew);
    if (in_env < 0) {
        fmt(r->err, ERR_CAP, "distributed: a rank is set in the environment (RLPOST_RANK, RANK, OMPI_COMM_WORLD_RANK or "
            "PMI_RANK) but the world size (RLPOST_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or PMI_SIZE) is not an "
            "integer");
        return -1;
    }
    if (in_env) {
        if (ew < 1 || ew > MAX_RANKS || rank < 0 || rank >= ew) {
            fmt(r->err, ERR_CAP, "distributed: rank %ld of world size %ld from the environment is out of range "
                "(1 to %d ranks)", rank, ew, MAX_RANKS);
            return -1;
        }
        r->rank = (int)rank;
        r->world = (int)ew;
        return 0;
    }
    if (world < 1 || world > MAX_RANKS) {
        fmt(r->err, ERR_CAP, "distributed.world_size: %ld is outside [1, %d]", world, MAX_RANKS);
        return -1;
    }
    r->world = (int)world;
    return world > 1 ? 1 : 0;
}

/* Removes the rendezvous files this user's earlier launchers left in
 * `dir` when they were killed outright (rlpost-train-<pid>.rendezvous of
 * a pid that has exited); a live launcher's file is kept. */
static void sweep_rendezvous_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long pid = 0;
        int end = 0;
        struct stat st;
        if (sscanf(e->d_name, "rlpost-train-%ld.rendezvous%n", &pid, &end) != 1 || e->d_name[end] || pid <= 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

int train_dist_launch(run *r, int *exit_code)
{
    long world = r->world;
    *exit_code = 0;
    char rdv[PATH_MAX];
    const char *cfg_rdv = cfg_str(r->cfg, "distributed.rendezvous");
    const char *tmp = getenv("TMPDIR");
    if (cfg_rdv)
        fmt(rdv, sizeof rdv, "%s", cfg_rdv);
    else {
        sweep_rendezvous_files(tmp && *tmp ? tmp : "/tmp");
        fmt(rdv, sizeof rdv, "%s/rlpost-train-%ld.rendezvous", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    }
    char ws[16];
    fmt(ws, sizeof ws, "%ld", world);
    fflush(stdout);
    fflush(stderr);
    n_children = (int)world;
    for (int i = 0; i < n_children; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* a launcher killed outright takes its ranks along */
            if (getppid() == 1)
                _exit(1); /* it died before prctl */
            char rs[16];
            fmt(rs, sizeof rs, "%d", i);
            setenv("RLPOST_RANK", rs, 1);
            setenv("LOCAL_RANK", rs, 1);
            setenv("RLPOST_WORLD_SIZE", ws, 1);
            setenv("RLPOST_RENDEZVOUS", rdv, 1);
            r->rank = i;
            r->world = (int)world;
            n_children = 0;
            return 0;
        }
        if (pid < 0) {
            fprintf(stderr, "rlpost train: cannot start rank %d: %s\n", i, strerror(errno));
            for (int j = 0; j < i; j++)
                kill(children[j], SIGTERM);
            n_children = i;
            *exit_code = 1;
            break;
        }
        children[i] = pid;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int first_failure = 0, left = n_children;
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int idx = -1;
        for (int i = 0; i < n_children; i++)
            if (children[i] == pid)
                idx = i;
        if (idx < 0)
            continue;
        children[idx] = 0;
        left--;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (code && !first_failure) {
            first_failure = code;
            fprintf(stderr, "rlpost train: rank %d %s %d; stopping the other ranks\n", idx,
                    WIFEXITED(status) ? "exited with status" : "was killed by signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            for (int i = 0; i < n_children; i++)
                if (children[i] > 0)
                    kill(children[i], SIGTERM);
        }
    }
    if (strcmp(rdv, "env://") && strncmp(rdv, "tcp://", 6))
        unlink(rdv);
    if (!*exit_code)
        *exit_code = first_failure;
    return 1;
}

int train_dist_join(run *r)
{
    if (r->world <= 1)
        return 0;
    const char *t = cfg_str(r->cfg, "distributed.transport");
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    o.transport = !strcmp(t, "shm") ? RLP_COMM_SHM : !strcmp(t, "nccl") ? RLP_COMM_NCCL : !strcmp(t, "mpi") ? RLP_COMM_MPI
                : !strcmp(t, "gloo") ? RLP_COMM_GLOO : RLP_COMM_AUTO;
    if (o.transport == RLP_COMM_AUTO && r->shared_gpu)
        o.transport = RLP_COMM_SHM;
    o.rank = r->rank;
    o.world_size = r->world;
    o.rendezvous = cfg_str(r->cfg, "distributed.rendezvous"); /* NULL: RLPOST_RENDEZVOUS */
    o.timeout_ms = (uint32_t)(cfg_num(r->cfg, "distributed.timeout_s") * 1000.0);
    if (rlp_comm_create(&r->comm, r->ctx, &o)) {
        fmt(r->err, ERR_CAP, "distributed: rank %d of %d could not join the group: %s", r->rank, r->world,
            rlp_error_last());
        return -1;
    }
    return 0;
}

/* FNV-1a, 32 bits: exact in a double, so the ranks can compare digests
 * with a min/max all-reduce. */
static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int train_dist_agree(run *r)
{
    if (!r->comm)
        return 0;
    /* every top-level key of the effective configuration (the keys come in
     * the defaults' order on every rank), except what is this rank's own */
    static const char *const own[] = {"threads", "device", "distributed"};
    size_t n = json_object_size(r->cfg), k = 0;
    const char **keys = calloc(n + 1, sizeof *keys);
    double *d = calloc(2 * (n + 1), sizeof *d); /* digests, then their negations: min and max in one call */
    if (!keys || !d) {
        free(keys), free(d);
        fmt(r->err, ERR_CAP, "distributed: out of memory");
        return -1;
    }
    d[k] = (double)n;
    keys[k++] = "the number of keys";
    const char *key;
    json_t *v;
    json_object_foreach(r->cfg, key, v) {
        int skip = 0;
        for (size_t i = 0; i < sizeof own / sizeof *own; i++)
            skip |= !strcmp(key, own[i]);
        if (skip)
            continue;
        char *text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        d[k] = text ? (double)fnv1a(text) : -1;
        free(text);
        keys[k++] = key;
    }
    for (size_t i = 0; i < k; i++)
        d[k + i] = -d[i];
    int bad = rlp_comm_all_reduce(r->comm, d, 2 * k, RLP_REDUCE_MIN) != RLP_OK;
    if (bad)
        fmt(r->err, ERR_CAP, "distributed: rank %d: comparing the ranks' configurations: %s", r->rank, rlp_error_last());
    for (size_t i = 0; !bad && i < k; i++)
        if (d[i] != -d[k + i]) {
            fmt(r->err, ERR_CAP, "distributed: rank %d: \"%s\" differs between the ranks (every rank must run the "
                "same configuration; only threads, device and distributed may differ)", r->rank, keys[i]);
            bad = 1;
        }
    free(keys);
    free(d);
    if (bad)
        return -1;
    /* and the same weights: rank 0's (a rank that loaded another model of
     * the same shape would otherwise train it silently) */
    if (rlp_policy_broadcast(r->policy, r->comm, 0)) {
        fmt(r->err, ERR_CAP, "distributed: rank %d: taking rank 0's weights: %s", r->rank, rlp_error_last());
        return -1;
    }
    return 0;
}
