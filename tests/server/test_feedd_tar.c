/*
 * feedd serving tar shards, end to end over real gRPC on 127.0.0.1: shards
 * written from the fixture's real JPEGs (and, with FEED_SAMPLE_DIR, from the
 * ImageNet sample) are described as format "tar" with the tree's classes, and
 * give byte-identical batches (pixels, labels, CRC; same seed and epoch, with
 * and without the decoded cache) to the tree they were made from; a shard
 * cut short while feedd serves it costs only the samples that lay in the
 * lost bytes, each reported as an I/O error, and feedd goes on serving; a
 * member that is no JPEG is reported with its shard and its member's name.
 * Fixture: feedd_it.h (its shared server is not used here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/tar.h"
#include "feedd_it.h"
#include "feedtest_skip.h"

/* Shards of the dataset at src, per_shard samples each, as prefix-000000.tar ...; their count. */
static size_t write_shards(const char *src, const char *prefix, uint64_t per_shard)
{
    feed_dataset *ds = NULL;
    char err[512], path[700], key[32];
    assert_int_equal(feed_dataset_open(src, NULL, &ds, err, sizeof err), 0);
    uint32_t nc = feed_dataset_num_classes(ds);
    const char **names = calloc(nc, sizeof *names);
    assert_non_null(names);
    for (uint32_t c = 0; c < nc; c++)
        names[c] = feed_dataset_class_name(ds, c);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    size_t shards = 0;
    for (uint64_t first = 0; first < feed_dataset_count(ds); first += per_shard, shards++) {
        snprintf(path, sizeof path, "%s-%06zu.tar", prefix, shards);
        feed_tar_writer *w = NULL;
        assert_int_equal(feed_tar_writer_open(path, nc, names, &w, err, sizeof err), 0);
        for (uint64_t i = first; i < first + per_shard && i < feed_dataset_count(ds); i++) {
            const uint8_t *data;
            size_t len;
            assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
            snprintf(key, sizeof key, "%09llu", (unsigned long long)i);
            assert_int_equal(feed_tar_writer_add(w, key, feed_dataset_label(ds, i), data, len), 0);
        }
        assert_int_equal(feed_tar_writer_finish(w, err, sizeof err), 0);
    }
    feed_buf_free(&scratch);
    free(names);
    feed_dataset_close(ds);
    return shards;
}

/* One batch of idx from dataset ds (train side x side, seed 99). */
static Feed__V1__Batch *fetch_from(grpc_channel *ch, const char *ds, uint32_t side,
                                   const uint64_t *idx, size_t n, uint32_t epoch)
{
    Feed__V1__TransformSpec spec = train_spec(side);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, ds, 99, 1);
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(ch, 120, &s), 0);
    assert_int_equal(send_batch(&s, &open, 7, epoch, idx, n), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    return b;
}

static void assert_same_batch(const Feed__V1__Batch *a, const Feed__V1__Batch *b, size_t n)
{
    assert_int_equal(a->n_status, n);
    assert_int_equal(b->n_status, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
        assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    }
    assert_int_equal(a->data.len, b->data.len);
    assert_memory_equal(a->data.data, b->data.data, a->data.len);
    assert_int_equal(a->crc32c, b->crc32c);
    assert_memory_equal(a->labels, b->labels, n * sizeof *a->labels);
}

/* Describe of dataset name on ch: format, count, class names and fingerprint of the tree at
 * dir (the same samples, so the same fingerprint). */
static void check_describe(grpc_channel *ch, const char *name, const char *dir)
{
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(ch, name, &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    assert_non_null(r);
    feed_dataset *tree = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(dir, NULL, &tree, err, sizeof err), 0);
    assert_string_equal(r->datasets[0]->format, "tar");
    assert_int_equal(r->datasets[0]->num_samples, feed_dataset_count(tree));
    assert_int_equal(r->datasets[0]->n_class_names, feed_dataset_num_classes(tree));
    for (uint32_t c = 0; c < feed_dataset_num_classes(tree); c++)
        assert_string_equal(r->datasets[0]->class_names[c], feed_dataset_class_name(tree, c));
    assert_string_equal(r->datasets[0]->fingerprint, feed_dataset_fingerprint(tree));
    feed_dataset_close(tree);
    feed__v1__describe_response__free_unpacked(r, NULL);
}

