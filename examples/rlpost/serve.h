/* `rlpost serve`: an OpenAI-compatible rollout server on the local engine.
 * The parts and what each must not do:
 *   cmd_serve.c   options, model and engine, start, signals, clean shutdown
 *   serve_http.c  libmicrohttpd: routing, bearer auth, body limits, HTTP
 *                 errors, SSE responses; never touches the engine's batch
 *   serve_api.c   OpenAI/vLLM request parsing and response JSON; no locking
 *                 except the stream buffer append
 *   serve_sched.c the job queue and the ONE generation thread that drains
 *                 every pending job into one rlp_rollout_generate() call
 *   serve_weights.c  which files of --weights-dir GET /v1/rlpost/weights/
 *                 may serve (the relay's parent endpoint), Range parsing
 *   serve_run.c   --weights-from (the relay follower thread) and signals,
 *                 shared with `rlpost weights-serve` (cmd_weights_serve.c)
 * Public API of librlpost only (rlpost.h), plus jansson and libmicrohttpd. */
#ifndef RLPOST_SERVE_H
#define RLPOST_SERVE_H

#include "rlpost.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Limits of one request (beyond them: 400). */
#define SERVE_MAX_N 128            /* samples per prompt */
#define SERVE_MAX_SAMPLES 1024     /* samples per request, all prompts */
#define SERVE_MAX_PROMPTS 256      /* prompts per /v1/completions request */
#define SERVE_MAX_STOPS 16         /* stop strings */
#define SERVE_MAX_STOP_BYTES 256   /* bytes per stop string */
#define SERVE_MAX_STOP_IDS 64      /* stop_token_ids */
#define SERVE_MAX_MESSAGES 1024    /* chat messages */
#define SERVE_MAX_LOGPROBS 20      /* as vLLM: top alternatives asked (only the chosen one is returned) */

/* Tokens: at most this many characters; generated ones are this many
 * random bytes in hex, in this file of the weights folder. */
#define SERVE_TOKEN_MAX 256
#define SERVE_TOKEN_BYTES 32
#define SERVE_TOKEN_FILE ".rlpost-serve-token"

typedef struct serve_config {
    const char *model_name;        /* "model" of responses and /v1/models */
    const char *token;             /* bearer token of every endpoint but /health, or NULL: open */
    const char *update_token;      /* bearer token of /update_weights_from_disk (never NULL when
                                      weights_root is set): token, or the generated one */
    const char *weights_root;      /* realpath of --weights-dir: weight updates load only folders
                                      below it; NULL: weight updates are refused (403) */
    size_t max_pending;            /* generation requests admitted at once; beyond: 503 */
    uint32_t header_timeout_ms;    /* a request's headers must be in this long after the connection
                                      opened or the previous answer ended (not reset by each byte) */
    size_t max_body_bytes;         /* request body limit (413 beyond) */
    uint32_t max_seq_len;          /* engine KV capacity per sequence (prompt + completion) */
    int32_t vocab_size;            /* model vocabulary: token ids are checked against it */
    int32_t logprobs_mode;         /* rlp_logprobs_mode unless a request says otherwise */
    uint32_t batch_wait_ms;        /* how long the generator gathers requests after the first */
} serve_config;

typedef struct serve_job serve_job;

typedef struct serve_text {
    char *p;
    size_t n, cap;
} serve_text;

typedef struct serve_server {
    serve_config cfg;
    rlp_rollout_engine *engine;    /* owned by cmd_serve.c */
    const rlp_tokenizer *tok;      /* the engine's */

    pthread_mutex_t mu;            /* the queue, job states, stream buffers, counters */
    pthread_cond_t queue_cv;
    serve_job *head, *tail;        /* jobs waiting for the next generate call */
    size_t n_queued, n_running;
    int stopping;                  /* atomic: no new jobs; sequences in flight abort */
    int gen_started;
    pthread_t gen_thread;
    uint64_t n_calls;              /* generate calls made */
    uint64_t n_jobs_done;
    uint64_t max_jobs_per_call;    /* most requests batched into one call */
    uint64_t next_id;              /* request ids and default seeds */
    uint64_t seed_base;

    pthread_mutex_t update_mu;     /* one weight update at a time; also refused_* */
    uint64_t refused_version;      /* the newest version a weight update was refused for since the last
                                      load (0: none); a request asking for it fails at once */
    char refused_why[256];
    struct serve_follow *follow;   /* --weights-from: weight updates wait for the relay to deliver
                                      the version instead of loading a path; NULL: none */

    /* counters of the HTTP guard (atomic) */
    size_t n_admitted;             /* generation requests admitted and not yet answered */
    uint64_t n_busy;               /* requests answered 503 for overload */
    uint64_t n_timed_out;          /* connections closed for headers or a body too slow */
    uint64_t n_refused_ip;         /* connections refused over the per-address limit */
    size_t n_conns;                /* open connections */
} serve_server;

