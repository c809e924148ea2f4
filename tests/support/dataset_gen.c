/*
 * Small ImageFolder datasets of real JPEGs for tests: feed-gen-dataset from
 * server/tools when it is built, else encoded here with libjpeg. Images are a
 * seed-dependent smooth pattern with some noise, so they compress like photos
 * (and the decoder's DCT scaling paths are exercised), at varied sizes. Also
 * the temp dir that holds one, and the reference epoch permutation tests
 * compare the client's plan with.
 */
#include "feedtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jpeglib.h>

#include "feed/errors.h"
#include "feed/rng.h"

static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

int feed_test_write_jpeg(const char *path, unsigned w, unsigned h, unsigned seed, int quality)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    int rc = FEED_EIO;
    uint8_t *row = NULL;
    if (w == 0 || h == 0 || w > 8192 || h > 8192)
        return FEED_EINVAL;
    FILE *f = fopen(path, "wb");
    if (!f)
        return FEED_EIO;
    row = malloc((size_t)w * 3);
    if (!row) {
        rc = FEED_ENOMEM;
        goto out;
    }
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    uint32_t s = mix32(seed * 2654435761u + 1);
    unsigned fx = 1 + s % 7, fy = 1 + (s >> 8) % 5, phase = (s >> 16) % 256;
    while (c.next_scanline < h) {
        unsigned y = c.next_scanline;
        for (unsigned x = 0; x < w; x++) {
            uint32_t n = mix32(s ^ (y * 65537u + x));
            row[3 * x + 0] = (uint8_t)((x * 255 / w + phase) + (n & 15));
            row[3 * x + 1] = (uint8_t)((y * 255 / h) * fy + ((n >> 4) & 15));
            row[3 * x + 2] = (uint8_t)(((x * fx + y * fy) & 255) ^ ((n >> 8) & 7));
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    rc = 0;
out:
    free(row);
    if (fclose(f) != 0 && rc == 0)
        rc = FEED_EIO;
    return rc;
}

static int run_gen_tool(const char *tool, const char *dir, unsigned classes, unsigned per_class,
                        unsigned seed)
{
    char cbuf[16], pbuf[16], sbuf[16];
    snprintf(cbuf, sizeof cbuf, "%u", classes);
    snprintf(pbuf, sizeof pbuf, "%u", per_class);
    snprintf(sbuf, sizeof sbuf, "%u", seed);
    pid_t pid = fork();
    if (pid < 0)
        return FEED_EIO;
    if (pid == 0) {
        execl(tool, tool, dir, "--classes", cbuf, "--per-class", pbuf, "--seed", sbuf,
              (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return FEED_EIO;
    return 0;
}

int feed_test_make_imagefolder(const char *dir, unsigned classes, unsigned per_class, unsigned seed)
{
    char tool[512], path[1024];
    const char *bdir = getenv("FEED_BUILD_DIR");
    if (classes == 0 || per_class == 0 || classes > 1000 || per_class > 10000)
        return FEED_EINVAL;
    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0)
        return FEED_EIO;
    if (bdir) {
        snprintf(tool, sizeof tool, "%s/server/tools/feed-gen-dataset", bdir);
        if (access(tool, X_OK) == 0 && run_gen_tool(tool, dir, classes, per_class, seed) == 0)
            return 0;
    }
    for (unsigned c = 0; c < classes; c++) {
        snprintf(path, sizeof path, "%s/class_%03u", dir, c);
        if (mkdir(path, 0755) != 0)
            return FEED_EIO;
        for (unsigned i = 0; i < per_class; i++) {
            unsigned s = seed * 1000003u + c * 10007u + i;
            unsigned w = 48 + mix32(s) % 273, h = 48 + mix32(s ^ 0x9e3779b9u) % 273;
            snprintf(path, sizeof path, "%s/class_%03u/img_%05u.jpg", dir, c, i);
            int rc = feed_test_write_jpeg(path, w, h, s, 85);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int feed_test_tmp_imagefolder(const char *prefix, char *root, size_t root_cap, char *dir,
                              size_t dir_cap, unsigned classes, unsigned per_class, unsigned seed)
{
    int rc = feed_test_tmpdir(prefix, root, root_cap);
    if (rc != 0)
        return rc;
    if ((size_t)snprintf(dir, dir_cap, "%s/data", root) >= dir_cap)
        return FEED_EINVAL;
    return feed_test_make_imagefolder(dir, classes, per_class, seed);
}

int feed_test_group_rmtree(void **state)
{
    const char *root = state ? *state : NULL;
    if (root && root[0])
        feed_test_rmtree(root);
    return 0;
}

uint64_t *feed_test_ref_perm(uint64_t n, uint64_t seed, uint32_t epoch)
{
    uint64_t *p = n ? malloc(n * sizeof(*p)) : NULL;
    if (!p)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        p[i] = i;
    feed_rng r;
    feed_rng_init(&r, seed, epoch, FEED_RNG_PERMUTATION_STREAM);
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = feed_rng_below(&r, i + 1);
        uint64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}
