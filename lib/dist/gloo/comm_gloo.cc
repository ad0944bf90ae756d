// The Gloo process-group module (librlpost-gloo.so): host collectives over
// Gloo's TCP transport, the engine behind torch.distributed's CPU groups.
// Ranks meet through librlpost's TCP store (the env:// rendezvous), which
// the host hands in as rlpi_comm_store_api; Gloo's full mesh of TCP pairs
// is then built from the addresses each rank publishes there.
//
// C++ because Gloo is; nothing C++ crosses the module boundary: every entry
// point catches Gloo's exceptions (gloo::IoException for a peer that left
// or timed out, gloo::EnforceNotMet for a broken invariant) and reports them
// through the host's error_set.
//
// All-reduce is not Gloo's own (its ring adds in an order that depends on
// the world size): it is the SHM transport's scheme (comm_shm.c), as the
// MPI module's is, over Gloo's all-to-all and all-gather. Rank r receives
// part r of every rank's chunk, combines them in rank order 0, 1, …, W−1
// with the SHM operators, and an all-gather hands every rank every part.
// So every rank receives the same bits, and the same bits as over SHM or
// MPI, for the traffic of a ring all-reduce. Every collective first checks
// that all ranks made the same call (kind, dtype, op, root, size): a rank
// that calls with another size fails every rank with RLP_E_INVALID_ARG
// instead of a hang or a read past a buffer.
#include "dist/comm_module.h"
#include "rlpost/core.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <pthread.h>
#include <time.h>

namespace {

const rlpi_host_api *host;

// Gloo writes to its sockets with writev(2), which raises SIGPIPE on a
// connection its peer has closed: the default action would kill a rank
// whose peer died mid-collective (torch never sees this: Python ignores
// SIGPIPE). While Gloo runs on a thread, SIGPIPE is blocked there and one
// raised meanwhile is discarded (libpq's way); the write then fails with
// EPIPE, which Gloo reports as an IoException. Gloo's event-loop thread
// inherits the blocked mask from the thread that creates the device.
class SigpipeBlocked {
  public:
    SigpipeBlocked()
    {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
        sigset_t pending;
        was_pending_ = blocked_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    }
    ~SigpipeBlocked()
    {
        if (!blocked_)
            return;
        sigset_t pending;
        if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
            const struct timespec zero = {0, 0};
            while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SigpipeBlocked(const SigpipeBlocked &) = delete;
    SigpipeBlocked &operator=(const SigpipeBlocked &) = delete;

  private:
    sigset_t pipe_, old_;
    bool blocked_ = false, was_pending_ = false;
};

// rlpi_comm_store_api as a gloo::rendezvous::Store
class HostStore : public gloo::rendezvous::Store {
  public:
    HostStore(const rlpi_comm_store_api *api, double timeout_s) : api_(api), timeout_s_(timeout_s) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        if (api_->set(api_->impl, key.c_str(), data.data(), data.size()) != RLP_OK)
            throw std::runtime_error("the rendezvous store refused key " + key);
    }

