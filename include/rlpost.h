/**
 * @file rlpost.h
 * @brief librlpost — reinforcement-learning post-training of causal language
 *        models, as an embeddable C11 library with a stable ABI.
 *
 * This is the one public header. Everything it declares starts with `rlp_`
 * or `RLP_`. Conventions that hold for every function unless its own comment
 * says otherwise:
 *
 * - **Status.** Functions return `int`: `RLP_OK` (0) on success or a negative
 *   `RLP_E_*` code. On failure a human-readable message naming the argument,
 *   file, field or URL at fault is available from rlp_error_last() on the
 *   same thread.
 * - **Out-parameters** come first and are written only on success.
 * - **Ownership.** Whatever a function returns through `**out` belongs to the
 *   caller and is released with the matching `*_free()`; `*_free(NULL)` is a
 *   no-op. Getters return borrowed pointers that stay valid until the parent
 *   handle is freed or changed.
 * - **Options structs** start with `uint32_t version`, are initialised with
 *   their `RLP_*_OPTIONS_INIT` macro or `rlp_*_options_init()`, are passed by
 *   pointer, and only ever grow at the end. Passing NULL means "defaults".
 * - **Threads.** A handle is used by one thread at a time unless its
 *   functions document otherwise (the replay buffer and the synchronizer are
 *   built for concurrent producers and consumers).
 * - **Callbacks** take `void *payload` last.
 *
 * See docs/ABI.md for what is stable and how the ABI is checked.
 */
#ifndef RLPOST_H
#define RLPOST_H

#include <stddef.h>
#include <stdint.h>

#include "rlpost_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Export and deprecation macros                                            */
/* ------------------------------------------------------------------------ */

/** Marks a public function. The library is built with hidden visibility and
 *  a linker version script, so only symbols carrying RLP_API are exported. */
#if defined(_WIN32) && defined(RLPOST_BUILDING)
#define RLP_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(RLPOST_STATIC)
#define RLP_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define RLP_API __attribute__((visibility("default")))
#else
#define RLP_API
#endif

/** Marks a public function that still works but will be removed at the next
 *  ABI break; the message names its replacement. */
#if defined(__GNUC__) || defined(__clang__)
#define RLP_DEPRECATED(msg) __attribute__((deprecated(msg)))
#elif defined(_MSC_VER)
#define RLP_DEPRECATED(msg) __declspec(deprecated(msg))
#else
#define RLP_DEPRECATED(msg)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

/** Run-time version as `MAJOR*10000 + MINOR*100 + PATCH`; compare with
 *  RLP_VERSION_NUMBER to detect a header/library mismatch.
 *  Thread-safe. */
RLP_API unsigned rlp_version_number(void);

/** Run-time version as a static string "MAJOR.MINOR.PATCH". Thread-safe;
 *  the string is owned by the library and never freed. */
RLP_API const char *rlp_version_string(void);

/** ABI version (the shared object's SOVERSION). It changes only on an
 *  incompatible ABI change, independently of the release version.
 *  Thread-safe. */
RLP_API unsigned rlp_abi_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                  */
/* ------------------------------------------------------------------------ */

/** Status codes. Values are fixed forever; new codes are only appended. */
typedef enum rlp_status {
    RLP_OK = 0,                /**< success */
    RLP_E_INVALID_ARG = -1,    /**< a NULL handle or pointer, a bad enum value, a value out of range */
    RLP_E_NOMEM = -2,          /**< an allocation failed (host or device) */
    RLP_E_IO = -3,             /**< a file could not be opened, read, written or synced */
    RLP_E_FORMAT = -4,         /**< a file or message is malformed (bad magic, bounds, JSON) */
    RLP_E_UNSUPPORTED = -5,    /**< valid, but not supported (dtype, architecture, option) */
    RLP_E_BACKEND = -6,        /**< the compute backend failed or is not available here */
    RLP_E_TIMEOUT = -7,        /**< a wait, peer or callback ran past its deadline */
    RLP_E_NETWORK = -8,        /**< a network peer could not be reached or answered badly */
    RLP_E_CALLBACK = -9,       /**< a user callback returned an error */
    RLP_E_CLOSED = -10,        /**< the handle was shut down; no more work is accepted */
    RLP_E_AGAIN = -11,         /**< would block (full, empty, busy): try again later */
    RLP_E_NOT_FOUND = -12,     /**< a named item (tensor, key, token, file) does not exist */
    RLP_E_STATE = -13,         /**< the call is not valid in the handle's current state */
    RLP_E_OVERFLOW = -14,      /**< a size or count does not fit (arithmetic overflow, buffer too small) */
    RLP_E_INTERNAL = -15       /**< a bug in librlpost: please report it */
} rlp_status;

/** A static English description of any status code (unknown codes give
 *  "unknown status"). Never returns NULL. Thread-safe. */
RLP_API const char *rlp_status_str(int status);

/** The message describing the last failure of a librlpost call on the
 *  calling thread, e.g. "rlp_context_create: options->backend: 7 is not a
 *  backend kind". The string is thread-local, owned by the library, and valid
 *  until the next failing librlpost call on this thread. Returns "" when no error has
 *  been recorded. Never returns NULL. */
RLP_API const char *rlp_error_last(void);

/** The status code that went with rlp_error_last() (RLP_OK if none).
 *  Thread-local. */
RLP_API int rlp_error_last_code(void);

/** Forgets the calling thread's last error. */
RLP_API void rlp_error_clear(void);

/* ------------------------------------------------------------------------ */
/* Opaque handles                                                           */
/* ------------------------------------------------------------------------ */

/** Execution context: backend, device, threads, seed, logging. */
typedef struct rlp_context rlp_context;
/** Tokenizer: encode/decode, special tokens, chat templates. */
typedef struct rlp_tokenizer rlp_tokenizer;
/** Causal language model with trainable weights and optimizer state. */
typedef struct rlp_policy rlp_policy;
/** Generates sampled completions with behaviour logprobs and version tags. */
typedef struct rlp_rollout_engine rlp_rollout_engine;
/** Thread-safe, staleness-bounded store of version-tagged trajectory groups. */
typedef struct rlp_replay_buffer rlp_replay_buffer;
/** Scores trajectories (C callbacks, built-ins, HTTP verifiers). */
typedef struct rlp_reward_fn rlp_reward_fn;
/** Owns the policy version counter, the sync mode and the staleness gate. */
typedef struct rlp_synchronizer rlp_synchronizer;
/** A batch of trajectories (prompt, completion, logprobs, versions, reward). */
typedef struct rlp_batch rlp_batch;
/** A process group: data-parallel gradient all-reduce, weight broadcast (SHM or NCCL). */
typedef struct rlp_comm rlp_comm;

/* ------------------------------------------------------------------------ */
/* Backends                                                                 */
/* ------------------------------------------------------------------------ */

/** Compute backends. Values are fixed and only grow. */
typedef enum rlp_backend_kind {
    RLP_BACKEND_CPU = 0,  /**< OpenBLAS GEMMs and a thread pool; always built */
    RLP_BACKEND_CUDA = 1  /**< cuBLAS, own kernels and NCCL; built with -Dcuda */
} rlp_backend_kind;

/** Number of backend kinds (one past the largest valid rlp_backend_kind). */
#define RLP_BACKEND_COUNT 2

/**
 * Whether a backend can be used on this machine right now.
 *
 * For RLP_BACKEND_CUDA this checks that the library was built with CUDA,
 * that the CUDA backend module and its runtime libraries load, and that at
 * least one GPU is visible; the reason it is not is in rlp_error_last().
 * Never fails to load or crashes on a machine without a GPU.
 *
 * @param kind  an rlp_backend_kind
 * @return 1 if available, 0 if not (reason in rlp_error_last()),
 *         RLP_E_INVALID_ARG if @p kind is not a backend kind.
 * Thread-safe.
 */
RLP_API int rlp_backend_available(int kind);

/** Static name of a backend kind ("cpu", "cuda"), or NULL for a bad kind.
 *  Thread-safe. */
RLP_API const char *rlp_backend_name(int kind);

/**
 * Number of devices of a backend kind visible here: 1 for the CPU, the GPU
 * count for CUDA (0 where none or not built).
 *
 * @param[out] out_count  receives the count
 * @param kind            an rlp_backend_kind
 * @return RLP_OK, or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_backend_device_count(int *out_count, int kind);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

/** Log severities; a context logs messages at or above its level. */
typedef enum rlp_log_level {
    RLP_LOG_DEBUG = 0,
    RLP_LOG_INFO = 1,
    RLP_LOG_WARN = 2,
    RLP_LOG_ERROR = 3,
    RLP_LOG_NONE = 4  /**< as a threshold: log nothing */
} rlp_log_level;

/**
 * Receives the library's log messages.
 *
 * @param level    an rlp_log_level
 * @param message  NUL-terminated, without a trailing newline; borrowed for
 *                 the duration of the call
 * @param payload  the pointer given with the callback
 *
 * May be called from any thread the library runs (worker threads included),
 * concurrently: it must be thread-safe and must not call back into the
 * handle that is logging.
 */
typedef void (*rlp_log_fn)(int level, const char *message, void *payload);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * Number format of the matrix products (GEMMs) of a context: every
 * projection, the logits and their backward products. Everything else stays
 * fp32 in every mode: weights (which are the fp32 master weights),
 * activations between ops, gradients, AdamW moments, norms, softmax,
 * attention and the logprob head. Values are fixed and only grow.
 *
 * Mixed precision in the sense of Micikevicius et al., "Mixed Precision
 * Training", ICLR 2018 (fp32 master weights, low-precision operands, fp32
 * accumulation), with bfloat16 operands as in Kalamkar et al., "A Study of
 * BFLOAT16 for Deep Learning Training", arXiv:1905.12322 (2019): bf16 keeps
 * fp32's exponent range, so no loss scaling is needed.
 *
 * Expected deviation from fp32 (docs/cuda.md has the measured table): each
 * operand is rounded to nearest even at a relative error of at most 2^-8
 * (bf16: 8 significant bits) or 2^-11 (TF32: 11), so an element of a
 * product can move by up to 2^-7·Σ|a·b| (bf16) or 2^-10·Σ|a·b| (TF32);
 * random rounding errors mostly cancel, and on the tests' tiny models
 * logprobs move by up to about 6e-3 nats in bf16.
 */
typedef enum rlp_matmul_precision {
    /** fp32 operands, fp32 products and sums (the default; cuBLAS in its
     *  default math mode, no TF32). The same bits as before this option. */
    RLP_MATMUL_FP32 = 0,
    /** CUDA: fp32 operands that tensor cores may round to TF32 (10-bit
     *  mantissa), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32). The CPU
     *  backend has no TF32 and runs such a context in fp32 (a permission,
     *  not a demand, like PyTorch's set_float32_matmul_precision("high")). */
    RLP_MATMUL_TF32 = 1,
    /** Both operands rounded to bfloat16 (round to nearest even; NaN and
     *  ±Inf kept), products accumulated in fp32, the output written in fp32.
     *  CUDA: a conversion kernel, then cublasGemmStridedBatchedEx on tensor
     *  cores. CPU: the same rounding into scratch, then the fp32 GEMM; a
     *  reference emulation for studying bf16 effects (bf16 × bf16 products
     *  are exact in fp32, so it differs from CUDA only by summation order),
     *  slightly slower than fp32 on the CPU, not faster. */
    RLP_MATMUL_BF16 = 2
} rlp_matmul_precision;

/** Version of rlp_context_options understood by this header (2 added
 *  matmul_precision; version-1 structs are still accepted and get fp32). */
#define RLP_CONTEXT_OPTIONS_VERSION 2

/** Options for rlp_context_create(). Initialise with
 *  RLP_CONTEXT_OPTIONS_INIT or rlp_context_options_init(). */
typedef struct rlp_context_options {
    uint32_t version;     /**< RLP_CONTEXT_OPTIONS_VERSION */
    int32_t backend;      /**< an rlp_backend_kind; default RLP_BACKEND_CPU */
    int32_t device;       /**< device index for CUDA (0-based); must be 0 for the CPU */
    int32_t n_threads;    /**< CPU threads of the backend's pool, which runs the GEMM tiles and every kernel; 0 = one per online core */
    uint64_t seed;        /**< seed of the context's random streams; default 0x5eed */
    rlp_log_fn log_fn;    /**< log sink; NULL = write to stderr */
    void *log_payload;    /**< passed to @ref log_fn */
    int32_t log_level;    /**< an rlp_log_level threshold; default RLP_LOG_WARN */
    int32_t matmul_precision; /**< (version ≥ 2) an rlp_matmul_precision for every GEMM run on
                                   the context, by training and by the rollout engine alike;
                                   default RLP_MATMUL_FP32 */
} rlp_context_options;

/** Static initialiser with the defaults documented in rlp_context_options. */
#define RLP_CONTEXT_OPTIONS_INIT \
    { RLP_CONTEXT_OPTIONS_VERSION, RLP_BACKEND_CPU, 0, 0, UINT64_C(0x5eed), NULL, NULL, RLP_LOG_WARN, RLP_MATMUL_FP32 }

/**
 * Fills @p opts with the defaults (same as RLP_CONTEXT_OPTIONS_INIT).
 *
 * @param[out] opts     options to initialise
 * @param version       RLP_CONTEXT_OPTIONS_VERSION
 * @return RLP_OK, or RLP_E_INVALID_ARG for NULL or an unknown version.
 */
RLP_API int rlp_context_options_init(rlp_context_options *opts, uint32_t version);

/**
 * Creates an execution context: the backend every handle made from it runs
 * on, its thread pool, its random seed and its log sink.
 *
 * Asking for RLP_BACKEND_CUDA on a machine without a GPU (or in a build
 * without CUDA) fails with RLP_E_BACKEND and a message saying why; it never
 * crashes and never makes the library fail to load.
 *
 * @param[out] out  receives the new context; free with rlp_context_free()
 * @param opts      options, or NULL for the defaults
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out, unknown options version,
 *         bad backend/device/thread count/log level/matmul precision);
 *         RLP_E_BACKEND; RLP_E_NOMEM. A context whose matmul_precision is
 *         not fp32 says so at the end of rlp_context_device_name().
 * Thread-safe (creating contexts concurrently is fine). A CPU context does
 * its own threading: it splits every product over its n_threads pool and
 * calls OpenBLAS on one thread, so creating one sets OpenBLAS's process-wide
 * thread count to 1 (openblas_set_num_threads(1)). A host that uses OpenBLAS
 * itself and wants it threaded should set the count back around its own
 * calls. (With both OpenBLAS's threads and ours alive, each spun while the
 * other worked: a train step was 1.3–1.5× slower on 2 cores.)
 */
RLP_API int rlp_context_create(rlp_context **out, const rlp_context_options *opts);

/** Frees a context. Every handle created from it must be freed first.
 *  NULL is a no-op. */
RLP_API void rlp_context_free(rlp_context *ctx);

/**
 * Reads the backend a context runs on.
 * @param[out] out_kind  receives an rlp_backend_kind
 * @param ctx            the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_backend(int *out_kind, const rlp_context *ctx);

/**
 * Reads the number of CPU threads a context uses (after resolving 0 to the
 * core count).
 * @param[out] out_threads  receives the count (≥ 1)
 * @param ctx               the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_n_threads(int *out_threads, const rlp_context *ctx);

/**
 * Reads a context's seed.
 * @param[out] out_seed  receives the seed given at creation
 * @param ctx            the context
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_seed(uint64_t *out_seed, const rlp_context *ctx);

/**
 * A short description of the context's device, e.g.
 * "cpu: 2 threads, OpenBLAS 0.3.21" or "cuda:0 NVIDIA H200 (sm_90, 139 GiB)".
 * @param ctx  the context
 * @return a string owned by the context, valid until it is freed; NULL (with
 *         rlp_error_last() set) for a NULL context.
 * Thread-safe.
 */
RLP_API const char *rlp_context_device_name(const rlp_context *ctx);

/**
 * Changes the log threshold of a context.
 * @param ctx    the context
 * @param level  an rlp_log_level
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_context_set_log_level(rlp_context *ctx, int level);

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */
/* ------------------------------------------------------------------------ */

/** Roles of the special token ids a tokenizer knows (rlp_tokenizer_special_id()). */
typedef enum rlp_token_role {
    RLP_TOKEN_BOS = 0, /**< beginning of sequence */
    RLP_TOKEN_EOS = 1, /**< end of sequence / end of turn */
    RLP_TOKEN_PAD = 2, /**< padding */
    RLP_TOKEN_UNK = 3  /**< unknown */
} rlp_token_role;

/** Flags of rlp_tokenizer_encode(). */
typedef enum rlp_encode_flags {
    RLP_ENCODE_ADD_BOS = 1,      /**< prepend the BOS id (if the tokenizer has one) */
    RLP_ENCODE_PARSE_SPECIAL = 2 /**< text spelling a special token (e.g. "<|im_end|>")
                                      becomes that token; without it the text is
                                      encoded as ordinary characters */
} rlp_encode_flags;

/** Flags of rlp_tokenizer_decode(). */
typedef enum rlp_decode_flags {
    RLP_DECODE_SKIP_SPECIAL = 1 /**< leave special (control) tokens out of the text */
} rlp_decode_flags;

/**
 * Loads a tokenizer from a file, recognised by its content:
 * - a Hugging Face `tokenizer.json` with a BPE model: byte-level BPE (GPT-2,
 *   SmolLM/SmolLM2, Qwen2/Qwen3, Llama-3) or Llama-2-style BPE with byte
 *   fallback. A `tokenizer_config.json` in the same folder, if present,
 *   supplies bos/eos/pad tokens, `add_bos_token` and `chat_template`.
 * - a llama2.c `tokenizer.bin` (SentencePiece-style BPE with scores).
 *
 * The file is treated as hostile: sizes, counts and ids are bounds-checked.
 *
 * @param[out] out  receives the tokenizer; free with rlp_tokenizer_free()
 * @param path      file path (NUL-terminated)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL argument); RLP_E_IO (cannot read);
 *         RLP_E_FORMAT (malformed); RLP_E_UNSUPPORTED (a GGUF file — load it
 *         with its model — or a tokenizer.json component that is not
 *         supported, named in rlp_error_last()); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_load(rlp_tokenizer **out, const char *path);

/** Frees a tokenizer. NULL is a no-op. Detokenizers made from it must be
 *  freed first. */
