/* Internal hooks of the RL step (rl_step.c): whether π_prox gets a forward
 * pass of its own, and a count of those passes. For tests and benchmarks
 * that compare the step that reuses the training forward's logprobs as
 * π_prox with the step that recomputes them; nothing else should set it. */
#ifndef RLPI_ALGO_RL_STEP_H
#define RLPI_ALGO_RL_STEP_H

#include <stdint.h>

/* 1: every RL step runs the separate π_prox forward (the behaviour before
 * the reuse); 0 (the default): it is skipped where the training forward
 * gives the same logprobs (one epoch, one mini-batch, no consumer of π_prox
 * before training). Process-wide; set it while no step runs. */
void rlpi_rl_force_prox_forward(int on);

/* π_prox forward passes (rlp_policy_logprobs over a step's batch) run by
 * RL steps in this process so far; π_ref passes are not counted. */
uint64_t rlpi_rl_prox_forwards(void);

#endif
