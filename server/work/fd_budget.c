/*
 * The descriptor budget at start (fd_budget.h). Main thread, once, before
 * the datasets open their files and before any listener runs. The reserve
 * below the open-file limit is the listener's (listener.h), computed the
 * same way: a connection whose descriptor lands in it is closed at once, so
 * the shard descriptors must leave room under it for the connections.
 */
#include "fd_budget.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/resource.h>

#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/strutil.h"
#include "listener.h"

/* Descriptors open now; a guess of 16 where /proc cannot tell. */
static uint64_t open_descriptors(void)
{
    uint64_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 16;
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n ? n - 1 : 0; /* less the directory's own */
}

int feedd_fd_budget(const feedd_config *cfg, uint32_t *shard_files, char *err, size_t err_cap)
{
    struct rlimit rl;
    uint64_t limit = INT32_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < INT32_MAX)
        limit = rl.rlim_cur;
    uint64_t reserve = LISTENER_FD_RESERVE_MIN + limit / LISTENER_FD_RESERVE_SHARE;
    uint64_t ceiling = limit > 2 * reserve ? limit - reserve : limit / 2;
    uint64_t used = open_descriptors(), remote = 0;
    for (size_t i = 0; i < cfg->n_datasets; i++)
        if (feed_blob_is_remote(cfg->datasets[i].path))
            remote = cfg->remote_connections;
    uint64_t fixed = used + remote + cfg->threads;
    uint64_t room = ceiling > fixed ? ceiling - fixed : 0;
    uint64_t n = cfg->shard_files;
    if (!n) {
        n = room / 4;
        if (n > FEEDD_SHARD_FILES_AUTO_MAX)
            n = FEEDD_SHARD_FILES_AUTO_MAX;
    }
    int rc = 0;
    if (n == 0 || n > room / 2) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap,
                     "the open-file limit %llu leaves %llu descriptors below its reserve of "
                     "%llu for the listener; less %llu in use, %llu remote connections and %u "
                     "workers, %llu are left, and %llu shard files (--shard-files) would take "
                     "more than half of them from the connections: raise the limit (ulimit -n) "
                     "or lower --shard-files",
                     (unsigned long long)limit, (unsigned long long)ceiling,
                     (unsigned long long)reserve, (unsigned long long)used,
                     (unsigned long long)remote, cfg->threads, (unsigned long long)room,
                     (unsigned long long)(n ? n : 1));
    } else {
        *shard_files = (uint32_t)n;
    }
    return rc;
}