RLP_API void rlp_tokenizer_free(rlp_tokenizer *tok);

/**
 * Encodes UTF-8 text to token ids.
 *
 * Special-token text is matched only with RLP_ENCODE_PARSE_SPECIAL; put it
 * only on text you wrote yourself, never on user, dataset or tool text
 * (whose "<|im_end|>" would otherwise close a chat turn). Non-special added
 * tokens are always matched, as Hugging Face tokenizers do. Ill-formed UTF-8
 * is encoded byte by byte (byte-level BPE) or through byte fallback.
 *
 * @param tok    the tokenizer
 * @param text   the text, @p len bytes (need not be NUL-terminated; may be
 *               NULL when @p len is 0)
 * @param len    bytes of @p text
 * @param flags  rlp_encode_flags, OR-ed
 * @param[out] ids  receives up to @p cap ids (int32); may be NULL when @p cap is 0
 * @param cap    capacity of @p ids in ids
 * @param[out] n_out  receives the number of ids the text encodes to — also
 *               when it returns RLP_E_OVERFLOW, so a caller can size a buffer
 * @return RLP_OK; RLP_E_OVERFLOW when @p cap is too small (the first @p cap
 *         ids are written); RLP_E_INVALID_ARG; RLP_E_NOMEM.
 * Thread-safe: several threads may encode with one tokenizer at once.
 */
RLP_API int rlp_tokenizer_encode(const rlp_tokenizer *tok, const char *text, size_t len,
                                 uint32_t flags, int32_t *ids, size_t cap, size_t *n_out);

/**
 * Decodes token ids to UTF-8 text. Byte sequences that are not well-formed
 * UTF-8 (e.g. a character cut off at the end) become U+FFFD, one per
 * maximal ill-formed subpart (as Python's `errors="replace"`). For
 * SentencePiece vocabularies the leading space of the first word is removed.
 *
 * @param tok    the tokenizer
 * @param ids    @p n token ids
 * @param n      number of ids
 * @param flags  rlp_decode_flags
 * @param[out] text  receives the text and a terminating NUL
 * @param cap    capacity of @p text in bytes (may be 0 with @p text NULL)
 * @param[out] len_out  receives the text length without the NUL, also on
 *               RLP_E_OVERFLOW (then @p cap must be at least len + 1)
 * @return RLP_OK; RLP_E_OVERFLOW; RLP_E_INVALID_ARG (NULL, or an id outside
 *         the vocabulary, named in the message); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_decode(const rlp_tokenizer *tok, const int32_t *ids, size_t n,
                                 uint32_t flags, char *text, size_t cap, size_t *len_out);

/**
 * The bytes one token decodes to (GPT-2 byte mapping undone, ▁ as a space,
 * `<0xNN>` as the byte, special tokens as their text). They need not be
 * valid UTF-8 on their own and may contain NUL (the `<0x00>` token).
 *
 * @param[out] out_text  receives a borrowed pointer, valid until the
 *                       tokenizer is freed; NUL-terminated
 * @param[out] out_len   receives the length in bytes
 * @param tok  the tokenizer
 * @param id   a token id
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL or id outside the vocabulary).
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_token_text(const char **out_text, size_t *out_len,
                                     const rlp_tokenizer *tok, int32_t id);

/**
 * Number of token ids (one past the largest id, added tokens included).
 * @param[out] out_size  receives the size
 * @param tok            the tokenizer
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_tokenizer_vocab_size(size_t *out_size, const rlp_tokenizer *tok);

/**
 * The id of a special token.
 * @param[out] out_id  receives the id
 * @param tok          the tokenizer
 * @param role         an rlp_token_role
 * @return RLP_OK; RLP_E_NOT_FOUND when the tokenizer has no such token;
 *         RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_tokenizer_special_id(int32_t *out_id, const rlp_tokenizer *tok, int role);

/** One chat message. Both strings are UTF-8, NUL-terminated, borrowed. */
typedef struct rlp_chat_message {
    const char *role;    /**< "system", "user" or "assistant" */
    const char *content; /**< message text; never parsed for special tokens */
} rlp_chat_message;

/**
 * Chooses the chat template: a name ("chatml", "qwen3", "smollm2", "llama3",
 * "llama2") or the Jinja source of a model's template, recognised by its
 * distinctive parts. A tokenizer starts with the template of its
 * tokenizer_config.json (or GGUF), else the one its special tokens imply.
 *
 * @param tok        the tokenizer
 * @param name_or_source  NUL-terminated
 * @return RLP_OK; RLP_E_UNSUPPORTED (unknown template, an excerpt of it in
 *         the message); RLP_E_INVALID_ARG.
 * Not thread-safe against concurrent use of @p tok.
 */
RLP_API int rlp_tokenizer_set_chat_template(rlp_tokenizer *tok, const char *name_or_source);

/**
 * Name of the chat template in use ("chatml", "qwen3", "smollm2", "llama3",
 * "llama2"), or NULL when the tokenizer has none (rlp_error_last() says so).
 * Static string. Thread-safe.
 */
RLP_API const char *rlp_tokenizer_chat_template(const rlp_tokenizer *tok);

/**
 * Renders a conversation with the tokenizer's chat template and encodes it.
 * The template's own scaffolding (e.g. `<|im_start|>user\n`) is encoded with
 * special tokens parsed; message content never is, so a message that spells
 * "<|im_end|>" cannot end its turn. Templates: ChatML (Qwen2), Qwen3's
 * ChatML (reasoning kept in a <think> block only after the last user query;
 * tool definitions not supported), ChatML for SmolLM2 (with its default system prompt "You are a helpful AI assistant
 * named SmolLM, trained by Hugging Face" when the first message is not a
 * system message)), Llama-3 (3.0), Llama-2.
 *
 * @param tok    the tokenizer
 * @param msgs   @p n messages
 * @param n      number of messages (≥ 1)
 * @param add_generation_prompt  non-zero: end with the assistant turn opener
 * @param[out] ids   receives up to @p cap ids
 * @param cap    capacity of @p ids
 * @param[out] n_out  the number of ids, also on RLP_E_OVERFLOW
 * @return RLP_OK; RLP_E_OVERFLOW; RLP_E_INVALID_ARG (NULL, or a role the
 *         template does not accept); RLP_E_UNSUPPORTED (no chat template);
 *         RLP_E_NOMEM.
 * Thread-safe (with itself and encode).
 */
RLP_API int rlp_tokenizer_apply_chat_template(const rlp_tokenizer *tok,
                                              const rlp_chat_message *msgs, size_t n,
                                              int add_generation_prompt, int32_t *ids,
                                              size_t cap, size_t *n_out);

/** Streaming decoder: turns ids arriving one at a time into text deltas. */
typedef struct rlp_detokenizer rlp_detokenizer;

/**
 * Creates a streaming decoder. It holds back the bytes of a character that
 * is split across tokens until the character is complete, so no delta ever
 * contains U+FFFD for such a character, no character is sent twice, and the
 * concatenated deltas plus the final flush equal rlp_tokenizer_decode() of
 * all ids.
 *
 * @param[out] out  receives the decoder; free with rlp_detokenizer_free()
 * @param tok       the tokenizer; must outlive the decoder
 * @param flags     rlp_decode_flags
 * @return RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. Thread-safe.
 */
RLP_API int rlp_detokenizer_create(rlp_detokenizer **out, const rlp_tokenizer *tok,
                                   uint32_t flags);

/**
 * Feeds one id.
 * @param[out] out_text  receives the new text (possibly "", never NULL),
 *                       NUL-terminated, owned by the decoder and valid until
 *                       its next call
 * @param[out] out_len   receives its length
 * @param det  the decoder
 * @param id   the next token id
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL or id outside the vocabulary);
 *         RLP_E_NOMEM. One thread at a time per decoder.
 */
RLP_API int rlp_detokenizer_push(const char **out_text, size_t *out_len, rlp_detokenizer *det,
                                 int32_t id);

/**
 * Ends the stream: returns the held-back bytes, lossily decoded (an
 * incomplete character becomes U+FFFD), and resets the decoder for a new
 * stream. Same out-parameters and errors as rlp_detokenizer_push().
 */
RLP_API int rlp_detokenizer_flush(const char **out_text, size_t *out_len, rlp_detokenizer *det);

/** Frees a streaming decoder. NULL is a no-op. */
RLP_API void rlp_detokenizer_free(rlp_detokenizer *det);

/* Policy: a causal LM with trainable weights and optimizer state           */
/* ------------------------------------------------------------------------ */

/**
 * One token sequence for scoring or training: a prompt followed by a
 * completion, packed with others without padding.
 *
 * The logprob of token t (t ≥ max(n_prompt, 1)) is that of tokens[t] given
 * tokens[0..t): so a sequence contributes n_tokens − max(n_prompt, 1)
 * "scored" tokens, in order, to every per-token array of the policy API.
 */
typedef struct rlp_sequence {
    const int32_t *tokens;  /**< (n_tokens) token ids; borrowed for the call */
    uint32_t n_tokens;      /**< ≥ 1, ≤ the model's context length */
    uint32_t n_prompt;      /**< tokens [0, n_prompt) are conditioning only */
} rlp_sequence;

/** Version of rlp_policy_options understood by this header. */
#define RLP_POLICY_OPTIONS_VERSION 1

/** Options of rlp_policy_load(). */
typedef struct rlp_policy_options {
    uint32_t version;                  /**< RLP_POLICY_OPTIONS_VERSION */
    uint32_t head_chunk_tokens;        /**< rows of logits alive at once in the fused head (0 = 64) */
    int32_t activation_checkpointing;  /**< 1: keep only layer inputs, recompute in backward */
    int32_t trainable;                 /**< 0: frozen (no gradients or optimizer state; for π_ref) */
} rlp_policy_options;

#define RLP_POLICY_OPTIONS_INIT { RLP_POLICY_OPTIONS_VERSION, 0, 0, 1 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_policy_options_init(rlp_policy_options *opts, uint32_t version);

/** Learning-rate schedules (values fixed). */
typedef enum rlp_lr_schedule {
    RLP_LR_CONSTANT = 0,       /**< lr throughout */
    RLP_LR_LINEAR_WARMUP = 1,  /**< lr·min(1, (t+1)/warmup), t = updates applied so far */
    RLP_LR_COSINE = 2          /**< warmup, then lr·(r + (1−r)·½(1 + cos πp)), p = progress after warmup, r = min_lr_ratio */
} rlp_lr_schedule;

/** Version of rlp_optimizer_options understood by this header. */
#define RLP_OPTIMIZER_OPTIONS_VERSION 1

/**
 * AdamW (Loshchilov & Hutter, ICLR 2019, Alg. 2) with bias correction and
 * global-norm clipping. Weight decay is not applied to norms, biases and
 * embeddings (a tied output head counts as the embedding).
 */
typedef struct rlp_optimizer_options {
    uint32_t version;        /**< RLP_OPTIMIZER_OPTIONS_VERSION */
    float lr;                /**< peak learning rate; default 1e-6 */
    float beta1, beta2;      /**< defaults 0.9, 0.999 */
    float eps;               /**< default 1e-8 */
    float weight_decay;      /**< decoupled; default 0.01 */
    float max_grad_norm;     /**< clip the global L2 norm to this; ≤ 0 = off; default 1.0 */
    int32_t schedule;        /**< rlp_lr_schedule; default RLP_LR_CONSTANT */
    int64_t warmup_steps;    /**< default 0 */
    int64_t total_steps;     /**< for the cosine schedule */
    float min_lr_ratio;      /**< cosine floor as a fraction of lr; default 0 */
} rlp_optimizer_options;

#define RLP_OPTIMIZER_OPTIONS_INIT \
    { RLP_OPTIMIZER_OPTIONS_VERSION, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, RLP_LR_CONSTANT, 0, 0, 0.0f }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_optimizer_options_init(rlp_optimizer_options *opts, uint32_t version);

/**
 * What a loss function sees for one micro-batch, and where it writes.
 *
 * Per-token arrays cover the scored tokens of the micro-batch's sequences
 * in order (see rlp_sequence); sequence i of the micro-batch owns entries
 * [token_start[i], token_start[i+1]) and is sequence seq_index[i] of the
 * whole step. The step totals let a loss normalise over the whole step, so
 * that micro-batching does not change the gradient (token-mean divides by
 * step_n_tokens, not by this micro-batch's count).
 */
typedef struct rlp_loss_context {
    uint32_t version;              /**< 1 */
    size_t n_seqs;                 /**< sequences in this micro-batch */
    const size_t *seq_index;       /**< (n_seqs) index of each within the step */
    const size_t *token_start;     /**< (n_seqs + 1) offsets into the per-token arrays */
    size_t n_tokens;               /**< scored tokens in this micro-batch */
    const float *logprobs;         /**< (n_tokens) log π_θ(token), temperature-scaled */
    const float *entropy;          /**< (n_tokens) entropy of π_θ at that position (nats) */
    size_t step_n_seqs;            /**< sequences in the whole step */
    size_t step_n_tokens;          /**< scored tokens in the whole step */
    float *dlogprobs;              /**< out (n_tokens): ∂L/∂logprobs, zeroed on entry */
    float *dentropy;               /**< out (n_tokens): ∂L/∂entropy, zeroed on entry */
    double loss;                   /**< out: this micro-batch's contribution to the step loss */
} rlp_loss_context;

/**
 * A loss over per-token logprobs: fills ctx->dlogprobs (and optionally
 * ctx->dentropy) and ctx->loss. Called on the thread that runs the train
 * step, once per micro-batch. A non-zero return aborts the step
 * (RLP_E_CALLBACK) with the weights untouched.
 */
typedef int (*rlp_loss_fn)(rlp_loss_context *ctx, void *payload);

/**
 * Built-in supervised loss: token-mean negative log-likelihood over the
 * whole step, L = −Σ logp / step_n_tokens. @p payload is ignored.
 * Usable as an rlp_loss_fn.
 */
RLP_API int rlp_loss_nll(rlp_loss_context *ctx, void *payload);

/** Version of rlp_train_options understood by this header. */
#define RLP_TRAIN_OPTIONS_VERSION 1

/** Options of one rlp_policy_train_step(). */
typedef struct rlp_train_options {
    uint32_t version;              /**< RLP_TRAIN_OPTIONS_VERSION */
    float temperature;             /**< logprobs under softmax(logits / T); must match the rollout's T; default 1 */
    uint32_t micro_batch_tokens;   /**< pack at most this many tokens per forward/backward (0 = all at once);
                                        a longer single sequence runs alone */
} rlp_train_options;

#define RLP_TRAIN_OPTIONS_INIT { RLP_TRAIN_OPTIONS_VERSION, 1.0f, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_train_options_init(rlp_train_options *opts, uint32_t version);

/** Statistics of one train step. */
typedef struct rlp_train_stats {
    uint32_t version;              /**< set by the library (1) */
    double loss;                   /**< Σ of the loss function's contributions */
    double grad_norm;              /**< global L2 norm before clipping */
    float lr;                      /**< learning rate used (0 when skipped) */
    int32_t skipped;               /**< 1 if the gradient was not finite and no update was applied */
    uint64_t policy_version;       /**< version after the step */
    uint64_t n_seqs, n_tokens;     /**< sequences and scored tokens */
    uint32_t n_micro_batches;
    double mean_entropy;           /**< mean entropy over scored tokens (nats) */
    double seconds;                /**< wall time of the step */
} rlp_train_stats;

/**
 * Loads a policy: a GGUF file, a Hugging Face folder (config.json +
 * *.safetensors [+ tokenizer.json]) or a llama2.c checkpoint (.bin).
 *
 * @param[out] out   new policy; free with rlp_policy_free()
 * @param ctx        context whose backend the policy runs on; must outlive it
 * @param path       file or folder
 * @param opts       options or NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_FORMAT (names the file
 *         and field/tensor); RLP_E_UNSUPPORTED (architecture, dtype);
 *         RLP_E_NOMEM.
 */
RLP_API int rlp_policy_load(rlp_policy **out, rlp_context *ctx, const char *path,
                            const rlp_policy_options *opts);

/** Storage dtypes for saved weights (values fixed). */
typedef enum rlp_dtype {
    RLP_DTYPE_F32 = 0,
    RLP_DTYPE_F16 = 1,
    RLP_DTYPE_BF16 = 2
} rlp_dtype;

/**
 * Saves the policy's weights as a Hugging Face folder: config.json,
 * model.safetensors (in @p dtype; a tied head is not stored) and
 * generation_config.json, loadable by transformers, vLLM and SGLang, plus
 * the tokenizer as tokenizer.json and tokenizer_config.json: copied when it
 * came as such files, written from GGUF metadata when it came from a GGUF
 * (byte-level BPE vocabularies; a SentencePiece GGUF vocabulary gives
 * RLP_E_UNSUPPORTED after the weights are written). Each file is written to
 * a temporary name and renamed.
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO (names the file).
 */
RLP_API int rlp_policy_save(const rlp_policy *policy, const char *dir, int dtype);

/**
 * Saves the optimizer state (AdamW moments, step count, skipped count) and
 * the policy version to one safetensors file, atomically, for resume.
 */
RLP_API int rlp_policy_save_optimizer(const rlp_policy *policy, const char *path);

/**
 * Restores what rlp_policy_save_optimizer() wrote into a trainable policy
 * of the same architecture (RLP_E_FORMAT naming the tensor on a mismatch);
 * the version is restored too. The weights are not touched.
 */
RLP_API int rlp_policy_load_optimizer(rlp_policy *policy, const char *path);

/** Version of rlp_model_info filled by this library. */
#define RLP_MODEL_INFO_VERSION 1

/** What a model file holds (rlp_model_inspect()). */
typedef struct rlp_model_info {
    uint32_t version;            /**< set by the library */
    char architecture[32];       /**< "llama", "qwen2", "mistral" */
    char format[16];             /**< "gguf", "hf", "llama2c" */
    int32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;
    int32_t context_length;
    float rope_theta, rms_eps;
    int32_t rope_scaling;        /**< 0 none, 1 llama3, 2 linear */
    int32_t tie_embeddings;      /**< 1: the output head is the token embedding */
    int32_t attention_bias;      /**< 1: q/k/v projections have biases */
    uint64_t n_params;           /**< parameters, a tied head counted once */
    uint64_t n_tensors;          /**< tensors stored in the file */
    char dtypes[128];            /**< stored dtypes with tensor counts, e.g. "Q4_1:210 F32:61 Q8_0:1" */
} rlp_model_info;

