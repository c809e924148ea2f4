/*
 * feedd's descriptor budget, checked once at start by the main thread
 * before the datasets are opened (fd_budget.c).
 */
#ifndef FEED_SERVER_FD_BUDGET_H
#define FEED_SERVER_FD_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* The most local shard descriptors --shard-files 0 keeps open. */
#define FEEDD_SHARD_FILES_AUTO_MAX 4096

/*
 * The number of local shard descriptors to keep open (feed_blob_set_open_files)
 * under the open-file limit as it is now. The room: the limit less the
 * listener's reserve (listener.h), the descriptors in use, the remote
 * connections and one shard descriptor per worker beyond the cache (a reader
 * never waits for one); what the shard files leave of it is the clients'.
 * cfg->shard_files, or with 0 a quarter of the room, at most
 * FEEDD_SHARD_FILES_AUTO_MAX. 0, or FEED_EINVAL with err saying what the
 * limit leaves and for what, when the shard files would take more than half
 * of the room (or the room has none).
 */
int feedd_fd_budget(const feedd_config *cfg, uint32_t *shard_files, char *err, size_t err_cap);

#endif