    std::vector<char> get(const std::string &key) override
    {
        void *v = nullptr;
        size_t len = 0;
        if (api_->get(api_->impl, key.c_str(), &v, &len, timeout_s_) != RLP_OK)
            throw std::runtime_error("waiting for key " + key + " in the rendezvous store failed or timed out");
        std::vector<char> out(static_cast<char *>(v), static_cast<char *>(v) + len);
        std::free(v);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override { wait(keys, std::chrono::milliseconds(0)); }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override
    {
        for (const auto &k : keys)
            (void)get(k);
    }

  private:
    const rlpi_comm_store_api *api_;
    double timeout_s_;
};

struct GlooComm {
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::chrono::milliseconds timeout;
    uint32_t tag = 0;
    bool aborted = false;
    std::string why;
};

int fail(int code, const char *what, const char *detail)
{
    return host->error_set(code, "gloo: %s: %s", what, detail);
}

// A Gloo exception ends the group: its pairs are in an unknown state.
template <typename F> int guarded(GlooComm *g, const char *what, F &&f)
{
    if (g->aborted || !g->ctx)
        return host->error_set(RLP_E_CLOSED, "gloo: %s: the group was closed on this rank (%s)", what,
                               g->why.empty() ? "an earlier collective failed" : g->why.c_str());
    SigpipeBlocked quiet;
    try {
        f();
        return RLP_OK;
    }
    catch (const std::exception &e) {
        std::string msg = e.what();
        g->ctx.reset(); // closes every pair: the peers fail at once instead of waiting
        g->aborted = true;
        g->why = "an earlier collective failed";
        bool timeout = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos;
        return fail(timeout ? RLP_E_TIMEOUT : RLP_E_CLOSED, what, msg.c_str());
    }
}

// the SHM transport's operators (comm_shm.c): out = out op in, NaN wins
template <typename T> void combine(T *out, const T *in, size_t n, int op)
{
    if (op == RLPI_CM_SUM)
        for (size_t j = 0; j < n; j++)
            out[j] += in[j];
    else if (op == RLPI_CM_MAX)
        for (size_t j = 0; j < n; j++)
            out[j] = in[j] > out[j] || in[j] != in[j] ? in[j] : out[j];
    else
        for (size_t j = 0; j < n; j++)
            out[j] = in[j] < out[j] || in[j] != in[j] ? in[j] : out[j];
}

void max_i64(void *c, const void *a, const void *b, size_t n)
{
    auto *o = static_cast<int64_t *>(c);
    auto *x = static_cast<const int64_t *>(a), *y = static_cast<const int64_t *>(b);
    for (size_t i = 0; i < n; i++)
        o[i] = std::max(x[i], y[i]);
}

enum { KIND_ALL_REDUCE = 1, KIND_BROADCAST = 2, KIND_BARRIER = 3, DESC_FIELDS = 5 };

// Every rank's (kind, dtype, op, root, size) against every other's: an
// all-reduce of (d, −d) with max gives max and −min at once. Throws
// nothing of its own: a mismatch is reported as RLP_E_INVALID_ARG.
int same_call(GlooComm *g, int64_t kind, int64_t dtype, int64_t op, int64_t root, int64_t size, bool *ok)
{
    int64_t d[2 * DESC_FIELDS] = {kind, dtype, op, root, size};
    for (int i = 0; i < DESC_FIELDS; i++)
        d[DESC_FIELDS + i] = -d[i];
    gloo::AllreduceOptions o(g->ctx);
    o.setOutput(d, 2 * DESC_FIELDS);
    o.setTimeout(g->timeout);
    o.setTag(g->tag++);
    o.setReduceFunction(gloo::AllreduceOptions::Func(max_i64));
    gloo::allreduce(o);
    *ok = true;
    for (int i = 0; i < DESC_FIELDS; i++)
        *ok = *ok && d[i] == -d[DESC_FIELDS + i];
    return RLP_OK;
}

constexpr size_t kChunkBytes = size_t(16) << 20;

template <typename T> void all_reduce_typed(GlooComm *g, T *data, size_t n, int op)
{
    const size_t W = static_cast<size_t>(g->ctx->size), me = static_cast<size_t>(g->ctx->rank);
    const size_t per = kChunkBytes / sizeof(T);
    std::vector<T> parts, mine_out, gathered;
    for (size_t done = 0; done < n;) {
        size_t len = std::min(n - done, per);
        // part r of the chunk is [len·r/W, len·(r+1)/W), as in the SHM transport
        std::vector<int64_t> counts(W), from(W);
        std::vector<size_t> gcounts(W);
        for (size_t r = 0; r < W; r++) {
            counts[r] = static_cast<int64_t>(len * (r + 1) / W - len * r / W);
            gcounts[r] = static_cast<size_t>(counts[r]);
        }
        const size_t mine = gcounts[me];
        for (size_t r = 0; r < W; r++)
            from[r] = static_cast<int64_t>(mine);
        parts.resize(std::max<size_t>(W * mine, 1));
        {
            gloo::AlltoallvOptions o(g->ctx);
            o.setInput(data + done, counts);
            o.setOutput(parts.data(), from);
            o.setTimeout(g->timeout);
            o.setTag(g->tag++);
            gloo::alltoallv(o);
        }
        mine_out.assign(parts.begin(), parts.begin() + mine);
        for (size_t r = 1; r < W; r++)
            combine(mine_out.data(), parts.data() + r * mine, mine, op);
        gathered.resize(len);
        {
            gloo::AllgathervOptions o(g->ctx);
            o.setInput(mine_out.data(), mine);
            o.setOutput(gathered.data(), gcounts);
            o.setTimeout(g->timeout);
            o.setTag(g->tag++);
            gloo::allgatherv(o);
        }
        std::copy(gathered.begin(), gathered.end(), data + done);
        done += len;
    }
}

int g_create(const rlpi_comm_module_args *a, int32_t *rank, int32_t *world, void **impl)
{
    if (!a || a->abi != RLPI_COMM_MODULE_ABI || !a->store || !a->address || !*a->address || a->world < 1 ||
        a->rank < 0 || a->rank >= a->world || !rank || !world || !impl)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: create: bad arguments (rank %d of %d)", a ? a->rank : -1,
                               a ? a->world : 0);
    auto *g = new (std::nothrow) GlooComm;
    if (!g)
        return host->error_set(RLP_E_NOMEM, "gloo: out of memory");
    double t = a->timeout_s > 0 ? a->timeout_s : 300;
    g->timeout = std::chrono::milliseconds(static_cast<long long>(t * 1e3));
    SigpipeBlocked quiet; // also for Gloo's event-loop thread, started here
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = a->address; // the address the store connection left from: the peers reach it
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(a->rank, a->world);
        ctx->setTimeout(g->timeout);
        HostStore store(a->store, t);
        ctx->connectFullMesh(store, dev);
        g->ctx = ctx;
    }
    catch (const std::exception &e) {
        delete g;
        std::string msg = e.what();
        bool timeout = msg.find("imed out") != std::string::npos || msg.find("timed out") != std::string::npos;
        return fail(timeout ? RLP_E_TIMEOUT : RLP_E_BACKEND, "connecting the ranks", msg.c_str());
    }
    *rank = a->rank;
    *world = a->world;
    *impl = g;
    return RLP_OK;
}