/**
 * Reads a model file or folder (as rlp_policy_load() would) and describes
 * it. Thread-safe (no shared state).
 * @return RLP_OK or the loader's error (RLP_E_IO, RLP_E_FORMAT, RLP_E_UNSUPPORTED).
 */
RLP_API int rlp_model_inspect(rlp_model_info *out, const char *path);

/** Frees a policy (and its tokenizer). NULL is a no-op. */
RLP_API void rlp_policy_free(rlp_policy *policy);

/**
 * A copy of the policy's current weights as a new policy (same context).
 * With @p trainable = 0 the copy is frozen: no gradients or optimizer state
 * (a reference policy π_ref, or a snapshot). The copy starts at the same
 * version, with a fresh optimizer.
 */
RLP_API int rlp_policy_clone(rlp_policy **out, const rlp_policy *policy, int trainable);

/**
 * The tokenizer that came with the model (GGUF metadata or the HF folder's
 * tokenizer.json), borrowed: valid until the policy is freed. NULL (with
 * RLP_E_NOT_FOUND in rlp_error_last()) when the model file has none, as
 * for llama2.c checkpoints.
 */
RLP_API const rlp_tokenizer *rlp_policy_tokenizer(const rlp_policy *policy);

/** Optimizer steps applied so far (the policy version of the RL loop). */
RLP_API int rlp_policy_version(uint64_t *out_version, const rlp_policy *policy);

/** Number of parameters (a tied head counted once). */
RLP_API int rlp_policy_n_params(uint64_t *out_count, const rlp_policy *policy);

/** Memory held by a policy, in bytes. */
typedef struct rlp_memory_stats {
    uint32_t version;          /**< set by the library (1) */
    uint64_t weights;          /**< parameters */
    uint64_t gradients;        /**< gradient buffer (0 when frozen) */
    uint64_t optimizer;        /**< AdamW moments (0 before the first step) */
    uint64_t activations;      /**< activation buffers currently held */
} rlp_memory_stats;

/** Fills @p out with the policy's memory use. */
RLP_API int rlp_policy_memory(rlp_memory_stats *out, const rlp_policy *policy);

/** Sets the optimizer configuration (takes effect at the next step; the
 *  moments are kept). */
RLP_API int rlp_policy_set_optimizer(rlp_policy *policy, const rlp_optimizer_options *opts);

/**
 * Per-token logprobs (and entropies) of the scored tokens of @p seqs under
 * softmax(logits / temperature). Peak memory above the weights does not
 * grow with tokens × vocabulary (chunked fused head).
 *
 * @param[out] logprobs  (cap) floats: the scored tokens of all sequences, in order
 * @param[out] entropy   (cap) floats, or NULL
 * @param cap            capacity of the arrays; RLP_E_OVERFLOW if too small
 * @param[out] n_out     scored tokens written (may be NULL)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULLs, token ids outside the vocabulary,
 *         a sequence longer than the context, temperature ≤ 0);
 *         RLP_E_OVERFLOW; RLP_E_NOMEM.
 * Not thread-safe on one policy.
 */
RLP_API int rlp_policy_logprobs(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs,
                                float temperature, float *logprobs, float *entropy, size_t cap,
                                size_t *n_out);

/**
 * One optimizer step: forward over @p seqs in micro-batches, the loss,
 * backward (gradients accumulate across micro-batches), global-norm
 * clipping, AdamW, version + 1. A non-finite gradient skips the update
 * (stats->skipped = 1, weights untouched, version unchanged).
 *
 * @param policy   a trainable policy
 * @param seqs     sequences; at least one must have a scored token
 * @param loss     e.g. rlp_loss_nll, or the RL losses
 * @param payload  passed to @p loss
 * @param opts     options or NULL
 * @param[out] stats  step statistics (may be NULL)
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_STATE (frozen policy);
 *         RLP_E_CALLBACK (the loss failed; nothing applied); RLP_E_NOMEM.
 */
RLP_API int rlp_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs,
                                  rlp_loss_fn loss, void *payload, const rlp_train_options *opts,
                                  rlp_train_stats *stats);

/* ------------------------------------------------------------------------ */
/* Trajectories: what rollout, reward, replay buffer and train step share   */
/* ------------------------------------------------------------------------ */

/** Why a completion ended (values fixed). */
typedef enum rlp_finish_reason {
    RLP_FINISH_NONE = 0,    /**< still running (never in a returned batch) */
    RLP_FINISH_STOP = 1,    /**< a stop string, a stop token id or EOS */
    RLP_FINISH_LENGTH = 2,  /**< max_new_tokens or the KV capacity was reached */
    RLP_FINISH_ABORT = 3,   /**< aborted: rlp_rollout_engine_abort(), a stream callback, or a weight
                                 update in RLP_INTERRUPT_ABORT mode; the tokens so far are kept */
    RLP_FINISH_ERROR = 4    /**< a remote request failed; see rlp_trajectory::error */
} rlp_finish_reason;

/** Version of rlp_trajectory understood by this header. */
#define RLP_TRAJECTORY_VERSION 1

/**
 * One prompt and one sampled completion with everything the losses need,
 * as a view: rlp_batch_get() fills it with pointers borrowed from the batch
 * (valid until the batch is changed or freed); rlp_batch_append() copies
 * from it. Set @ref version to RLP_TRAJECTORY_VERSION before either call.
 *
 * Per-token arrays have n_completion_tokens entries: the i-th completion
 * token was drawn from the rollout policy at version token_versions[i] with
 * behaviour logprob logprobs[i] (see rlp_logprobs_mode for which
 * distribution). After a stop string the ids and logprobs of every sampled
 * token are kept (they are training data) while completion_text ends at the
 * stop.
 */
typedef struct rlp_trajectory {
    uint32_t version;                  /**< RLP_TRAJECTORY_VERSION, set by the caller */
    uint64_t group_id;                 /**< samples of one prompt share it (GRPO group) */
    const int32_t *prompt_tokens;      /**< (n_prompt_tokens) */
    size_t n_prompt_tokens;
    const int32_t *completion_tokens;  /**< (n_completion_tokens) */
    size_t n_completion_tokens;
    const float *logprobs;             /**< (n_completion_tokens) behaviour logprobs (nats) */
    const uint64_t *token_versions;    /**< (n_completion_tokens) policy version per token; NULL on append = all policy_version */
    const char *prompt_text;           /**< UTF-8 or NULL */
    const char *completion_text;       /**< UTF-8, ends at a matched stop string (or includes it if asked) */
    uint64_t policy_version;           /**< version of the weights that started the rollout */
    int32_t finish_reason;             /**< rlp_finish_reason */
    int32_t stop_index;                /**< index of the matched stop string, or −1 */
    float temperature;                 /**< the T the tokens were sampled at (the trainer must use the same) */
    float reward;                      /**< scalar reward; NaN until scored */
    int32_t valid;                     /**< 0: marked invalid (reward failure, remote error); see error */
    const char *error;                 /**< why invalid, or NULL */
    const char *metadata_json;         /**< JSON object carried from the prompt (by convention its "reference"
                                            field is the reference answer rewards compare with), or NULL */
    uint32_t sample_index;             /**< 0 … n−1 within its group */
    const float *token_rewards;        /**< (n_completion_tokens) per-token (process) rewards, or NULL */
} rlp_trajectory;

/** Creates an empty batch. RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. */
RLP_API int rlp_batch_create(rlp_batch **out);

/** Frees a batch. NULL is a no-op. */
RLP_API void rlp_batch_free(rlp_batch *batch);

/** Number of trajectories. */
RLP_API int rlp_batch_size(size_t *out_count, const rlp_batch *batch);

/**
 * Fills @p out with a view of trajectory @p index (pointers borrowed; see
 * rlp_trajectory). @p out->version must be set by the caller.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, bad version, index out of range).
 */
RLP_API int rlp_batch_get(rlp_trajectory *out, const rlp_batch *batch, size_t index);

/**
 * Appends a copy of @p traj (arrays and strings are copied). Checks that
 * the per-token arrays are present when n_completion_tokens > 0, that
 * logprobs are finite and ≤ 0, and that finish_reason is known.
 * @return RLP_OK; RLP_E_INVALID_ARG (naming the field); RLP_E_NOMEM.
 */
RLP_API int rlp_batch_append(rlp_batch *batch, const rlp_trajectory *traj);

/** Moves every trajectory of @p src to the end of @p dst (src becomes empty). */
RLP_API int rlp_batch_extend(rlp_batch *dst, rlp_batch *src);

/** Sets the scalar reward of trajectory @p index (finite, else RLP_E_INVALID_ARG). */
RLP_API int rlp_batch_set_reward(rlp_batch *batch, size_t index, float reward);

/**
 * Sets per-token (process) rewards of trajectory @p index: @p n must equal
 * its completion length; values are copied and must be finite. NULL with
 * n = 0 clears them.
 */
RLP_API int rlp_batch_set_token_rewards(rlp_batch *batch, size_t index, const float *rewards, size_t n);

/** Marks trajectory @p index invalid with a reason (copied); it keeps its tokens. */
RLP_API int rlp_batch_set_invalid(rlp_batch *batch, size_t index, const char *reason);

/* ------------------------------------------------------------------------ */
/* Rollout engine: batched sampling with behaviour logprobs and versions     */
/* ------------------------------------------------------------------------ */

/**
 * Which distribution a behaviour logprob is taken under (values fixed).
 * With no truncation (top_k = 0, top_p = 1, min_p = 0) SAMPLING and
 * TEMPERED are the same number: log_softmax(logits / T)[token], which is
 * what rlp_policy_logprobs() recomputes at the same T (public-bugs case #5).
 * With truncation, SAMPLING is exact for importance weights (it is the
 * distribution the token was drawn from, renormalised over the kept set)
 * and differs from the trainer's recomputation by log(kept mass)
 * (TRL #7269); TEMPERED matches the trainer instead.
 */
typedef enum rlp_logprobs_mode {
    RLP_LOGPROBS_SAMPLING = 0,  /**< log of the truncated, renormalised, tempered distribution (default) */
    RLP_LOGPROBS_TEMPERED = 1,  /**< log_softmax(logits / T) over the whole vocabulary */
    RLP_LOGPROBS_RAW = 2        /**< log_softmax(logits): T = 1, no truncation (vLLM's default) */
} rlp_logprobs_mode;

/** Version of rlp_sampling_options understood by this header. */
#define RLP_SAMPLING_OPTIONS_VERSION 1

/**
 * How completions are sampled. Truncations apply in Hugging Face's order:
 * temperature, top-k, top-p, min-p. Temperature 0 is greedy decoding (the
 * lowest id wins ties; the logprob is then that of log_softmax(logits)).
 */
typedef struct rlp_sampling_options {
    uint32_t version;                /**< RLP_SAMPLING_OPTIONS_VERSION */
    uint32_t n;                      /**< samples per prompt (the group size); default 1 */
    float temperature;               /**< ≥ 0; default 1 */
    int32_t top_k;                   /**< 0 = off */
    float top_p;                     /**< (0, 1]; 1 = off */
    float min_p;                     /**< [0, 1]; 0 = off */
    uint32_t max_new_tokens;         /**< default 256 */
    uint64_t seed;                   /**< sample j of a prompt draws from the random stream (seed, g, j),
                                          g = the prompt's group_id, or its index in the call when that is 0:
                                          the same tokens whatever the thread count and the rest of the batch */
    const char *const *stop;         /**< (n_stop) stop strings matched on the decoded text, across token boundaries */
    size_t n_stop;
    const int32_t *stop_token_ids;   /**< (n_stop_token_ids) besides EOS */
    size_t n_stop_token_ids;
    int32_t include_stop_str;        /**< 1: completion_text keeps the matched stop string */
    int32_t ignore_eos;              /**< 1: EOS does not stop generation */
    int32_t logprobs_mode;           /**< rlp_logprobs_mode */
} rlp_sampling_options;

#define RLP_SAMPLING_OPTIONS_INIT \
    { RLP_SAMPLING_OPTIONS_VERSION, 1, 1.0f, 0, 1.0f, 0.0f, 256, 0, NULL, 0, NULL, 0, 0, 0, RLP_LOGPROBS_SAMPLING }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_sampling_options_init(rlp_sampling_options *opts, uint32_t version);

/** One prompt of a generate call. */
typedef struct rlp_prompt {
    const int32_t *tokens;           /**< (n_tokens) prompt ids, or NULL to encode @ref text */
    size_t n_tokens;
    const char *text;                /**< used when tokens is NULL: encoded as plain text (special-token
                                          spellings stay text; apply a chat template to get control tokens) */
    uint64_t group_id;               /**< 0 = the engine numbers groups itself */
    const char *metadata_json;       /**< copied into every trajectory of the group, or NULL */
    const rlp_sampling_options *sampling; /**< this prompt's own options (n, temperature, stops, …), or NULL
                                               for the call's: requests with different options still decode
                                               together in one batch */
} rlp_prompt;

/** What happens to sequences in flight when new weights arrive (values fixed). */
typedef enum rlp_interrupt_mode {
    RLP_INTERRUPT_RECOMPUTE = 0,  /**< AReaL: drop their KV cache, recompute it with the new weights and go on;
                                       token_versions show the switch */
    RLP_INTERRUPT_ABORT = 1,      /**< end them with RLP_FINISH_ABORT and the tokens so far (the host resubmits) */
    RLP_INTERRUPT_DEFER = 2       /**< the update waits until the running generate call has finished */
} rlp_interrupt_mode;

/** Version of rlp_rollout_options understood by this header. */
#define RLP_ROLLOUT_OPTIONS_VERSION 1

/** Options of a local rollout engine. */
typedef struct rlp_rollout_options {
    uint32_t version;         /**< RLP_ROLLOUT_OPTIONS_VERSION */
    uint32_t max_batch;       /**< sequences decoded at once (KV-cache slots); default 32 */
    uint32_t max_seq_len;     /**< KV capacity per slot, prompt + completion; 0 = min(context, 2048) */
    int32_t interrupt_mode;   /**< rlp_interrupt_mode; default RLP_INTERRUPT_RECOMPUTE */
    int32_t share_weights;    /**< 1: generate with the policy's own weights (co-located; no copy; the
                                   policy must not be trained while a generate call runs);
                                   0: keep a frozen copy, refreshed by rlp_rollout_engine_update_weights() */
} rlp_rollout_options;

#define RLP_ROLLOUT_OPTIONS_INIT { RLP_ROLLOUT_OPTIONS_VERSION, 32, 0, RLP_INTERRUPT_RECOMPUTE, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_rollout_options_init(rlp_rollout_options *opts, uint32_t version);

/**
 * Creates a local engine on the policy's context: prefill as batched GEMMs
 * (one prefill shared by the n samples of a prompt), decode of up to
 * max_batch sequences at once against a KV cache, continuous batching (a
 * finished slot is refilled from the queue at once).
 *
 * @param[out] out   the engine; free with rlp_rollout_engine_free()
 * @param policy     the policy; borrowed when share_weights = 1 (it must
 *                   outlive the engine), copied otherwise; it must have a
 *                   tokenizer for text prompts and stop strings
 * @param opts       options or NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM (the KV cache is
 *         n_layers·2·max_batch·max_seq_len·n_kv_heads·head_dim floats).
 */
RLP_API int rlp_rollout_engine_create(rlp_rollout_engine **out, rlp_policy *policy,
                                      const rlp_rollout_options *opts);

/** Version of rlp_remote_options understood by this header. */
#define RLP_REMOTE_OPTIONS_VERSION 1

/**
 * Options of a remote engine: OpenAI-compatible `POST {url}/v1/completions`
 * servers. What a server must do: accept the prompt as an array of token
 * ids, honour `n`, `logprobs: 1` and `max_tokens`, and return the sampled
 * token ids, either as `choices[i].token_ids`, as `logprobs.tokens` entries
 * "token_id:N" (vLLM with `return_tokens_as_token_ids`, which the request
 * sets) or as `logprobs.content[].id` (llama.cpp server). `rlpost serve`
 * does all three.
 */
typedef struct rlp_remote_options {
    uint32_t version;              /**< RLP_REMOTE_OPTIONS_VERSION */
    const char *const *urls;       /**< (n_urls) base URLs, e.g. "http://10.0.0.5:8000"; round-robin */
    size_t n_urls;
    const char *model;             /**< "model" field of requests, or NULL */
    const char *api_key;           /**< bearer token, or NULL */
    uint32_t timeout_ms;           /**< per request; 0 = 600000 */
    uint32_t max_retries;          /**< on connection errors, timeouts and 5xx; default 3 */
    uint32_t max_in_flight;        /**< concurrent requests (backpressure); 0 = 64 */
    uint64_t max_response_bytes;   /**< 0 = 64 MiB */
} rlp_remote_options;

#define RLP_REMOTE_OPTIONS_INIT { RLP_REMOTE_OPTIONS_VERSION, NULL, 0, NULL, NULL, 0, 3, 0, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_remote_options_init(rlp_remote_options *opts, uint32_t version);

/**
 * Creates a remote engine (needs a build with libcurl; RLP_E_UNSUPPORTED
 * otherwise). @p tok (borrowed; must outlive the engine) encodes text
 * prompts and decodes completions; the servers must use the same
 * vocabulary. Its version is what rlp_rollout_engine_set_version() last
 * said, or the `weight_version` a server reports.
 */
RLP_API int rlp_rollout_engine_create_remote(rlp_rollout_engine **out, const rlp_tokenizer *tok,
                                             const rlp_remote_options *opts);

/** Frees an engine. NULL is a no-op. Not while a generate call runs. */
RLP_API void rlp_rollout_engine_free(rlp_rollout_engine *engine);

