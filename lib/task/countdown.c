/* Countdown problem generator: draws numbers, combines them with a random
 * expression tree in exact arithmetic, and keeps the result as the target
 * when it is an integer in range, so every problem is solvable by
 * construction and carries its witness. Must not verify answers (that is
 * the Countdown reward's job) nor know about prompts. */
#include "task/countdown.h"

#include "core/error.h"
#include "core/rng.h"

#include <stdio.h>
#include <string.h>

#define CD_STREAM_SALT UINT64_C(0x636f756e74646f77) /* "countdow" */
#define CD_MAX_TRIES 200000
#define CD_TREES_PER_DRAW 16 /* expressions tried before new numbers are drawn */

/* An exact rational num/den with den > 0. Operands are at most 10^4 and
 * at most 6 of them, so |num|, den ≤ 10^24 could overflow int64 in
 * principle: every operation is checked, and an overflow just rejects that
 * expression. */
typedef struct cd_q {
    int64_t num, den;
} cd_q;

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0)
        a = -a;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

static int q_make(cd_q *out, int64_t num, int64_t den)
{
    if (den == 0)
        return 0;
    if (den < 0) {
        if (num == INT64_MIN || den == INT64_MIN)
            return 0;
        num = -num;
        den = -den;
    }
    int64_t g = gcd64(num, den);
    out->num = num / g;
    out->den = den / g;
    return 1;
}

/* a op b; 0 on overflow or division by zero. */
static int q_apply(cd_q *out, cd_q a, cd_q b, char op)
{
    int64_t x, y, z;
    switch (op) {
    case '+':
    case '-':
        if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(b.num, a.den, &y) ||
            __builtin_mul_overflow(a.den, b.den, &z))
            return 0;
        if (op == '+' ? __builtin_add_overflow(x, y, &x) : __builtin_sub_overflow(x, y, &x))
            return 0;
        return q_make(out, x, z);
    case '*':
        if (__builtin_mul_overflow(a.num, b.num, &x) || __builtin_mul_overflow(a.den, b.den, &z))
            return 0;
        return q_make(out, x, z);
    case '/':
        if (b.num == 0)
            return 0;
        if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(a.den, b.num, &z))
            return 0;
        return q_make(out, x, z);
    default: return 0;
    }
}

int rlpi_cd_params_check(const rlpi_cd_params *p)
{
    if (p->min_count < 2 || p->max_count > RLPI_CD_MAX_NUMBERS || p->min_count > p->max_count)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "countdown: the count of numbers must lie in [2, %d] (got min %d, max %d)",
                              RLPI_CD_MAX_NUMBERS, p->min_count, p->max_count);
    if (p->min_number < 1 || p->max_number > 10000 || p->min_number > p->max_number)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "countdown: numbers must lie in [1, 10000] (got min %lld, max %lld)",
                              (long long)p->min_number, (long long)p->max_number);
    if (p->min_target < 1 || p->max_target > 1000000000 || p->min_target > p->max_target)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "countdown: the target must lie in [1, 10^9] (got min %lld, max %lld)",
                              (long long)p->min_target, (long long)p->max_target);
    return RLP_OK;
}

/* One random expression over all numbers: repeatedly combine two random
 * values of the pool (the pool shrinks by one each time), as a player
 * would. Writes the expression text when the result is an integer target
 * in range. */
static int try_tree(rlpi_cd_problem *pb, const rlpi_cd_params *p, rlpi_rng *r)
{
    static const char ops[4] = {'+', '-', '*', '/'};
    cd_q val[RLPI_CD_MAX_NUMBERS];
    char text[RLPI_CD_MAX_NUMBERS][256];
    int n = pb->count;
    for (int i = 0; i < n; i++) {
        val[i] = (cd_q){pb->numbers[i], 1};
        snprintf(text[i], sizeof text[i], "%lld", (long long)pb->numbers[i]);
    }
    while (n > 1) {
        int i = (int)rlpi_rng_below(r, (uint64_t)n);
        int j = (int)rlpi_rng_below(r, (uint64_t)(n - 1));
        if (j >= i)
            j++;
        char op = ops[rlpi_rng_below(r, 4)];
        cd_q out;
        if (!q_apply(&out, val[i], val[j], op))
            return 0;
        if (p->integer_steps && (out.den != 1 || out.num <= 0))
            return 0;
        char buf[256];
        /* the root needs no parentheses; inner nodes get them */
        int last = n == 2;
        int w = snprintf(buf, sizeof buf, last ? "%s %c %s" : "(%s %c %s)", text[i], op, text[j]);
        if (w < 0 || (size_t)w >= sizeof buf)
            return 0;
        /* the result takes the lower slot; the last value fills the upper */
        int lo = i < j ? i : j, hi = i < j ? j : i;
        val[lo] = out;
        memcpy(text[lo], buf, (size_t)w + 1);
        if (hi != n - 1) {
            val[hi] = val[n - 1];
            memcpy(text[hi], text[n - 1], sizeof text[hi]);
        }
        n--;
    }
    if (val[0].den != 1 || val[0].num < p->min_target || val[0].num > p->max_target)
        return 0;
    pb->target = val[0].num;
    memcpy(pb->solution, text[0], sizeof pb->solution);
    return 1;
}

int rlpi_cd_generate(rlpi_cd_problem *out, const rlpi_cd_params *p, uint64_t seed, uint64_t index)
{
    int rc = rlpi_cd_params_check(p);
    if (rc)
        return rc;
    rlpi_rng r;
    rlpi_rng_seed(&r, seed ^ CD_STREAM_SALT, index);
    rlpi_cd_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.count = p->min_count + (int)rlpi_rng_below(&r, (uint64_t)(p->max_count - p->min_count + 1));
    uint64_t span = (uint64_t)(p->max_number - p->min_number + 1);
    for (uint32_t t = 0; t < CD_MAX_TRIES; t++) {
        if (t % CD_TREES_PER_DRAW == 0)
            for (int i = 0; i < pb.count; i++)
                pb.numbers[i] = p->min_number + (int64_t)rlpi_rng_below(&r, span);
        if (try_tree(&pb, p, &r)) {
            pb.tries = t + 1;
            *out = pb;
            return RLP_OK;
        }
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED,
                          "countdown: no solvable problem with %d-%d numbers in [%lld, %lld] and a "
                          "target in [%lld, %lld] after %d tries",
                          p->min_count, p->max_count, (long long)p->min_number,
                          (long long)p->max_number, (long long)p->min_target,
                          (long long)p->max_target, CD_MAX_TRIES);
}
