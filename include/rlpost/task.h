/**
 * @file rlpost/task.h
 * @brief librlpost: tasks and datasets (rlp_task).
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_TASK_H
#define RLPOST_TASK_H

#include "rlpost/core.h"
#include "rlpost/rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 *     tokenizer's chat template when rlp_task_next_batch() gets one; or
 *     an object of chat options, which also means true:
 *     {"enable_thinking": false} gives Qwen3's non-thinking generation
 *     prompt, see rlp_chat_options).
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_TASK_H */
