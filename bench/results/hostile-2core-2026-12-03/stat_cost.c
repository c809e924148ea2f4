/*
 * What the decoded cache's staleness check costs per hit: one stat() of the
 * sample's file, timed over every JPEG under DIR (warm dentries), PASSES
 * passes; prints ns per stat (median pass, range). Build and run: see
 * stat_cost.sh.
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PASSES 9
#define MAX_FILES 20000

static char *paths[MAX_FILES];
static int n;

static int add(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)f;
    if (type == FTW_F && n < MAX_FILES && strstr(p, ".JPEG"))
        paths[n++] = strdup(p);
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    double ns[PASSES];
    struct stat st;
    if (argc < 2 || nftw(argv[1], add, 16, FTW_PHYS) != 0 || n == 0)
        return 1;
    for (int p = 0; p < PASSES; p++) {
        double t0 = now();
        for (int i = 0; i < n; i++)
            stat(paths[i], &st);
        ns[p] = (now() - t0) / n;
    }
    qsort(ns, PASSES, sizeof ns[0], cmp);
    printf("stat: %d files, %d passes: %.0f ns median (%.0f-%.0f)\n", n, PASSES, ns[PASSES / 2],
           ns[0], ns[PASSES - 1]);
    return 0;
}