int g_all_reduce(void *impl, void *data, size_t n, int dtype, int op)
{
    auto *g = static_cast<GlooComm *>(impl);
    if (!g || (!data && n) || (dtype != RLPI_CM_F32 && dtype != RLPI_CM_F64) || op < RLPI_CM_SUM || op > RLPI_CM_MIN)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: all-reduce: bad arguments");
    bool same = true;
    int rc = guarded(g, "all-reduce", [&] { same_call(g, KIND_ALL_REDUCE, dtype, op, 0, (int64_t)n, &same); });
    if (rc != RLP_OK)
        return rc;
    if (!same)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: all-reduce: the ranks called with different sizes, "
                               "dtypes or operations (this rank: %zu elements)", n);
    if (n == 0 || g->ctx->size == 1)
        return RLP_OK;
    return guarded(g, "all-reduce", [&] {
        if (dtype == RLPI_CM_F32)
            all_reduce_typed(g, static_cast<float *>(data), n, op);
        else
            all_reduce_typed(g, static_cast<double *>(data), n, op);
    });
}

int g_broadcast(void *impl, void *data, size_t nbytes, int root)
{
    auto *g = static_cast<GlooComm *>(impl);
    if (!g || (!data && nbytes) || (g->ctx && (root < 0 || root >= g->ctx->size)))
        return host->error_set(RLP_E_INVALID_ARG, "gloo: broadcast: bad arguments");
    bool same = true;
    int rc = guarded(g, "broadcast", [&] { same_call(g, KIND_BROADCAST, 0, 0, root, (int64_t)nbytes, &same); });
    if (rc != RLP_OK)
        return rc;
    if (!same)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: broadcast: the ranks called with different sizes or roots "
                               "(this rank: %zu bytes from rank %d)", nbytes, root);
    if (nbytes == 0)
        return RLP_OK;
    return guarded(g, "broadcast", [&] {
        gloo::BroadcastOptions o(g->ctx);
        o.setOutput(static_cast<unsigned char *>(data), nbytes);
        o.setRoot(root);
        o.setTimeout(g->timeout);
        o.setTag(g->tag++);
        gloo::broadcast(o);
    });
}

// The descriptor exchange is itself a barrier (nobody leaves it before
// every rank has entered), and it tells a rank that is in another call.
int g_barrier(void *impl)
{
    auto *g = static_cast<GlooComm *>(impl);
    if (!g)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: barrier: no group");
    bool same = true;
    int rc = guarded(g, "barrier", [&] { same_call(g, KIND_BARRIER, 0, 0, 0, 0, &same); });
    if (rc == RLP_OK && !same)
        return host->error_set(RLP_E_INVALID_ARG, "gloo: barrier: another rank is in another collective");
    return rc;
}

void g_abort(void *impl, const char *why)
{
    auto *g = static_cast<GlooComm *>(impl);
    if (!g || g->aborted)
        return;
    g->aborted = true;
    g->why = why ? why : "aborted";
    try {
        g->ctx.reset(); // closing the pairs wakes the peers' pending collectives with an error
    }
    catch (...) {
    }
}

void g_destroy(void *impl)
{
    auto *g = static_cast<GlooComm *>(impl);
    if (!g)
        return;
    try {
        g->ctx.reset();
    }
    catch (...) {
    }
    delete g;
}

const rlpi_comm_module_api api = {
    RLPI_COMM_MODULE_ABI, "gloo", g_create, g_all_reduce, g_broadcast, g_barrier, g_abort, g_destroy,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const rlpi_comm_module_api *
rlpi_comm_module_get(const rlpi_host_api *h)
{
    if (!h || h->version != RLPI_HOST_API_VERSION)
        return nullptr;
    host = h;
    return &api;
}