enum { JOB_COMPLETION = 0, JOB_CHAT = 1 };
enum { JOB_QUEUED = 0, JOB_RUNNING = 1, JOB_DONE = 2 };

/* One HTTP request's generation work, shared by its connection thread and
 * the generation thread (reference-counted under srv->mu). */
struct serve_job {
    serve_job *next;
    serve_server *srv;
    int refs;
    int kind;
    char id[48];
    int64_t created;

    /* request (immutable once queued) */
    size_t n_prompts;
    int32_t **prompts;             /* (n_prompts) malloc'd ids */
    size_t *prompt_lens;
    rlp_sampling_options sampling; /* stop / stop_token_ids point into the job */
    char **stop;                   /* (sampling.n_stop) */
    int32_t *stop_ids;             /* (sampling.n_stop_token_ids) */
    int logprobs;                  /* completions: -1 none, else k >= 0; chat: 0/1 */
    int tokens_as_ids;             /* vLLM return_tokens_as_token_ids */
    int return_token_ids;          /* also send prompt_token_ids */
    uint64_t min_version;          /* "min_weight_version": generate with weights at least this new */
    int stream, include_usage;
    int tool_parse;                /* chat with tools, tool_choice "auto": <tool_call> blocks → tool_calls */
    int tool_parallel;             /* parallel_tool_calls (0: the first call only) */
    int client_fd;                 /* the connection's socket, for hang-up checks (-1: unknown) */

    /* state, under srv->mu */
    int state;
    int cancelled;                 /* atomic: the client went away */
    pthread_cond_t cv;
    int status;                    /* RLP_OK or the failure (when DONE) */
    char *error;                   /* its message */
    rlp_batch *result;             /* prompt-major trajectories (when DONE and RLP_OK) */

    /* streaming: the generation thread appends, the connection thread reads */
    char *sse;
    size_t sse_len, sse_cap, sse_pos;
    int sse_done;
    size_t remaining;              /* sequences not finished (generation thread only) */
    uint64_t completion_tokens;    /* (generation thread only) */
    size_t *choice_chars;          /* (n_prompts · n) code points streamed per choice */
    uint64_t *choice_version;      /* (n_prompts · n) version of the choice's last token (+1; 0 = none yet) */
    unsigned char *choice_started; /* (n_prompts · n) chat: role already sent */
    serve_text *choice_text;       /* (n_prompts · n) chat with tools: the text held back until the
                                      choice ends (then content and tool_calls), else NULL */
};

/* ---- serve_api.c ---- */

/* Parses a request body into a new job (refs = 1). On a bad request
 * returns NULL with a message in err (the caller answers 400). */
serve_job *serve_parse_completion(serve_server *srv, const char *body, size_t len, char *err, size_t errlen);
serve_job *serve_parse_chat(serve_server *srv, const char *body, size_t len, char *err, size_t errlen);
/* Parses a JSON object body with the guards every endpoint uses (depth,
 * duplicate keys, UTF-8). NULL with a message in err. */
json_t *serve_parse_body(const char *body, size_t len, char *err, size_t errlen);
/* The whole response of a finished job. */
json_t *serve_response(serve_server *srv, const serve_job *job);
/* One stream event of a job: appends SSE chunks (and, after the job's last
 * sequence ends, the usage chunk and "data: [DONE]"). Generation thread. */
void serve_stream_event(serve_server *srv, serve_job *job, size_t prompt, const rlp_stream_event *ev);
/* Ends a job's stream early with an error chunk and [DONE] (under srv->mu). */
void serve_stream_fail(serve_job *job, const char *message);
/* A JSON string of arbitrary bytes: ill-formed UTF-8 becomes U+FFFD. */
json_t *serve_json_text(const char *s, size_t n);
void serve_job_free(serve_job *job);

