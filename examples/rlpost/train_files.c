/* `rlpost train`'s files: atomic writes, checkpoint folders (written as
 * .tmp-step_K by rlp_trainer_checkpoint, renamed, named by "latest",
 * pruned), the JSONL logs (appended; truncated to a checkpoint's step on
 * resume) and the reward plot (gnuplot, when installed). */
#define _GNU_SOURCE 1
#include "train.h"
#include "train_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ------------------------------------------------------------------------ */
/* Files: atomic writes, checkpoints                                        */
/* ------------------------------------------------------------------------ */

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Writes text to path through path.tmp, fsync and rename. */
int train_write_atomic(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int train_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    fmt(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* After step_K is written and named latest: removes what a crash left
 * half-written (.tmp-step_*) and all but the newest `keep` checkpoints up
 * to K (keep 0: all are kept). Checkpoints of later steps than K (an older
 * checkpoint was resumed) are not this run's to judge and stay. */
static void prune_checkpoints(const char *dir, long long step, long long keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    long long *older = NULL;
    size_t n = 0, cap = 0;
    char path[PATH_MAX];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long long k = -1;
        int end = 0;
        if (!strncmp(e->d_name, ".tmp-step_", 10)) {
            fmt(path, sizeof path, "%s/%s", dir, e->d_name);
            rm_tree(path);
        }
        else if (sscanf(e->d_name, "step_%lld%n", &k, &end) == 1 && !e->d_name[end] && k < step && k >= 0) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                long long *no = realloc(older, nc * sizeof *no);
                if (!no)
                    break; /* nothing is removed that should be kept */
                older = no;
                cap = nc;
            }
            older[n++] = k;
        }
    }
    closedir(d);
    /* newest first; the newest keep − 1 older ones stay beside step_K */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && older[j - 1] < older[j]; j--) {
            long long t = older[j];
            older[j] = older[j - 1];
            older[j - 1] = t;
        }
    for (size_t i = 0; keep > 0 && i < n; i++)
        if ((long long)i >= keep - 1) {
            fmt(path, sizeof path, "%s/step_%lld", dir, older[i]);
            rm_tree(path);
        }
    free(older);
}

/* OUTPUT/checkpoints/step_K/: weights, optimizer.safetensors, state.json,
 * written as .tmp-step_K (rlp_trainer_checkpoint, with the run's
 * configuration in state.json) and renamed; then "latest" names it. */
