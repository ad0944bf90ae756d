/* The one thing the replay buffer (lib/buffer) reads from a synchronizer
 * (lib/sync): its η, fixed when the synchronizer is created. The buffer
 * includes core alone and sync sits on other layers, so the declaration
 * lives here, in the layer both include; lib/sync/synchronizer.c defines it
 * (and includes this header, so the two cannot disagree). Nothing else of
 * the synchronizer belongs here. */
#ifndef RLPI_CORE_SYNC_ETA_H
#define RLPI_CORE_SYNC_ETA_H

#include "rlpost.h"

#include <stdint.h>

/* rlp_sync_options::max_staleness of @p sync as created. Thread-safe
 * (the value never changes). */
uint32_t rlpi_sync_max_staleness(const rlp_synchronizer *sync);

#endif
