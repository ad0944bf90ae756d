/* What replay_buffer.c shares with batch_file.c: grouping a batch's
 * trajectories (as a push does) and the buffer's log sink. */
#ifndef RLPI_BUFFER_INTERNAL_H
#define RLPI_BUFFER_INTERNAL_H

#include "rlpost.h"

#include "core/log.h"
#include "spill.h"

/* RLP_E_INVALID_ARG naming @p caller, the trajectory and the rule when a
 * trajectory of @p batch may not be pushed (rlpi_spill_check_traj). */
int rlpi_buffer_check_batch(const rlp_batch *batch, const char *caller);

/* The groups of @p batch (by group_id, in order of first appearance of
 * their lowest index), as shells whose trajectories are the batch's (not
 * copies): free them with rlpi_buffer_group_free_shell(). */
int rlpi_buffer_make_groups(const rlp_batch *batch, rlpi_group ***out, size_t *n_out);
void rlpi_buffer_group_free_shell(rlpi_group *g);

const rlpi_logger *rlpi_buffer_logger(const rlp_replay_buffer *b);

#endif
