// Asynchronous GRPO from C++ through rlp_trainer: what a C++ training stack
// linking librlpost writes.
//
//   async_grpo MODEL [steps] [prompts_per_step] [group_size] [max_new_tokens]
//
// A rollout thread (the trainer's rollout worker, on a frozen copy of the
// policy on a context of its own) generates and scores arithmetic questions
// while this thread trains; the staleness gate keeps every group within
// η = 1 version of the weights it trains. The training reward is a C++
// function (1 for the right number last, 0.5 for the right number
// anywhere, 0.1 for some number); the built-in gsm8k verifier is scored on
// each batch as the "accuracy" metric. One JSON line per step on stdout
// (rlp_trainer_step_json). Handles are owned by std::unique_ptr with the
// *_free functions as deleters; a failed call throws. Exit 0, 1 on a step
// error or a non-finite loss, 2 on bad arguments, 77 without the model.
#include "rlpost.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

template <auto Free> struct deleter {
    template <class T> void operator()(T *p) const { Free(p); }
};
template <class T, auto Free> using handle = std::unique_ptr<T, deleter<Free>>;
using context_ptr = handle<rlp_context, rlp_context_free>;
using policy_ptr = handle<rlp_policy, rlp_policy_free>;
using task_ptr = handle<rlp_task, rlp_task_free>;
using reward_ptr = handle<rlp_reward_fn, rlp_reward_fn_free>;
using trainer_ptr = handle<rlp_trainer, rlp_trainer_free>;

void check(int rc, const char *what)
{
    if (rc != RLP_OK)
        throw std::runtime_error(std::string(what) + ": " + rlp_error_last() + " (" + rlp_status_str(rc) + ")");
}

// The last integer of the text, or "" when there is none.
std::string last_number(std::string_view s)
{
    size_t end = s.find_last_of("0123456789");
    if (end == std::string_view::npos)
        return "";
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(s[begin - 1])))
        begin--;
    if (begin > 0 && s[begin - 1] == '-')
        begin--;
    return std::string(s.substr(begin, end + 1 - begin));
}

// The training reward; runs on the reward's worker threads: no state, no throw.
int number_reward(rlp_reward_result *res, const rlp_reward_request *req, void *)
{
    std::string_view text(req->completion_text, req->completion_len), ref(req->reference ? req->reference : "");
    if (ref.size() >= 2 && ref.front() == '"') // a JSON string
        ref = ref.substr(1, ref.size() - 2);
    if (ref.empty()) {
        res->valid = 0; // no reference: not scoreable, rather than wrong
        return 0;
    }
    res->score = last_number(text) == ref          ? 1.0
        : text.find(ref) != std::string_view::npos ? 0.5
        : last_number(text).empty()                ? 0.0
                                                   : 0.1;
    return 0;
}

policy_ptr load(rlp_context *ctx, const char *path, bool trainable)
{
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = trainable;
    rlp_policy *p = nullptr;
    check(rlp_policy_load(&p, ctx, path, &po), path);
    return policy_ptr(p);
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: async_grpo MODEL [steps] [prompts_per_step] [group_size] [max_new_tokens]\n");
        return 2;
    }
    const char *model = argv[1];
    const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
    const int per_step = argc > 3 ? std::atoi(argv[3]) : 2;
    const int group = argc > 4 ? std::atoi(argv[4]) : 4;
    const int max_new = argc > 5 ? std::atoi(argv[5]) : 24;
    if (steps < 1 || per_step < 1 || group < 2 || max_new < 1) {
        std::fprintf(stderr, "async_grpo: steps, prompts_per_step ≥ 1, group_size ≥ 2, max_new_tokens ≥ 1\n");
        return 2;
    }
    rlp_model_info info = {};
    info.version = RLP_MODEL_INFO_VERSION;
    if (rlp_model_inspect(&info, model) != RLP_OK) {
        std::fprintf(stderr, "async_grpo: %s: %s (skipped)\n", model, rlp_error_last());
        return 77;
    }
    try {
        // the trainer and the rollout thread each get a context (one core each)
        rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
        co.n_threads = 1;
        rlp_context *raw = nullptr;
        check(rlp_context_create(&raw, &co), "context");
        context_ptr train_ctx(raw);
        check(rlp_context_create(&raw, &co), "rollout context");
        context_ptr rollout_ctx(raw);
        policy_ptr policy = load(train_ctx.get(), model, true);
        rlp_optimizer_options opt = RLP_OPTIMIZER_OPTIONS_INIT;
        opt.lr = 1e-5f;
        opt.weight_decay = 0.0f;
        check(rlp_policy_set_optimizer(policy.get(), &opt), "optimizer");

        rlp_task *t = nullptr;
        check(rlp_task_create(&t, "arith", R"({"seed": 1, "split": "train", "chat": true})"), "task");
        task_ptr task(t);
        rlp_reward_options ro = RLP_REWARD_OPTIONS_INIT;
        ro.n_threads = 1;
        rlp_reward_fn *r = nullptr;
        check(rlp_reward_fn_create_callback(&r, number_reward, &ro, nullptr), "reward");
        reward_ptr reward(r);
        check(rlp_reward_fn_create_builtin(&r, "gsm8k", nullptr), "gsm8k verifier");
        reward_ptr verifier(r);

        rlp_trainer_options o;
        check(rlp_trainer_options_init(&o, RLP_TRAINER_OPTIONS_VERSION), "options");
        o.mode = RLP_TRAIN_ASYNC;
        o.max_staleness = 1;
        o.prompts_per_step = static_cast<uint32_t>(per_step);
        o.seed = 1;
        o.sampling.n = static_cast<uint32_t>(group);
        o.sampling.temperature = 1.0f;
        o.sampling.max_new_tokens = static_cast<uint32_t>(max_new);
        o.max_seq_len = 256;
        std::vector<rlp_trainer_metric> metrics = {{verifier.get(), nullptr, "accuracy", 0.5}};
        o.metrics = metrics.data();
        o.n_metrics = metrics.size();
        // the rollout engine copies these weights at create: the copy may go right after
        policy_ptr frozen = load(rollout_ctx.get(), model, false);
        o.rollout_policy = frozen.get();
        rlp_trainer *tr = nullptr;
        check(rlp_trainer_create(&tr, policy.get(), task.get(), reward.get(), &o), "trainer");
        trainer_ptr trainer(tr);
        frozen.reset();

        std::vector<char> json(4096);
        for (int k = 0; k < steps; k++) {
            rlp_step_record rec = {};
            rec.version = RLP_STEP_RECORD_VERSION;
            check(rlp_trainer_step(trainer.get(), &rec), "step");
            size_t len = 0;
            int rc = rlp_trainer_step_json(trainer.get(), json.data(), json.size(), &len);
            if (rc == RLP_E_OVERFLOW) {
                json.resize(len + 1);
                rc = rlp_trainer_step_json(trainer.get(), json.data(), json.size(), &len);
            }
            check(rc, "step_json");
            std::printf("%s\n", json.data());
            std::fflush(stdout);
            if (!std::isfinite(rec.rl.loss) || rec.rl.staleness_max > 1)
                throw std::runtime_error("step " + std::to_string(rec.step) + ": loss " + std::to_string(rec.rl.loss) +
                                         ", staleness " + std::to_string(rec.rl.staleness_max));
        }
        check(rlp_trainer_stop(trainer.get()), "stop");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "async_grpo: %s\n", e.what());
        return 1;
    }
    return 0;
}