static void test_shards_serve_the_tree(void **state)
{
    (void)state;
    char prefix[400], tree_arg[400], tar_arg[500], cached_arg[500];
    snprintf(prefix, sizeof prefix, "%s/good-shard", tmp_root);
    assert_int_equal(write_shards(good_dir, prefix, 5), 5); /* 24 samples: 5 x 4 + 4 */
    snprintf(tree_arg, sizeof tree_arg, "tree=%s", good_dir);
    snprintf(tar_arg, sizeof tar_arg, "shards=%s-{000000..000004}.tar", prefix);
    snprintf(cached_arg, sizeof cached_arg, "cached=%s-{000000..000004}.tar,cache=64", prefix);
    const char *args[] = {"--dataset",   tree_arg,        "--dataset", tar_arg,     "--dataset",
                          cached_arg,    "--cache-bytes", "16M",       "--threads", "2",
                          "--log-level", "warn",          NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start(args, &s), 0);
    grpc_channel *ch = feedtest_channel(s.target);
    check_describe(ch, "shards", good_dir);

    uint64_t idx[12];
    for (int i = 0; i < 12; i++)
        idx[i] = (uint64_t)(23 - 2 * i); /* across every shard, out of order */
    for (uint32_t epoch = 0; epoch < 2; epoch++) {
        Feed__V1__Batch *a = fetch_from(ch, "tree", 48, idx, 12, epoch);
        Feed__V1__Batch *b = fetch_from(ch, "shards", 48, idx, 12, epoch);
        assert_same_batch(a, b, 12);
        feed__v1__batch__free_unpacked(a, NULL);
        feed__v1__batch__free_unpacked(b, NULL);
    }
    /* From the decoded cache: a miss (epoch 0) and a hit (epoch 1) give the same bytes. */
    Feed__V1__Batch *miss = fetch_from(ch, "cached", 48, idx, 12, 4);
    Feed__V1__Batch *hit = fetch_from(ch, "cached", 48, idx, 12, 4);
    assert_same_batch(miss, hit, 12);
    feed__v1__batch__free_unpacked(miss, NULL);
    feed__v1__batch__free_unpacked(hit, NULL);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s), 0);
    assert_int_equal(s.exit_status, 0);
}