/** One event of a streamed generation (see rlp_stream_fn). */
typedef struct rlp_stream_event {
    uint32_t version;          /**< 1 */
    size_t prompt_index;       /**< index into the prompts of the call */
    uint32_t sample_index;     /**< 0 … n−1 */
    int32_t token;             /**< the new token id, or −1 on a final event without a token */
    float logprob;             /**< its behaviour logprob */
    uint64_t policy_version;   /**< version of the weights that produced it */
    const char *text;          /**< text now safe to show (whole characters, no held-back stop prefix); borrowed */
    size_t text_len;
    int32_t finish_reason;     /**< RLP_FINISH_NONE while running; set on the sequence's last event */
} rlp_stream_event;

/** Called on the generating thread for every token; return non-zero to
 *  abort that sequence (RLP_FINISH_ABORT). */
typedef int (*rlp_stream_fn)(const rlp_stream_event *event, void *payload);

/**
 * Generates n completions for each prompt (n of the prompt's own sampling
 * options, else of @p sampling).
 *
 * @param[out] out      new batch: prompt-major, sample-minor order
 *                      (with equal n: trajectory i·n + j is sample j of prompt i)
 * @param engine        the engine
 * @param prompts       (n_prompts) prompts
 * @param n_prompts     ≥ 1
 * @param sampling      options or NULL (defaults)
 * @param on_token      stream callback or NULL
 * @param payload       passed to @p on_token
 * @return RLP_OK (remote requests that failed come back as trajectories
 *         with RLP_FINISH_ERROR and valid = 0); RLP_E_INVALID_ARG (bad
 *         options, token ids outside the vocabulary, a prompt longer than
 *         max_seq_len − 1); RLP_E_NOMEM; RLP_E_BACKEND.
 * One generate call at a time per engine; rlp_rollout_engine_update_weights(),
 * rlp_rollout_engine_load_weights() and rlp_rollout_engine_abort() may be
 * called from other threads while it runs.
 */
RLP_API int rlp_rollout_generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *prompts,
                                 size_t n_prompts, const rlp_sampling_options *sampling,
                                 rlp_stream_fn on_token, void *payload);

/**
 * Copies @p policy's weights into a local engine (same architecture) and
 * takes its version. Thread-safe with a running generate call: the copy
 * happens between two decode steps, and sequences in flight are handled by
 * the engine's interrupt mode (AReaL §4: interruptible generation).
 * @return RLP_OK; RLP_E_INVALID_ARG (architecture mismatch); RLP_E_STATE
 *         (remote or share_weights engine).
 */
RLP_API int rlp_rollout_engine_update_weights(rlp_rollout_engine *engine, const rlp_policy *policy);

/**
 * Loads weights saved by rlp_policy_save() (a folder) into a local engine
 * and sets its version to @p version; the SGLang-style
 * `/update_weights_from_disk` of `rlpost serve`. Same threading as
 * rlp_rollout_engine_update_weights(). The engine keeps its weights and
 * version on any failure.
 * @return RLP_OK; RLP_E_FORMAT (a malformed file, or a weight that is NaN
 *         or ±Inf: the message names the tensor); RLP_E_NOT_FOUND /
 *         RLP_E_IO (no readable folder); RLP_E_INVALID_ARG (another
 *         architecture); RLP_E_STATE (remote or share_weights engine).
 */
RLP_API int rlp_rollout_engine_load_weights(rlp_rollout_engine *engine, const char *path, uint64_t version);

/** Version of the weights the engine generates with. Thread-safe. */
RLP_API int rlp_rollout_engine_version(uint64_t *out_version, const rlp_rollout_engine *engine);

/** Tells a remote engine which version its servers now hold. Thread-safe. */
RLP_API int rlp_rollout_engine_set_version(rlp_rollout_engine *engine, uint64_t version);

/** Ends every sequence in flight with RLP_FINISH_ABORT (tokens so far
 *  kept). Thread-safe; returns at once. */
RLP_API int rlp_rollout_engine_abort(rlp_rollout_engine *engine);

/** The tokenizer the engine decodes with (borrowed), or NULL. */
RLP_API const rlp_tokenizer *rlp_rollout_engine_tokenizer(const rlp_rollout_engine *engine);

/** Counters of an engine since it was created. */
typedef struct rlp_rollout_stats {
    uint32_t version;               /**< set by the library (1) */
    uint64_t prompts, completions;  /**< prompts prefilled (once per group), completions finished */
    uint64_t prefill_tokens;        /**< tokens run through prefill (including KV recomputation) */
    uint64_t decode_tokens;         /**< tokens sampled */
    uint64_t decode_steps;          /**< batched decode steps */
    uint64_t interrupts;            /**< sequences interrupted by a weight update */
    uint64_t remote_errors;         /**< remote requests that failed after their retries */
    double prefill_seconds, decode_seconds;
} rlp_rollout_stats;

/** Fills @p out. Thread-safe. */
RLP_API int rlp_rollout_engine_stats(rlp_rollout_stats *out, const rlp_rollout_engine *engine);

/** Train/inference mismatch of a batch (see rlp_batch_logprob_mismatch()). */
typedef struct rlp_mismatch_stats {
    uint32_t version;        /**< set by the library (1) */
    uint64_t n_tokens;       /**< completion tokens compared */
    double mean_abs;         /**< mean |logp_behaviour − logp_policy| (nats) */
    double max_abs;          /**< max of the same */
    double mean_ratio_dev;   /**< mean |exp(logp_policy − logp_behaviour) − 1| */
} rlp_mismatch_stats;

/**
 * Recomputes the completion tokens' logprobs with @p policy at each
 * trajectory's temperature and compares them with the recorded behaviour
 * logprobs: the train/inference mismatch verl and TRL users chase.
 * Trajectories sampled greedily (T = 0) are compared at T = 1.
 */
RLP_API int rlp_batch_logprob_mismatch(rlp_mismatch_stats *out, const rlp_batch *batch,
                                       const rlp_policy *policy);

/* ------------------------------------------------------------------------ */
/* RL algorithms: advantages, policy losses, KL, aggregation, the RL step    */
/* ------------------------------------------------------------------------ */

/** Advantage estimators (values fixed). G = samples of a group, r = their rewards. */
typedef enum rlp_advantage {
    RLP_ADV_GRPO = 0,           /**< (rᵢ − mean r)/(std r + ε) (Shao et al. 2024, DeepSeekMath §4.1.2); std
                                     is the unbiased sample std, as torch.std */
    RLP_ADV_DR_GRPO = 1,        /**< rᵢ − mean r (Liu et al. 2025, "Understanding R1-Zero-Like Training") */
    RLP_ADV_RLOO = 2,           /**< rᵢ − Σ_{j≠i} r_j/(G−1) (Ahmadian et al. 2024) */
    RLP_ADV_REINFORCE_PP = 3,   /**< REINFORCE++ (Hu 2025): per-token reward −β·KLₜ (k1 against π_ref, if a
                                     reference is given and kl_in_reward) plus r at the last token,
                                     return-to-go with discount γ, normalised over the whole batch */
    RLP_ADV_REINFORCE = 4       /**< rᵢ for every token: no baseline, no normalisation */
} rlp_advantage;

/** Policy losses (values fixed). ρ = exp(log π_θ − log π_old); Â the advantage. */
typedef enum rlp_policy_loss {
    RLP_LOSS_PPO_CLIP = 0,       /**< −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) (Schulman et al. 2017; clip-higher:
                                      DAPO, Yu et al. 2025), optional dual clip for Â < 0: min(that, −cÂ)
                                      (Ye et al. 2020); π_old = π_prox (recomputed at the start of the
                                      step); with tis_cap > 0 multiplied by min(π_old/π_behav, C) (truncated
                                      importance sampling against the rollout's logprobs) */
    RLP_LOSS_DECOUPLED_PPO = 1,  /**< AReaL (Fu et al. 2025, eq. 5): −w·min(ρÂ, clip(ρ)Â) with ρ against
                                      π_prox and w = π_prox/π_behav, truncated at behav_cap (or masked
                                      above it); π_behav = π_prox gives PPO-clip exactly */
    RLP_LOSS_GSPO = 2            /**< GSPO (Zheng et al. 2025): sequence ratio sᵢ = exp(mean_t(log π_θ −
                                      log π_old)), −min(sᵢÂᵢ, clip(sᵢ)Âᵢ) for every token of sequence i */
} rlp_policy_loss;

/** KL estimators of KL(π_θ‖π_ref) per token, x = log π_θ − log π_ref (values fixed; Schulman 2020). */
typedef enum rlp_kl_estimator {
    RLP_KL_K1 = 1,  /**< x */
    RLP_KL_K2 = 2,  /**< ½x² */
    RLP_KL_K3 = 3   /**< exp(−x) + x − 1 */
} rlp_kl_estimator;

/** How per-token losses ℓ combine into the step loss (verl's names; values fixed). The normaliser
 *  is taken over the whole step, so micro-batching never changes the gradient (public-bugs case #9). */
typedef enum rlp_loss_agg {
    RLP_AGG_TOKEN_MEAN = 0,              /**< Σ ℓ / Σ tokens */
    RLP_AGG_SEQ_MEAN_TOKEN_SUM = 1,      /**< (1/S) Σᵢ Σₜ ℓ */
    RLP_AGG_SEQ_MEAN_TOKEN_MEAN = 2,     /**< (1/S) Σᵢ (1/|yᵢ|) Σₜ ℓ */
    RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 3  /**< Σᵢ Σₜ ℓ / (S·C), C = agg_norm_constant (Dr.GRPO) */
} rlp_loss_agg;

/** Version of rlp_rl_options understood by this header. */
#define RLP_RL_OPTIONS_VERSION 1

/** Everything one RL step is made of. */
typedef struct rlp_rl_options {
    uint32_t version;            /**< RLP_RL_OPTIONS_VERSION */
    int32_t advantage;           /**< rlp_advantage; default GRPO */
    float adv_eps;               /**< ε of GRPO's denominator; default 1e-6 */
    int32_t adv_batch_norm;      /**< 1: GRPO/RLOO/Dr.GRPO advantages are further normalised over the batch */
    float gamma;                 /**< REINFORCE++ discount; default 1 */
    int32_t filter_equal_groups; /**< 1: drop groups whose rewards are all equal (DAPO dynamic sampling) */
    int32_t policy_loss;         /**< rlp_policy_loss; default PPO_CLIP */
    float clip_low, clip_high;   /**< ε_low, ε_high; default 0.2, 0.2 */
    float dual_clip;             /**< c > 1 for the dual clip; 0 = off */
    float tis_cap;               /**< PPO_CLIP: truncated-IS cap C on π_old/π_behav; 0 = off */
    float behav_cap;             /**< DECOUPLED_PPO: cap on w = π_prox/π_behav; 0 = no cap */
    int32_t behav_mask;          /**< DECOUPLED_PPO: 1 = tokens with w > behav_cap get weight 0 instead of the cap */
    int32_t kl_estimator;        /**< rlp_kl_estimator, or 0 = no KL */
    float kl_coef;               /**< β */
    int32_t kl_in_reward;        /**< 1: KL goes into the REINFORCE++ per-token reward; 0: into the loss */
    float entropy_coef;          /**< loss −= coef·entropy (an entropy bonus) */
    int32_t loss_agg;            /**< rlp_loss_agg; default TOKEN_MEAN */
    float agg_norm_constant;     /**< C of SEQ_MEAN_TOKEN_SUM_NORM; 0 = the longest completion of the step */
    uint32_t overlong_max;       /**< DAPO soft overlong penalty L_max (tokens); 0 = off */
    uint32_t overlong_cache;     /**< DAPO L_cache: penalty 0 up to L_max − L_cache, linear to −1 at L_max, −1 beyond */
    uint32_t ppo_epochs;         /**< passes over the batch; default 1 */
    uint32_t mini_batches;       /**< optimizer steps per pass (groups split evenly); default 1 */
    uint32_t micro_batch_tokens; /**< tokens per forward/backward; 0 = a mini-batch at once */
    float temperature;           /**< logprobs at this T; 0 = the trajectories' own (must agree), greedy → 1 */
} rlp_rl_options;

#define RLP_RL_OPTIONS_INIT                                                                          \
    { RLP_RL_OPTIONS_VERSION, RLP_ADV_GRPO, 1e-6f, 0, 1.0f, 0, RLP_LOSS_PPO_CLIP, 0.2f, 0.2f, 0.0f, \
      0.0f, 0.0f, 0, 0, 0.0f, 0, 0.0f, RLP_AGG_TOKEN_MEAN, 0.0f, 0, 0, 1, 1, 0, 0.0f }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_rl_options_init(rlp_rl_options *opts, uint32_t version);

/** Statistics of one RL step (over all its optimizer steps; means over scored tokens unless said). */
typedef struct rlp_rl_stats {
    uint32_t version;               /**< set by the library (1) */
    double loss, pg_loss, kl, entropy;
    double clip_frac_low, clip_frac_high;   /**< fraction of tokens whose ratio was clipped below / above */
    double ratio_mean, ratio_max;
    double behav_weight_mean, behav_weight_max;
    double grad_norm;               /**< before clipping, of the last optimizer step */
    double adv_mean, adv_std;       /**< over scored tokens */
    double reward_mean;             /**< over the trajectories used */
    double staleness_mean, staleness_max;   /**< policy version − trajectory version */
    uint64_t n_seqs, n_tokens;      /**< used */
    uint64_t n_groups, filtered_groups, zero_std_groups, invalid_seqs;
    uint32_t optimizer_steps, skipped_steps;
    uint64_t policy_version;        /**< after the step */
    double seconds;
} rlp_rl_stats;

/**
 * One RL step on a scored batch: drops invalid trajectories (counted),
 * computes advantages per group (grouped by group_id), π_prox (and π_ref
 * when @p ref and a KL are given) with the current weights, then runs
 * ppo_epochs × mini_batches optimizer steps of the chosen loss, each with
 * gradient accumulation over micro-batches, clipping and AdamW; the
 * version grows by the steps applied.
 *
 * @param policy  a trainable policy
 * @param batch   scored trajectories (rewards set, e.g. by rlp_reward_fn_score)
 * @param ref     frozen reference policy for the KL, or NULL
 * @param opts    options or NULL
 * @param[out] stats  may be NULL
 * @return RLP_OK; RLP_E_INVALID_ARG (bad options, an unscored trajectory, a
 *         missing reference for a KL, mixed temperatures); RLP_E_STATE (frozen
 *         policy); RLP_E_NOMEM. When every group is filtered out nothing is
 *         applied and stats say so (RLP_OK).
 */
RLP_API int rlp_policy_train_rl(rlp_policy *policy, const rlp_batch *batch, const rlp_policy *ref,
                                const rlp_rl_options *opts, rlp_rl_stats *stats);

/**
 * The advantage each trajectory of a scored batch gets from the estimator
 * of rlp_policy_train_rl() with the same options: the same selection
 * (valid trajectories with prompt and completion tokens; groups by
 * group_id), reward shaping (overlong penalty) and formula (GRPO, Dr.GRPO,
 * RLOO, REINFORCE, REINFORCE++ with its batch normalisation; see
 * rlp_advantage), for logs and completion tables. The value is the
 * advantage at the trajectory's first completion token (the whole
 * sequence's for outcome estimators). The KL shaping of kl_in_reward,
 * which needs π_ref's logprobs, is not included. Pure: reads the batch
 * only; any number of threads may call it on one batch.
 *
 * @param[out] out  (n) advantages, float; NaN for a trajectory the step
 *                  would drop (invalid, or no prompt or completion tokens)
 * @param n     must equal the batch's size
 * @param batch scored trajectories
 * @param opts  RL options (NULL: defaults)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL batch, n ≠ size, bad options, a
 *         valid trajectory without a reward); RLP_E_NOMEM.
 */
RLP_API int rlp_rl_advantages(float *out, size_t n, const rlp_batch *batch, const rlp_rl_options *opts);
/* Tasks and datasets                                                       */
/* ------------------------------------------------------------------------ */

/**
 * A source of prompts for training or evaluation: a generator (Knights and
 * Knaves, Countdown) or a JSONL file, a prompt template, a serving order
 * and a resumable cursor.
 *
 * **Order.** Items are served epoch by epoch. With `"shuffle": true` (the
 * default) the order of epoch e is a permutation that is a pure function of
 * (seed, e); otherwise it is file (or draw) order. A generator with
 * `"size": 0` (its default) is an endless stream of fresh problems: its
 * epoch stays 0 and its position counts the problems drawn.
 *
 * **Cursor.** (epoch, position) always names the next item to serve: after
 * the last item of epoch e it reads (e + 1, 0), never "epoch e, finished".
 * A cursor saved with rlp_task_cursor_save() and restored with
 * rlp_task_cursor_restore() into a task made with the same options
 * continues with exactly the items not yet served: mid-epoch, the rest of
 * that epoch in the same order; at an epoch boundary, the whole next epoch
 * (public-bugs case #10: a resume there must not run an empty epoch).
 *
 * A task is used by one thread at a time.
 */
typedef struct rlp_task rlp_task;

/** Prompts made by rlp_task_next_batch(), with the strings and token ids
 *  they point to. Read-only: any number of threads may read one. */
typedef struct rlp_prompt_set rlp_prompt_set;

