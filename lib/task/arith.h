/* Arithmetic word-free problems ("What is 17 + 26?") for the main job's
 * default task: every problem of a few operations over small operands,
 * split into a training part and a held-out part by a hash of the
 * unordered operand pair, so the two parts are disjoint by construction
 * (for any seeds) and "a + b" never trains while "b + a" evaluates.
 * Generation only; checking answers is the reward's job (gsm8k). Knows
 * nothing of cursors, datasets or tokenizers. */
#ifndef RLPI_TASK_ARITH_H
#define RLPI_TASK_ARITH_H

#include <stddef.h>
#include <stdint.h>

enum { RLPI_ARITH_ADD = 1u, RLPI_ARITH_SUB = 2u, RLPI_ARITH_MUL = 4u };

/* Which problems a task serves. */
enum { RLPI_ARITH_ALL = 0, RLPI_ARITH_TRAIN = 1, RLPI_ARITH_EVAL = 2 };

#define RLPI_ARITH_MAX_OPERAND 1000
#define RLPI_ARITH_MAX_HOLDOUT 100

typedef struct rlpi_arith_params {
    unsigned ops;       /* RLPI_ARITH_* bits, at least one */
    int max_add;        /* + and −: operands 1 … max_add (− keeps a ≥ b), 1 ≤ max_add ≤ 1000 */
    int max_mul;        /* ×: operands 2 … max_mul, 2 ≤ max_mul ≤ 1000 */
    int holdout;        /* one operand pair in `holdout` is held out (2 … 100) */
    int split;          /* RLPI_ARITH_ALL / _TRAIN / _EVAL */
} rlpi_arith_params;

typedef struct rlpi_arith_problem {
    unsigned op;        /* one RLPI_ARITH_* bit */
    int a, b;
} rlpi_arith_problem;

/* The problems of a split, in a fixed enumeration order (op, then a, then
 * b); independent of any seed. */
typedef struct rlpi_arith_set {
    rlpi_arith_problem *items;
    size_t n;
} rlpi_arith_set;

/* RLP_E_INVALID_ARG naming the field at fault. */
int rlpi_arith_params_check(const rlpi_arith_params *p);

/* Whether the unordered pair {a, b} of operation op belongs to the
 * held-out part: a fixed hash (splitmix64), never a seed. */
int rlpi_arith_held_out(unsigned op, int a, int b, int holdout);

/* Enumerates the problems of p->split. RLP_OK, RLP_E_INVALID_ARG (bad
 * params, or an empty split), RLP_E_NOMEM. */
int rlpi_arith_enumerate(rlpi_arith_set *out, const rlpi_arith_params *p);

void rlpi_arith_set_free(rlpi_arith_set *s);

/* The exact result. */
int64_t rlpi_arith_answer(const rlpi_arith_problem *pb);

/* "What is 17 + 26?", "What is 41 - 8?", "What is 7 times 12?" into buf
 * (at least 64 bytes). */
void rlpi_arith_render(const rlpi_arith_problem *pb, char *buf, size_t cap);

/* "+", "-", "times". */
const char *rlpi_arith_op_name(unsigned op);

#endif
