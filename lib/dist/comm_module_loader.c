/* Loads a process-group module (librlpost-mpi.so, librlpost-gloo.so) with
 * dlopen on first use, as backend/cuda_loader.c loads the CUDA module:
 * librlpost.so never links MPI or Gloo, so it loads on any machine, and
 * asking for a transport whose module (or engine) is missing is
 * RLP_E_UNSUPPORTED with the reason. Search order: RLPOST_<NAME>_MODULE,
 * next to the librlpost that holds this code, the install path, then the
 * bare name (LD_LIBRARY_PATH). */
#include "dist/comm.h"

#include "core/error.h"
#include "core/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void host_log(const void *logger, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rlpi_log((const rlpi_logger *)logger, level, "%s", msg);
}

static const rlpi_host_api host_api = {
    .version = RLPI_HOST_API_VERSION,
    .error_set = rlpi_error_set,
    .log = host_log,
};

const rlpi_host_api *rlpi_comm_host_api(void)
{
    return &host_api;
}

typedef struct module_slot {
    const char *name;      /* "mpi", "gloo" */
    const char *env;       /* RLPOST_MPI_MODULE, … */
    const char *install;   /* the installed path, or NULL */
    bool tried;
    const rlpi_comm_module_api *api;
    char why[1024];
} module_slot;

#ifndef RLPI_COMM_MODULE_DIR
#define RLPI_COMM_MODULE_DIR NULL
#endif

static module_slot slots[] = {
    {"mpi", "RLPOST_MPI_MODULE", RLPI_COMM_MODULE_DIR, false, NULL, ""},
    {"gloo", "RLPOST_GLOO_MODULE", RLPI_COMM_MODULE_DIR, false, NULL, ""},
};
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* an object in this library, whose address dladdr maps back to our file */
static const char module_anchor;

static void *try_open(const char *path, char *why, size_t why_len)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(why);
        const char *err = dlerror();
        int w = snprintf(why + used, why_len - used, "%s%s", used ? "; " : "", err ? err : path);
        if (w < 0 || (size_t)w >= why_len - used)
            why[why_len - 1] = '\0'; /* cut short: the reasons so far say enough */
    }
    return h;
}

static void *open_in(const char *dir, size_t dir_len, const char *file, char *why, size_t why_len)
{
    char path[4096];
    if (dir_len + 1 + strlen(file) + 1 > sizeof path)
        return NULL;
    memcpy(path, dir, dir_len);
    path[dir_len] = '/';
    strcpy(path + dir_len + 1, file);
    return try_open(path, why, why_len);
}

static void load(module_slot *m)
{
    char file[64], why[sizeof m->why] = "";
    snprintf(file, sizeof file, "librlpost-%s.so", m->name);
    void *h = NULL;
    const char *env = getenv(m->env);
    if (env && *env)
        h = try_open(env, why, sizeof why);
    Dl_info info;
    if (!h && dladdr(&module_anchor, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            h = open_in(info.dli_fname, (size_t)(slash - info.dli_fname), file, why, sizeof why);
    }
    if (!h && m->install)
        h = open_in(m->install, strlen(m->install), file, why, sizeof why);
    if (!h)
        h = try_open(file, why, sizeof why);
    if (!h) {
        snprintf(m->why, sizeof m->why, "the %s process-group module could not be loaded (build librlpost with "
                 "its engine installed: meson option %s): %s", m->name, m->name, why);
        return;
    }
    rlpi_comm_module_get_fn get = (rlpi_comm_module_get_fn)(uintptr_t)dlsym(h, "rlpi_comm_module_get");
    const rlpi_comm_module_api *api = get ? get(&host_api) : NULL;
    if (!api || api->abi != RLPI_COMM_MODULE_ABI) {
        snprintf(m->why, sizeof m->why, "%s is not a process-group module of this librlpost (ABI %u)", file,
                 (unsigned)RLPI_COMM_MODULE_ABI);
        dlclose(h);
        return;
    }
    /* the handle stays open for the life of the process: groups created
     * from it may outlive any one caller */
    m->api = api;
}

const rlpi_comm_module_api *rlpi_comm_module(const char *name)
{
    module_slot *m = NULL;
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++)
        if (!strcmp(slots[i].name, name))
            m = &slots[i];
    if (!m) {
        rlpi_error_set(RLP_E_UNSUPPORTED, "no process-group module named %s", name);
        return NULL;
    }
    pthread_mutex_lock(&slots_lock);
    if (!m->tried) {
        load(m);
        m->tried = true;
    }
    const rlpi_comm_module_api *api = m->api;
    pthread_mutex_unlock(&slots_lock);
    if (!api)
        rlpi_error_set(RLP_E_UNSUPPORTED, "%s", m->why);
    return api;
}