/**
 * Creates a generator task.
 *
 * @param[out] out  receives the task; free with rlp_task_free()
 * @param name      "kk", "countdown" or "arith"
 * @param options_json  a JSON object, or NULL for the defaults. Unknown keys
 *   are refused (RLP_E_INVALID_ARG), so a misspelt option cannot be ignored.
 *   Keys of every task:
 *   - "seed": integer in [0, 2^63 − 1], default 0. Problem i of a generator
 *     is a pure function of (seed, i and the options below).
 *   - "size": problems per epoch, default 0 = an endless stream. With N > 0
 *     the task is the fixed set of problems 0 … N − 1, served once per
 *     epoch (shuffled unless "shuffle" is false), as a dataset would be.
 *   - "shuffle": boolean, default true.
 *   - Prompt template keys: "template" (a preset: "none", "logic-rl",
 *     "logic-rl-base", "tinyzero", "tinyzero-base"), "system_prompt",
 *     "user_template" (must contain "{prompt}" once; the question goes
 *     there), "assistant_prefix" (text that opens the assistant's turn,
 *     e.g. "<think>"; "" for none), "chat" (boolean: render through a
 *     tokenizer's chat template when rlp_task_next_batch() gets one).
 *     Explicit keys override the preset's. "logic-rl" is the system prompt of
 *     Logic-RL (Xie et al. 2025, github.com/Unakar/Logic-RL,
 *     examples/data_preprocess/kk.py, template 'qwen-instruct') with the user
 *     turn "{prompt}\n" and assistant prefix "<think>", reproducing its
 *     prompt byte for byte on a ChatML tokenizer; "logic-rl-base" is the same
 *     file's plain-text 'base' template; "tinyzero" and "tinyzero-base" are
 *     TinyZero's Countdown prompts (github.com/Jiayi-Pan/TinyZero,
 *     examples/data_preprocess/countdown.py).
 *
 *   "kk" — Knights and Knaves (the K&K benchmark of Xie et al. 2024, "On
 *   Memorization of Large Language Models in Logical Reasoning",
 *   arXiv:2410.23123; github.com/AlphaPav/mem-kk-logic): every person makes
 *   one statement of depth ≤ 2 — a claim "X is a knight/knave", its
 *   negation, or and / or / if-then / if-and-only-if over distinct claims —
 *   never "I am a knave" nor "I am not a knight"; of all 2^n knight/knave
 *   assignments exactly one is consistent. Keys: "people" (2–8; fixes the
 *   count) or "min_people"/"max_people" (default 3 and 7, Logic-RL's
 *   training range; the count is drawn per problem), or a people-count
 *   curriculum (Logic-RL trains on 3, then 4, … then 7 people):
 *   "curriculum_start" and "curriculum_end" (2–8, start ≤ end) and
 *   "curriculum_prompts" (≥ 1), all three together and never with
 *   "people"/"min_people"/"max_people". Problem p of the stream (0-based,
 *   counted over all epochs: epoch × "size" + position, or the position of
 *   an endless stream) has start + ⌊(end − start + 1) · p /
 *   curriculum_prompts⌋ people, at most end: end − start + 1 equal stages
 *   over the first curriculum_prompts problems, then the end count. The
 *   count is a pure function of (seed, position), so a restored cursor
 *   continues the same curriculum; with "size" the problem at index i has
 *   the count of the stage it is drawn in. "width" (most claims
 *   joined by one and/or, 2–4, default 2). (No depth-1 option: with bare
 *   claims only, the complement of a solution is always a solution too, so
 *   no puzzle is unique.) Default
 *   template "logic-rl". The question is worded as the benchmark's `quiz`;
 *   the reference is its `solution_text_format`, "(1) NAME is a knight\n(2)
 *   NAME is a knave…". Metadata: "reference", "task": "kk", "names",
 *   "solution" (booleans, true = knight), "solution_text_format",
 *   "statements" (the benchmark's tuple form), "answer_type": "kk" (what
 *   the format reward's "answer": "auto" reads), "index", "epoch".
 *
 *   "countdown" — TinyZero's Countdown: numbers and a target reachable with
 *   + − × ÷ and parentheses using every number exactly once. Built from a
 *   random expression over the numbers in exact arithmetic, so always
 *   solvable. Keys: "count" (fixes how many numbers) or
 *   "min_count"/"max_count" (default 3 and 4, as Countdown-Tasks-3to4),
 *   "min_number"/"max_number" (default 1 and 99), "min_target"/"max_target"
 *   (default 10 and 100), "integer_steps" (default true: every intermediate
 *   result is a positive integer, the game's rule). Default template
 *   "tinyzero". The reference is one solution, e.g. "(44 + 19) + 35".
 *   Metadata: "reference", "task": "countdown", "numbers", "target",
 *   "answer_type": "equation", "index", "epoch".
 *
 *   "arith" — arithmetic questions "What is a + b?", "What is a - b?"
 *   (a ≥ b) and "What is a times b?", reference the exact result (a
 *   decimal integer). Keys: "ops" (array of "+", "-", "*"; default
 *   ["+", "*"]), "max_add" (+ and − operands 1…max_add, default 30, ≤ 1000),
 *   "max_mul" (× operands 2…max_mul, default 12, ≤ 1000), "holdout" (2–100,
 *   default 4) and "split" ("train", "eval" or "all", default "all"). One
 *   operand pair in `holdout`, chosen by a fixed hash of the operation and
 *   the *unordered* pair (never by the seed), forms the "eval" split and
 *   the rest the "train" split, so the two are disjoint for any seeds and a
 *   commuted question never crosses over. A split is a finite set served
 *   once per epoch ("size" is refused: the split fixes it), in an order
 *   that depends on "seed" and "shuffle". No template by default (the
 *   question alone, through the chat template when "chat"). Metadata:
 *   "reference", "task": "arith", "answer_type": "number", "op" ("+", "-",
 *   "times"), "a", "b", "index", "epoch".
 *
 *   Every prompt's metadata also carries "assistant_prefix" when the
 *   template has one (the format reward counts a tag the prompt opened).
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, unknown name, bad option, named
 *         in the message); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_task_create(rlp_task **out, const char *name, const char *options_json);

/**
 * Opens a JSONL file (one JSON object per line) as a task.
 *
 * The file is read whole at open and treated as hostile: every line must
 * be strict UTF-8 (no overlong forms, surrogates or NUL bytes) and valid
 * JSON nested at most 32 deep, without repeated keys, no longer than
 * "max_line_bytes"; the prompt field must be a non-empty string and the
 * reference a string or a number. Blank lines, a leading byte-order mark
 * and CRLF line ends are accepted. A file with no record is an error.
 *
 * @param[out] out  receives the task; free with rlp_task_free()
 * @param path      the file
 * @param options_json  a JSON object or NULL. Keys: "seed", "shuffle" and
 *   the template keys as for rlp_task_create() (default template "none");
 *   "prompt_field" (default "question"), "reference_field" (default
 *   "answer"; null for none) — so GSM8K's `test.jsonl` works as it is;
 *   "metadata_fields": an array of field names copied into each prompt's
 *   metadata when present (not "reference", "task", "index", "epoch",
 *   "line" or "assistant_prefix"); "task": a label for the metadata's
 *   "task" key (default none); "format": "kk" reads the K&K
 *   benchmark's records (`quiz` → prompt, `solution_text_format` →
 *   reference, `names` and `solution` checked — equal-length arrays of
 *   names and booleans — and copied to metadata with `statements` when
 *   present; task "kk"; template "logic-rl"); "skip_invalid": true skips
 *   bad lines and counts them (rlp_task_skipped()) instead of failing;
 *   "max_line_bytes" (default 16 MiB); "max_records" (default and most
 *   2^32 − 1; more records is an error, never a silent truncation).
 *   Metadata of a record: "reference", "task" (if any), its metadata
 *   fields, "index" (0-based record number in file order), "line" (1-based
 *   line number), "epoch".
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, bad option); RLP_E_NOT_FOUND
 *         (no such file); RLP_E_IO (cannot read); RLP_E_FORMAT (the line and
 *         field at fault in the message); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_task_open_jsonl(rlp_task **out, const char *path, const char *options_json);

/** Frees a task. NULL is a no-op. Prompt sets made from it stay valid. */
RLP_API void rlp_task_free(rlp_task *task);

/**
 * Items per epoch: the record count of a dataset, "size" of a generator
 * (0 for an endless stream).
 * @param[out] out_size  receives the count
 * @param task           the task
 * @return RLP_OK or RLP_E_INVALID_ARG.
 */
RLP_API int rlp_task_size(uint64_t *out_size, const rlp_task *task);

/** Lines a JSONL task skipped at open ("skip_invalid"); 0 for generators.
 *  @return RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_task_skipped(uint64_t *out_count, const rlp_task *task);

/** The epoch of the next item to serve (0-based).
 *  @return RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_task_epoch(uint64_t *out_epoch, const rlp_task *task);

/** The position of the next item to serve within its epoch: always less
 *  than rlp_task_size() (for an endless stream: problems drawn so far).
 *  @return RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_task_position(uint64_t *out_position, const rlp_task *task);

/**
 * Serves the next @p n items as prompts ready for rlp_rollout_generate(),
 * and moves the cursor past them (into the next epoch when one ends; a
 * batch may span two or more epochs).
 *
 * Rendering: with a tokenizer and a template whose "chat" is true, each
 * prompt is the tokenizer's chat template applied to [system prompt if
 * any, user message] with the generation prompt, followed by the assistant
 * prefix encoded as plain text: `tokens` holds those ids and `text` their
 * decoding (special tokens shown). Question text is message content, so a
 * question that spells "<|im_end|>" stays text (public-bugs case #1).
 * Without a tokenizer, or with "chat" false, `tokens` is NULL and `text` is
 * system prompt + user message + assistant prefix, concatenated as they are
 * (the engine encodes it as plain text).
 *
 * @param[out] out  receives the prompts; free with rlp_prompt_set_free()
 * @param task      the task
 * @param n         prompts to serve, ≥ 1
 * @param tok       tokenizer of the engine the prompts are for, or NULL;
 *                  borrowed for the call
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_UNSUPPORTED (the tokenizer has
 *         no chat template); RLP_E_NOMEM; RLP_E_OVERFLOW. On any failure
 *         the cursor does not move.
 */
RLP_API int rlp_task_next_batch(rlp_prompt_set **out, rlp_task *task, size_t n,
                                const rlp_tokenizer *tok);

/**
 * Writes the cursor as a small JSON object (under 512 bytes):
 * `{"version":1,"task":…,"epoch":…,"position":…,"seed":…,"size":…,
 * "fingerprint":…}`; the fingerprint identifies the content (a dataset's
 * prompts and references, a generator's options) so that a cursor is never
 * restored into another task.
 * @param task   the task
 * @param buf    receives the text and a NUL; may be NULL when @p cap is 0
 * @param cap    capacity of @p buf in bytes
 * @param[out] len_out  the text length without the NUL, also on
 *               RLP_E_OVERFLOW
 * @return RLP_OK; RLP_E_OVERFLOW; RLP_E_INVALID_ARG.
 */
RLP_API int rlp_task_cursor_save(const rlp_task *task, char *buf, size_t cap, size_t *len_out);

/**
 * Restores a cursor written by rlp_task_cursor_save(). The next batch then
 * continues with exactly the items that had not been served. A position
 * equal to the epoch size is read as the start of the next epoch.
 * @param task  a task created with the same name, options (seed, size) and
 *              content as the one that saved the cursor
 * @param json  the saved text, @p len bytes (need not be NUL-terminated)
 * @param len   its length
 * @return RLP_OK; RLP_E_FORMAT (malformed, or a position past the epoch);
 *         RLP_E_INVALID_ARG (saved by another task, seed, size or
 *         content — the message says which). The cursor is unchanged on
 *         failure.
 */
RLP_API int rlp_task_cursor_restore(rlp_task *task, const char *json, size_t len);

/** Frees a prompt set. NULL is a no-op. */
RLP_API void rlp_prompt_set_free(rlp_prompt_set *set);

/** Number of prompts in a set. @return RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_prompt_set_size(size_t *out_count, const rlp_prompt_set *set);

/**
 * The prompts, as an array of rlp_prompt_set_size() entries to pass to
 * rlp_rollout_generate(). Each has `text`, `metadata_json` (a JSON object
 * whose "reference" is the reference answer, plus the task's fields — see
 * rlp_task_create()), `tokens` when rendered with a tokenizer, group_id 0
 * and sampling NULL. Borrowed: valid until the set is freed. The engine
 * copies what it keeps, so the set may be freed once generate returns.
 * Returns NULL for a NULL set.
 */
RLP_API const rlp_prompt *rlp_prompt_set_prompts(const rlp_prompt_set *set);

/** Version of rlp_task_item understood by this header. */
#define RLP_TASK_ITEM_VERSION 1

/** Where a served prompt came from (a view filled by rlp_prompt_set_item();
 *  set @ref version to RLP_TASK_ITEM_VERSION first). Strings are borrowed
 *  from the set. */
typedef struct rlp_task_item {
    uint32_t version;          /**< RLP_TASK_ITEM_VERSION, set by the caller */
    uint64_t epoch;            /**< epoch it was served in */
    uint64_t position;         /**< its position in that epoch's order */
    uint64_t index;            /**< record index (file order, 0-based) or problem number */
    const char *question;      /**< the problem text before any template */
    const char *reference;     /**< the reference answer, or NULL */
    const char *metadata_json; /**< the prompt's metadata */
} rlp_task_item;

/**
 * Describes prompt @p index of a set.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, index out of range, or an
 *         unknown out->version).
 */
RLP_API int rlp_prompt_set_item(rlp_task_item *out, const rlp_prompt_set *set, size_t index);
/* Reward functions: C callbacks, built-in verifiers, HTTP, combinations     */
/* ------------------------------------------------------------------------ */

/*
 * A reward function (rlp_reward_fn) scores the trajectories of a batch:
 * rlp_reward_fn_score() sets each one's scalar reward, or marks it invalid
 * with a reason, and sets its per-token rewards when the function gives
 * them. Kinds: a C callback (single-sample or batch form), a built-in
 * verifier created by name with JSON options, an HTTP verifier, a reward
 * library run in worker processes (rlp_reward_fn_create_isolated(): a
 * crash costs its samples, not the host), and a weighted combination of
 * any of these.
 *
 * How a call runs. Every handle owns a pool of worker threads (created at
 * its first score call, sized by rlp_reward_options::n_threads or the
 * "threads" option of a built-in). rlp_reward_fn_score() hands the samples
 * to the workers, which copy what a callback reads before calling it, and
 * supervises them; the calling thread never runs a callback itself. Each
 * call of a callback has a deadline (timeout_ms). A call that
 *   - returns non-zero (an error),
 *   - gives a score that is NaN or ±Inf, or outside the range of float,
 *     or a non-finite per-token score,
 *   - or overruns its deadline
 * marks its sample(s) invalid with a reason; the other samples are scored
 * as usual and the counts are reported in rlp_reward_stats. A bad callback
 * can therefore never fail or stall the run.
 *
 * A C callback that overruns cannot be stopped (threads cannot be killed
 * safely). Its worker thread is abandoned: detached and replaced by a
 * fresh worker, so the pool keeps its size; rlp_reward_fn_score() returns
 * on time (within a few milliseconds of the deadline) with the sample
 * invalid ("timed out after N ms"). Whatever the abandoned call later
 * returns is discarded. The request and result memory that call was given
 * belongs to the library and stays valid until it returns, so it never
 * touches freed memory; the payload, however, is the host's: keep it alive
 * until every abandoned call has returned (stats->abandoned_running tells
 * how many are still running), or hand it to the handle with
 * rlp_reward_options::payload_free, which the library calls once nothing
 * can use the payload any more. At most rlp_reward_options::max_abandoned
 * abandoned calls may run at once; past that no replacement worker is
 * started, and once no worker is left the remaining samples are marked
 * invalid at once ("no worker left").
 *
 * What a callback may touch. It runs on one of the handle's worker
 * threads, concurrently with itself on up to n_threads threads, so its
 * payload must be safe to use from several threads. It may read the
 * request and write the result it was given, during the call only (do not
 * keep the pointers). It must not touch the batch being scored, nor call
 * rlp_reward_fn_score() on the handle that called it (that call would wait
 * for itself); other librlpost calls on other handles are allowed. The
 * thread-local rlp_error_last() of a worker thread is not seen by the host.
 */

/** Version of rlp_reward_request understood by this header. */
#define RLP_REWARD_REQUEST_VERSION 1

/**
 * One sample as a reward function sees it. Filled by the library; every
 * pointer is to library-owned memory valid for the duration of the call
 * (callbacks must not keep it). Text is UTF-8 as the rollout produced it
 * (not validated), NUL-terminated, with its length in bytes beside it.
 */
typedef struct rlp_reward_request {
    uint32_t version;                   /**< RLP_REWARD_REQUEST_VERSION (set by the library) */
    const char *prompt_text;            /**< the prompt as text; "" when the trajectory has none */
    size_t prompt_len;                  /**< bytes of prompt_text */
    const char *completion_text;        /**< the completion (ends at a matched stop string); never NULL */
    size_t completion_len;              /**< bytes of completion_text */
    const int32_t *completion_tokens;   /**< (n_completion_tokens) ids, NULL when there are none */
    size_t n_completion_tokens;
    const char *reference;              /**< reference answer: the "reference" field of the metadata (a JSON
                                             string, or the JSON text of a number), or NULL */
    const char *metadata_json;          /**< the trajectory's metadata JSON object as text, or NULL */
    uint64_t group_id;                  /**< samples of one prompt share it */
    uint32_t sample_index;              /**< 0 … n−1 within its group */
    uint64_t policy_version;            /**< version of the weights that produced the completion */
    size_t batch_index;                 /**< index of the trajectory in the batch being scored */
} rlp_reward_request;

/** Version of rlp_reward_result understood by this header. */
#define RLP_REWARD_RESULT_VERSION 1

/** Size of rlp_reward_result::reason, terminating NUL included. */
#define RLP_REWARD_REASON_MAX 128

/**
 * What a reward function gives back for one sample. The library
 * initialises it before each call to: score NaN, valid 1, reason "",
 * has_token_scores 0, and token_scores / step_ends pointing at zeroed,
 * library-owned buffers of n_completion_tokens entries (NULL when the
 * completion has no tokens).
 *
 * Per-token (process) rewards: write token_scores[t] for the completion
 * token t that they belong to and set has_token_scores = 1. For a process
 * reward model give the reward of each reasoning step at the step's last
 * token and set step_ends[t] = 1 there: the refinements
 * (rlp_reward_fn_set_refine()) treat the marked tokens as the steps, or
 * every token when none is marked. The library copies the buffers after
 * the call.
 */
typedef struct rlp_reward_result {
    uint32_t version;                   /**< RLP_REWARD_RESULT_VERSION (set by the library) */
    double score;                       /**< the scalar reward; must be finite and fit in a float */
    int32_t valid;                      /**< 1: score is meaningful; 0: the sample cannot be scored */
    char reason[RLP_REWARD_REASON_MAX]; /**< short human reason (why invalid, or e.g. "wrong answer"),
                                             NUL-terminated */
    float *token_scores;                /**< (n_completion_tokens) library buffer, zeroed; NULL when there are
                                             no tokens */
    uint8_t *step_ends;                 /**< (n_completion_tokens) library buffer, zeroed; 1 marks a step's
                                             last token */
    int32_t has_token_scores;           /**< set to 1 when token_scores was filled */
} rlp_reward_result;

