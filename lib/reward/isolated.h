/* The scorer of a process-isolated reward function: worker processes that
 * load a reward library (isolated.c; wire format in isolation_proto.h). */
#ifndef RLPI_REWARD_ISOLATED_H
#define RLPI_REWARD_ISOLATED_H

#include "reward/scorer.h"

/* Starts n_workers workers (each loads library_path and reports ready)
 * and makes the scorer that talks to them; chunk = o->batch_size (already
 * resolved, >= 1). The caller runs it on n_workers executor threads.
 * RLP_OK, RLP_E_NOT_FOUND, RLP_E_CALLBACK, RLP_E_IO, RLP_E_TIMEOUT,
 * RLP_E_NOMEM (message set). */
int rlpi_isolated_scorer(rlpi_scorer **out, const char *library_path, const char *options_json,
                         const rlp_isolation_options *o, uint32_t n_workers);

#endif
