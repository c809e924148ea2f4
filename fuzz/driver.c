/*
 * A standalone main() for the fuzz targets, so CI runs them with any C
 * compiler and no libFuzzer: every file in the corpus directories given on
 * the command line goes through LLVMFuzzerTestOneInput as it is, and then
 * mutated copies of them (bit flips, interesting values, truncations,
 * insertions, deletions, duplicated chunks) from a fixed-seed PRNG, so a run
 * is the same every time. The bugs it finds are reported by the sanitizers or
 * by the targets' own abort()s; the exit status is 0 otherwise.
 *
 *   driver [--mutations N] DIR...   (N in total over all files, default 2000)
 *
 * Files are read up to their first MiB.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "feed/strutil.h"

#define INPUT_MAX_BYTES (1u << 20)
#define FILES_MAX 4096
#define PATH_BYTES 4096

typedef struct input {
    uint8_t *data;
    size_t len;
} input;

typedef struct corpus {
    input files[FILES_MAX];
    size_t n;
} corpus;

/* splitmix64: small, fixed-seed, good enough to pick mutations. */
static uint64_t next_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(uint64_t *state, size_t n)
{
    return n ? (size_t)(next_rand(state) % n) : 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_whole(const char *path, input *in)
{
    int rc = -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        goto out;
    in->data = malloc(INPUT_MAX_BYTES);
    if (!in->data)
        goto out;
    in->len = fread(in->data, 1, INPUT_MAX_BYTES, f);
    rc = ferror(f) ? -1 : 0;
    uint8_t *fit = realloc(in->data, in->len ? in->len : 1);
    in->data = fit ? fit : in->data;
out:
    if (f)
        fclose(f);
    return rc;
}

/* Adds the regular files of dir, in name order (readdir's order is not stable). */
static int load_dir(const char *dir, corpus *c)
{
    int rc = 0;
    char *names[FILES_MAX];
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "driver: cannot open %s\n", dir);
        return -1;
    }
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == FILES_MAX || c->n + n == FILES_MAX) {
            fprintf(stderr, "driver: more than %d files\n", FILES_MAX);
            rc = -1;
        } else {
            names[n] = strdup(de->d_name);
            rc = names[n] ? 0 : -1;
            n += rc == 0;
        }
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_str);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_BYTES];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0 && read_whole(path, &c->files[c->n]) == 0)
            c->n++;
        else
            rc = -1;
        free(names[i]);
    }
    if (rc)
        fprintf(stderr, "driver: cannot read %s\n", dir);
    return rc;
}

/* Runs a copy of exactly len bytes, so a read past the end trips ASan. 0 or -1 (no memory). */
static int run_exact(const uint8_t *p, size_t len)
{
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact)
        return -1;
    memcpy(exact, p, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

/* One in-place edit of buf (len bytes, room for INPUT_MAX_BYTES); returns the new length. */
static size_t mutate_once(uint64_t *st, uint8_t *buf, size_t len)
{
    static const uint64_t interesting[] = {0,          1,          0x7f,     0x80,
                                           0xff,       0x7fff,     0xffff,   0x7fffffff,
                                           0xffffffff, UINT64_MAX, 1u << 16, 1u << 24};
    size_t pos = below(st, len);
    switch (below(st, 7)) {
    case 0: /* flip a bit */
        if (len)
            buf[pos] ^= (uint8_t)(1u << below(st, 8));
        break;
    case 1: /* a random byte */
        if (len)
            buf[pos] = (uint8_t)next_rand(st);
        break;
    case 2: { /* an interesting little-endian value, 1, 2, 4 or 8 bytes wide */
        size_t width = (size_t)1 << below(st, 4);
        uint64_t v = interesting[below(st, sizeof interesting / sizeof interesting[0])];
        for (size_t i = 0; i < width && pos + i < len; i++)
            buf[pos + i] = (uint8_t)(v >> (8 * i));
        break;
    }
    case 3: /* truncate */
        len = pos;
        break;
    case 4: { /* insert up to 16 random bytes */
        size_t k = 1 + below(st, 16);
        if (len + k <= INPUT_MAX_BYTES) {
            memmove(buf + pos + k, buf + pos, len - pos);
            for (size_t i = 0; i < k; i++)
                buf[pos + i] = (uint8_t)next_rand(st);
            len += k;
        }
        break;
    }
    case 5: { /* delete up to 16 bytes */
        size_t k = below(st, 17);
        k = k > len - pos ? len - pos : k;
        memmove(buf + pos, buf + pos + k, len - pos - k);
        len -= k;
        break;
    }
    default: { /* copy a chunk of up to 64 bytes over another place */
        size_t k = below(st, 65);
        size_t from = below(st, len);
        k = k > len - pos ? len - pos : k;
        k = k > len - from ? len - from : k;
        memmove(buf + pos, buf + from, k);
        break;
    }
    }
    return len;
}

int main(int argc, char **argv)
{
    int rc = 1;
    uint64_t mutations = 2000, st = 0x46454544u; /* "FEED" */
    int first = 1;
    static corpus c;
    uint8_t *buf = malloc(INPUT_MAX_BYTES);
    if (argc > 2 && strcmp(argv[1], "--mutations") == 0) {
        if (feed_parse_u64(argv[2], 0, UINT32_MAX, &mutations) != 0) {
            fprintf(stderr, "driver: bad --mutations '%s'\n", argv[2]);
            goto out;
        }
        first = 3;
    }
    if (!buf || first >= argc) {
        fprintf(stderr, "usage: %s [--mutations N] CORPUS_DIR...\n", argv[0]);
        goto out;
    }
    for (int i = first; i < argc; i++)
        if (load_dir(argv[i], &c) != 0)
            goto out;
    if (c.n == 0) {
        fprintf(stderr, "driver: no corpus files\n");
        goto out;
    }
    for (size_t i = 0; i < c.n; i++)
        if (run_exact(c.files[i].data, c.files[i].len) != 0)
            goto out;
    for (uint64_t m = 0; m < mutations; m++) {
        const input *in = &c.files[m % c.n];
        memcpy(buf, in->data, in->len);
        size_t len = in->len;
        size_t edits = 1 + below(&st, 4);
        for (size_t e = 0; e < edits; e++)
            len = mutate_once(&st, buf, len);
        if (run_exact(buf, len) != 0)
            goto out;
    }
    printf("%s: %zu corpus files, %llu mutated inputs, no failure\n", argv[0], c.n,
           (unsigned long long)mutations);
    rc = 0;
out:
    for (size_t i = 0; i < c.n; i++)
        free(c.files[i].data);
    free(buf);
    return rc;
}
