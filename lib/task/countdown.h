/* Countdown problems in the form TinyZero trains on (github.com/Jiayi-Pan/
 * TinyZero, examples/data_preprocess/countdown.py; the Countdown-Tasks-3to4
 * set): a few numbers and a target reachable with + - * / using each
 * number exactly once. Generation only; verifying answers is the reward's
 * job. Pure function of (params, seed, index). */
#ifndef RLPI_TASK_COUNTDOWN_H
#define RLPI_TASK_COUNTDOWN_H

#include <stdint.h>

#define RLPI_CD_MAX_NUMBERS 6

typedef struct rlpi_cd_params {
    int min_count, max_count;       /* numbers per problem, 2 ≤ min ≤ max ≤ 6 */
    int64_t min_number, max_number; /* each number drawn from [min, max], 1 ≤ min ≤ max ≤ 10000 */
    int64_t min_target, max_target; /* the target lies in [min, max], 1 ≤ min ≤ max ≤ 10^9 */
    int integer_steps;              /* 1: every intermediate value is a positive integer
                                       (the game show's rule); 0: exact rationals */
} rlpi_cd_params;

typedef struct rlpi_cd_problem {
    int count;
    int64_t numbers[RLPI_CD_MAX_NUMBERS]; /* in the order they are shown */
    int64_t target;
    char solution[256]; /* one expression over all numbers that equals target,
                           e.g. "(44 + 19) + 35" */
    uint32_t tries;     /* expressions sampled to hit the target range */
} rlpi_cd_problem;

/* RLP_E_INVALID_ARG naming the field at fault. */
int rlpi_cd_params_check(const rlpi_cd_params *p);

/* Problem `index` of the stream `seed`. RLP_E_UNSUPPORTED when the ranges
 * admit no solvable problem in a generous number of tries (say, a target
 * range far above what the numbers can make). */
int rlpi_cd_generate(rlpi_cd_problem *out, const rlpi_cd_params *p, uint64_t seed, uint64_t index);

#endif
