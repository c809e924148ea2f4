/*
 * feed/opts.h: a getopt_long table built from the rows (an option's val is
 * 256 + its row), each argument parsed into what its row says.
 */
#include "feed/opts.h"

#include <getopt.h>
#include <stdio.h>

#include "feed/strutil.h"

#define OPT_HELP 'h'
#define OPT_FIRST 256

static int set(const feed_opt *o, const char *arg)
{
    uint32_t v32;
    if (o->flag) {
        *o->flag = true;
        return 0;
    }
    if (o->u32) {
        uint32_t hi = o->hi > UINT32_MAX ? UINT32_MAX : (uint32_t)o->hi;
        if (feed_parse_u32(arg, (uint32_t)o->lo, hi, &v32))
            return -1;
        *o->u32 = v32;
        return 0;
    }
    if (o->u64)
        return feed_parse_u64(arg, o->lo, o->hi, o->u64) ? -1 : 0;
    if (o->dbl)
        return feed_parse_double(arg, o->dlo, o->dhi, o->dbl) ? -1 : 0;
    if (o->str) {
        *o->str = arg;
        return 0;
    }
    return o->call(o->ctx, arg) ? -1 : 0;
}

int feed_opts_parse(const char *prog, const feed_opt *opts, int argc, char **argv, int *operands)
{
    struct option table[FEED_OPTS_MAX + 2];
    int n = 0;
    for (; opts[n].name; n++) {
        if (n == FEED_OPTS_MAX) {
            fprintf(stderr, "%s: more than %d options\n", prog, FEED_OPTS_MAX);
            return -1;
        }
        table[n] = (struct option){opts[n].name, opts[n].flag ? no_argument : required_argument,
                                   NULL, OPT_FIRST + n};
    }
    table[n] = (struct option){"help", no_argument, NULL, OPT_HELP};
    table[n + 1] = (struct option){NULL, 0, NULL, 0};
    optind = 0; /* glibc: start over, also after an earlier parse */
    int c;
    while ((c = getopt_long(argc, argv, "h", table, NULL)) != -1) {
        if (c == OPT_HELP)
            return 1;
        if (c < OPT_FIRST || c >= OPT_FIRST + n)
            return -1; /* getopt_long has said what is wrong */
        const feed_opt *o = &opts[c - OPT_FIRST];
        if (set(o, optarg)) {
            fprintf(stderr, "%s: invalid value '%s' for --%s\n", prog, optarg, o->name);
            return -1;
        }
    }
    *operands = optind;
    return 0;
}