static void test_shard_cut_while_served(void **state)
{
    (void)state;
    char prefix[400], arg[500], path[500];
    snprintf(prefix, sizeof prefix, "%s/cut-shard", tmp_root);
    assert_int_equal(write_shards(good_dir, prefix, 12), 2);
    snprintf(arg, sizeof arg, "cut=%s-{000000..000001}.tar", prefix);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "error", NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start(args, &s), 0);
    grpc_channel *ch = feedtest_channel(s.target);
    uint64_t idx[4] = {0, 11, 12, 23};
    Feed__V1__Batch *before = fetch_from(ch, "cut", 32, idx, 4, 0);
    /* Keep shard 1's class list and first sample (header + bytes), lose the rest. */
    snprintf(path, sizeof path, "%s-000001.tar", prefix);
    feed_dataset *one = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(path, NULL, &one, err, sizeof err), 0);
    feed_buf scratch;
    feed_buf_init(&scratch, 1u << 20);
    const uint8_t *data;
    size_t len;
    assert_int_equal(feed_dataset_read(one, 0, &scratch, &data, &len), 0);
    feed_buf_free(&scratch);
    feed_dataset_close(one);
    assert_int_equal(truncate(path, 1024 + 512 + (off_t)len), 0);

    Feed__V1__Batch *after = fetch_from(ch, "cut", 32, idx, 4, 0);
    assert_int_equal(after->status[0], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(after->status[1], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(after->status[2], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(after->status[3], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
    assert_int_equal(after->n_errors, 1);
    assert_int_equal(after->errors[0]->index, 23);
    /* The message names the shard and where in it the member was. */
    assert_non_null(strstr(after->errors[0]->message, "cut-shard-000001.tar, member at byte "));
    size_t sample = 32 * 32 * 3;
    assert_memory_equal(after->data.data, before->data.data, 3 * sample);
    feed__v1__batch__free_unpacked(before, NULL);
    feed__v1__batch__free_unpacked(after, NULL);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s), 0);
    assert_int_equal(s.exit_status, 0);
}

/* A shard with a good sample and a member that is no JPEG: the failed sample's message names the
 * shard and the member as `tar tv` lists it (before, the member only by its byte offset). */
static void test_bad_member_named(void **state)
{
    (void)state;
    char path[500], arg[600], err[512];
    snprintf(path, sizeof path, "%s/bad-shard-000003.tar", tmp_root);
    feed_dataset *tree = NULL;
    assert_int_equal(feed_dataset_open(good_dir, NULL, &tree, err, sizeof err), 0);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    const uint8_t *data;
    size_t len;
    assert_int_equal(feed_dataset_read(tree, 0, &scratch, &data, &len), 0);
    const char *names[] = {"a", "b"};
    feed_tar_writer *w = NULL;
    static const char not_jpeg[] = "these bytes are no JPEG";
    assert_int_equal(feed_tar_writer_open(path, 2, names, &w, err, sizeof err), 0);
    assert_int_equal(feed_tar_writer_add(w, "n01440764_1", 0, data, len), 0);
    assert_int_equal(feed_tar_writer_add(w, "n01440764_123", 1, not_jpeg, sizeof not_jpeg), 0);
    assert_int_equal(feed_tar_writer_finish(w, err, sizeof err), 0);
    feed_buf_free(&scratch);
    feed_dataset_close(tree);

    snprintf(arg, sizeof arg, "bad=%s", path);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "error", NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start(args, &s), 0);
    grpc_channel *ch = feedtest_channel(s.target);
    uint64_t idx[2] = {1, 0};
    Feed__V1__Batch *b = fetch_from(ch, "bad", 32, idx, 2, 0);
    assert_int_equal(b->status[0], FEED__V1__SAMPLE_STATUS__SAMPLE_NOT_JPEG);
    assert_int_equal(b->status[1], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(b->n_errors, 1);
    assert_int_equal(b->errors[0]->index, 1);
    const char *msg = b->errors[0]->message;
    if (!strstr(msg, "bad-shard-000003.tar, member 'n01440764_123.jpg' at byte "))
        fail_msg("the message does not name the shard and the member: '%s'", msg);
    assert_true(strlen(msg) <= 200); /* FEEDD_SAMPLE_MSG_MAX */
    feed__v1__batch__free_unpacked(b, NULL);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s), 0);
    assert_int_equal(s.exit_status, 0);
}

static void test_imagenet_sample_shards(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    char prefix[400], tree_arg[1200], tar_arg[500];
    snprintf(prefix, sizeof prefix, "%s/in-shard", tmp_root);
    assert_int_equal(write_shards(dir, prefix, 300), 4);
    snprintf(tree_arg, sizeof tree_arg, "tree=%s", dir);
    snprintf(tar_arg, sizeof tar_arg, "shards=%s-{000000..000003}.tar", prefix);
    const char *args[] = {"--dataset", tree_arg,      "--dataset", tar_arg, "--threads",
                          "2",         "--log-level", "warn",      NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start(args, &s), 0);
    grpc_channel *ch = feedtest_channel(s.target);
    check_describe(ch, "shards", dir);
    uint64_t idx[8] = {999, 0, 299, 300, 599, 600, 899, 900}; /* both ends of every shard */
    Feed__V1__Batch *a = fetch_from(ch, "tree", 224, idx, 8, 3);
    Feed__V1__Batch *b = fetch_from(ch, "shards", 224, idx, 8, 3);
    assert_same_batch(a, b, 8);
    feed__v1__batch__free_unpacked(a, NULL);
    feed__v1__batch__free_unpacked(b, NULL);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test(test_imagenet_sample_shards),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample()
                   ? cmocka_run_group_tests(sample_tests, group_setup, group_teardown)
                   : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_serve_the_tree),
        cmocka_unit_test(test_shard_cut_while_served),
        cmocka_unit_test(test_bad_member_named),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
