/* Vectorised exp-based row kernels of the CPU backend: the logprob head's
 * softmax statistics and gradient, SiLU, GELU (tanh form), and the exponentials of the
 * attention softmax. glibc's expf is scalar (one call per element: ~10 % of
 * a train step, all of it in the head's 49,152-wide rows); these evaluate
 * a polynomial exp 16 lanes at a time and are compiled for AVX-512, AVX2
 * and baseline x86-64, picked at load time (GCC target_clones).
 *
 * Accuracy: the exp is Cephes' expf (range reduction by ln 2 in two parts,
 * a degree-6 polynomial), within 2 ulp of the correctly rounded value on
 * [-87.3, 88.7]; arguments below -87.3 give 0 (the softmax arguments are
 * ≤ 0, so only terms already below FLT_MIN are affected). Every clone does
 * the same operations in the same order without FMA contraction, so results
 * do not depend on which one runs. Sums that feed a normaliser are taken in
 * double, as before. */
#ifndef RLPI_BACKEND_CPU_VECMATH_H
#define RLPI_BACKEND_CPU_VECMATH_H

#include <stdint.h>

/* x[i] = exp(a·x[i] − b) in place; returns Σ x[i] (after) in double. */
double rlpi_vec_exp_affine_sum(float *x, int64_t n, float a, float b);

/* Attention of g query heads that share one key/value head, over nk cached
 * rows: for each head h < g, out[h] = softmax(scale · K q[h]) V, with the
 * rows of K and V `stride` floats apart, each hd long. s is scratch of
 * g · nk floats. Per head the same operations in the same order as a dot
 * product of 8 partial sums (lane l takes elements l, l+8, …; combined as
 * ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), then the elements past the last
 * multiple of 8), the softmax of rlpi_vec_exp_affine_sum and o += w·v row
 * by row: so the result for a head does not depend on g (how the caller
 * groups heads) nor on the clone that runs. Each K and V row is read once
 * for all g heads. */
#define RLPI_VEC_ATTEND_MAX_GROUP 16 /* the most heads one call takes */
void rlpi_vec_attend(float *const *out, const float *const *q, int g, const float *K, const float *V, int64_t stride,
                     int64_t nk, int64_t hd, float scale, float *s);

/* With z = row·inv_temp: *lse = log Σ exp z, *pz = Σ softmax(z)·z (both in
 * double). n ≥ 1. */
void rlpi_vec_row_stats(const float *row, int64_t n, float inv_temp, double *lse, double *pz);

/* The logprob/entropy gradient of one row, in place: with z = row·inv_temp,
 * p = exp(z − lse), row[j] = inv_temp·(−dl·p_j − dh·p_j·(z_j + zh)),
 * zh = H − lse. The target's +dl term is the caller's. */
void rlpi_vec_logprob_grad(float *row, int64_t n, float inv_temp, float lse, float zh, float dl, float dh);

/* SwiGLU: y = silu(g)·u, silu(g) = g·σ(g). */
void rlpi_vec_swiglu_fwd(float *y, const float *g, const float *u, int64_t n);

/* SwiGLU backward: dg = d·u·σ(g)·(1 + g·(1 − σ(g))), du = d·g·σ(g). */
void rlpi_vec_swiglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n);

/* GeGLU: y = gelu_tanh(g)·u, gelu_tanh(g) = 0.5·g·(1 + tanh(√(2/π)(g + 0.044715 g³))),
 * evaluated as g·σ(2·√(2/π)(g + 0.044715 g³)) with the polynomial exp. */
void rlpi_vec_geglu_fwd(float *y, const float *g, const float *u, int64_t n);

/* GeGLU backward: dg = d·u·gelu_tanh'(g), du = d·gelu_tanh(g). */
void rlpi_vec_geglu_bwd(float *dg, float *du, const float *d, const float *g, const float *u, int64_t n);

#endif