/**
 * Single-sample reward callback, called on a worker thread (see the top of
 * this section for which thread and what it may touch).
 *
 * @param[out] result   pre-initialised result to fill (score, valid, reason, token scores)
 * @param request       the sample
 * @param payload       the pointer given at creation
 * @return 0 on success (then result->valid says whether the sample could
 *         be scored); non-zero marks the sample invalid, with
 *         result->reason as the reason when set ("callback returned N"
 *         otherwise) and counts it in rlp_reward_stats::errors.
 */
typedef int (*rlp_reward_callback)(rlp_reward_result *result, const rlp_reward_request *request,
                                   void *payload);

/**
 * Batch reward callback: scores up to rlp_reward_options::batch_size
 * samples in one call (a verifier that amortises set-up, a model that
 * batches). Same rules as rlp_reward_callback; a non-zero return or a
 * timeout marks all @p n samples of the call invalid.
 *
 * @param[out] results  (n) pre-initialised results, in the order of @p requests
 * @param requests      (n) samples
 * @param n             ≥ 1
 * @param payload       the pointer given at creation
 */
typedef int (*rlp_reward_batch_callback)(rlp_reward_result *results, const rlp_reward_request *requests,
                                         size_t n, void *payload);

/** Version of rlp_reward_options understood by this header. */
#define RLP_REWARD_OPTIONS_VERSION 1

/** Options of a callback reward function (rlp_reward_fn_create_callback(),
 *  rlp_reward_fn_create_batch_callback()). */
typedef struct rlp_reward_options {
    uint32_t version;                   /**< RLP_REWARD_OPTIONS_VERSION */
    const char *name;                   /**< label used in reasons and by combinations (copied); NULL = "callback" */
    uint32_t n_threads;                 /**< worker threads; 0 = one per online core, at most 64; default 0 */
    uint32_t timeout_ms;                /**< deadline of each call in milliseconds; 0 = none; default 10000 */
    uint32_t batch_size;                /**< batch form: samples per call; 0 = 64; ignored by the single form */
    uint32_t max_abandoned;             /**< abandoned (timed-out) calls allowed to run at once; default 16 */
    void (*payload_free)(void *payload);/**< called once, on some thread, when nothing can use the payload any
                                             more (the handle is freed and every abandoned call has returned);
                                             NULL = the host keeps ownership */
} rlp_reward_options;

#define RLP_REWARD_OPTIONS_INIT { RLP_REWARD_OPTIONS_VERSION, NULL, 0, 10000, 0, 16, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG (NULL,
 *  unknown version). Thread-safe. */
RLP_API int rlp_reward_options_init(rlp_reward_options *opts, uint32_t version);

/** Version of rlp_reward_stats understood by this header (2 added crashed). */
#define RLP_REWARD_STATS_VERSION 2

/**
 * Counts of one rlp_reward_fn_score() call. Set @ref version to
 * RLP_REWARD_STATS_VERSION before the call; the library fills the fields
 * that version has.
 */
typedef struct rlp_reward_stats {
    uint32_t version;                   /**< RLP_REWARD_STATS_VERSION, set by the caller */
    uint64_t scored;                    /**< trajectories given to the reward function */
    uint64_t skipped;                   /**< trajectories not scored: finish_reason RLP_FINISH_ERROR */
    uint64_t valid;                     /**< scored and valid */
    uint64_t invalid;                   /**< scored and marked invalid (all causes below, and samples the
                                             function itself declared invalid, e.g. "no reference") */
    uint64_t errors;                    /**< samples of calls that returned an error (incl. HTTP failures) */
    uint64_t timeouts;                  /**< samples of calls that overran their deadline */
    uint64_t nonfinite;                 /**< samples whose score or a token score was NaN/Inf/out of float range */
    uint64_t abandoned_running;         /**< abandoned calls of this handle still running when the call returned */
    double mean_score;                  /**< mean reward over the valid samples; NaN when there are none */
    double min_score, max_score;        /**< over the valid samples; NaN when there are none */
    double seconds;                     /**< wall time of the call */
    /* version 2 */
    uint64_t crashed;                   /**< samples whose reward worker process died while scoring them
                                             (rlp_reward_fn_create_isolated()) */
} rlp_reward_stats;

/**
 * Creates a reward function from a single-sample C callback.
 *
 * @param[out] out  the handle; free with rlp_reward_fn_free()
 * @param fn        the callback (see rlp_reward_callback for the rules)
 * @param opts      options or NULL (defaults)
 * @param payload   passed to every call of @p fn; owned by the host unless
 *                  opts->payload_free is set (then by the handle, even if
 *                  this function fails: it is freed at once)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out or @p fn, unknown options
 *         version); RLP_E_NOMEM. Thread-safe.
 */
RLP_API int rlp_reward_fn_create_callback(rlp_reward_fn **out, rlp_reward_callback fn,
                                          const rlp_reward_options *opts, void *payload);

/**
 * Creates a reward function from a batch callback: samples are handed over
 * in calls of up to opts->batch_size, several calls in parallel on the
 * worker threads. Parameters and codes as rlp_reward_fn_create_callback().
 */
RLP_API int rlp_reward_fn_create_batch_callback(rlp_reward_fn **out, rlp_reward_batch_callback fn,
                                                const rlp_reward_options *opts, void *payload);

/**
 * Creates a built-in verifier by name. @p options_json is a JSON object of
 * options (NULL or "{}" for the defaults); an unknown key is an error, so a
 * misspelt option cannot go unnoticed. Keys every built-in takes:
 * "threads" (worker threads, 0 = one per online core, default 0),
 * "timeout_ms" (per sample, default 10000), "refine" ("none", "clip",
 * "delta", "clip_delta") and "refine_eta" (see rlp_reward_fn_set_refine()),
 * "name" (label, default the built-in's name). The reference answer is
 * the metadata's "reference" field unless said otherwise; a sample without
 * the reference or data a built-in needs is marked invalid with a reason.
 * Scores (all overridable) and what each one checks:
 *
 * - "logic_rl_format" — Logic-RL's format reward (Xie et al. 2025,
 *   "Logic-RL", arXiv:2502.14768, rule-based reward; Unakar/Logic-RL
 *   verl/utils/reward_score/kk.py, validate_response_structure): in the assistant's text each of
 *   `<think>`, `</think>`, `<answer>`, `</answer>` occurs exactly once, in
 *   that order. The assistant's text is "assistant_prefix" + completion;
 *   without the option, the prefix is the metadata's "assistant_prefix"
 *   (rlp_task prompts carry it), else "<think>" when the prompt text ends
 *   with `<think>` (Logic-RL's prompt opens the assistant turn with it),
 *   else "".
 *   Beyond kk.py, the content of the `<answer>` block must also parse as
 *   an answer, so that a placeholder copied from a prompt (`<answer> answer
 *   </answer>`) earns no format bonus; the reason then says why (e.g.
 *   `format: <answer> content "answer" is not a number`). Option "answer":
 *   - "auto" (default): the metadata's "answer_type" when present (one of
 *     the names below; rlp_task sets "kk" for K&K and "equation" for
 *     Countdown; any other value makes the sample invalid), else "number"
 *     when the reference is a number (trimmed; a GSM8K answer ending
 *     `#### N` counts), else "nonempty";
 *   - "any": the tags only, kk.py's rule exactly;
 *   - "nonempty": some text that is not a placeholder: after trimming
 *     spaces and punctuation, not empty and not (ASCII case-insensitive)
 *     "answer", "your answer", "the answer", "final answer", "answer
 *     here", "your answer here", "insert answer", "placeholder", "todo",
 *     "tbd", "xxx" or the like; "..." and "…" are placeholders too;
 *   - "number": the trimmed content is a number as the "gsm8k" reference
 *     is read (decimal with optional thousands commas, a/b, `\frac{a}{b}`,
 *     a sign), optionally followed by one '.', or `\boxed{N}` (inside
 *     optional `$`) and nothing else — "42 apples" or "x = 42" is not;
 *   - "kk": every person of the metadata's "names" array is stated as
 *     `NAME is a knight|knave` (kk_answer's parser; roles need not be
 *     right); without "names", at least one `WORD is a knight|knave`;
 *   - "equation": the content is an expression of Countdown's grammar
 *     (below; numbers need not be the problem's).
 *   Scores "format_correct" 1, "format_wrong" −1.
 * - "kk_answer" — Logic-RL's Knights-and-Knaves answer reward (kk.py,
 *   parse_model_answer / compute_score): the reference is lines
 *   `(1) NAME is a knight|knave` (or the metadata's "solution_text_format");
 *   from the last `<answer>…</answer>` block the number of "knight" and
 *   "knave" substrings (ASCII case-insensitive) must equal the number of
 *   people and each name must be stated as `NAME is a knight|knave` (word
 *   boundaries, ASCII case-insensitive, whitespace between the words).
 *   Scores "answer_correct" 2, "answer_wrong" −1.5, "answer_unparsable" −2
 *   (no answer block, empty answer, a name not stated),
 *   "count_mismatch" −2 (as kk.py, where a wrong count makes the answer
 *   unparsable), and "answer_unparsable" whenever the format check fails
 *   ("require_format", default true).
 * - "logic_rl" — Logic-RL's total: format + answer, one of 3, −0.5, −1, −3
 *   with the defaults. Takes the options of both. kk_answer and logic_rl
 *   use the format check above, "answer" included: with "auto" on K&K
 *   prompts a real answer (every name stated) scores as in kk.py, while a
 *   placeholder or an answer that leaves a person out fails the format
 *   (−1 − 2 = −3 instead of kk.py's 1 − 2 = −1); "answer": "any" gives
 *   kk.py's scores exactly.
 * - "gsm8k" — GSM8K (Cobbe et al. 2021): the completion's final number is
 *   the one after the last `#### `, else in the last `\boxed{}`, else (when
 *   "fallback_last_number", default true) the last number in the text;
 *   commas between digit groups, `$`, and trailing zeros after a decimal
 *   point are ignored, and `\frac{a}{b}` or a/b inside the box are exact
 *   fractions; compared exactly with the reference (itself a number, or a
 *   whole GSM8K answer with a `#### N` line). Scores "correct" 1, "wrong" 0,
 *   "missing" 0.
 * - "boxed_math" — last brace-balanced `\boxed{…}` or `\fbox{…}` of the
 *   completion against the reference (its own last box if it has one), both
 *   lightly normalised: whitespace and `\,` `\;` `\:` `\!` spacing removed,
 *   `\left`/`\right` dropped, `\dfrac`/`\tfrac` read as `\frac`, `\frac12`
 *   as `\frac{1}{2}`, `{,}` and `$` removed, one pair of enclosing braces and
 *   a trailing period removed; then numbers (integers, decimals, a/b,
 *   `\frac{a}{b}`, signs, thousands separators) compare as exact fractions
 *   and anything else as normalised text (so `0.5` equals `\frac{1}{2}`,
 *   `0.333` does not equal `1/3`). Not normalised: `\text{}`, units,
 *   `^\circ`, `\%`, values of `\pi` or `\sqrt`, equivalent algebraic
 *   forms (x+1 vs 1+x), the order of set or tuple elements, `x=5` vs `5`,
 *   `\boxed 5` without braces. An unclosed last box counts as no answer. Scores "correct" 1, "wrong" 0, "missing" 0.
 * - "countdown" — TinyZero's Countdown (Jiayi-Pan/TinyZero
 *   verl/utils/reward_score/countdown.py): the last `<answer>…</answer>`
 *   block must hold an expression of non-negative integer literals, `+ - *
 *   /` and parentheses (no unary operators) using each of the metadata's
 *   "numbers" (or "nums") exactly once, whose exact rational value equals
 *   the metadata's "target". Parsed by a recursive-descent parser (nothing
 *   is evaluated as code); arithmetic is exact over int64 fractions, and an
 *   overflow or a division by zero makes the answer wrong. Scores "correct"
 *   1, "format_score" 0.1 (parses but wrong numbers or value), "missing" 0
 *   (no block, or it does not parse).
 * - "exact_match" — the extracted answer equals the reference. "extract":
 *   "none" (the whole completion, default), "answer_tag" (last
 *   `<answer>` block), "boxed" (last box), "last_line"; "trim" (default
 *   true), "case_sensitive" (default true), "collapse_whitespace" (default
 *   false). Scores "correct" 1, "wrong" 0.
 * - "regex_match" — PCRE2 (UTF) pattern "pattern" (default: the reference
 *   is the pattern) found in the extracted answer ("extract" as above),
 *   or matching all of it when "full" is true; "flags" a string of i, m, s,
 *   x; "match_limit" (default 1000000: a pattern that backtracks
 *   catastrophically makes the sample invalid instead of hanging).
 *   Scores "correct" 1, "wrong" 0.
 *
 * @param[out] out       the handle; free with rlp_reward_fn_free()
 * @param name           a built-in's name (see rlp_reward_builtin_name())
 * @param options_json   JSON object text or NULL
 * @return RLP_OK; RLP_E_NOT_FOUND (unknown name); RLP_E_INVALID_ARG (bad
 *         JSON, unknown key, wrong type or value, naming it; a regex that
 *         does not compile, with PCRE2's message and offset); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_reward_fn_create_builtin(rlp_reward_fn **out, const char *name, const char *options_json);

/** Name of the @p index-th built-in (0-based), or NULL past the last one.
 *  Static string. Thread-safe. */
RLP_API const char *rlp_reward_builtin_name(size_t index);

/** Version of rlp_http_reward_options understood by this header. */
#define RLP_HTTP_REWARD_OPTIONS_VERSION 1

/**
 * Options of an HTTP verifier (rlp_reward_fn_create_http()).
 *
 * Protocol. Samples go out in batches of batch_size, each one
 * `POST {url}` with `Content-Type: application/json` and the body
 * `{"version": 1, "samples": [{"id": I, "prompt": "…", "completion": "…",
 * "reference": "…" or null, "metadata": {…} or null, "group_id": G,
 * "sample_index": S, "policy_version": V[, "completion_tokens": […]]}, …]}`
 * (id = index in the batch being scored). The answer must be HTTP 2xx
 * with `{"scores": [E, …]}`, one entry per sample in the same order, each
 * E a number (the score), null (invalid), or an object
 * `{"score": x, "valid": true|false, "reason": "…", "token_scores": […]}`
 * (all but "score" optional). A transport error, a timeout, HTTP 5xx, 408
 * or 429 is retried (up to max_retries times, with doubling backoff);
 * other 4xx are not. A request that still fails, an answer that is not
 * such JSON, is larger than max_response_bytes, or has fewer or more
 * entries than samples marks every sample of that request invalid with a
 * reason naming the URL; a malformed entry marks its own sample invalid.
 */
typedef struct rlp_http_reward_options {
    uint32_t version;                   /**< RLP_HTTP_REWARD_OPTIONS_VERSION */
    const char *url;                    /**< http:// or https:// URL that is POSTed to (copied) */
    const char *api_key;                /**< sent as "Authorization: Bearer …", or NULL (copied) */
    const char *name;                   /**< label; NULL = "http" (copied) */
    uint32_t timeout_ms;                /**< whole-request timeout of each attempt; 0 = 60000 */
    uint32_t connect_timeout_ms;        /**< 0 = 10000 */
    uint32_t max_retries;               /**< retries after the first attempt; default 2 */
    uint32_t backoff_ms;                /**< first backoff, doubled per retry (jittered); 0 = 200 */
    uint32_t batch_size;                /**< samples per request; 0 = 64 */
    uint32_t max_in_flight;             /**< concurrent requests; 0 = 8 */
    uint64_t max_response_bytes;        /**< 0 = 16 MiB */
    int32_t send_tokens;                /**< 1: include "completion_tokens" */
} rlp_http_reward_options;

#define RLP_HTTP_REWARD_OPTIONS_INIT \
    { RLP_HTTP_REWARD_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 2, 0, 0, 0, 0, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. Thread-safe. */
RLP_API int rlp_http_reward_options_init(rlp_http_reward_options *opts, uint32_t version);

/**
 * Creates an HTTP verifier (see rlp_http_reward_options for the protocol).
 * All requests of a score call run concurrently from one worker thread
 * through libcurl's multi interface; the deadline of each is its
 * timeout_ms (per attempt) and max_retries, enforced by libcurl, so no
 * thread is ever abandoned. The first creation in the process runs
 * curl_global_init once; a host using libcurl from several threads should
 * call curl_global_init itself before starting them.
 *
 * @return RLP_OK; RLP_E_INVALID_ARG (no URL, not http(s), control
 *         characters); RLP_E_UNSUPPORTED (built without libcurl);
 *         RLP_E_NETWORK (libcurl failed to initialise); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_reward_fn_create_http(rlp_reward_fn **out, const rlp_http_reward_options *opts);

/**
 * Creates the weighted sum of @p n reward functions: reward = Σ wᵢ·rᵢ, and
 * per-token rewards = Σ wᵢ·tᵢ over the members that give them. Members
 * score the batch one after the other, each on its own threads with its
 * own deadlines; a sample is valid only if every member found it valid,
 * otherwise its reason is the first failing member's, prefixed by that
 * member's name. On success the combination takes ownership of the
 * members (free only the combination; do not use them any more); on
 * failure they stay the caller's.
 *
 * @param[out] out   the handle; free with rlp_reward_fn_free()
 * @param fns        (n) distinct handles
 * @param weights    (n) finite weights, or NULL for all 1
 * @param n          ≥ 1
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, n = 0, a repeated handle, a
 *         non-finite weight); RLP_E_NOMEM. Thread-safe for distinct members.
 */
RLP_API int rlp_reward_fn_combine(rlp_reward_fn **out, rlp_reward_fn *const *fns, const double *weights,
                                  size_t n);

/** Version of rlp_isolation_options understood by this header. */
#define RLP_ISOLATION_OPTIONS_VERSION 1

/** Options of a process-isolated reward function (rlp_reward_fn_create_isolated()). */
typedef struct rlp_isolation_options {
    uint32_t version;                   /**< RLP_ISOLATION_OPTIONS_VERSION */
    const char *name;                   /**< label used in reasons (copied); NULL = "isolated" */
    uint32_t n_workers;                 /**< worker processes (1 … 64); 0 = one per online core, at most 8 */
    uint32_t timeout_ms;                /**< deadline of each request to a worker; 0 = none; default 10000 */
    uint32_t batch_size;                /**< samples per request (1 … 4096); 0 = 1 */
    uint32_t max_restarts;              /**< worker restarts allowed within any 60 s; past that the score
                                             call fails (RLP_E_CALLBACK); default 20 */
    const char *worker_path;            /**< the rlpost-reward-worker executable (copied); NULL = the
                                             environment variable RLPOST_REWARD_WORKER, else the one
                                             installed with librlpost */
} rlp_isolation_options;

#define RLP_ISOLATION_OPTIONS_INIT { RLP_ISOLATION_OPTIONS_VERSION, NULL, 0, 10000, 0, 20, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG (NULL,
 *  unknown version). Thread-safe. */
