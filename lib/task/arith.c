/* Arithmetic problems: enumeration of a split and rendering (arith.h). */
#include "task/arith.h"

#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>

int rlpi_arith_params_check(const rlpi_arith_params *p)
{
    if (!p->ops || (p->ops & ~(unsigned)(RLPI_ARITH_ADD | RLPI_ARITH_SUB | RLPI_ARITH_MUL)))
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"ops\" must name at least one of \"+\", \"-\", \"*\"");
    if (p->max_add < 1 || p->max_add > RLPI_ARITH_MAX_OPERAND)
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"max_add\" must be in [1, %d]", RLPI_ARITH_MAX_OPERAND);
    if (p->max_mul < 2 || p->max_mul > RLPI_ARITH_MAX_OPERAND)
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"max_mul\" must be in [2, %d]", RLPI_ARITH_MAX_OPERAND);
    if (p->holdout < 2 || p->holdout > RLPI_ARITH_MAX_HOLDOUT)
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"holdout\" must be in [2, %d]", RLPI_ARITH_MAX_HOLDOUT);
    if (p->split < RLPI_ARITH_ALL || p->split > RLPI_ARITH_EVAL)
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"split\" must be \"train\", \"eval\" or \"all\"");
    return RLP_OK;
}

static uint64_t splitmix64(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

int rlpi_arith_held_out(unsigned op, int a, int b, int holdout)
{
    /* the pair unordered: "7 + 5" and "5 + 7" fall on the same side */
    uint64_t lo = (uint64_t)(a < b ? a : b), hi = (uint64_t)(a < b ? b : a);
    uint64_t h = splitmix64(((uint64_t)op << 40) ^ (hi << 20) ^ lo);
    return h % (uint64_t)holdout == 0;
}

/* Visits every problem of the split; emit NULL only counts. */
static size_t visit(const rlpi_arith_params *p, rlpi_arith_problem *emit)
{
    static const unsigned order[3] = {RLPI_ARITH_ADD, RLPI_ARITH_SUB, RLPI_ARITH_MUL};
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        unsigned op = order[k];
        if (!(p->ops & op))
            continue;
        int lo = op == RLPI_ARITH_MUL ? 2 : 1, hi = op == RLPI_ARITH_MUL ? p->max_mul : p->max_add;
        for (int a = lo; a <= hi; a++)
            for (int b = lo; b <= (op == RLPI_ARITH_SUB ? a : hi); b++) {
                int held = rlpi_arith_held_out(op, a, b, p->holdout);
                if (p->split == RLPI_ARITH_ALL || held == (p->split == RLPI_ARITH_EVAL)) {
                    if (emit)
                        emit[n] = (rlpi_arith_problem){op, a, b};
                    n++;
                }
            }
    }
    return n;
}

int rlpi_arith_enumerate(rlpi_arith_set *out, const rlpi_arith_params *p)
{
    out->items = NULL;
    out->n = 0;
    int rc = rlpi_arith_params_check(p);
    if (rc)
        return rc;
    size_t n = visit(p, NULL);
    if (n == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "the %s split has no problems; widen the ranges",
                              p->split == RLPI_ARITH_EVAL ? "eval" : "train");
    if (!(out->items = malloc(n * sizeof *out->items)))
        return rlpi_error_set(RLP_E_NOMEM, "out of memory");
    out->n = visit(p, out->items);
    return RLP_OK;
}

void rlpi_arith_set_free(rlpi_arith_set *s)
{
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

int64_t rlpi_arith_answer(const rlpi_arith_problem *pb)
{
    int64_t a = pb->a, b = pb->b;
    return pb->op == RLPI_ARITH_ADD ? a + b : pb->op == RLPI_ARITH_SUB ? a - b : a * b;
}

const char *rlpi_arith_op_name(unsigned op)
{
    return op == RLPI_ARITH_ADD ? "+" : op == RLPI_ARITH_SUB ? "-" : "times";
}

void rlpi_arith_render(const rlpi_arith_problem *pb, char *buf, size_t cap)
{
    snprintf(buf, cap, "What is %d %s %d?", pb->a, rlpi_arith_op_name(pb->op), pb->b);
}