/* ---- serve_sched.c ---- */

int serve_sched_start(serve_server *srv);
/* Stops taking jobs, aborts sequences in flight, fails queued jobs with
 * RLP_E_CLOSED, joins the generation thread. */
void serve_sched_stop(serve_server *srv);
/* Queues a job (takes a reference). RLP_E_CLOSED when shutting down. */
int serve_submit(serve_server *srv, serve_job *job);
/* Waits until the job is done; polls `fd` (the client socket, or -1) for a
 * hang-up meanwhile and cancels the job if the client went away.
 * Returns 0 when done, -1 when the client left. */
int serve_wait(serve_server *srv, serve_job *job, int fd);
/* Blocking read of a job's SSE stream (libmicrohttpd content reader):
 * bytes copied; -1 at the end of the stream; -2 when the client on `fd`
 * (or -1) hung up, which cancels the job. */
ssize_t serve_stream_read(serve_job *job, char *buf, size_t max, int fd);
void serve_job_cancel(serve_job *job);
void serve_job_unref(serve_job *job);

/* ---- serve_http.c ---- */

typedef struct serve_http serve_http;
/* Starts libmicrohttpd on addr (thread per connection) and the guard
 * thread that closes connections past their header/body deadline. NULL
 * with a message on stderr. */
serve_http *serve_http_start(serve_server *srv, const void *sockaddr, int ipv6);
/* The port the daemon is bound to (after --port 0). */
unsigned serve_http_port(serve_http *h);
/* Stops the guard, then the daemon (joins every connection thread). NULL is a no-op. */
void serve_http_stop(serve_http *h);
struct sockaddr;
/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104: the peers exempt from the
 * per-address limit, and the binds that may go without a token. */
bool serve_addr_loopback(const struct sockaddr *sa);
struct addrinfo;
/* The address to listen on for --host/--port: getaddrinfo, and a refusal
 * of a non-loopback bind without a token (anyone who reaches the port
 * could use it). 0 with *ai (freeaddrinfo it), or -1 with a message on
 * stderr prefixed by `cmd`. */
int serve_listen_addr(const char *cmd, const char *host, long long port, bool has_token, struct addrinfo **ai);

/* ---- serve_weights.c ---- */

/* The prefix under which --weights-dir is served read-only (the relay
 * transport's parent endpoint). */
#define SERVE_WEIGHTS_ROUTE "/v1/rlpost/weights/"
/* Opens `rel` below `root` for reading if it is DIR/latest.json or
 * DIR/v<N>/<name> (a plain, not hidden name), never through a symlink:
 * 200 with *fd (the caller closes it), its size and whether it is the
 * manifest; 404 for anything else. While the server's relay client
 * fetches version N, latest.json is N's manifest and a file of vN not
 * complete yet is its part file (*growing: *size is its final size; read
 * it with serve_weights_read). May wait up to 30 s for such a file to
 * appear. */
int serve_weights_open(const char *root, const char *rel, int *fd, uint64_t *size, bool *manifest, bool *growing);
/* pread that waits (up to 30 s without a byte) for a growing file of
 * version `version` below `root` to reach `off`: bytes read, or -1 (also
 * at once when the relay client gave that version up). */
ssize_t serve_weights_read(const char *root, uint64_t version, int fd, uint64_t off, char *buf, size_t max);
/* A Range header against a file of `size` bytes: 1 with [*first, *last]
 * (inclusive), 0 to send the whole file (no header, several ranges or an
 * invalid one: RFC 9110 §14.2), -1 unsatisfiable (416). */
int serve_range_parse(const char *header, uint64_t size, uint64_t *first, uint64_t *last);

/* ---- serve_run.c ---- */

/* --weights-from: a thread that mirrors a parent's weights folder into
 * --weights-dir (RLP_TRANSPORT_RELAY) every poll_ms and loads each new
 * version into srv->engine (none: mirror only), logging "weight version N
 * (mirrored and loaded in S s; unix T)" to stderr. */