RLP_API int rlp_isolation_options_init(rlp_isolation_options *opts, uint32_t version);

/**
 * Creates a reward function whose scoring runs in worker processes, so
 * that a reward library that crashes (NULL dereference, abort(), stack
 * overflow, _exit) or hangs cannot take the host down.
 *
 * Each worker is the helper executable `rlpost-reward-worker` (installed
 * in libexecdir; found through opts->worker_path, the environment
 * variable RLPOST_REWARD_WORKER, next to the librlpost shared object, or
 * its install path, in that order), started with posix_spawn(), which is
 * safe in a multi-threaded host where fork() without exec is not. It
 * dlopens @p library_path, calls its `int rlpost_reward_create(rlp_reward_fn
 * **out, const char *options_json)` with @p options_json (the same entry
 * point `rlpost train` loads from `reward.library`) and scores the
 * requests it is sent over a socket with the handle it got (its threads
 * and deadlines as that handle says). The host's samples travel as
 * copies; every answer is bounds-checked.
 *
 * rlp_reward_fn_score() hands requests of opts->batch_size samples to the
 * workers, one request per worker at a time. When a worker dies (a
 * signal, or an exit), the samples of its request are marked invalid
 * with the reason "reward worker killed by SIGSEGV" (the signal's name;
 * "reward worker exited with status N" for an exit) and counted in
 * rlp_reward_stats::crashed; a request that overruns opts->timeout_ms has
 * its worker killed with SIGKILL (which, unlike a thread, really stops it)
 * and its samples marked invalid ("timed out after N ms (reward worker
 * killed)", counted in timeouts). Either way the worker is restarted for
 * the next request, after a backoff that doubles with consecutive deaths
 * (10 ms up to 1 s); the other samples are scored as usual. Once more than
 * opts->max_restarts restarts would happen within 60 s, the handle is
 * broken: that score call and every later one fail with RLP_E_CALLBACK
 * and a message naming the last death, so a library that always crashes
 * stops the run instead of spinning.
 *
 * Workers start here (each must load the library and report ready within
 * 60 s), so a library that cannot be loaded fails this call. A worker
 * exits when its parent process dies (it checks every 200 ms) and is
 * killed and reaped by rlp_reward_fn_free(). The host must not reap
 * children it does not know (waitpid(-1, …)) nor set SIGCHLD to SIG_IGN,
 * or the cause of a death reads "status unavailable". A worker's stdout
 * goes to the host's stderr (a host's stdout may carry its results).
 *
 * @param[out] out        the handle; free with rlp_reward_fn_free()
 * @param library_path    path of the reward library (as dlopen takes it)
 * @param options_json    passed to rlpost_reward_create() (copied), or NULL
 * @param opts            options or NULL (defaults)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL @p out or @p library_path, an
 *         option out of range, unknown version); RLP_E_NOT_FOUND (no worker
 *         executable); RLP_E_CALLBACK (the library could not be loaded or
 *         its rlpost_reward_create() failed: the worker's message); RLP_E_IO
 *         (a worker could not be started); RLP_E_TIMEOUT (a worker did not
 *         report ready in time); RLP_E_NOMEM. Thread-safe. Score calls on
 *         the handle follow rlp_reward_fn_score() (one at a time).
 */
RLP_API int rlp_reward_fn_create_isolated(rlp_reward_fn **out, const char *library_path, const char *options_json,
                                          const rlp_isolation_options *opts);

/** Process-reward refinements (values fixed). */
typedef enum rlp_reward_refine_mode {
    RLP_REFINE_NONE = 0,        /**< per-step rewards as given */
    RLP_REFINE_CLIP = 1,        /**< r_k ← min(r_k − η, 0) */
    RLP_REFINE_DELTA = 2,       /**< r_k ← r_k − r_{k+1} for k < K; r_K kept */
    RLP_REFINE_CLIP_DELTA = 3   /**< Clip, then Delta */
} rlp_reward_refine_mode;

/**
 * Refines per-step process rewards in place, after Gao et al. 2024, "On
 * Designing Effective RL Reward at Training Time for LLM Reasoning"
 * (arXiv:2410.15115), its Clip and Delta mechanisms: with steps k = 1…K
 * of a completion and a threshold η,
 *   - Clip:  r̃_k = min(r_k − η, 0), so every step reward is ≤ 0 and the
 *     return of a completion is bounded above by 0 however many steps it
 *     repeats;
 *   - Delta: r̃_k = r_k − r_{k+1} for k < K and r̃_K = r_K, so the return
 *     from step k telescopes to r_k and cannot grow with the step count;
 *   - Clip-Delta: Clip first, then Delta on the clipped values.
 * The steps are the entries with step_mask[t] ≠ 0 in order (all entries
 * when step_mask is NULL); other entries are left as they are.
 *
 * @param rewards    (n) per-token or per-step rewards, changed in place
 * @param n          entries
 * @param step_mask  (n) or NULL
 * @param mode       an rlp_reward_refine_mode
 * @param eta        η of Clip (ignored by Delta); finite
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL rewards with n > 0, bad mode,
 *         non-finite η). Thread-safe (no shared state).
 */
RLP_API int rlp_reward_refine(float *rewards, size_t n, const uint8_t *step_mask, int mode, float eta);

/**
 * Makes a handle refine the per-token rewards its scorers give (see
 * rlp_reward_refine(); the steps are the tokens marked in
 * rlp_reward_result::step_ends, or all tokens when none is marked) before
 * they reach the batch. The scalar reward is not changed.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, bad mode, non-finite η).
 * Not while a score call of @p fn runs.
 */
RLP_API int rlp_reward_fn_set_refine(rlp_reward_fn *fn, int mode, float eta);

/**
 * Scores every trajectory of @p batch: sets its reward (and per-token
 * rewards when the function gives them) and marks it valid, or marks it
 * invalid with the reason (its reward then reads NaN). Trajectories with
 * finish_reason RLP_FINISH_ERROR have no completion and are skipped
 * (counted in stats->skipped). Returns when every sample is scored,
 * invalid or past its deadline (see the top of this section).
 *
 * @param fn      the reward function
 * @param batch   the batch; not to be touched by other threads during the call
 * @param stats   counts of this call, or NULL; set stats->version first
 * @return RLP_OK whatever happened to individual samples; RLP_E_INVALID_ARG
 *         (NULL, stats->version unset); RLP_E_NOMEM; RLP_E_BACKEND (no
 *         worker thread could be started). On an error return no
 *         trajectory was changed.
 * Calls on the same handle are serialised (the second waits); distinct
 * handles score in parallel.
 */
RLP_API int rlp_reward_fn_score(rlp_reward_fn *fn, rlp_batch *batch, rlp_reward_stats *stats);

/**
 * Scores one request outside a batch, through the same threads and
 * deadlines (for tools and tests: `rlpost reward` uses it). Fills
 * out->score, out->valid and out->reason (a valid sample's reason says
 * e.g. "wrong answer: 17, reference 18"); out->token_scores and
 * out->step_ends are set to NULL and has_token_scores to 0 (per-token
 * rewards are only delivered into a batch). A callback error, non-finite
 * score or timeout gives valid = 0 with the reason, and RLP_OK.
 *
 * @param[out] out   the result
 * @param fn         the reward function
 * @param request    the sample (its version must be set; reference NULL =
 *                   taken from metadata_json as in a batch)
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_NOMEM; RLP_E_BACKEND.
 */
RLP_API int rlp_reward_fn_score_one(rlp_reward_result *out, rlp_reward_fn *fn,
                                    const rlp_reward_request *request);

/** The handle's label (a built-in's name, the name option, "combine").
 *  Borrowed, valid until the handle is freed; NULL for NULL. Thread-safe. */
RLP_API const char *rlp_reward_fn_name(const rlp_reward_fn *fn);

/**
 * Frees a reward function (and the members of a combination). Joins its
 * idle worker threads; does not wait for abandoned calls, which keep the
 * library's own data alive until they return (see payload_free for the
 * payload). NULL is a no-op. Not while a score call of @p fn runs.
 */
RLP_API void rlp_reward_fn_free(rlp_reward_fn *fn);

/* ------------------------------------------------------------------------ */
/* Replay buffer: staleness-bounded store of scored trajectory groups       */
/* ------------------------------------------------------------------------ */

/** A timeout meaning "wait as long as it takes" (or until the handle is closed). */
#define RLP_WAIT_FOREVER UINT32_MAX

/** A staleness bound meaning "never drop a group for its age". */
#define RLP_STALENESS_UNBOUNDED UINT32_MAX

/** What rlp_replay_buffer_push() does when the buffer is full (values fixed). */
typedef enum rlp_buffer_full_policy {
    RLP_BUFFER_FULL_BLOCK = 0, /**< wait for room up to push_timeout_ms, then RLP_E_TIMEOUT */
    RLP_BUFFER_FULL_FAIL = 1   /**< return RLP_E_AGAIN at once */
} rlp_buffer_full_policy;

/** Bins of rlp_buffer_stats::staleness_hist. */
#define RLP_BUFFER_STALENESS_BINS 16

/** Version of rlp_buffer_options understood by this header. */
#define RLP_BUFFER_OPTIONS_VERSION 1

/**
 * Options of rlp_replay_buffer_create().
 *
 * Versions count optimizer steps (rlp_policy_version()). A group's version
 * is the smallest token version among its trajectories (the oldest weights
 * that produced any of its tokens; a trajectory without completion tokens
 * counts with its policy_version). A consumer at version v receives a group
 * of version u only if u + max_staleness ≥ v (AReaL, Fu et al. 2025, §5:
 * staleness ≤ η); older groups are dropped and counted.
 */
typedef struct rlp_buffer_options {
    uint32_t version;          /**< RLP_BUFFER_OPTIONS_VERSION */
    uint64_t capacity;         /**< most groups held (plus pushes being written); 0 = unbounded */
    uint32_t max_staleness;    /**< η; default 1 (Echo's sequential pull: ≤ 1 step);
                                    RLP_STALENESS_UNBOUNDED = never drop */
    int32_t full_policy;       /**< rlp_buffer_full_policy; default RLP_BUFFER_FULL_BLOCK */
    uint32_t push_timeout_ms;  /**< BLOCK: longest wait for room; default RLP_WAIT_FOREVER */
    const char *spill_path;    /**< durable spill file (created if absent, re-read if present),
                                    or NULL for a memory-only buffer; copied */
    uint64_t compact_bytes;    /**< rewrite the spill once it is larger than this and more than
                                    half of it is consumed or dropped; 0 = 64 MiB */
    rlp_log_fn log_fn;         /**< sink for warnings (a torn spill record); NULL = stderr */
    void *log_payload;         /**< passed to @ref log_fn */
} rlp_buffer_options;

#define RLP_BUFFER_OPTIONS_INIT \
    { RLP_BUFFER_OPTIONS_VERSION, 0, 1, RLP_BUFFER_FULL_BLOCK, RLP_WAIT_FOREVER, NULL, 0, NULL, NULL }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_buffer_options_init(rlp_buffer_options *opts, uint32_t version);

/**
 * Creates a replay buffer.
 *
 * With @ref rlp_buffer_options::spill_path every accepted push is
 * appended to that file and fsynced before rlp_replay_buffer_push()
 * returns, and every pull records what it consumed (and what was dropped as
 * stale) before it returns, so after a crash re-creating the buffer on the
 * same file restores exactly the groups that were accepted and not yet
 * consumed. A torn or corrupt last record (a push that never returned) is
 * cut off with a warning; corruption anywhere else fails with RLP_E_FORMAT
 * rather than losing accepted groups silently. The file is locked: one
 * buffer per file at a time. Its format (records with lengths and CRC-32s)
 * is described in docs/buffer-sync.md; it is read as untrusted input.
 *
 * @param[out] out  receives the buffer; free with rlp_replay_buffer_free()
 * @param opts      options, or NULL for the defaults (memory only, unbounded)
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO (the spill cannot be opened,
 *         read or written); RLP_E_STATE (another buffer holds the spill);
 *         RLP_E_FORMAT (the spill is not ours or is corrupt before its last
 *         record); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_replay_buffer_create(rlp_replay_buffer **out, const rlp_buffer_options *opts);

/**
 * Frees a buffer and the groups it holds (the spill file stays on disk
 * with them). No thread may be inside a call on it. NULL is a no-op.
 */
RLP_API void rlp_replay_buffer_free(rlp_replay_buffer *buf);

/**
 * Adds the trajectories of @p batch as groups: trajectories sharing a
 * group_id form one group (a push takes whole groups, so push a prompt's n
 * samples together). Each group is tagged with its version (see
 * rlp_buffer_options). All groups go in, or none.
 *
 * When the buffer is full (capacity counts groups), the full policy
 * decides: block until consumers make room, or fail at once. With a spill
 * the groups are on disk (fsynced) before this returns; concurrent pushes
 * share one fsync (group commit).
 *
 * @param buf    the buffer
 * @param batch  scored trajectories: every valid trajectory needs a finite
 *               reward. On RLP_OK the batch is left empty (its
 *               trajectories now belong to the buffer); on failure it is
 *               unchanged. An empty batch is a no-op.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, an unscored valid trajectory or
 *         another field a spill could not hold, named with its index; more
 *         groups than the capacity); RLP_E_AGAIN (full, FAIL policy);
 *         RLP_E_TIMEOUT (full past push_timeout_ms); RLP_E_CLOSED; RLP_E_IO
 *         (the spill write failed: the buffer stops accepting pushes);
 *         RLP_E_NOMEM.
 * Thread-safe: any number of producers may push at once, while consumers pull.
 */
RLP_API int rlp_replay_buffer_push(rlp_replay_buffer *buf, rlp_batch *batch);

/**
 * Takes @p n_groups whole groups for a consumer at policy version
 * @p version, oldest accepted first. Every group whose version is below
 * version − max_staleness is dropped on the way (counted in
 * rlp_buffer_stats::dropped_stale, never returned). Waits until
 * enough fresh groups are there, up to @p timeout_ms.
 *
 * @param[out] out      receives a new batch of the groups' trajectories
 *                      (each group contiguous); free with rlp_batch_free()
 * @param buf           the buffer
 * @param n_groups      groups wanted (≥ 1, ≤ the capacity when bounded)
 * @param version       the consumer's current policy version v
 * @param timeout_ms    0 = do not wait; RLP_WAIT_FOREVER = no limit
 * @return RLP_OK; RLP_E_AGAIN (not enough with timeout 0); RLP_E_TIMEOUT;
 *         RLP_E_CLOSED (closed and not enough left); RLP_E_INVALID_ARG;
 *         RLP_E_IO (the spill could not record the consumption: the groups
 *         stay in the buffer); RLP_E_NOMEM. Nothing is taken on failure.
 * Thread-safe: any number of consumers may pull at once.
 */
RLP_API int rlp_replay_buffer_pull(rlp_batch **out, rlp_replay_buffer *buf, size_t n_groups, uint64_t version,
                                   uint32_t timeout_ms);

/**
 * Closes the buffer: every blocked push and pull returns RLP_E_CLOSED, new
 * pushes fail with it, pulls still take what is there. Idempotent.
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_replay_buffer_close(rlp_replay_buffer *buf);

/** Counters of a replay buffer (groups unless said otherwise). */
typedef struct rlp_buffer_stats {
    uint32_t version;            /**< set by the library (1) */
    uint64_t size;               /**< groups held now */
    uint64_t trajectories;       /**< trajectories held now */
    uint64_t accepted;           /**< groups accepted by pushes since creation */
    uint64_t restored;           /**< groups restored from the spill at creation */
    uint64_t consumed;           /**< groups handed out by pulls */
    uint64_t dropped_stale;      /**< groups dropped for staleness */
    uint64_t rejected;           /**< pushes refused for lack of room (AGAIN or TIMEOUT) */
    uint64_t staleness_hist[RLP_BUFFER_STALENESS_BINS]; /**< consumed groups by v − version
                                                             (0 when negative); the last bin
                                                             counts everything ≥ its index */
    uint64_t max_staleness_seen; /**< largest v − version among consumed groups */
    uint64_t spill_bytes;        /**< size of the spill file now (0 without one) */
    uint64_t spill_records;      /**< records appended since creation */
    uint64_t spill_syncs;        /**< fdatasync calls (fewer than records when pushes share one) */
    uint64_t compactions;        /**< spill rewrites */
    uint64_t torn_bytes;         /**< bytes of a torn last record cut off at creation */
} rlp_buffer_stats;

/**
 * Reads the counters (one consistent snapshot).
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_replay_buffer_stats(rlp_buffer_stats *out, const rlp_replay_buffer *buf);

/* ------------------------------------------------------------------------ */
/* Synchronizer: policy versions, weight transports, the staleness gate     */
/* ------------------------------------------------------------------------ */

/** How trainer and rollout side share weights (values fixed; ARCHITECTURE.md §1). */
typedef enum rlp_sync_mode {
    RLP_SYNC_COLOCATED = 0,        /**< one thread trains and generates (verl/TRL default): publish
                                        keeps a borrowed pointer to the policy, pull copies from it
                                        (or does nothing for a share_weights engine); needs the
                                        in-process transport */
    RLP_SYNC_SEQUENTIAL_PULL = 1,  /**< Echo: the rollout side calls rlp_synchronizer_pull() before each
                                        generate call and runs at most η versions behind */
    RLP_SYNC_ASYNC = 2             /**< Echo/AReaL push-pull: the trainer publishes every version while
                                        rollout workers generate; they pull when ready (a pull from another
                                        thread during generation is handled by the engine's interrupt
                                        mode) and admit rollouts through the gate */
} rlp_sync_mode;

