/* Named fp32 tensor set shared by all loaders and writers. */
#include "model/weights.h"

#include "core/checked.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

void rlpi_weights_init(rlpi_weights *w)
{
    memset(w, 0, sizeof *w);
}

void rlpi_weights_free(rlpi_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    memset(w, 0, sizeof *w);
}

static int grow(rlpi_weights *w)
{
    if (w->n < w->cap)
        return RLP_OK;
    size_t cap = w->cap ? w->cap * 2 : 64;
    rlpi_tensor *t = realloc(w->tensors, cap * sizeof *t);
    if (!t)
        return rlpi_error_set(RLP_E_NOMEM, "weights: out of memory");
    w->tensors = t;
    w->cap = cap;
    return RLP_OK;
}

int rlpi_weights_add(rlpi_weights *w, const char *name, int32_t n_dims, const int64_t *shape,
                     rlpi_tensor **out)
{
    if (!w || !name || n_dims < 1 || n_dims > RLPI_MAX_DIMS || !shape)
        return rlpi_error_set(RLP_E_INVALID_ARG, "weights: bad tensor '%s'", name ? name : "(null)");
    if (rlpi_weights_find(w, name))
        return rlpi_error_set(RLP_E_FORMAT, "weights: duplicate tensor '%s'", name);
    size_t n = 1, bytes;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || !rlpi_mul_size(&n, n, (size_t)shape[i]))
            return rlpi_error_set(RLP_E_OVERFLOW, "weights: tensor '%s' size overflows", name);
    }
    if (!rlpi_mul_size(&bytes, n, sizeof(float)))
        return rlpi_error_set(RLP_E_OVERFLOW, "weights: tensor '%s' size overflows", name);
    int rc = grow(w);
    if (rc)
        return rc;
    rlpi_tensor *t = &w->tensors[w->n];
    memset(t, 0, sizeof *t);
    t->alias_of = -1;
    t->name = strdup(name);
    t->data = calloc(n ? n : 1, sizeof(float));
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return rlpi_error_set(RLP_E_NOMEM, "weights: cannot allocate tensor '%s' (%zu floats)", name, n);
    }
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++)
        t->shape[i] = shape[i];
    t->n_elems = n;
    w->n++;
    if (out)
        *out = t;
    return RLP_OK;
}

int rlpi_weights_add_alias(rlpi_weights *w, const char *name, const char *target)
{
    const rlpi_tensor *tt = rlpi_weights_find(w, target);
    if (!tt)
        return rlpi_error_set(RLP_E_NOT_FOUND, "weights: alias '%s' of missing tensor '%s'", name, target);
    if (rlpi_weights_find(w, name))
        return rlpi_error_set(RLP_E_FORMAT, "weights: duplicate tensor '%s'", name);
    int32_t idx = (int32_t)(tt - w->tensors);
    int rc = grow(w);
    if (rc)
        return rc;
    rlpi_tensor *t = &w->tensors[w->n];
    *t = w->tensors[idx];
    t->name = strdup(name);
    if (!t->name)
        return rlpi_error_set(RLP_E_NOMEM, "weights: out of memory");
    t->data = NULL;
    t->alias_of = w->tensors[idx].alias_of >= 0 ? w->tensors[idx].alias_of : idx;
    w->n++;
    return RLP_OK;
}

const rlpi_tensor *rlpi_weights_find(const rlpi_weights *w, const char *name)
{
    for (size_t i = 0; w && i < w->n; i++)
        if (!strcmp(w->tensors[i].name, name))
            return &w->tensors[i];
    return NULL;
}

const float *rlpi_tensor_data(const rlpi_weights *w, const rlpi_tensor *t)
{
    return t->alias_of >= 0 ? w->tensors[t->alias_of].data : t->data;
}

int rlpi_weights_check_finite(const rlpi_weights *w, const char *source)
{
    for (size_t i = 0; w && i < w->n; i++) {
        const rlpi_tensor *t = &w->tensors[i];
        if (t->alias_of >= 0 || !t->data)
            continue;
        /* exponent bits all ones = NaN or Inf: integer compares vectorize
         * (the scan stays a small fraction of the load) and hold under
         * -ffast-math, where isfinite() may be folded to true */
        size_t bad = 0, first = SIZE_MAX;
        uint32_t first_bits = 0;
        for (size_t k = 0; k < t->n_elems; k++) {
            uint32_t u;
            memcpy(&u, &t->data[k], sizeof u);
            bad += (u & 0x7f800000u) == 0x7f800000u;
        }
        if (!bad)
            continue;
        for (size_t k = 0; k < t->n_elems && first == SIZE_MAX; k++) {
            memcpy(&first_bits, &t->data[k], sizeof first_bits);
            if ((first_bits & 0x7f800000u) == 0x7f800000u)
                first = k;
        }
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s%stensor %s holds %zu non-finite value%s (the first, %s, at element %zu)",
                              source ? source : "", source ? ": " : "", t->name, bad, bad == 1 ? "" : "s",
                              (first_bits & 0x007fffffu) ? "NaN" : "Inf", first);
    }
    return RLP_OK;
}