typedef struct serve_follow {
    serve_server *srv;
    rlp_synchronizer *sync;
    const char *cmd, *from;
    unsigned poll_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* wakes the thread (stop, or a waiter's kick) */
    pthread_cond_t done_cv;        /* a pull ended */
    bool stop, started, kick;
    uint64_t pulls_done;           /* under mu */
    char last_error[512];          /* of the last failed pull, under mu ("" after a good one) */
    pthread_t thread;
} serve_follow;
/* Starts it (`f` zeroed or stopped before): from[0] is the parent, the
 * others fallbacks tried in order while it fails (RLP_TRANSPORT_RELAY's
 * urls; copied). -1 with a message on stderr. */
int serve_follow_start(serve_follow *f, serve_server *srv, const char *dir, const char *const *from, size_t n_from,
                       const char *token, unsigned poll_ms);
/* A weight update on a following server (the trainer's HTTP transport
 * telling it to load `version`): pulls at once and waits up to timeout_ms
 * until this node holds `version` or newer. 0, or -1 with the reason in
 * why. Thread-safe. */
int serve_follow_wait(serve_follow *f, uint64_t version, unsigned timeout_ms, char *why, size_t n);
/* Stops it, waiting for a pull in progress (a stalled download ends at its
 * stall limit). Safe on a zeroed or stopped one. */
void serve_follow_stop(serve_follow *f);
/* SIGINT/SIGTERM go to a pipe (SIGPIPE ignored); blocked in this thread
 * and the threads it starts from now on. -1 (errno) if the pipe fails. */
int serve_signals_block(void);
/* Unblocks them here and waits for one; returns it. */
int serve_signals_wait(void);

/* ---- serve_join.c ---- */

/* --join TRAINER_URL: a thread that registers this server with the
 * trainer's swarm coordinator, heartbeats, registers again on 404, retries
 * with backoff while the trainer is unreachable (built with libcurl only). */
typedef struct serve_join {
    const rlp_rollout_engine *engine; /* its weight_version goes into each heartbeat */
    char trainer[512];                /* the coordinator's base URL */
    char url[RLP_SERVER_URL_MAX];     /* what the trainer calls (--advertise) */
    char id[33];                      /* 32 hex digits */
    const char *token;
    double heartbeat_s;               /* what the trainer asked for */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, registered, inited, started;
    pthread_t thread;
} serve_join;
/* The worker id kept in DIR/.rlpost-worker-id (made, 0600, 128 random
 * bits, when absent). -1 with a message in err. */
int serve_join_id(const char *dir, char *id, size_t n, char *err, size_t errlen);
/* Starts it (`j` is overwritten). -1 with a message on stderr. */
int serve_join_start(serve_join *j, const rlp_rollout_engine *engine, const char *trainer, const char *advertise,
                     const char *dir, const char *token);
/* Stops the thread and, when registered, tells the trainer it leaves
 * (3 s at most). Safe on a zeroed or stopped one. */
void serve_join_stop(serve_join *j);

/* ---- serve_token.c ---- */

/* The token a server demands: `token` (--token), else the first line of
 * `token_file` (into buf), else RLPOST_SERVE_TOKEN, else none (*out NULL).
 * -1 with a message on stderr prefixed by `cmd` (both given, an unreadable
 * file, a token that is not 1..SERVE_TOKEN_MAX visible ASCII characters). */
int serve_token_resolve(const char *cmd, const char *token, const char *token_file, char *buf, size_t cap,
                        const char **out);
/* One --weights-from URL (http:// or https://) appended to urls[*n] (at
 * most `cap`); false if it is not one or there are too many. */
bool serve_weights_from_add(const char *val, const char **urls, size_t *n, size_t cap);
/* --weights-poll-s: seconds in [0.01, 3600]; false otherwise. */
bool serve_poll_s_parse(const char *val, double *out);

/* 1..SERVE_TOKEN_MAX visible ASCII characters (it travels in a header). */
bool serve_token_ok(const char *t);
/* The token in a file (its first line). -1 with a message in err. */
int serve_token_read(const char *path, char *out, size_t n, char *err, size_t errlen);
/* The weight-update token of DIR: DIR/SERVE_TOKEN_FILE, created (0600,
 * random) if absent, refused if another user could have written it.
 * Its path goes to `path`. -1 with a message in err. */
int serve_token_dir(const char *dir, char *out, size_t n, char *path, size_t pn, char *err, size_t errlen);

#endif
