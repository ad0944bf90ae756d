"""The C side of the bindings: finds and loads librlpost, checks its
version, and declares the layout of every public struct and the
argtypes/restype of every public function of include/rlpost.h.

Written by hand from the header; tests/test_header_sync.py parses the
header and fails when a function, a parameter or a struct field here no
longer matches it. Nothing in this module wraps a handle: the classes
built on these declarations live in one module per handle family.
"""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint32, c_uint64, c_void_p)

#: Major version of librlpost these bindings are written for (rlp_version_number() // 10000).
EXPECTED_MAJOR = 0
#: ABI version (SOVERSION) the struct layouts below describe.
EXPECTED_ABI = 0

# ---------------------------------------------------------------------------
# Finding the library
# ---------------------------------------------------------------------------

_LOCAL_NAMES = ("librlpost.so.%d" % EXPECTED_ABI, "librlpost.so", "librlpost.%d.dylib" % EXPECTED_ABI,
                "librlpost.dylib", "rlpost.dll")


def _loaded_path(name):
    """Where the dynamic loader found @p name (Linux: /proc/self/maps), or @p name."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if os.path.basename(path).startswith("librlpost.so"):
                    return path
    except OSError:
        pass
    return name


def load_library():
    """Loads librlpost: the file named by RLPOST_LIBRARY, else the copy next
    to this package (the one `pip install bindings/python` builds and
    bundles), else whatever the system loader finds. Returns (CDLL, path).
    ImportError says what was tried."""
    env = os.environ.get("RLPOST_LIBRARY", "")
    if env:
        # an explicit choice never falls back to another copy silently
        try:
            return ctypes.CDLL(env), os.path.abspath(env)
        except OSError as e:
            raise ImportError("rlpost: RLPOST_LIBRARY=%s cannot be loaded: %s" % (env, e)) from None
    tried = []
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _LOCAL_NAMES:
        path = os.path.join(here, name)
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
        else:
            tried.append("%s (absent)" % path)
    names = ["librlpost.so.%d" % EXPECTED_ABI]
    found = ctypes.util.find_library("rlpost")
    if found and found not in names:
        names.append(found)
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            return lib, _loaded_path(name)
        except OSError as e:
            tried.append("%s through the system loader (%s)" % (name, e))
    raise ImportError("rlpost: librlpost not found. Install the package with `pip install bindings/python` "
                      "from the repository (it builds and bundles the library), or set RLPOST_LIBRARY to "
                      "the path of librlpost.so (e.g. build/lib/librlpost.so after `ninja -C build`), or "
                      "install the library (`meson install -C build`). Tried: " + "; ".join(tried))


def check_version(number, abi, path):
    """Refuses a library of another major version or ABI (ImportError)."""
    major = number // 10000
    found = "%d.%d.%d" % (major, number // 100 % 100, number % 100)
    if major != EXPECTED_MAJOR:
        raise ImportError("rlpost: the librlpost at %s is version %s (major %d), but these bindings are "
                          "written for major version %d: use bindings of the same major version, or set "
                          "RLPOST_LIBRARY to a librlpost %d.x" % (path, found, major, EXPECTED_MAJOR,
                                                                    EXPECTED_MAJOR))
    if abi != EXPECTED_ABI:
        raise ImportError("rlpost: the librlpost at %s (version %s) has ABI version %d, but these bindings "
                          "describe ABI version %d" % (path, found, abi, EXPECTED_ABI))


# ---------------------------------------------------------------------------
# Callback types
# ---------------------------------------------------------------------------

#: rlp_log_fn: void (int level, const char *message, void *payload)
LogFn = CFUNCTYPE(None, c_int, c_char_p, c_void_p)
#: void (*payload_free)(void *payload) of rlp_reward_options
PayloadFreeFn = CFUNCTYPE(None, c_void_p)


def _struct(c_name, fields, version=1):
    """A ctypes Structure named after its C typedef, with the value its
    `version` field takes (its *_VERSION macro; both checked by the tests)."""
    cls = type(c_name, (Structure,), {"_fields_": fields, "_c_name_": c_name, "_version_": version})
    return cls


# ---------------------------------------------------------------------------
# Structs (field for field as in include/rlpost.h)
# ---------------------------------------------------------------------------

ContextOptions = _struct("rlp_context_options", [
    ("version", c_uint32), ("backend", c_int32), ("device", c_int32), ("n_threads", c_int32),
    ("seed", c_uint64), ("log_fn", LogFn), ("log_payload", c_void_p), ("log_level", c_int32),
    ("matmul_precision", c_int32)], version=2)

ChatMessage = _struct("rlp_chat_message", [("role", c_char_p), ("content", c_char_p)])

ChatOptions = _struct("rlp_chat_options", [
    ("version", c_uint32), ("add_generation_prompt", c_int), ("enable_thinking", c_int)])

Sequence = _struct("rlp_sequence", [
    ("tokens", POINTER(c_int32)), ("n_tokens", c_uint32), ("n_prompt", c_uint32)])

PolicyOptions = _struct("rlp_policy_options", [
    ("version", c_uint32), ("head_chunk_tokens", c_uint32), ("activation_checkpointing", c_int32),
    ("trainable", c_int32)])

GGUFSaveOptions = _struct("rlp_gguf_save_options", [
    ("version", c_uint32), ("type", c_int32), ("embed_type", c_int32), ("name", c_char_p),
    ("tokenizer_gguf", c_char_p)])

OptimizerOptions = _struct("rlp_optimizer_options", [
    ("version", c_uint32), ("lr", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
    ("weight_decay", c_float), ("max_grad_norm", c_float), ("schedule", c_int32),
    ("warmup_steps", c_int64), ("total_steps", c_int64), ("min_lr_ratio", c_float)])

LossContext = _struct("rlp_loss_context", [
    ("version", c_uint32), ("n_seqs", c_size_t), ("seq_index", POINTER(c_size_t)),
    ("token_start", POINTER(c_size_t)), ("n_tokens", c_size_t), ("logprobs", POINTER(c_float)),
    ("entropy", POINTER(c_float)), ("step_n_seqs", c_size_t), ("step_n_tokens", c_size_t),
    ("dlogprobs", POINTER(c_float)), ("dentropy", POINTER(c_float)), ("loss", c_double)])

#: rlp_loss_fn: int (rlp_loss_context *ctx, void *payload)
LossFn = CFUNCTYPE(c_int, POINTER(LossContext), c_void_p)

TrainOptions = _struct("rlp_train_options", [
    ("version", c_uint32), ("temperature", c_float), ("micro_batch_tokens", c_uint32)])

TrainStats = _struct("rlp_train_stats", [
    ("version", c_uint32), ("loss", c_double), ("grad_norm", c_double), ("lr", c_float),
    ("skipped", c_int32), ("policy_version", c_uint64), ("n_seqs", c_uint64), ("n_tokens", c_uint64),
    ("n_micro_batches", c_uint32), ("mean_entropy", c_double), ("seconds", c_double)])

ModelInfo = _struct("rlp_model_info", [
    ("version", c_uint32), ("architecture", c_char * 32), ("format", c_char * 16),
    ("n_layers", c_int32), ("dim", c_int32), ("n_heads", c_int32), ("n_kv_heads", c_int32),
    ("head_dim", c_int32), ("ffn_dim", c_int32), ("vocab_size", c_int32), ("context_length", c_int32),
    ("rope_theta", c_float), ("rms_eps", c_float), ("rope_scaling", c_int32), ("tie_embeddings", c_int32),
    ("attention_bias", c_int32), ("n_params", c_uint64), ("n_tensors", c_uint64), ("dtypes", c_char * 128),
    ("activation", c_char * 16), ("qk_norm", c_int32), ("post_norms", c_int32), ("norm_offset", c_float),
    ("embed_scale", c_float), ("attn_scale", c_float), ("final_softcap", c_float), ("sliding_window", c_int32),
    ("n_local_layers", c_int32), ("rope_theta_local", c_float),
    ("score_labels", c_int32), ("score_per_token", c_int32)], version=3)

LoraOptions = _struct("rlp_lora_options", [
    ("version", c_uint32), ("rank", c_int32), ("alpha", c_float), ("rslora", c_int32), ("targets", c_char_p),
    ("seed", c_uint64), ("base_dtype", c_char_p)], version=2)

MemoryStats = _struct("rlp_memory_stats", [
    ("version", c_uint32), ("weights", c_uint64), ("gradients", c_uint64), ("optimizer", c_uint64),
    ("activations", c_uint64)])

Provenance = _struct("rlp_provenance", [
    ("version", c_uint32), ("prompt_index", c_uint64), ("epoch", c_uint64), ("position", c_uint64),
    ("sampling_seed", c_uint64), ("batch", c_uint64)])

EpisodeStats = _struct("rlp_episode_stats", [
    ("version", c_uint32), ("turns", c_uint32), ("tool_calls", c_uint32), ("tool_errors", c_uint32),
    ("tool_timeouts", c_uint32), ("observation_tokens", c_uint32), ("observations_cut", c_uint32),
    ("end", c_int32), ("tool_seconds", c_double)])

Trajectory = _struct("rlp_trajectory", [
    ("version", c_uint32), ("group_id", c_uint64), ("prompt_tokens", POINTER(c_int32)),
    ("n_prompt_tokens", c_size_t), ("completion_tokens", POINTER(c_int32)),
    ("n_completion_tokens", c_size_t), ("logprobs", POINTER(c_float)),
    ("token_versions", POINTER(c_uint64)), ("prompt_text", c_char_p), ("completion_text", c_char_p),
    ("policy_version", c_uint64), ("finish_reason", c_int32), ("stop_index", c_int32),
    ("temperature", c_float), ("reward", c_float), ("valid", c_int32), ("error", c_char_p),
    ("metadata_json", c_char_p), ("sample_index", c_uint32), ("token_rewards", POINTER(c_float)),
    ("has_provenance", c_int32), ("provenance", Provenance),
    ("loss_mask", POINTER(c_uint8)), ("has_episode", c_int32), ("episode", EpisodeStats)], version=3)

SamplingOptions = _struct("rlp_sampling_options", [
    ("version", c_uint32), ("n", c_uint32), ("temperature", c_float), ("top_k", c_int32),
    ("top_p", c_float), ("min_p", c_float), ("max_new_tokens", c_uint32), ("seed", c_uint64),
    ("stop", POINTER(c_char_p)), ("n_stop", c_size_t), ("stop_token_ids", POINTER(c_int32)),
    ("n_stop_token_ids", c_size_t), ("include_stop_str", c_int32), ("ignore_eos", c_int32),
    ("logprobs_mode", c_int32)])

Prompt = _struct("rlp_prompt", [
    ("tokens", POINTER(c_int32)), ("n_tokens", c_size_t), ("text", c_char_p), ("group_id", c_uint64),
    ("metadata_json", c_char_p), ("sampling", POINTER(SamplingOptions))])

RolloutOptions = _struct("rlp_rollout_options", [
    ("version", c_uint32), ("max_batch", c_uint32), ("max_seq_len", c_uint32),
    ("interrupt_mode", c_int32), ("share_weights", c_int32), ("weights", c_int32)], version=2)

RemoteOptions = _struct("rlp_remote_options", [
    ("version", c_uint32), ("urls", POINTER(c_char_p)), ("n_urls", c_size_t), ("model", c_char_p),
    ("api_key", c_char_p), ("timeout_ms", c_uint32), ("max_retries", c_uint32),
    ("max_in_flight", c_uint32), ("max_response_bytes", c_uint64)])

StreamEvent = _struct("rlp_stream_event", [
    ("version", c_uint32), ("prompt_index", c_size_t), ("sample_index", c_uint32), ("token", c_int32),
    ("logprob", c_float), ("policy_version", c_uint64), ("text", POINTER(c_char)), ("text_len", c_size_t),
    ("finish_reason", c_int32)])

#: rlp_stream_fn: int (const rlp_stream_event *event, void *payload)
StreamFn = CFUNCTYPE(c_int, POINTER(StreamEvent), c_void_p)

RolloutStats = _struct("rlp_rollout_stats", [
    ("version", c_uint32), ("prompts", c_uint64), ("completions", c_uint64), ("prefill_tokens", c_uint64),
    ("decode_tokens", c_uint64), ("decode_steps", c_uint64), ("interrupts", c_uint64),
    ("remote_errors", c_uint64), ("prefill_seconds", c_double), ("decode_seconds", c_double)])

#: RLP_SERVER_URL_MAX
SERVER_URL_MAX = 256

ServerStats = _struct("rlp_server_stats", [
    ("version", c_uint32), ("in_set", c_int32), ("url", c_char * SERVER_URL_MAX), ("requests_ok", c_uint64),
    ("requests_failed", c_uint64), ("completions", c_uint64), ("completion_tokens", c_uint64),
    ("last_weight_version", c_int64), ("versioned", c_uint64), ("staleness_max", c_uint64),
    ("staleness_sum", c_uint64)])

MismatchStats = _struct("rlp_mismatch_stats", [
    ("version", c_uint32), ("n_tokens", c_uint64), ("mean_abs", c_double), ("max_abs", c_double),
    ("mean_ratio_dev", c_double)])

RLOptions = _struct("rlp_rl_options", [
    ("version", c_uint32), ("advantage", c_int32), ("adv_eps", c_float), ("adv_batch_norm", c_int32),
    ("gamma", c_float), ("filter_equal_groups", c_int32), ("policy_loss", c_int32), ("clip_low", c_float),
    ("clip_high", c_float), ("dual_clip", c_float), ("tis_cap", c_float), ("behav_cap", c_float),
    ("behav_mask", c_int32), ("kl_estimator", c_int32), ("kl_coef", c_float), ("kl_in_reward", c_int32),
    ("entropy_coef", c_float), ("loss_agg", c_int32), ("agg_norm_constant", c_float),
    ("overlong_max", c_uint32), ("overlong_cache", c_uint32), ("ppo_epochs", c_uint32),
    ("mini_batches", c_uint32), ("micro_batch_tokens", c_uint32), ("temperature", c_float),
    ("sapo_tau_pos", c_float), ("sapo_tau_neg", c_float), ("whiten", c_int32), ("rollout_is", c_int32),
    ("rollout_is_threshold", c_float), ("rollout_is_batch_normalize", c_int32), ("rollout_rs", c_int32),
    ("rollout_rs_threshold", c_float), ("rollout_rs_threshold_lower", c_float), ("rollout_token_veto", c_float),
    ("overlong_filter", c_int32), ("clip_cov_ratio", c_float), ("clip_cov_lb", c_float), ("clip_cov_ub", c_float),
    ("kl_cov_ratio", c_float), ("ppo_kl_coef", c_float)], version=2)

RLStats = _struct("rlp_rl_stats", [
    ("version", c_uint32), ("loss", c_double), ("pg_loss", c_double), ("kl", c_double), ("entropy", c_double),
    ("clip_frac_low", c_double), ("clip_frac_high", c_double), ("ratio_mean", c_double),
    ("ratio_max", c_double), ("behav_weight_mean", c_double), ("behav_weight_max", c_double),
    ("grad_norm", c_double), ("adv_mean", c_double), ("adv_std", c_double), ("reward_mean", c_double),
    ("staleness_mean", c_double), ("staleness_max", c_double), ("n_seqs", c_uint64), ("n_tokens", c_uint64),
    ("n_groups", c_uint64), ("filtered_groups", c_uint64), ("zero_std_groups", c_uint64),
    ("invalid_seqs", c_uint64), ("optimizer_steps", c_uint32), ("skipped_steps", c_uint32),
    ("policy_version", c_uint64), ("seconds", c_double)])

TaskItem = _struct("rlp_task_item", [
    ("version", c_uint32), ("epoch", c_uint64), ("position", c_uint64), ("index", c_uint64),
    ("question", c_char_p), ("reference", c_char_p), ("metadata_json", c_char_p)])

RewardRequest = _struct("rlp_reward_request", [
    ("version", c_uint32), ("prompt_text", POINTER(c_char)), ("prompt_len", c_size_t),
    ("completion_text", POINTER(c_char)), ("completion_len", c_size_t),
    ("completion_tokens", POINTER(c_int32)), ("n_completion_tokens", c_size_t), ("reference", c_char_p),
    ("metadata_json", c_char_p), ("group_id", c_uint64), ("sample_index", c_uint32),
    ("policy_version", c_uint64), ("batch_index", c_size_t)])

#: RLP_REWARD_REASON_MAX
REWARD_REASON_MAX = 128

RewardResult = _struct("rlp_reward_result", [
    ("version", c_uint32), ("score", c_double), ("valid", c_int32), ("reason", c_char * REWARD_REASON_MAX),
    ("token_scores", POINTER(c_float)), ("step_ends", POINTER(c_uint8)), ("has_token_scores", c_int32)])

#: rlp_reward_callback: int (rlp_reward_result *, const rlp_reward_request *, void *payload)
RewardCallback = CFUNCTYPE(c_int, POINTER(RewardResult), POINTER(RewardRequest), c_void_p)
#: rlp_reward_batch_callback: int (rlp_reward_result *, const rlp_reward_request *, size_t n, void *payload)
RewardBatchCallback = CFUNCTYPE(c_int, POINTER(RewardResult), POINTER(RewardRequest), c_size_t, c_void_p)

RewardOptions = _struct("rlp_reward_options", [
    ("version", c_uint32), ("name", c_char_p), ("n_threads", c_uint32), ("timeout_ms", c_uint32),
    ("batch_size", c_uint32), ("max_abandoned", c_uint32), ("payload_free", PayloadFreeFn)])

RewardStats = _struct("rlp_reward_stats", [
    ("version", c_uint32), ("scored", c_uint64), ("skipped", c_uint64), ("valid", c_uint64),
    ("invalid", c_uint64), ("errors", c_uint64), ("timeouts", c_uint64), ("nonfinite", c_uint64),
    ("abandoned_running", c_uint64), ("mean_score", c_double), ("min_score", c_double),
    ("max_score", c_double), ("seconds", c_double), ("crashed", c_uint64)], version=2)

IsolationOptions = _struct("rlp_isolation_options", [
    ("version", c_uint32), ("name", c_char_p), ("n_workers", c_uint32), ("timeout_ms", c_uint32),
    ("batch_size", c_uint32), ("max_restarts", c_uint32), ("worker_path", c_char_p)])

HttpRewardOptions = _struct("rlp_http_reward_options", [
    ("version", c_uint32), ("url", c_char_p), ("api_key", c_char_p), ("name", c_char_p),
    ("timeout_ms", c_uint32), ("connect_timeout_ms", c_uint32), ("max_retries", c_uint32),
    ("backoff_ms", c_uint32), ("batch_size", c_uint32), ("max_in_flight", c_uint32),
    ("max_response_bytes", c_uint64), ("send_tokens", c_int32)])

#: RLP_BUFFER_STALENESS_BINS
BUFFER_STALENESS_BINS = 16

BufferOptions = _struct("rlp_buffer_options", [
    ("version", c_uint32), ("capacity", c_uint64), ("max_staleness", c_uint32), ("full_policy", c_int32),
    ("push_timeout_ms", c_uint32), ("spill_path", c_char_p), ("compact_bytes", c_uint64),
    ("log_fn", LogFn), ("log_payload", c_void_p), ("sync", c_void_p)], version=2)

BufferStats = _struct("rlp_buffer_stats", [
    ("version", c_uint32), ("size", c_uint64), ("trajectories", c_uint64), ("accepted", c_uint64),
    ("restored", c_uint64), ("consumed", c_uint64), ("dropped_stale", c_uint64), ("rejected", c_uint64),
    ("staleness_hist", c_uint64 * BUFFER_STALENESS_BINS), ("max_staleness_seen", c_uint64),
    ("spill_bytes", c_uint64), ("spill_records", c_uint64), ("spill_syncs", c_uint64),
    ("compactions", c_uint64), ("torn_bytes", c_uint64)])

SyncOptions = _struct("rlp_sync_options", [
    ("version", c_uint32), ("mode", c_int32), ("transport", c_int32), ("max_staleness", c_uint32),
    ("batch_groups", c_uint32), ("max_concurrent", c_uint32), ("initial_version", c_uint64),
    ("dir", c_char_p), ("keep_versions", c_uint32), ("dtype", c_int32), ("urls", POINTER(c_char_p)),
    ("n_urls", c_size_t), ("api_key", c_char_p), ("timeout_ms", c_uint32), ("max_retries", c_uint32),
    ("verify_retries", c_uint32), ("log_fn", LogFn), ("log_payload", c_void_p), ("comm", c_void_p),
    ("root", c_int32)], version=2)

SyncStats = _struct("rlp_sync_stats", [
    ("version", c_uint32), ("mode", c_int32), ("transport", c_int32), ("policy_version", c_uint64),
    ("accepted", c_uint64), ("running", c_uint64), ("admitted", c_uint64), ("gate_waits", c_uint64),
    ("publishes", c_uint64), ("pulls", c_uint64), ("weight_loads", c_uint64), ("checksum_retries", c_uint64),
    ("http_requests", c_uint64), ("http_failures", c_uint64), ("bytes_published", c_uint64),
    ("publish_seconds", c_double), ("pull_seconds", c_double)])

CommOptions = _struct("rlp_comm_options", [
    ("version", c_uint32), ("transport", c_int32), ("rank", c_int32), ("world_size", c_int32),
    ("rendezvous", c_char_p), ("timeout_ms", c_uint32)])

#: RLP_TRAINER_MAX_METRICS
TRAINER_MAX_METRICS = 8

TrainerMetric = _struct("rlp_trainer_metric", [
    ("fn", c_void_p), ("mean_key", c_char_p), ("rate_key", c_char_p), ("threshold", c_double)])

# ---- environments (rlpost/env.h) ----

EnvOptions = _struct("rlp_env_options", [
    ("version", c_uint32), ("timeout_ms", c_uint32), ("max_threads", c_uint32), ("max_abandoned", c_uint32),
    ("max_observation_bytes", c_uint64), ("serialize", c_int32)])

#: rlp_env_callbacks.reset: int (void **episode, rlp_env_reply *reply, const char *metadata_json, void *user)
EnvResetFn = CFUNCTYPE(c_int, POINTER(c_void_p), c_void_p, c_char_p, c_void_p)
#: rlp_env_callbacks.step: int (rlp_env_reply *, void *episode, const char *action, size_t action_len,
#: const int32_t *action_ids, size_t n_action_ids, void *user)
EnvStepFn = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(c_char), c_size_t, POINTER(c_int32), c_size_t, c_void_p)
#: rlp_env_callbacks.close: void (void *episode, void *user)
EnvCloseFn = CFUNCTYPE(None, c_void_p, c_void_p)
#: rlp_env_callbacks.free_user: void (void *user)
EnvFreeUserFn = CFUNCTYPE(None, c_void_p)

EnvCallbacks = _struct("rlp_env_callbacks", [
    ("version", c_uint32), ("reset", EnvResetFn), ("step", EnvStepFn), ("close", EnvCloseFn),
    ("free_user", EnvFreeUserFn)])

EnvOutcome = _struct("rlp_env_outcome", [
    ("version", c_uint32), ("status", c_int32), ("error", c_char_p), ("observation", POINTER(c_char)),
    ("observation_len", c_size_t), ("n_observation_tokens", c_size_t), ("done", c_int32), ("tool_call", c_int32),
    ("has_reward", c_int32), ("reward", c_float), ("tool_error", c_char_p), ("metadata_json", c_char_p),
    ("truncated", c_int32), ("seconds", c_double)])

ToolCall = _struct("rlp_tool_call", [
    ("version", c_uint32), ("name", c_char_p), ("arguments", c_char_p), ("start", c_size_t), ("end", c_size_t)])

MultiturnOptions = _struct("rlp_multiturn_options", [
    ("version", c_uint32), ("env", c_void_p), ("max_turns", c_uint32), ("max_tokens", c_uint32),
    ("overlap", c_int32)])

#: rlp_trainer_batch_fn: int (const rlp_batch *batch, uint64_t step, void *payload)
TrainerBatchFn = CFUNCTYPE(c_int, c_void_p, c_uint64, c_void_p)

TrainerOptions = _struct("rlp_trainer_options", [
    ("version", c_uint32), ("mode", c_int32), ("max_staleness", c_uint32), ("prompts_per_step", c_uint32),
    ("seed", c_uint64), ("sampling", SamplingOptions), ("rl", RLOptions), ("ref", c_void_p),
    ("tokenizer", c_void_p), ("max_seq_len", c_uint32), ("max_batch", c_uint32), ("rollout_threads", c_uint32),
    ("worker_urls", POINTER(c_char_p)), ("n_worker_urls", c_size_t), ("api_key", c_char_p),
    ("weights_dir", c_char_p), ("worker_timeout_ms", c_uint32), ("worker_retries", c_uint32),
    ("metrics", POINTER(TrainerMetric)), ("n_metrics", c_size_t), ("on_batch", TrainerBatchFn),
    ("on_batch_payload", c_void_p), ("comm", c_void_p), ("stall_polls", c_uint32),
    ("rollout_inbox", c_char_p), ("multiturn", MultiturnOptions), ("rollout_weights", c_int32),
    ("max_gen_batches", c_uint32),
    ("critic_path", c_char_p), ("critic_lr", c_float), ("critic_warmup", c_uint32), ("value_clip", c_float),
    ("gae_lambda", c_float), ("remote_workers", c_int32)], version=6)

StepRecord = _struct("rlp_step_record", [
    ("version", c_uint32), ("step", c_uint64), ("policy_version", c_uint64), ("epoch", c_uint64),
    ("sampling_seed", c_uint64), ("prompt_index", POINTER(c_uint64)), ("n_prompts", c_size_t),
    ("reward_mean", c_double), ("reward_std", c_double), ("reward_min", c_double), ("reward_max", c_double),
    ("reward_valid", c_uint64), ("reward_errors", c_uint64), ("reward_timeouts", c_uint64),
    ("reward_nonfinite", c_uint64), ("reward_crashed", c_uint64), ("completions", c_uint64),
    ("completion_tokens", c_uint64), ("truncated", c_uint64),
    ("metric_mean", c_double * TRAINER_MAX_METRICS), ("metric_rate", c_double * TRAINER_MAX_METRICS),
    ("rl", RLStats), ("buffer_dropped", c_uint64), ("buffer_dropped_total", c_uint64), ("buffer_size", c_uint64),
    ("rollout_seconds", c_double), ("reward_seconds", c_double), ("train_seconds", c_double),
    ("publish_seconds", c_double), ("trainer_idle_seconds", c_double), ("rollout_idle_seconds", c_double),
    ("step_seconds", c_double), ("rollout_tokens", c_uint64), ("tokens_per_second", c_double),
    ("episodes", c_uint64), ("turns_mean", c_double), ("turns_max", c_uint32), ("tool_call_rate", c_double),
    ("tool_calls", c_uint64), ("tool_errors", c_uint64), ("tool_timeouts", c_uint64), ("tool_seconds", c_double),
    ("masked_token_share", c_double), ("episodes_truncated", c_uint64), ("episodes_max_turns", c_uint64),
    ("episodes_failed", c_uint64), ("mismatch_kl", c_double), ("mismatch_is_mean", c_double),
    ("mismatch_is_min", c_double), ("mismatch_is_max", c_double), ("mismatch_abs_mean", c_double),
    ("publish_bytes", c_uint64), ("gen_batches", c_uint32), ("dynamic_dropped_groups", c_uint64),
    ("overlong_filtered", c_uint64), ("rollout_is_mean", c_double), ("rollout_is_min", c_double),
    ("rollout_is_max", c_double), ("rollout_is_truncated", c_double), ("rollout_is_ess", c_double),
    ("rollout_rs_masked", c_double), ("rollout_rs_seq_masked", c_double), ("rollout_veto", c_double),
    ("value_loss", c_double), ("value_clipfrac", c_double), ("values_mean", c_double), ("returns_mean", c_double),
    ("value_explained_var", c_double), ("critic_grad_norm", c_double), ("critic_seconds", c_double)], version=6)

EvalResult = _struct("rlp_eval_result", [
    ("version", c_uint32), ("prompts", c_uint64), ("completions", c_uint64), ("correct", c_uint64),
    ("accuracy", c_double), ("accuracy_low", c_double), ("accuracy_high", c_double), ("reward_mean", c_double),
    ("mean_completion_tokens", c_double), ("truncated", c_uint64), ("seconds", c_double)])

RolloutWorkerOptions = _struct("rlp_rollout_worker_options", [
    ("version", c_uint32), ("prompts_per_batch", c_uint32), ("seed", c_uint64), ("first_batch", c_uint64),
    ("sampling", SamplingOptions), ("tokenizer", c_void_p), ("retries", c_uint32), ("remote", c_int32),
    ("log_fn", LogFn), ("log_payload", c_void_p), ("outbox_dir", c_char_p), ("multiturn", MultiturnOptions)],
    version=2)

RolloutWorkerStats = _struct("rlp_rollout_worker_stats", [
    ("version", c_uint32), ("batches", c_uint64), ("groups_pushed", c_uint64), ("groups_released", c_uint64),
    ("tokens", c_uint64), ("generate_seconds", c_double), ("reward_seconds", c_double), ("idle_seconds", c_double),
    ("reward_errors", c_uint64), ("reward_timeouts", c_uint64), ("reward_nonfinite", c_uint64),
    ("reward_crashed", c_uint64), ("at_gate", c_int32), ("running", c_int32)])

# ---------------------------------------------------------------------------
# Functions: (name, restype, argtypes), in the order of the header
# ---------------------------------------------------------------------------

_h = c_void_p                # an opaque handle (rlp_context *, const rlp_policy *, ...)
_out_h = POINTER(c_void_p)   # rlp_context **out
_cs = c_char_p               # const char * (in) / const char * (returned, static or borrowed)
_buf = POINTER(c_char)       # char * out-buffer, or a borrowed text with a length
P = POINTER

FUNCTIONS = [
    # version
    ("rlp_version_number", c_uint, []),
    ("rlp_version_string", _cs, []),
    ("rlp_abi_version", c_uint, []),
    # status and errors
    ("rlp_status_str", _cs, [c_int]),
    ("rlp_error_last", _cs, []),
    ("rlp_error_last_code", c_int, []),
    ("rlp_error_clear", None, []),
    # backends
    ("rlp_backend_available", c_int, [c_int]),
    ("rlp_backend_name", _cs, [c_int]),
    ("rlp_backend_device_count", c_int, [P(c_int), c_int]),
    # context
    ("rlp_context_options_init", c_int, [P(ContextOptions), c_uint32]),
    ("rlp_context_create", c_int, [_out_h, P(ContextOptions)]),
    ("rlp_context_free", None, [_h]),
    ("rlp_context_backend", c_int, [P(c_int), _h]),
    ("rlp_context_n_threads", c_int, [P(c_int), _h]),
    ("rlp_context_seed", c_int, [P(c_uint64), _h]),
    ("rlp_context_matmul_precision", c_int, [P(c_int), _h]),
    ("rlp_context_device_name", _cs, [_h]),
    ("rlp_context_set_log_level", c_int, [_h, c_int]),
    # tokenizer
    ("rlp_tokenizer_load", c_int, [_out_h, _cs]),
    ("rlp_tokenizer_free", None, [_h]),
    ("rlp_tokenizer_encode", c_int, [_h, _cs, c_size_t, c_uint32, P(c_int32), c_size_t, P(c_size_t)]),
    ("rlp_tokenizer_decode", c_int, [_h, P(c_int32), c_size_t, c_uint32, _buf, c_size_t, P(c_size_t)]),
    ("rlp_tokenizer_token_text", c_int, [P(_buf), P(c_size_t), _h, c_int32]),
    ("rlp_tokenizer_vocab_size", c_int, [P(c_size_t), _h]),
    ("rlp_tokenizer_special_id", c_int, [P(c_int32), _h, c_int]),
    ("rlp_tokenizer_set_chat_template", c_int, [_h, _cs]),
    ("rlp_tokenizer_chat_template", _cs, [_h]),
    ("rlp_tokenizer_apply_chat_template", c_int,
     [_h, P(ChatMessage), c_size_t, c_int, P(c_int32), c_size_t, P(c_size_t)]),
    ("rlp_chat_options_init", c_int, [P(ChatOptions), c_uint32]),
    ("rlp_tokenizer_apply_chat_template_opts", c_int,
     [_h, P(ChatMessage), c_size_t, P(ChatOptions), P(c_int32), c_size_t, P(c_size_t)]),
    ("rlp_detokenizer_create", c_int, [_out_h, _h, c_uint32]),
    ("rlp_detokenizer_push", c_int, [P(_buf), P(c_size_t), _h, c_int32]),
    ("rlp_detokenizer_flush", c_int, [P(_buf), P(c_size_t), _h]),
    ("rlp_detokenizer_free", None, [_h]),
    # policy
    ("rlp_policy_options_init", c_int, [P(PolicyOptions), c_uint32]),
    ("rlp_optimizer_options_init", c_int, [P(OptimizerOptions), c_uint32]),
    ("rlp_loss_nll", c_int, [P(LossContext), c_void_p]),
    ("rlp_train_options_init", c_int, [P(TrainOptions), c_uint32]),
    ("rlp_policy_load", c_int, [_out_h, _h, _cs, P(PolicyOptions)]),
    ("rlp_policy_save", c_int, [_h, _cs, c_int]),
    ("rlp_policy_save_optimizer", c_int, [_h, _cs]),
    ("rlp_gguf_save_options_init", c_int, [P(GGUFSaveOptions), c_uint32]),
    ("rlp_gguf_type_from_name", c_int, [P(c_int32), _cs]),
    ("rlp_policy_save_gguf", c_int, [_h, _cs, P(GGUFSaveOptions)]),
    ("rlp_policy_load_optimizer", c_int, [_h, _cs]),
    ("rlp_model_inspect", c_int, [P(ModelInfo), _cs]),
    ("rlp_policy_free", None, [_h]),
    ("rlp_policy_clone", c_int, [_out_h, _h, c_int]),
    ("rlp_policy_clone_to", c_int, [_out_h, _h, _h, c_int]),
    ("rlp_policy_tokenizer", _h, [_h]),
    ("rlp_policy_version", c_int, [P(c_uint64), _h]),
    ("rlp_policy_n_params", c_int, [P(c_uint64), _h]),
    ("rlp_policy_memory", c_int, [P(MemoryStats), _h]),
    ("rlp_lora_options_init", c_int, [P(LoraOptions), c_uint32]),
    ("rlp_policy_enable_lora", c_int, [_h, P(LoraOptions)]),
    ("rlp_policy_n_trainable", c_int, [P(c_uint64), _h]),
    ("rlp_policy_save_lora", c_int, [_h, _cs, _cs]),
    ("rlp_policy_load_lora", c_int, [_h, _cs]),
    ("rlp_policy_set_optimizer", c_int, [_h, P(OptimizerOptions)]),
    ("rlp_policy_logprobs", c_int,
     [_h, P(Sequence), c_size_t, c_float, P(c_float), P(c_float), c_size_t, P(c_size_t)]),
    ("rlp_policy_score_labels", c_int, [P(c_uint32), _h]),
    ("rlp_policy_info", c_int, [P(ModelInfo), _h]),
    ("rlp_policy_score", c_int, [_h, P(Sequence), c_size_t, P(c_float), c_size_t, P(c_size_t)]),
    ("rlp_policy_train_step", c_int,
     [_h, P(Sequence), c_size_t, LossFn, c_void_p, P(TrainOptions), P(TrainStats)]),
    # trajectories and batches
    ("rlp_batch_create", c_int, [_out_h]),
    ("rlp_batch_free", None, [_h]),
    ("rlp_batch_size", c_int, [P(c_size_t), _h]),
    ("rlp_batch_get", c_int, [P(Trajectory), _h, c_size_t]),
    ("rlp_batch_append", c_int, [_h, P(Trajectory)]),
    ("rlp_batch_extend", c_int, [_h, _h]),
    ("rlp_batch_set_reward", c_int, [_h, c_size_t, c_float]),
    ("rlp_batch_set_token_rewards", c_int, [_h, c_size_t, P(c_float), c_size_t]),
    ("rlp_batch_set_invalid", c_int, [_h, c_size_t, _cs]),
    ("rlp_batch_set_provenance", c_int, [_h, c_size_t, P(Provenance)]),
    ("rlp_batch_set_group_provenance", c_int, [_h, c_uint64, P(Provenance)]),
    # rollout engine
    ("rlp_sampling_options_init", c_int, [P(SamplingOptions), c_uint32]),
    ("rlp_rollout_options_init", c_int, [P(RolloutOptions), c_uint32]),
    ("rlp_rollout_engine_create", c_int, [_out_h, _h, P(RolloutOptions)]),
    ("rlp_remote_options_init", c_int, [P(RemoteOptions), c_uint32]),
    ("rlp_rollout_engine_create_remote", c_int, [_out_h, _h, P(RemoteOptions)]),
    ("rlp_rollout_engine_free", None, [_h]),
    ("rlp_rollout_generate", c_int,
     [_out_h, _h, P(Prompt), c_size_t, P(SamplingOptions), StreamFn, c_void_p]),
    ("rlp_rollout_engine_update_weights", c_int, [_h, _h]),
    ("rlp_rollout_engine_load_weights", c_int, [_h, _cs, c_uint64]),
    ("rlp_rollout_engine_version", c_int, [P(c_uint64), _h]),
    ("rlp_rollout_engine_set_version", c_int, [_h, c_uint64]),
    ("rlp_rollout_engine_set_urls", c_int, [_h, P(c_char_p), c_size_t]),
    ("rlp_rollout_engine_server_stats", c_int, [P(ServerStats), c_size_t, P(c_size_t), _h]),
    ("rlp_rollout_engine_abort", c_int, [_h]),
    ("rlp_rollout_engine_tokenizer", _h, [_h]),
    ("rlp_rollout_engine_stats", c_int, [P(RolloutStats), _h]),
    ("rlp_batch_logprob_mismatch", c_int, [P(MismatchStats), _h, _h]),
    # RL step
    ("rlp_rl_options_init", c_int, [P(RLOptions), c_uint32]),
    ("rlp_rl_options_check", c_int, [P(RLOptions)]),
    ("rlp_policy_train_rl", c_int, [_h, _h, _h, P(RLOptions), P(RLStats)]),
    ("rlp_rl_advantages", c_int, [P(c_float), c_size_t, _h, P(RLOptions)]),
    # tasks
    ("rlp_task_create", c_int, [_out_h, _cs, _cs]),
    ("rlp_task_open_jsonl", c_int, [_out_h, _cs, _cs]),
    ("rlp_task_free", None, [_h]),
    ("rlp_task_size", c_int, [P(c_uint64), _h]),
    ("rlp_task_skipped", c_int, [P(c_uint64), _h]),
    ("rlp_task_epoch", c_int, [P(c_uint64), _h]),
    ("rlp_task_position", c_int, [P(c_uint64), _h]),
    ("rlp_task_next_batch", c_int, [_out_h, _h, c_size_t, _h]),
    ("rlp_task_cursor_save", c_int, [_h, _buf, c_size_t, P(c_size_t)]),
    ("rlp_task_cursor_restore", c_int, [_h, _cs, c_size_t]),
    ("rlp_prompt_set_free", None, [_h]),
    ("rlp_prompt_set_size", c_int, [P(c_size_t), _h]),
    ("rlp_prompt_set_prompts", P(Prompt), [_h]),
    ("rlp_prompt_set_item", c_int, [P(TaskItem), _h, c_size_t]),
    # reward functions
    ("rlp_reward_options_init", c_int, [P(RewardOptions), c_uint32]),
    ("rlp_reward_fn_create_callback", c_int, [_out_h, RewardCallback, P(RewardOptions), c_void_p]),
    ("rlp_reward_fn_create_batch_callback", c_int,
     [_out_h, RewardBatchCallback, P(RewardOptions), c_void_p]),
    ("rlp_reward_fn_create_builtin", c_int, [_out_h, _cs, _cs]),
    ("rlp_reward_builtin_name", _cs, [c_size_t]),
    ("rlp_http_reward_options_init", c_int, [P(HttpRewardOptions), c_uint32]),
    ("rlp_reward_fn_create_http", c_int, [_out_h, P(HttpRewardOptions)]),
    ("rlp_isolation_options_init", c_int, [P(IsolationOptions), c_uint32]),
    ("rlp_reward_fn_create_isolated", c_int, [_out_h, _cs, _cs, P(IsolationOptions)]),
    ("rlp_reward_fn_combine", c_int, [_out_h, P(c_void_p), P(c_double), c_size_t]),
    ("rlp_reward_refine", c_int, [P(c_float), c_size_t, P(c_uint8), c_int, c_float]),
    ("rlp_reward_fn_set_refine", c_int, [_h, c_int, c_float]),
    ("rlp_reward_fn_score", c_int, [_h, _h, P(RewardStats)]),
    ("rlp_reward_fn_score_one", c_int, [P(RewardResult), _h, P(RewardRequest)]),
    ("rlp_reward_fn_name", _cs, [_h]),
    ("rlp_reward_fn_free", None, [_h]),
    # replay buffer
    ("rlp_buffer_options_init", c_int, [P(BufferOptions), c_uint32]),
    ("rlp_replay_buffer_create", c_int, [_out_h, P(BufferOptions)]),
    ("rlp_replay_buffer_free", None, [_h]),
    ("rlp_replay_buffer_push", c_int, [_h, _h]),
    ("rlp_replay_buffer_pull", c_int, [_out_h, _h, c_size_t, c_uint64, c_uint32]),
    ("rlp_replay_buffer_close", c_int, [_h]),
    ("rlp_batch_write_file", c_int, [_h, c_char_p]),
    ("rlp_batch_read_file", c_int, [_out_h, c_char_p]),
    ("rlp_replay_buffer_ingest_dir", c_int, [_h, c_char_p, P(c_size_t)]),
    ("rlp_replay_buffer_stats", c_int, [P(BufferStats), _h]),
    # synchronizer
    ("rlp_sync_options_init", c_int, [P(SyncOptions), c_uint32]),
    ("rlp_synchronizer_create", c_int, [_out_h, P(SyncOptions)]),
    ("rlp_synchronizer_free", None, [_h]),
    ("rlp_synchronizer_publish", c_int, [_h, _h]),
    ("rlp_synchronizer_pull", c_int, [_h, _h]),
    ("rlp_synchronizer_pull_at_least", c_int, [_h, _h, c_uint64]),
    ("rlp_synchronizer_set_urls", c_int, [_h, P(c_char_p), c_size_t]),
    ("rlp_synchronizer_acquire", c_int, [_h, c_uint32]),
    ("rlp_synchronizer_release", c_int, [_h, c_int]),
    ("rlp_synchronizer_version", c_int, [P(c_uint64), _h]),
    ("rlp_synchronizer_close", c_int, [_h]),
    ("rlp_synchronizer_stats", c_int, [P(SyncStats), _h]),
    # process groups
    ("rlp_comm_options_init", c_int, [P(CommOptions), c_uint32]),
    ("rlp_comm_create", c_int, [_out_h, _h, P(CommOptions)]),
    ("rlp_comm_free", None, [_h]),
    ("rlp_comm_info", c_int, [_h, P(c_int32), P(c_int32), P(c_int32)]),
    ("rlp_comm_barrier", c_int, [_h]),
    ("rlp_comm_all_reduce", c_int, [_h, P(c_double), c_size_t, c_int]),
    ("rlp_comm_broadcast", c_int, [_h, c_void_p, c_size_t, c_int32]),
    ("rlp_policy_set_comm", c_int, [_h, _h]),
    ("rlp_policy_broadcast", c_int, [_h, _h, c_int32]),
    # trainer
    ("rlp_trainer_options_init", c_int, [P(TrainerOptions), c_uint32]),
    ("rlp_trainer_create", c_int, [_out_h, _h, _h, _h, P(TrainerOptions)]),
    ("rlp_trainer_step", c_int, [_h, P(StepRecord)]),
    ("rlp_trainer_step_json", c_int, [_h, _buf, c_size_t, P(c_size_t)]),
    ("rlp_trainer_interrupt", c_int, [_h]),
    ("rlp_trainer_stop", c_int, [_h]),
    ("rlp_trainer_steps_done", c_int, [P(c_uint64), _h]),
    ("rlp_trainer_async_stats", c_int, [P(BufferStats), P(RolloutWorkerStats), _h]),
    ("rlp_trainer_set_worker_urls", c_int, [_h, P(c_char_p), c_size_t]),
    ("rlp_trainer_server_stats", c_int, [P(ServerStats), c_size_t, P(c_size_t), _h]),
    ("rlp_trainer_checkpoint", c_int, [_h, _cs, c_int, _cs]),
    ("rlp_trainer_resume", c_int, [_h, _cs]),
    ("rlp_trainer_generate", c_int, [_out_h, _h, _h, P(SamplingOptions)]),
    ("rlp_trainer_evaluate", c_int,
     [P(EvalResult), _h, _h, P(SamplingOptions), _h, c_double, P(c_double), _out_h]),
    ("rlp_stats_wilson", c_int, [P(c_double), P(c_double), c_uint64, c_uint64, c_double]),
    ("rlp_stats_bootstrap_mean", c_int, [P(c_double), P(c_double), P(c_double), c_size_t, c_uint32, c_uint64]),
    ("rlp_stats_bootstrap_paired", c_int,
     [P(c_double), P(c_double), P(c_double), P(c_double), c_size_t, c_uint32, c_uint64]),
    ("rlp_trainer_free", None, [_h]),
    # rollout worker
    ("rlp_rollout_worker_options_init", c_int, [P(RolloutWorkerOptions), c_uint32]),
    ("rlp_rollout_worker_create", c_int, [_out_h, _h, _h, _h, _h, _h, P(RolloutWorkerOptions)]),
    ("rlp_rollout_worker_run_once", c_int, [_h]),
    ("rlp_rollout_worker_add_engine", c_int, [_h, _h]),
    ("rlp_rollout_worker_start", c_int, [_h]),
    ("rlp_rollout_worker_stop", c_int, [_h]),
    ("rlp_rollout_worker_error", c_int, [_h, P(c_char_p)]),
    ("rlp_rollout_worker_stats_get", c_int, [P(RolloutWorkerStats), _h]),
    ("rlp_rollout_worker_free", None, [_h]),
    # environments
    ("rlp_env_reply_add_text", c_int, [_h, _cs, c_size_t, c_uint32]),
    ("rlp_env_reply_add_tokens", c_int, [_h, P(c_int32), c_size_t]),
    ("rlp_env_reply_set_reward", c_int, [_h, c_float]),
    ("rlp_env_reply_set_done", c_int, [_h, c_int]),
    ("rlp_env_reply_set_tool_call", c_int, [_h, c_int]),
    ("rlp_env_reply_set_tool_error", c_int, [_h, _cs]),
    ("rlp_env_reply_set_metadata", c_int, [_h, _cs]),
    ("rlp_env_options_init", c_int, [P(EnvOptions), c_uint32]),
    ("rlp_env_create", c_int, [_out_h, _cs, P(EnvCallbacks), c_void_p, P(EnvOptions)]),
    ("rlp_env_create_http", c_int, [_out_h, _cs, _cs, P(EnvOptions)]),
    ("rlp_env_create_builtin", c_int, [_out_h, _cs, _cs, P(EnvOptions)]),
    ("rlp_env_name", _cs, [_h]),
    ("rlp_env_free", None, [_h]),
    ("rlp_env_episode_start", c_int, [_out_h, _h, _cs, P(EnvOutcome)]),
    ("rlp_env_episode_step", c_int, [P(EnvOutcome), _h, _cs, c_size_t, P(c_int32), c_size_t]),
    ("rlp_env_episode_free", None, [_h]),
    ("rlp_tool_calls_parse", c_int, [_out_h, _cs, c_size_t, P(c_size_t)]),
    ("rlp_tool_call_list_size", c_int, [P(c_size_t), _h]),
    ("rlp_tool_call_list_get", c_int, [P(ToolCall), _h, c_size_t]),
    ("rlp_tool_call_list_free", None, [_h]),
    ("rlp_multiturn_options_init", c_int, [P(MultiturnOptions), c_uint32]),
    ("rlp_rollout_generate_episodes", c_int,
     [_out_h, _h, P(Prompt), c_size_t, P(SamplingOptions), P(MultiturnOptions), StreamFn, c_void_p]),
]


class _Missing:
    """Stands for a function this library does not export (an older minor
    version): calling it raises UnsupportedError."""

    def __init__(self, name, restype, argtypes):
        self.__name__ = name
        self.restype = restype
        self.argtypes = argtypes

    def __call__(self, *args):
        from .errors import UnsupportedError, STATUS_UNSUPPORTED
        raise UnsupportedError("%s: not exported by the librlpost at %s (version %s); it needs a newer "
                               "librlpost" % (self.__name__, library_path, lib.rlp_version_string().decode()),
                               STATUS_UNSUPPORTED, self.__name__)


class _Functions:
    """The declared functions as attributes: F.rlp_context_create(...)."""


def _declare(cdll):
    funcs = _Functions()
    missing = []
    for name, restype, argtypes in FUNCTIONS:
        try:
            f = getattr(cdll, name)
        except AttributeError:
            f = _Missing(name, restype, argtypes)
            missing.append(name)
        else:
            f.restype = restype
            f.argtypes = argtypes
        setattr(funcs, name, f)
    return funcs, missing


lib, library_path = load_library()
# the version functions first: an incompatible library is refused before anything else is used
lib.rlp_version_number.restype = c_uint
lib.rlp_version_number.argtypes = []
lib.rlp_abi_version.restype = c_uint
lib.rlp_abi_version.argtypes = []
lib.rlp_version_string.restype = c_char_p
lib.rlp_version_string.argtypes = []
check_version(lib.rlp_version_number(), lib.rlp_abi_version(), library_path)

#: Every public function, with argtypes and restype set (or a _Missing stand-in).
F, MISSING = _declare(lib)
#: The address of rlp_loss_nll as an rlp_loss_fn, to pass to rlp_policy_train_step().
LOSS_NLL = ctypes.cast(lib.rlp_loss_nll, LossFn) if "rlp_loss_nll" not in MISSING else None

