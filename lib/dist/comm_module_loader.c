/* Loads a process-group module (librlpost-mpi.so, librlpost-gloo.so) with
 * dlopen on first use, as backend/cuda_loader.c loads the CUDA module:
 * librlpost.so never links MPI or Gloo, so it loads on any machine, and
 * asking for a transport whose module (or engine) is missing is
 * RLP_E_UNSUPPORTED with the reason. Search order (backend/module_open.c):
 * RLPOST_<NAME>_MODULE, next to the librlpost that holds this code, the
 * install path, then the bare name (LD_LIBRARY_PATH). */
#include "dist/comm.h"

#include "core/error.h"
#include "core/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void load(module_slot *m)
{
    char file[64], why[sizeof m->why];
    snprintf(file, sizeof file, "librlpost-%s.so", m->name);
    void *h = rlpi_module_open(m->env, file, m->install, why, sizeof why);
    if (!h) {
        snprintf(m->why, sizeof m->why, "the %s process-group module could not be loaded (build librlpost with "
                 "its engine installed: meson option %s): %.900s", m->name, m->name, why);
        return;
    }
    rlpi_comm_module_get_fn get = (rlpi_comm_module_get_fn)(uintptr_t)dlsym(h, "rlpi_comm_module_get");
    const rlpi_comm_module_api *api = get ? get(rlpi_module_host_api()) : NULL;
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
