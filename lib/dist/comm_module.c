/* The MPI and Gloo transports of rlp_comm: glue from the process-group
 * interface (rlpi_comm_ops) to a loaded module (comm_module.h). Modules
 * move host memory only; comm.c stages device buffers through it. Gloo
 * meets its peers through the group's TCP store: its keys are put under
 * "gloo/" so they cannot collide with the rendezvous' own. */
#include "dist/comm.h"

#include "backend/context.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct module_comm {
    rlpi_comm_ops ops;              /* module_ops named after the module */
    const rlpi_comm_module_api *api;
    void *impl;
    rlpi_store *store;              /* borrowed from the rlp_comm */
    rlpi_comm_store_api store_api;  /* what the module sees of it */
} module_comm;

static int m_all_reduce(void *impl, void *data, size_t n, int dtype, int op)
{
    module_comm *m = impl;
    return m->api->all_reduce(m->impl, data, n, dtype, op);
}

static int m_broadcast(void *impl, void *data, size_t nbytes, int root)
{
    module_comm *m = impl;
    return m->api->broadcast(m->impl, data, nbytes, root);
}

static int m_barrier(void *impl)
{
    module_comm *m = impl;
    return m->api->barrier(m->impl);
}

static void m_abort(void *impl, const char *why)
{
    module_comm *m = impl;
    m->api->abort(m->impl, why);
}

static void m_destroy(void *impl)
{
    module_comm *m = impl;
    if (m) {
        m->api->destroy(m->impl);
        free(m);
    }
}

/* The ops of every module; the name is the module's (module_comm.ops). */
static const rlpi_comm_ops module_ops = {
    .all_reduce_host = m_all_reduce,
    .broadcast_host = m_broadcast,
    .barrier = m_barrier,
    .abort = m_abort,
    .destroy = m_destroy,
};

static int prefixed(char *out, size_t cap, const char *key)
{
    int w = snprintf(out, cap, "gloo/%s", key);
    if (w < 0 || (size_t)w >= cap || (size_t)w > RLPI_STORE_MAX_KEY)
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: store key \"%s\" is too long", key);
    return RLP_OK;
}

static int store_set(void *impl, const char *key, const void *value, size_t len)
{
    char k[RLPI_STORE_MAX_KEY + 2];
    int rc = prefixed(k, sizeof k, key);
    return rc ? rc : rlpi_store_set(impl, k, value, len);
}

static int store_get(void *impl, const char *key, void **value, size_t *len, double timeout_s)
{
    char k[RLPI_STORE_MAX_KEY + 2];
    int rc = prefixed(k, sizeof k, key);
    return rc ? rc : rlpi_store_get(impl, k, value, len, timeout_s);
}

bool rlpi_comm_mpi_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return true;
    }
    return false;
}

int rlpi_comm_module_create(rlp_comm *c, const rlpi_comm_module_api *api)
{
    bool gloo = !strcmp(api->name, "gloo");
    if (gloo && !c->store)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "process group: the Gloo transport meets through a TCP rendezvous: "
                              "set the rendezvous to \"env://\" (MASTER_ADDR, MASTER_PORT) or \"tcp://HOST:PORT\"");
    module_comm *m = calloc(1, sizeof *m);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "process group: out of memory");
    m->api = api;
    m->store = c->store;
    m->store_api = (rlpi_comm_store_api){c->store, store_set, store_get};
    rlpi_comm_module_args a = {
        .abi = RLPI_COMM_MODULE_ABI,
        .host = rlpi_module_host_api(),
        .rank = c->rank,
        .world = c->world,
        .timeout_s = c->timeout_ms / 1e3,
        .store = gloo ? &m->store_api : NULL,
        .address = gloo ? rlpi_store_local_address(c->store) : NULL,
    };
    int32_t rank = -1, world = 0;
    int rc = api->create(&a, &rank, &world, &m->impl);
    if (rc != RLP_OK) {
        free(m);
        return rlpi_error_wrap("process group: joining over %s", api->name);
    }
    c->rank = rank;
    c->world = world;
    m->ops = module_ops;
    m->ops.name = api->name;
    c->impl = m;
    c->ops = &m->ops;
    return RLP_OK;
}