int train_checkpoint(run *r, long long step)
{
    char dir[PATH_MAX], tmp[PATH_MAX], fin[PATH_MAX], path[PATH_MAX];
    fmt(dir, sizeof dir, "%s/checkpoints", r->out);
    fmt(tmp, sizeof tmp, "%s/.tmp-step_%lld", dir, step);
    fmt(fin, sizeof fin, "%s/step_%lld", dir, step);
    if (train_mkdir_p(dir)) {
        fprintf(stderr, "rlpost train: cannot create '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    rm_tree(tmp);
    json_t *host = json_pack("{s:O}", "config", r->cfg);
    char *host_text = json_dumps(host, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(host);
    int rc = host_text ? rlp_trainer_checkpoint(r->trainer, tmp, r->dtype, host_text) : RLP_E_NOMEM;
    free(host_text);
    if (rc || fsync_path(tmp)) {
        fprintf(stderr, "rlpost train: checkpoint %s: %s\n", tmp, rc ? rlp_error_last() : strerror(errno));
        return -1;
    }
    rm_tree(fin);
    if (rename(tmp, fin)) {
        fprintf(stderr, "rlpost train: cannot rename '%s': %s\n", tmp, strerror(errno));
        return -1;
    }
    char name[64];
    fmt(name, sizeof name, "step_%lld\n", step);
    fmt(path, sizeof path, "%s/latest", dir);
    if (train_write_atomic(path, name) || fsync_path(dir)) {
        fprintf(stderr, "rlpost train: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    prune_checkpoints(dir, step, cfg_int(r->cfg, "checkpoint.keep"));
    fprintf(stderr, "checkpoint %s\n", fin);
    return 0;
}

/* The checkpoint folder named by --resume DIR: DIR itself (holding
 * state.json), or the one DIR/checkpoints/latest or DIR/latest names. */
int train_find_checkpoint(const char *dir, char *out, size_t cap)
{
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/state.json", dir);
    if (train_readable_file(path)) {
        fmt(out, cap, "%s", dir);
        return 0;
    }
    const char *subs[2] = {"/checkpoints", ""};
    for (int i = 0; i < 2; i++) {
        fmt(path, sizeof path, "%s%s/latest", dir, subs[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char name[128] = {0};
        int ok = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\r\n")] = 0;
        if (!ok || !*name || strchr(name, '/'))
            continue;
        fmt(out, cap, "%s%s/%s", dir, subs[i], name);
        return 0;
    }
    return -1;
}

/* Keeps the records of a JSONL file whose "step" is ≤ step (a resumed run
 * rewrites what came after its checkpoint); a line that does not parse (the
 * torn last line of a killed run) goes too. Lines of any length (getline:
 * a samples.jsonl record holds whole completions). -1 when the file could
 * not be rewritten (it is then left as it was). */
int train_truncate_jsonl(const char *path, long long step)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    size_t cap = 1 << 16, len = 0, lcap = 0;
    char *keep = malloc(cap), *line = NULL;
    int bad = !keep;
    if (keep)
        keep[0] = 0;
    for (ssize_t l; !bad && (l = getline(&line, &lcap, f)) > 0;) {
        json_t *rec = json_loads(line, 0, NULL);
        json_t *js = json_object_get(rec, "step");
        long long s = json_is_integer(js) ? (long long)json_integer_value(js) : LLONG_MAX;
        json_decref(rec);
        if (s > step)
            continue;
        if (len + (size_t)l + 1 > cap) {
            size_t ncap = 2 * (len + (size_t)l + 1);
            char *nk = realloc(keep, ncap);
            if (!nk) {
                bad = 1;
                break;
            }
            keep = nk;
            cap = ncap;
        }
        memcpy(keep + len, line, (size_t)l + 1);
        len += (size_t)l;
    }
    free(line);
    fclose(f);
    if (!bad)
        bad = train_write_atomic(path, keep) != 0;
    free(keep);
    return bad ? -1 : 0;
}

/* Appends every record of arr to OUT/file, one line each (reals with
 * `digits` significant digits), with one fsync. */
void train_append_jsonl_all(const char *out, const char *file, json_t *arr, int digits)
{
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/%s", out, file);
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    size_t i;
    json_t *rec;
    json_array_foreach(arr, i, rec)
    {
        json_dumpf(rec, f, JSON_COMPACT | JSON_REAL_PRECISION(digits));
        fputc('\n', f);
    }
    fflush(f);
    fsync(fileno(f));
    fclose(f);
}

void train_append_jsonl(const char *out, const char *file, json_t *rec)
{
    json_t *one = json_pack("[O]", rec);
    train_append_jsonl_all(out, file, one, 17);
    json_decref(one);
}

/* ------------------------------------------------------------------------ */
/* Plot and summary                                                         */
/* ------------------------------------------------------------------------ */

static int have_program(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t l = strcspn(p, ":");
        fmt(buf, sizeof buf, "%.*s/%s", (int)l, p, name);
        if (!access(buf, X_OK))
            return 1;
        p += l + (p[l] == ':');
    }
    return 0;
}

/* training.png from metrics.jsonl and eval.jsonl, through gnuplot. */
/* Runs `prog arg` (PATH lookup) in folder dir with its stdout on our
 * stderr, from an argument vector, and waits: its exit status, or -1. */
static int run_in(const char *dir, const char *prog, const char *arg)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa))
        return -1;
    char *argv[] = {(char *)prog, (char *)arg, NULL};
    pid_t pid;
    int rc = posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO) ||
                     posix_spawn_file_actions_addchdir_np(&fa, dir) ||
                     posix_spawnp(&pid, prog, &fa, NULL, argv, environ)
                 ? -1
                 : 0;
    posix_spawn_file_actions_destroy(&fa);
    int st;
    while (!rc && waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return rc ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *train_plot(const char *out)
{
    static char png[PATH_MAX];
    if (!have_program("gnuplot")) {
        fprintf(stderr, "no plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
        return NULL;
    }
    char path[PATH_MAX], line[1 << 15];
    const char *src[2] = {"metrics.jsonl", "eval.jsonl"}, *dst[2] = {"plot_train.tsv", "plot_eval.tsv"};
    for (int k = 0; k < 2; k++) {
        fmt(path, sizeof path, "%s/%s", out, dst[k]);
        FILE *o = fopen(path, "w");
        fmt(path, sizeof path, "%s/%s", out, src[k]);
        FILE *f = fopen(path, "r");
        while (f && o && fgets(line, sizeof line, f)) {
            json_t *rec = json_loads(line, 0, NULL);
            /* train: step, reward, format rate, accuracy; eval: step, then
             * value, low, high of greedy accuracy, sampled accuracy, format rate */
            static const char *const cols[2][3] = {{"reward_mean", "format_rate", "accuracy"},
                                                   {"greedy_accuracy", "sampled_accuracy", "format_rate"}};
            fprintf(o, "%lld", (long long)json_integer_value(json_object_get(rec, "step")));
            for (int c = 0; c < 3; c++) {
                json_t *v = json_object_get(rec, cols[k][c]);
                fprintf(o, "\t%.6g", json_is_number(v) ? json_number_value(v) : NAN);
                if (k == 1) {
                    char key[64];
                    fmt(key, sizeof key, "%s_ci", c == 2 ? "greedy_format_rate" : cols[k][c]);
                    json_t *ci = json_object_get(rec, key);
                    for (int e = 0; e < 2; e++) {
                        json_t *b = json_array_get(ci, (size_t)e);
                        fprintf(o, "\t%.6g", json_is_number(b) ? json_number_value(b) : NAN);
                    }
                }
            }
            fputc('\n', o);
            json_decref(rec);
        }
        if (f)
            fclose(f);
        if (o)
            fclose(o);
    }
    fmt(png, sizeof png, "%s/training.png", out);
    /* The script names only files in the run folder, by relative names, and
     * gnuplot runs there from an argument vector: no path or other
     * configuration value reaches a shell or gnuplot's own command
     * language (gnuplot has `system`). The title shows the folder's name
     * with anything but [A-Za-z0-9._/+-] replaced. */
    char title[128];
    size_t tl = 0;
    for (const char *c = out; *c && tl + 1 < sizeof title; c++)
        title[tl++] = strchr("._/+-", *c) || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                              (*c >= '0' && *c <= '9')
                          ? *c
                          : '_';
    title[tl] = '\0';
    static const char *const terminals[2] = {"pngcairo", "png"}; /* pngcairo is missing in some builds */
    for (int t = 0; t < 2; t++) {
        fmt(path, sizeof path, "%s/plot.gp", out);
        FILE *gp = fopen(path, "w");
        if (!gp)
            return NULL;
        fprintf(gp,
                "set terminal %s size 1000,600 noenhanced\n"
                "set output 'training.png'\n"
                "set datafile missing 'nan'\n"
                "set key outside bottom center horizontal\n"
                "set xlabel 'step'\nset grid\n"
                "set offsets 0.5, 0.5, 0.02, 0.02\n" /* interval bars at the first and last step stay whole */
                "set title 'rlpost train: %s'\n"
                "plot 'plot_train.tsv' using 1:2 with linespoints title 'train: mean reward', \\\n"
                "     'plot_train.tsv' using 1:4 with linespoints title 'train: accuracy', \\\n"
                "     'plot_train.tsv' using 1:3 with linespoints title 'train: format rate', \\\n"
                "     'plot_eval.tsv' using 1:2:3:4 with yerrorlines lw 2 title 'held-out greedy accuracy (95%% CI)', \\\n"
                "     'plot_eval.tsv' using 1:5:6:7 with yerrorlines lw 2 title 'held-out sampled accuracy (95%% CI)', \\\n"
                "     'plot_eval.tsv' using 1:8:9:10 with yerrorlines title 'held-out format rate (greedy)'\n",
                terminals[t], title);
        fclose(gp);
        if (run_in(out, "gnuplot", "plot.gp") == 0)
            return png;
    }
    fprintf(stderr, "no plot: gnuplot failed\n");
    return NULL;
}