/** How published weights travel (values fixed). */
typedef enum rlp_sync_transport {
    RLP_TRANSPORT_IN_PROCESS = 0,  /**< publish keeps a frozen copy (rlp_policy_clone); pull copies it into
                                        the engine with rlp_rollout_engine_update_weights() */
    RLP_TRANSPORT_FILE = 1,        /**< publish writes DIR/v<version>/ (rlp_policy_save) and then the manifest
                                        DIR/latest.json (temporary name, fsync, rename); pull reads the
                                        manifest, verifies every file's CRC-32 and size, and loads with
                                        rlp_rollout_engine_load_weights(); works across processes */
    RLP_TRANSPORT_HTTP = 2,        /**< FILE, plus: pull tells the servers at @ref rlp_sync_options::urls to
                                        load the version (POST {url}/update_weights_from_disk, as `rlpost
                                        serve` and SGLang accept) and then sets a remote engine's version */
    RLP_TRANSPORT_COLLECTIVE = 3   /**< a broadcast over the process group @ref rlp_sync_options::comm
                                        (rlp_policy_broadcast(): NCCL between GPUs, or shared memory): the
                                        trainer rank (@ref rlp_sync_options::root) publishes, every other
                                        rank pulls into its local engine. Both are collectives: the root's
                                        k-th publish pairs with each rank's k-th pull, so a pull waits for
                                        the next publish (Echo's sequential pull in lockstep); SEQUENTIAL_PULL
                                        mode only */
} rlp_sync_transport;

/** Version of rlp_sync_options understood by this header (2 added comm and root). */
#define RLP_SYNC_OPTIONS_VERSION 2

/**
 * Options of rlp_synchronizer_create().
 *
 * The gate (AReaL, Fu et al. 2025, §5 "staleness-aware training"): with v
 * the latest published version, B = @ref batch_groups, η =
 * @ref max_staleness, `accepted` the groups released as accepted and
 * `running` those admitted and not yet released, a new rollout group may
 * start only while running < max_concurrent and accepted + running <
 * (η + v + 1)·B. Versions count optimizer steps (rlp_policy_version()), so
 * B is the number of groups the trainer consumes per version step: with k
 * optimizer steps per train call on G groups, B = G / k.
 */
typedef struct rlp_sync_options {
    uint32_t version;              /**< RLP_SYNC_OPTIONS_VERSION */
    int32_t mode;                  /**< rlp_sync_mode; default RLP_SYNC_SEQUENTIAL_PULL */
    int32_t transport;             /**< rlp_sync_transport; default RLP_TRANSPORT_IN_PROCESS */
    uint32_t max_staleness;        /**< η; default 1 */
    uint32_t batch_groups;         /**< B (≥ 1); default 1 */
    uint32_t max_concurrent;       /**< rollout groups in flight at most; 0 = no limit */
    uint64_t initial_version;      /**< v at creation (a resumed run's policy version); accepted starts at v·B */
    const char *dir;               /**< FILE/HTTP: folder of the published versions (created if absent);
                                        readers in other processes open the same folder; copied */
    uint32_t keep_versions;        /**< FILE/HTTP: version folders kept (K ≥ 1); default 3 */
    int32_t dtype;                 /**< FILE/HTTP: rlp_dtype of the saved weights; default RLP_DTYPE_F32 */
    const char *const *urls;       /**< HTTP: (n_urls) server base URLs, e.g. "http://127.0.0.1:8000"; copied */
    size_t n_urls;
    const char *api_key;           /**< HTTP: bearer token, or NULL: the first line of
                                        DIR/.rlpost-serve-token if that file exists (the token
                                        `rlpost serve --weights-dir DIR` demands for weight
                                        updates), read at each publish; copied */
    uint32_t timeout_ms;           /**< HTTP: per request (a server loads the weights before answering);
                                        0 = 120000 */
    uint32_t max_retries;          /**< HTTP: retries on connection errors, timeouts, 408, 429 and 5xx; default 3 */
    uint32_t verify_retries;       /**< FILE/HTTP readers: re-reads of the manifest after a checksum
                                        mismatch or a version pruned mid-load; default 5 */
    rlp_log_fn log_fn;             /**< sink for warnings; NULL = stderr */
    void *log_payload;             /**< passed to @ref log_fn */
    rlp_comm *comm;                /**< COLLECTIVE: the group (borrowed; must outlive the synchronizer) */
    int32_t root;                  /**< COLLECTIVE: the publishing (trainer) rank; default 0 */
} rlp_sync_options;

#define RLP_SYNC_OPTIONS_INIT                                                                             \
    { RLP_SYNC_OPTIONS_VERSION, RLP_SYNC_SEQUENTIAL_PULL, RLP_TRANSPORT_IN_PROCESS, 1, 1, 0, 0, NULL, 3, \
      RLP_DTYPE_F32, NULL, 0, NULL, 0, 3, 5, NULL, NULL, NULL, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_sync_options_init(rlp_sync_options *opts, uint32_t version);

/**
 * Creates a synchronizer. Trainer and rollout side may each have their own
 * (in different processes with the FILE or HTTP transport, pointed at the
 * same folder): a synchronizer that has not published itself learns the
 * latest version from the manifest. Run one gate per run, though: each
 * synchronizer admits by its own counts.
 *
 * @param[out] out  receives the synchronizer; free with rlp_synchronizer_free()
 * @param opts      options, or NULL for the defaults
 * @return RLP_OK; RLP_E_INVALID_ARG (bad enum, B = 0, K = 0, no dir for
 *         FILE/HTTP, no URLs for HTTP, COLOCATED with another transport);
 *         RLP_E_UNSUPPORTED (HTTP in a build without libcurl); RLP_E_IO (the
 *         folder cannot be created); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_create(rlp_synchronizer **out, const rlp_sync_options *opts);

/** Frees a synchronizer (and its snapshot of the weights). No thread may be
 *  inside a call on it. The published files stay. NULL is a no-op. */
RLP_API void rlp_synchronizer_free(rlp_synchronizer *sync);

/**
 * Publishes the policy's current weights as version rlp_policy_version():
 * call it after each train step. IN_PROCESS keeps a frozen copy (COLOCATED:
 * the pointer); FILE/HTTP write DIR/v<version>/ and then the manifest, and
 * remove old version folders beyond keep_versions (a reader still loading
 * one retries with the newest). Wakes rollouts waiting at the gate.
 *
 * @param sync    the synchronizer
 * @param policy  the trained policy; COLOCATED borrows it until the next
 *                publish or rlp_synchronizer_free()
 * @return RLP_OK (also when this version was already published: nothing is
 *         done); RLP_E_STATE (an older version than the last published);
 *         RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_NOMEM.
 * Thread-safe; publishes are serialized. One process writes a folder.
 */
RLP_API int rlp_synchronizer_publish(rlp_synchronizer *sync, const rlp_policy *policy);

/**
 * Brings a rollout engine to the latest published version if it is older
 * (Echo's pull): a local engine gets the in-process copy or the verified
 * files; a remote engine's servers are told to load the version (only
 * those not known to hold it already) and the engine's version is set once
 * all of them have it. A local share_weights engine needs nothing.
 *
 * @param sync    the synchronizer
 * @param engine  the engine; NULL (HTTP only) = just tell the servers
 * @return RLP_OK (also when there is nothing newer); RLP_E_FORMAT (the
 *         files failed their checksums on every retry, or the manifest is
 *         malformed; the engine keeps its weights); RLP_E_NETWORK (a server
 *         refused or could not be reached after its retries: the message
 *         names each failing URL; the others were updated, and the next pull
 *         retries the failed ones; the engine's version is not changed);
 *         RLP_E_STATE (a remote engine without the HTTP transport);
 *         RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_NOMEM.
 * Thread-safe, also while the engine generates on another thread (the
 * engine applies the update between decode steps).
 */
RLP_API int rlp_synchronizer_pull(rlp_synchronizer *sync, rlp_rollout_engine *engine);

/**
 * Admits one rollout group through the staleness gate (see
 * rlp_sync_options), waiting up to @p timeout_ms for a publish or a release
 * to open it. Call rlp_synchronizer_release() when the group is done.
 *
 * @param sync        the synchronizer
 * @param timeout_ms  0 = do not wait; RLP_WAIT_FOREVER = no limit
 * @return RLP_OK (running + 1); RLP_E_AGAIN (closed gate, timeout 0);
 *         RLP_E_TIMEOUT; RLP_E_CLOSED; RLP_E_INVALID_ARG.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_acquire(rlp_synchronizer *sync, uint32_t timeout_ms);

/**
 * Ends an admitted rollout group.
 *
 * @param sync      the synchronizer
 * @param accepted  non-zero: the group was pushed to the buffer (accepted + 1);
 *                  0: it was discarded (its slot is freed, nothing counted)
 * @return RLP_OK; RLP_E_STATE (nothing is running); RLP_E_INVALID_ARG.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_release(rlp_synchronizer *sync, int accepted);

/**
 * The latest published version: this synchronizer's last publish, or
 * (FILE/HTTP, when it has not published) the manifest's.
 * @return RLP_OK; RLP_E_FORMAT / RLP_E_IO (unreadable manifest);
 *         RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_synchronizer_version(uint64_t *out_version, rlp_synchronizer *sync);

/**
 * Closes the gate for good: waiting and later acquires return RLP_E_CLOSED.
 * Publish and pull keep working. Idempotent. Thread-safe.
 */
RLP_API int rlp_synchronizer_close(rlp_synchronizer *sync);

/** Counters of a synchronizer. */
typedef struct rlp_sync_stats {
    uint32_t version;            /**< set by the library (1) */
    int32_t mode, transport;     /**< as created */
    uint64_t policy_version;     /**< latest version known (published here or read from the manifest) */
    uint64_t accepted, running;  /**< the gate's counts */
    uint64_t admitted;           /**< acquires that succeeded */
    uint64_t gate_waits;         /**< acquires that found the gate closed (and waited or gave up) */
    uint64_t publishes;          /**< versions published */
    uint64_t pulls;              /**< pull calls */
    uint64_t weight_loads;       /**< pulls that changed an engine's weights (or told servers) */
    uint64_t checksum_retries;   /**< manifest re-reads after a mismatch or a vanished version */
    uint64_t http_requests;      /**< update requests sent (retries included) */
    uint64_t http_failures;      /**< servers that were not updated after their retries */
    uint64_t bytes_published;    /**< bytes written by FILE/HTTP publishes */
    double publish_seconds;      /**< total time in publish */
    double pull_seconds;         /**< total time in pulls that loaded weights */
} rlp_sync_stats;

/** Reads the counters (one consistent snapshot). RLP_OK or RLP_E_INVALID_ARG. Thread-safe. */
RLP_API int rlp_synchronizer_stats(rlp_sync_stats *out, const rlp_synchronizer *sync);

/* ------------------------------------------------------------------------ */
/* Process groups: data-parallel training and weight broadcast              */
/* ------------------------------------------------------------------------ */

/*
 * A process group (rlp_comm, "communicator"): world_size processes, one per device
 * (or per CPU share), that run collectives together. Data parallelism
 * (rlp_policy_set_comm()) all-reduces gradients through it; rlp_policy_broadcast()
 * sends weights from one rank to the others (the trainer to co-located
 * rollout engines).
 *
 * Every collective is called by every rank of the group, in the same order,
 * with the same sizes; a rank that calls with another size makes them all
 * fail with RLP_E_INVALID_ARG instead of corrupting memory. Sums are taken
 * in rank order 0, 1, …, so every rank receives the same bits and a rerun
 * reproduces them (SHM; NCCL's ring order is fixed for a given topology).
 */
/** How the ranks exchange data (values fixed). */
typedef enum rlp_comm_transport {
    RLP_COMM_AUTO = 0,  /**< NCCL on a CUDA context where NCCL loads, otherwise SHM */
    RLP_COMM_SHM = 1,   /**< POSIX shared memory between processes (or threads) of one machine; any
                             backend (device buffers are staged through host memory) */
    RLP_COMM_NCCL = 2   /**< NCCL on CUDA contexts (one GPU per rank, one or several machines); the
                             unique id travels through the rendezvous file, so it must be on a
                             filesystem every rank sees */
} rlp_comm_transport;

/** Reductions of rlp_comm_all_reduce() (values fixed). */
typedef enum rlp_reduce_op {
    RLP_REDUCE_SUM = 0,
    RLP_REDUCE_MAX = 1,
    RLP_REDUCE_MIN = 2
} rlp_reduce_op;

/** Version of rlp_comm_options understood by this header. */
#define RLP_COMM_OPTIONS_VERSION 1

/**
 * Options of rlp_comm_create(). Unset fields come from the environment,
 * torchrun-style: rank from RLPOST_RANK, else RANK; world size from
 * RLPOST_WORLD_SIZE, else WORLD_SIZE; rendezvous from RLPOST_RENDEZVOUS.
 */
typedef struct rlp_comm_options {
    uint32_t version;        /**< RLP_COMM_OPTIONS_VERSION */
    int32_t transport;       /**< rlp_comm_transport; default RLP_COMM_AUTO */
    int32_t rank;            /**< 0 … world_size − 1; −1 (default) = from the environment */
    int32_t world_size;      /**< ≥ 1; 0 (default) = from the environment */
    const char *rendezvous;  /**< path of the rendezvous file: rank 0 replaces it with a fresh one (JSON:
                                  world size, transport, the shared-memory name or NCCL id, its pid) and
                                  removes it when all ranks joined; the others wait for it. Use one path
                                  per run. NULL = RLPOST_RENDEZVOUS. Copied. */
    uint32_t timeout_ms;     /**< the rendezvous and every collective fail with RLP_E_TIMEOUT after this
                                  long without progress (a dead or stuck peer); 0 = 300000 */
} rlp_comm_options;

#define RLP_COMM_OPTIONS_INIT { RLP_COMM_OPTIONS_VERSION, RLP_COMM_AUTO, -1, 0, NULL, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_comm_options_init(rlp_comm_options *opts, uint32_t version);

/**
 * Joins a process group: blocks until all world_size ranks have joined
 * through the rendezvous file (or the timeout).
 *
 * @param[out] out  the communicator; free with rlp_comm_free()
 * @param ctx       context whose backend holds the buffers the group reduces (gradients); must outlive it
 * @param opts      options or NULL (all from the environment)
 * @return RLP_OK; RLP_E_INVALID_ARG (rank outside [0, world_size), world_size < 1, no rendezvous
 *         path, unknown transport, a rank that joined twice); RLP_E_UNSUPPORTED (NCCL on a CPU
 *         context, or NCCL not loadable); RLP_E_TIMEOUT (a rank did not come); RLP_E_IO;
 *         RLP_E_BACKEND (NCCL failed); RLP_E_NOMEM.
 */
RLP_API int rlp_comm_create(rlp_comm **out, rlp_context *ctx, const rlp_comm_options *opts);

/** Leaves the group. Peers still waiting in a collective for this rank fail
 *  with RLP_E_CLOSED instead of waiting for the timeout. NULL is a no-op. */
RLP_API void rlp_comm_free(rlp_comm *comm);

/**
 * This process's rank, the group's size and its transport (any may be NULL).
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_comm_info(const rlp_comm *comm, int32_t *rank, int32_t *world_size, int32_t *transport);

/**
 * Waits until every rank has called it. @return RLP_OK; RLP_E_TIMEOUT;
 * RLP_E_CLOSED (a peer left or failed; the group is unusable afterwards).
 */
RLP_API int rlp_comm_barrier(rlp_comm *comm);

/**
 * In-place all-reduce of @p n host doubles: afterwards every rank holds
 * op(values of rank 0, …, rank world−1), combined in rank order.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL values with n > 0, unknown op,
 *         ranks disagreeing on n or op); RLP_E_TIMEOUT; RLP_E_CLOSED; RLP_E_BACKEND.
 * Collectives on one communicator are serialised; call them from one thread per rank.
 */
RLP_API int rlp_comm_all_reduce(rlp_comm *comm, double *values, size_t n, int op);

/**
 * Broadcasts @p nbytes host bytes from rank @p root to all ranks (in place).
 * @return as rlp_comm_all_reduce(), plus RLP_E_INVALID_ARG for root outside the group.
 */
RLP_API int rlp_comm_broadcast(rlp_comm *comm, void *data, size_t nbytes, int32_t root);

/**
 * Data parallelism (the DDP pattern): after this call every
 * rlp_policy_train_step() and rlp_policy_train_rl() on @p policy is a
 * collective of the group. Each rank passes its own share of the step's
 * sequences (a rank may have none); the step's token and sequence totals
 * are summed over ranks before the loss sees them, the gradients are
 * summed after the backward (so a token-mean loss gives the gradient of
 * the whole global batch), and the norm, clipping and AdamW then run
 * identically everywhere, leaving bit-identical weights on all ranks.
 * RL steps also reduce their step normalisers, REINFORCE++'s batch
 * statistics and the reported statistics, and run the same number of
 * optimizer steps on every rank. Start all ranks from the same weights
 * (load the same file, or rlp_policy_broadcast()).
 *
 * @param policy  a trainable policy on the communicator's context
 * @param comm    the group (borrowed; must outlive its use), or NULL to train alone again
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL policy, another context); RLP_E_STATE (frozen policy).
 */
RLP_API int rlp_policy_set_comm(rlp_policy *policy, rlp_comm *comm);

/**
 * Collective: copies rank @p root's weights and version into @p policy on
 * every other rank (same architecture everywhere; trainable or frozen).
 * The weight broadcast of Echo's co-located rollout engines: the trainer
 * rank broadcasts after a step, a rollout rank receives into a frozen
 * policy and passes it to rlp_rollout_engine_update_weights().
 * Optimizer state is not sent: start data-parallel ranks with fresh
 * optimizers, or have each load the same rlp_policy_save_optimizer() file.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULLs, root outside the group, ranks whose parameter counts
 *         differ); RLP_E_TIMEOUT; RLP_E_CLOSED; RLP_E_BACKEND.
 */
RLP_API int rlp_policy_broadcast(rlp_policy *policy, rlp_comm *comm, int32_t root);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_H */
