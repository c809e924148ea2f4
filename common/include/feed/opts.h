/*
 * Command lines from one table: each row names a long option and what it
 * sets, with its bounds; feed_opts_parse runs getopt_long over the table, so
 * a tool declares its options once instead of an enum, a getopt table and a
 * switch. Used by the tools (feed-pack, feed-gen-dataset, feed-client-probe,
 * the benchmarks). Not thread-safe (getopt_long's globals): call it from main.
 */
#ifndef FEED_OPTS_H
#define FEED_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#define FEED_OPTS_MAX 64

/* One option; exactly one of flag..call is set. A table ends with a row whose name is NULL. */
typedef struct feed_opt {
    const char *name;                        /* without the leading "--" */
    bool *flag;                              /* takes no argument: set to true */
    uint32_t *u32;                           /* a decimal number in lo..hi */
    uint64_t *u64;                           /* the same */
    double *dbl;                             /* a decimal number in dlo..dhi */
    const char **str;                        /* the argument itself (argv's storage) */
    int (*call)(void *ctx, const char *arg); /* 0, or nonzero for a value it refuses */
    void *ctx;                               /* call's first argument */
    uint64_t lo, hi;
    double dlo, dhi;
} feed_opt;

/*
 * Parses argv's options (up to FEED_OPTS_MAX, plus -h and --help) against
 * opts; numbers must be whole decimal strings within bounds (feed/strutil.h).
 * 0: parsed, and argv[*operands..argc) are the operands; 1: help was asked
 * for; -1: a bad option or value, said on stderr as "PROG: ..." (getopt_long
 * names an unknown option itself).
 */
int feed_opts_parse(const char *prog, const feed_opt *opts, int argc, char **argv, int *operands);

#endif
