/*
 * Tests of the feed-pack tool, run as a child process from
 * ${FEED_BUILD_DIR}/server/tools: byte-for-byte round trips from ImageFolder
 * trees, re-encoded packs decoded with libjpeg (sizes, colours, every image
 * its own), a tool killed by SIGINT or SIGTERM mid-pack leaving nothing
 * behind, and the ImageNet sample repacked. Helpers: pack_testlib.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "feed/buf.h"
#include "feed/crc32c.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/pack.h"
#include "feedtest_skip.h"
#include "pack_testlib.h"

extern char **environ;

static pid_t spawn_feed_pack(const char *const *args, int stderr_fd)
{
    const char *build = getenv("FEED_BUILD_DIR");
    if (!build)
        fail_msg("FEED_BUILD_DIR is not set (run under ctest)");
    char tool[1024];
    snprintf(tool, sizeof(tool), "%s/server/tools/feed-pack", build);
    char *argv[16];
    int n = 0;
    argv[n++] = tool;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    if (stderr_fd >= 0)
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, stderr_fd, STDERR_FILENO), 0);
    pid_t pid;
    int rc = posix_spawn(&pid, tool, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc)
        fail_msg("spawn %s: %s", tool, strerror(rc));
    return pid;
}

/* Runs feed-pack with args; returns its exit status. */
static int run_feed_pack(const char *const *args)
{
    pid_t pid = spawn_feed_pack(args, -1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_tool_round_trip(void **state)
{
    (void)state;
    make_byte_tree();
    char src[1024], dst[1024];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "tool.pack");
    const char *args[] = {src, dst, "--threads", "3", NULL};
    assert_int_equal(run_feed_pack(args), 0);
    feed_dataset *tree = open_path("tree", NULL);
    feed_dataset *pack = open_path("tool.pack", NULL);
    assert_same_dataset(tree, pack);
    /* A pack is a valid source too, and repacking it changes nothing. */
    char again[1024];
    path_in(again, sizeof(again), "again.pack");
    const char *args2[] = {dst, again, NULL};
    assert_int_equal(run_feed_pack(args2), 0);
    size_t la, lb;
    uint8_t *a = read_all(dst, &la);
    uint8_t *b = read_all(again, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    feed_dataset_close(pack);
    feed_dataset_close(tree);
}

/* Tree -> tar shards -> pack -> tree with the tool, each the same dataset; --index rebuilds indexes. */
static void test_tool_shards_either_way(void **state)
{
    (void)state;
    make_byte_tree(); /* 3 classes of 7, 8 and 9 samples */
    char src[1024], shards[1024], pat[1100], pack[1024], back[1024];
    path_in(src, sizeof(src), "tree");
    path_in(shards, sizeof(shards), "sh");
    path_in(pack, sizeof(pack), "from-shards.pack");
    path_in(back, sizeof(back), "back");
    snprintf(pat, sizeof(pat), "%s-{000000..000002}.tar", shards);
    const char *to_tar[] = {src, shards, "--format", "tar", "--shard-samples", "10", NULL};
    assert_int_equal(run_feed_pack(to_tar), 0);
    const char *to_pack[] = {pat, pack, NULL};
    assert_int_equal(run_feed_pack(to_pack), 0);
    const char *to_tree[] = {pack, back, "--format", "folder", NULL};
    assert_int_equal(run_feed_pack(to_tree), 0);
    const char *again[] = {pack, back, "--format", "folder", NULL}; /* never over a tree */
    assert_int_equal(run_feed_pack(again), 1);
    feed_dataset *tree = open_path("tree", NULL);
    feed_dataset *t = open_path("sh-{000000..000002}.tar", NULL);
    feed_dataset *p = open_path("from-shards.pack", NULL);
    feed_dataset *b = open_path("back", NULL);
    assert_same_dataset(tree, t);
    assert_same_dataset(tree, p);
    assert_same_dataset(tree, b);
    feed_dataset_close(t);

    char idx[1200];
    size_t la, lb;
    snprintf(idx, sizeof(idx), "%s-000002.tar.idx", shards);
    uint8_t *written = read_all(idx, &la);
    assert_int_equal(unlink(idx), 0);
    const char *index[] = {"--index", pat, NULL};
    assert_int_equal(run_feed_pack(index), 0);
    uint8_t *rebuilt = read_all(idx, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(written, rebuilt, la);
    free(written);
    free(rebuilt);
    feed_dataset_close(b);
    feed_dataset_close(p);
    feed_dataset_close(tree);
}

/* The tree of the re-encode tests, in sample order (classes a, b; names sorted). */
static const jpeg_spec k_wide = {640, 480, 0, 1, 1, 0, {200, 40, 40}};  /* a/1: 4:4:4 */
static const jpeg_spec k_small = {200, 100, 0, 2, 2, 0, {30, 160, 60}}; /* a/2: 4:2:0 */
static const jpeg_spec k_gray = {1000, 250, 1, 1, 1, 1, {90, 90, 90}};  /* b/1: progressive */
static const jpeg_spec k_tall = {90, 700, 0, 2, 1, 0, {40, 60, 220}};   /* b/2: 4:2:2 */

static void make_jpeg_tree(void)
{
    mkdir_in("tree/a");
    mkdir_in("tree/b");
    write_jpeg("tree/a/1.jpg", &k_wide);
    write_jpeg("tree/a/2.jpg", &k_small);
    write_jpeg("tree/b/1.jpg", &k_gray);
    write_jpeg("tree/b/2.jpg", &k_tall);
    write_bytes("tree/b/3.jpg", "not a jpeg at all", 17);
    /* A JPEG cut in half: libjpeg only warns; the tool must keep it as it is. */
    char p[1024];
    path_in(p, sizeof(p), "tree/a/1.jpg");
    size_t len;
    uint8_t *whole = read_all(p, &len);
    write_bytes("tree/b/4.jpg", whole, len / 2);
    free(whole);
}

static void assert_colour(const decoded *d, const jpeg_spec *s)
{
    for (int k = 0; k < d->components; k++) {
        double want = s->rgb[k] + 4.0; /* the gradient adds 0..7 */
        if (d->mean[k] < want - 10 || d->mean[k] > want + 10)
            fail_msg("channel %d mean %.1f, want about %.1f", k, d->mean[k], want);
    }
}

/* Sample i of the pack (pointing into the mapping) and of the tree (a malloc'd copy). */
static void sample_pair(const feed_dataset *pack, const feed_dataset *tree, uint64_t i,
                        feed_buf *scratch, const uint8_t **pd, size_t *pl, const uint8_t **td,
                        size_t *tl)
{
    assert_int_equal(feed_dataset_read(pack, i, scratch, pd, pl), 0);
    feed_buf tree_scratch;
    feed_buf_init(&tree_scratch, 1 << 24);
    const uint8_t *data;
    assert_int_equal(feed_dataset_read(tree, i, &tree_scratch, &data, tl), 0);
    uint8_t *copy = malloc(*tl + 1);
    assert_non_null(copy);
    memcpy(copy, data, *tl);
    feed_buf_free(&tree_scratch);
    *td = copy;
}

static void test_tool_reencode(void **state)
{
    (void)state;
    make_jpeg_tree();
    char src[1024], dst[1024];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "small.pack");
    const char *args[] = {src, dst, "--max-side", "320", "--quality", "80", "--threads", "2", NULL};
    assert_int_equal(run_feed_pack(args), 0);
    feed_dataset *tree = open_path("tree", NULL);
    feed_dataset *pack = open_path("small.pack", NULL);
    assert_int_equal(feed_dataset_count(pack), 6);
    feed_buf scratch;
    feed_buf_init(&scratch, 1 << 24);
    const uint8_t *pd, *td;
    size_t pl, tl;
    decoded d;

    static const struct {
        const jpeg_spec *spec;
        int w, h;
    } want[] = {{&k_wide, 320, 240}, {&k_small, 200, 100}, {&k_gray, 320, 80}, {&k_tall, 41, 320}};
    for (uint64_t i = 0; i < 4; i++) {
        sample_pair(pack, tree, i, &scratch, &pd, &pl, &td, &tl);
        decode(pd, pl, &d);
        assert_int_equal(d.w, want[i].w);
        assert_int_equal(d.h, want[i].h);
        assert_int_equal(d.components, want[i].spec->gray ? 1 : 3);
        if (!want[i].spec->gray) {
            assert_int_equal(d.h_samp, 2); /* re-encoded as 4:2:0 */
            assert_int_equal(d.v_samp, 2);
        }
        assert_colour(&d, want[i].spec);
        /* --quality asks for a change, so even the small one was re-encoded. */
        assert_true(pl != tl || memcmp(pd, td, pl) != 0);
        free((void *)td);
    }
    /* Undecodable and truncated images are stored exactly as they were. */
    for (uint64_t i = 4; i < 6; i++) {
        sample_pair(pack, tree, i, &scratch, &pd, &pl, &td, &tl);
        assert_int_equal(pl, tl);
        assert_memory_equal(pd, td, pl);
        free((void *)td);
    }
    feed_dataset_close(pack);

    /* --max-side alone: images already small enough keep their bytes. */
    path_in(dst, sizeof(dst), "side.pack");
    const char *args2[] = {src, dst, "--max-side", "320", "--subsample", "keep", NULL};
    assert_int_equal(run_feed_pack(args2), 0);
    pack = open_path("side.pack", NULL);
    sample_pair(pack, tree, 1, &scratch, &pd, &pl, &td, &tl);
    assert_int_equal(pl, tl);
    assert_memory_equal(pd, td, pl);
    free((void *)td);
    sample_pair(pack, tree, 0, &scratch, &pd, &pl, &td, &tl);
    decode(pd, pl, &d);
    assert_int_equal(d.w, 320);
    assert_int_equal(d.h_samp, 1); /* "keep": the source's 4:4:4 */
    assert_int_equal(d.v_samp, 1);
    free((void *)td);
    feed_dataset_close(pack);

    /* --subsample 444 alone re-encodes the 4:2:0 image at full size. */
    path_in(dst, sizeof(dst), "444.pack");
    const char *args3[] = {src, dst, "--subsample", "444", NULL};
    assert_int_equal(run_feed_pack(args3), 0);
    pack = open_path("444.pack", NULL);
    sample_pair(pack, tree, 1, &scratch, &pd, &pl, &td, &tl);
    decode(pd, pl, &d);
    assert_int_equal(d.w, 200);
    assert_int_equal(d.h_samp, 1);
    assert_colour(&d, &k_small);
    free((void *)td);
    /* ... and leaves the 4:4:4 one alone. */
    sample_pair(pack, tree, 0, &scratch, &pd, &pl, &td, &tl);
    assert_int_equal(pl, tl);
    assert_memory_equal(pd, td, pl);
    free((void *)td);
    feed_dataset_close(pack);

    /* Bad arguments: usage, exit 2, no pack written. */
    path_in(dst, sizeof(dst), "never.pack");
    const char *bad[] = {src, dst, "--quality", "0", NULL};
    assert_int_equal(run_feed_pack(bad), 2);
    const char *bad2[] = {src, dst, "--subsample", "411", NULL};
    assert_int_equal(run_feed_pack(bad2), 2);
    assert_int_equal(access(dst, F_OK), -1);

    feed_buf_free(&scratch);
    feed_dataset_close(tree);
}

/* ---- damaged packs ---- */

static void make_full_pipe(int fds[2])
{
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    char junk[4096];
    memset(junk, 'x', sizeof(junk));
    while (write(fds[1], junk, sizeof(junk)) > 0)
        ;
    while (write(fds[1], junk, 1) > 0) /* writes up to PIPE_BUF are all or nothing */
        ;
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(fcntl(fds[1], F_SETFL, 0), 0);
}

/*
 * feed-pack interrupted mid-pack by SIGINT and by SIGTERM. Its stderr is a
 * full pipe, so the first undecodable sample's message blocks it after the
 * temporary file exists and before the pack is complete, whatever the
 * machine's speed. It dies of the signal and leaves no temporary file; the
 * older pack at the path is untouched.
 */
static void test_tool_interrupted(void **state)
{
    (void)state;
    make_jpeg_tree();
    char src[1024], dst[1024], tmp[1100];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "out.pack");
    static const char older[] = "an older pack";
    write_bytes("out.pack", older, sizeof(older));
    const char *args[] = {src, dst, "--max-side", "64", "--threads", "1", NULL};
    const int sigs[] = {SIGINT, SIGTERM};
    for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++) {
        int fds[2];
        make_full_pipe(fds);
        pid_t pid = spawn_feed_pack(args, fds[1]);
        snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dst, (long)pid);
        /* It cannot finish: wait for it to get that far (or to exit, which fails below). */
        while (access(tmp, F_OK) != 0 && waitpid(pid, NULL, WNOHANG) == 0)
            usleep(10000);
        assert_int_equal(access(tmp, F_OK), 0);
        assert_int_equal(kill(pid, sigs[k]), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(fds[0]);
        close(fds[1]);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), sigs[k]);
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(errno, ENOENT);
        size_t len;
        uint8_t *kept = read_all(dst, &len);
        assert_int_equal(len, sizeof(older));
        assert_memory_equal(kept, older, len);
        free(kept);
    }
}

static void test_imagenet_sample_repack(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    feed_dataset *tree = NULL;
    char err[512];
    assert_int_equal(feed_dataset_open(dir, NULL, &tree, err, sizeof(err)), 0);
    char p[1024];
    path_in(p, sizeof(p), "imagenet.pack");
    write_pack(tree, p);
    feed_dataset *pack = open_path("imagenet.pack", NULL);
    assert_same_dataset(tree, pack);
    feed_dataset_close(pack);
    feed_dataset_close(tree);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test_setup_teardown(test_imagenet_sample_repack, setup_tmp, teardown_tmp),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample() ? cmocka_run_group_tests(sample_tests, NULL, NULL)
                                       : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tool_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_shards_either_way, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_reencode, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_interrupted, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
