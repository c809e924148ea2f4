/*
 * feed-bench's own feedd processes (--spawn-servers): fork/exec with an
 * optional CPU list (sched_setaffinity in the child, like taskset), wait for
 * the port file, stop with SIGTERM (SIGKILL after a grace period), and read a
 * process's CPU time from /proc for the report. Main thread only.
 */
#ifndef FEED_BENCH_SPAWN_H
#define FEED_BENCH_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct feedd_proc {
    pid_t pid;
    int port;
    char target[64]; /* "127.0.0.1:PORT" */
} feedd_proc;

/*
 * Start `feedd` serving dataset `name`=`data` with `threads` workers, pinned
 * to `cpus` ("0-3,8", NULL: no pinning); its output goes to log_path.
 * work_dir holds the port file. 0 or a negative FEED_E code, message in err.
 */
int feedd_spawn(const char *feedd, const char *name, const char *data, uint32_t threads,
                const char *cpus, const char *work_dir, const char *log_path, feedd_proc *out,
                char *err, size_t err_cap);
void feedd_stop(feedd_proc *p); /* accepts a never-started proc (pid <= 0) */

/* user + system CPU of a process in nanoseconds from /proc/PID/stat; 0 when unreadable. */
uint64_t proc_cpu_ns(pid_t pid);

/* Parse a CPU list ("0-3,8,10-11") into a bitmask of up to 1024 CPUs; 0 or FEED_EINVAL. */
int parse_cpu_list(const char *list, uint64_t mask[16]);

#endif
