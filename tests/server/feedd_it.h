/*
 * The fixture of feedd's integration tests (test_feedd, test_feedd_limits):
 * two datasets of real JPEGs in a temp dir (good: generated; bad: two good
 * images and broken ones: empty, garbage, truncated), one shared feedd
 * serving them (2 workers, max-batch 64) with a channel to it, and the
 * helpers the cases share. One process's tests at a time (globals).
 * FEEDD_IT_LOG_LEVEL (default warn) sets the log level of the feedd they start.
 */
#ifndef FEED_TESTS_FEEDD_IT_H
#define FEED_TESTS_FEEDD_IT_H

#include <grpc/grpc.h>

#include "feed/transform.h"
#include "feedtest.h"
#include "feedtest_grpc.h"

#define CLASSES 3
#define PER_CLASS 8
#define N_SAMPLES (CLASSES * PER_CLASS)

extern char tmp_root[256];
extern char good_dir[300];
extern char bad_dir[300];
extern feed_test_server srv; /* shared server: datasets good and bad, 2 workers */
extern grpc_channel *chan;

void sleep_ms(int ms);
int start_server(feed_test_server *s, const char *const *extra);
Feed__V1__TransformSpec train_spec(uint32_t side);
void train_transform(uint32_t side, feed_transform *t);
int send_batch(feedtest_stream *s, Feed__V1__SessionOpen *open, uint64_t batch_id, uint32_t epoch,
               const uint64_t *idx, size_t n);
void make_open(Feed__V1__SessionOpen *o, Feed__V1__TransformSpec *t, const char *ds, uint64_t seed,
               uint32_t window);
void expect_stream_error(grpc_channel *ch, Feed__V1__SessionOpen *open, const uint64_t *idx,
                         size_t n, grpc_status_code code, const char *needle);
double scrape(const feed_test_server *s, const char *series);
/* Poll until series >= want (or == 0; memory: feedd_memory_bytes == 0), with no deadline of
 * their own; a long wait prints every feedd_ series every 30 s of polls. */
void wait_metric(const feed_test_server *s, const char *series, double want);
void wait_metric_zero(const feed_test_server *s, const char *series);
void wait_memory_free(const feed_test_server *s);
int group_setup(void **state);
int group_teardown(void **state);
Feed__V1__Batch *fetch(grpc_channel *ch, const uint64_t *idx, size_t n, uint32_t epoch);

#endif
