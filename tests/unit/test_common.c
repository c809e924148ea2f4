/*
 * Unit tests for the common basics: error text, CRC32C, bounded buffers, RNG,
 * string helpers, the intrusive list, token files, monotonic condition
 * variables.
 */
#include <pthread.h>
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
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/list.h"
#include "feed/log.h"
#include "feed/names.h"
#include "feed/opts.h"
#include "feed/rng.h"
#include "feed/strutil.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "feed/token_file.h"

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(feed_strerror(FEED_EINVAL), "invalid argument");
    assert_string_equal(feed_err_name(FEED_ETIMEDOUT), "FEED_ETIMEDOUT");
    assert_string_equal(feed_err_name(FEED_EAUTH), "FEED_EAUTH");
    assert_string_equal(feed_strerror(-999), "unknown error");
    assert_string_equal(feed_sample_status_name(FEED_SAMPLE_TRUNCATED), "truncated");
}

static void test_crc32c_known_answers(void **state)
{
    (void)state;
    assert_int_equal(feed_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(feed_crc32c(0, "", 0), 0);
    uint8_t zeros[32] = {0};
    assert_int_equal(feed_crc32c(0, zeros, sizeof zeros), 0x8A9136AAu); /* RFC 3720 B.4 */
    /* Chunked equals whole. */
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    uint32_t whole = feed_crc32c(0, buf, sizeof buf);
    uint32_t part = feed_crc32c(0, buf, 333);
    part = feed_crc32c(part, buf + 333, sizeof buf - 333);
    assert_int_equal(whole, part);
}

static void test_buf_limit(void **state)
{
    (void)state;
    feed_buf b;
    feed_buf_init(&b, 10000);
    uint8_t chunk[4000] = {1};
    assert_int_equal(feed_buf_append(&b, chunk, sizeof chunk), 0);
    assert_int_equal(feed_buf_append(&b, chunk, sizeof chunk), 0);
    assert_int_equal(feed_buf_append(&b, chunk, sizeof chunk), FEED_ETOOBIG);
    assert_int_equal(b.len, 8000);
    assert_true(b.cap <= 10000);
    assert_int_equal(feed_buf_reserve(&b, 10001), FEED_ETOOBIG);
    feed_buf_free(&b);
}

static void test_philox_known_answer(void **state)
{
    (void)state;
    /* Random123 kat_vectors: philox4x32 10 rounds. */
    const uint32_t ctr0[4] = {0, 0, 0, 0}, key0[2] = {0, 0};
    const uint32_t want0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    const uint32_t ctr1[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
    const uint32_t key1[2] = {0xffffffff, 0xffffffff};
    const uint32_t want1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    const uint32_t ctr2[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    const uint32_t key2[2] = {0xa4093822, 0x299f31d0};
    const uint32_t want2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    uint32_t out[4];
    feed_philox4x32_10(ctr0, key0, out);
    assert_memory_equal(out, want0, sizeof out);
    feed_philox4x32_10(ctr1, key1, out);
    assert_memory_equal(out, want1, sizeof out);
    feed_philox4x32_10(ctr2, key2, out);
    assert_memory_equal(out, want2, sizeof out);
}

static void test_rng_deterministic(void **state)
{
    (void)state;
    feed_rng a, b;
    feed_rng_init(&a, 42, 3, 12345);
    feed_rng_init(&b, 42, 3, 12345);
    for (int i = 0; i < 100; i++)
        assert_int_equal(feed_rng_u32(&a), feed_rng_u32(&b));
}

/* Neighbouring keys (index, epoch, seed off by one) give unrelated streams:
 * the first words agree in about half their bits, and uniforms are uncorrelated. */
static void test_rng_neighbour_independence(void **state)
{
    (void)state;
    const int n = 20000;
    double sxy[3] = {0}, sx = 0, sxx = 0, sy[3] = {0}, syy[3] = {0};
    uint64_t agree_bits = 0;
    for (int i = 0; i < n; i++) {
        feed_rng base, nb[3];
        feed_rng_init(&base, 7, 1, (uint64_t)i);
        feed_rng_init(&nb[0], 7, 1, (uint64_t)i + 1);
        feed_rng_init(&nb[1], 7, 2, (uint64_t)i);
        feed_rng_init(&nb[2], 8, 1, (uint64_t)i);
        double x = feed_rng_uniform(&base);
        sx += x;
        sxx += x * x;
        for (int k = 0; k < 3; k++) {
            double y = feed_rng_uniform(&nb[k]);
            sy[k] += y;
            syy[k] += y * y;
            sxy[k] += x * y;
        }
        feed_rng_init(&base, 7, 1, (uint64_t)i);
        feed_rng_init(&nb[0], 7, 1, (uint64_t)i + 1);
        agree_bits += (uint64_t)__builtin_popcount(~(feed_rng_u32(&base) ^ feed_rng_u32(&nb[0])));
    }
    for (int k = 0; k < 3; k++) {
        double cov = sxy[k] / n - (sx / n) * (sy[k] / n);
        double vx = sxx / n - (sx / n) * (sx / n);
        double vy = syy[k] / n - (sy[k] / n) * (sy[k] / n);
        double corr = cov / (vx > 0 && vy > 0 ? __builtin_sqrt(vx * vy) : 1);
        assert_true(corr > -0.03 && corr < 0.03);
    }
    double frac = (double)agree_bits / (32.0 * n);
    assert_true(frac > 0.49 && frac < 0.51);
}

static void test_rng_below_uniform(void **state)
{
    (void)state;
    feed_rng r;
    feed_rng_init(&r, 1, 0, FEED_RNG_PERMUTATION_STREAM);
    int counts[6] = {0};
    for (int i = 0; i < 60000; i++)
        counts[feed_rng_below(&r, 6)]++;
    for (int k = 0; k < 6; k++)
        assert_true(counts[k] > 9500 && counts[k] < 10500);
}

static void test_parse_u64(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(feed_parse_u64("0", 0, UINT64_MAX, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(feed_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    assert_int_equal(feed_parse_u64("42", 42, 42, &v), 0);
    assert_int_equal(v, 42);
    /* Rejected, and *out left alone. */
    const char *bad[] = {"",
                         "x",
                         "12x",
                         "1 ",
                         " 1",
                         "+1",
                         "-1",
                         "-0",
                         "0x10",
                         "1e3",
                         "18446744073709551616",
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        assert_int_equal(feed_parse_u64(bad[i], 0, UINT64_MAX, &v), FEED_EINVAL);
        assert_int_equal(v, 7);
    }
    assert_int_equal(feed_parse_u64(NULL, 0, UINT64_MAX, &v), FEED_EINVAL);
    assert_int_equal(feed_parse_u64("9", 10, 20, &v), FEED_EINVAL);
    assert_int_equal(feed_parse_u64("21", 10, 20, &v), FEED_EINVAL);
}

static void test_parse_double(void **state)
{
    (void)state;
    double v = 7;
    assert_int_equal(feed_parse_double("0.5", 0, 10, &v), 0);
    assert_true(v == 0.5);
    assert_int_equal(feed_parse_double("2", 0, 10, &v), 0);
    assert_true(v == 2);
    assert_int_equal(feed_parse_double(".25", 0, 10, &v), 0);
    assert_true(v == 0.25);
    assert_int_equal(feed_parse_double("1e1", 0, 10, &v), 0);
    assert_true(v == 10);
    const char *bad[] = {"", "x", "1s", " 1", "+1", "-1", "0x10", "inf", "nan", "1e999", "11"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        assert_int_equal(feed_parse_double(bad[i], 0, 10, &v), FEED_EINVAL);
        assert_true(v == 7);
    }
    assert_int_equal(feed_parse_double(NULL, 0, 10, &v), FEED_EINVAL);
}

static void test_parse_u32(void **state)
{
    (void)state;
    uint32_t v = 7;
    assert_int_equal(feed_parse_u32("4294967295", 0, UINT32_MAX, &v), 0);
    assert_int_equal(v, UINT32_MAX);
    assert_int_equal(feed_parse_u32("100", 1, 100, &v), 0);
    assert_int_equal(v, 100);
    v = 7;
    assert_int_equal(feed_parse_u32("4294967296", 0, UINT32_MAX, &v), FEED_EINVAL);
    assert_int_equal(feed_parse_u32("0", 1, 100, &v), FEED_EINVAL);
    assert_int_equal(feed_parse_u32("101", 1, 100, &v), FEED_EINVAL);
    assert_int_equal(feed_parse_u32("-1", 0, UINT32_MAX, &v), FEED_EINVAL);
    assert_int_equal(v, 7);
}

static void test_set_err(void **state)
{
    (void)state;
    char err[8];
    memset(err, 'z', sizeof err);
    feed_set_err(err, sizeof err, "%s %d", "abc", 12345);
    assert_string_equal(err, "abc 123"); /* truncated, terminated */
    memset(err, 'z', sizeof err);
    feed_set_err(err, 0, "%d", 1);
    assert_int_equal(err[0], 'z');
    feed_set_err(NULL, 16, "%d", 1);
}

static void test_utf8_valid(void **state)
{
    (void)state;
    static const char *const good[] = {"",
                                       "ascii",
                                       "caf\xc3\xa9",
                                       "\xe2\x82\xac",
                                       "\xf0\x9f\x98\x80",
                                       "\xef\xbf\xbf",
                                       "\xf4\x8f\xbf\xbf"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(feed_utf8_valid(good[i], strlen(good[i]), NULL));
    /* Each with the offset of the first ill-formed sequence. */
    static const struct {
        const char *s;
        size_t bad;
    } bad[] = {
        {"caf\xe9", 3},          /* Latin-1 */
        {"\x80", 0},             /* lone continuation byte */
        {"ab\xc0\xaf", 2},       /* overlong '/' */
        {"\xe0\x80\xaf", 0},     /* overlong, 3 bytes */
        {"x\xed\xa0\x80", 1},    /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 0}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 0}, /* no such lead byte */
        {"ok\xe2\x82", 2},       /* truncated at the end */
        {"\xe2\x82x", 0},        /* truncated before ASCII */
        {"\xc3\xa9\xff", 2},     /* 0xff never appears */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t at = 99;
        assert_false(feed_utf8_valid(bad[i].s, strlen(bad[i].s), &at));
        assert_int_equal(at, bad[i].bad);
    }
    /* Length bounds the check: a cut inside a sequence is ill-formed. */
    assert_false(feed_utf8_valid("\xc3\xa9", 1, NULL));
    assert_true(feed_utf8_valid("\xc3\xa9\xff", 2, NULL));
}

typedef struct item {
    int v;
    feed_list_node link;
} item;

/* The values of l in order, as digits: "" when empty. */
static const char *list_text(const feed_list *l)
{
    static char buf[16];
    size_t n = 0;
    for (const feed_list_node *k = l->first; k && n + 1 < sizeof buf; k = k->next)
        buf[n++] = (char)('0' + FEED_LIST_ENTRY(k, item, link)->v);
    buf[n] = 0;
    return buf;
}

static void test_list(void **state)
{
    (void)state;
    item it[4] = {{0, {0}}, {1, {0}}, {2, {0}}, {3, {0}}};
    feed_list l = {0};
    assert_true(feed_list_empty(&l));
    assert_null(feed_list_pop_front(&l));
    feed_list_push_back(&l, &it[1].link);
    feed_list_push_front(&l, &it[0].link);
    feed_list_push_back(&l, &it[3].link);
    feed_list_insert_before(&l, &it[3].link, &it[2].link);
    assert_string_equal(list_text(&l), "0123");
    assert_ptr_equal(feed_list_next_cyclic(&l, &it[3].link), &it[0].link);
    assert_ptr_equal(feed_list_next_cyclic(&l, &it[1].link), &it[2].link);
    feed_list_remove(&l, &it[2].link);
    assert_null(it[2].link.prev);
    assert_null(it[2].link.next);
    feed_list_remove(&l, &it[3].link); /* the last */
    assert_string_equal(list_text(&l), "01");
    assert_ptr_equal(l.last, &it[1].link);
    assert_ptr_equal(feed_list_pop_front(&l), &it[0].link);
    assert_ptr_equal(feed_list_pop_front(&l), &it[1].link);
    assert_true(feed_list_empty(&l));
    assert_null(l.last);
}

static int opts_keep_even(void *ctx, const char *arg)
{
    uint32_t v;
    if (feed_parse_u32(arg, 0, 100, &v) || v % 2)
        return -1;
    *(uint32_t *)ctx = v;
    return 0;
}

typedef struct opts_seen {
    bool flag;
    uint32_t u32, even;
    uint64_t u64;
    double dbl;
    const char *str;
} opts_seen;

/* Parses the NULL-terminated args (after a program name) into *seen. */
static int opts_run(const char *const *args, opts_seen *seen, int *first)
{
    char *argv[16];
    int argc = 0;
    argv[argc++] = (char *)"prog";
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    memset(seen, 0, sizeof(*seen));
    const feed_opt opts[] = {
        {.name = "flag", .flag = &seen->flag},
        {.name = "u32", .u32 = &seen->u32, .lo = 1, .hi = 10},
        {.name = "u64", .u64 = &seen->u64, .lo = 0, .hi = UINT64_MAX},
        {.name = "dbl", .dbl = &seen->dbl, .dlo = 0.5, .dhi = 2},
        {.name = "str", .str = &seen->str},
        {.name = "even", .call = opts_keep_even, .ctx = &seen->even},
        {.name = NULL},
    };
    return feed_opts_parse("prog", opts, argc, argv, first);
}

static void test_opts(void **state)
{
    (void)state;
    opts_seen s;
    int first = -1;
    const char *all[] = {"--flag", "--u32", "10",    "--u64=18446744073709551615",
                         "--dbl",  "0.5",   "--str", "x y",
                         "--even", "42",    "a",     "b",
                         NULL};
    assert_int_equal(opts_run(all, &s, &first), 0);
    assert_true(s.flag);
    assert_int_equal(s.u32, 10);
    assert_true(s.u64 == UINT64_MAX);
    assert_true(s.dbl == 0.5);
    assert_string_equal(s.str, "x y");
    assert_int_equal(s.even, 42);
    assert_int_equal(first, 11); /* "a" */
    /* Parsing again starts over. */
    const char *none[] = {"c", NULL};
    assert_int_equal(opts_run(none, &s, &first), 0);
    assert_false(s.flag);
    assert_int_equal(first, 1);
    const char *help[] = {"--u32", "2", "--help", NULL};
    assert_int_equal(opts_run(help, &s, &first), 1);
    const char *h[] = {"-h", NULL};
    assert_int_equal(opts_run(h, &s, &first), 1);
    /* Out of bounds, not a number, refused by its call, unknown, a missing argument. */
    const char *bad[][3] = {{"--u32", "11", NULL},  {"--u32", "0", NULL},  {"--dbl", "3", NULL},
                            {"--u64", "-1", NULL},  {"--u32", "1x", NULL}, {"--even", "3", NULL},
                            {"--nope", NULL, NULL}, {"--u32", NULL, NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(opts_run(bad[i], &s, &first), -1);
    assert_int_equal(s.u32, 0); /* a refused value is not stored */
}

/* feed_token_file_read on a file holding text[0..len); rc, the token in out, the reason in err. */
static int read_token(const char *text, size_t len, char *out, char *err, size_t err_cap)
{
    char path[] = "/tmp/feed-token-test.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    int rc =
        feed_token_file_read(path, "--auth-token-file", out, FEED_TOKEN_FILE_MAX + 1, err, err_cap);
    unlink(path);
    return rc;
}

static void test_token_file(void **state)
{
    (void)state;
    static char out[FEED_TOKEN_FILE_MAX + 1], big[FEED_TOKEN_FILE_MAX + 1];
    char err[256];
    assert_int_equal(read_token("abc\n", 4, out, err, sizeof err), 0);
    assert_string_equal(out, "abc");
    assert_int_equal(read_token("abc\r\n", 5, out, err, sizeof err), 0);
    assert_string_equal(out, "abc");
    assert_int_equal(read_token("abc", 3, out, err, sizeof err), 0);
    assert_string_equal(out, "abc");
    /* Only one line end goes: what is left is the library's to refuse. */
    assert_int_equal(read_token("abc\n\n", 5, out, err, sizeof err), 0);
    assert_string_equal(out, "abc\n");
    assert_int_equal(read_token("\r\n", 2, out, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "empty token"));
    assert_int_equal(read_token("a\0b", 3, out, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "NUL"));
    memset(big, 'k', sizeof big);
    assert_int_equal(read_token(big, FEED_TOKEN_FILE_MAX, out, err, sizeof err), 0);
    assert_int_equal(strlen(out), FEED_TOKEN_FILE_MAX);
    assert_int_equal(read_token(big, FEED_TOKEN_FILE_MAX + 1, out, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "larger than 4096 bytes"));
    /* What was read of a refused file is wiped, not left in the caller's buffer. */
    for (size_t i = 0; i < sizeof out; i++)
        assert_int_equal(out[i], 0);
    assert_int_equal(feed_token_file_read("/nonexistent/token", "--auth-token-file", out,
                                          sizeof out, err, sizeof err),
                     FEED_EINVAL);
    assert_non_null(strstr(err, "--auth-token-file: cannot open"));
    assert_int_equal(feed_token_file_read("/dev/null", "x", out, 16, err, sizeof err), FEED_EINVAL);
}

/* Control bytes, C1 controls and bytes that are not UTF-8 become \\xNN; other UTF-8 passes whole.
 */
static void test_log_escape(void **state)
{
    (void)state;
    char out[64];
    feed_log_escape(out, sizeof out, "a\nb\x1b[2J\x7f caf\xc3\xa9 \xe2\x82\xac");
    assert_string_equal(out, "a\\x0ab\\x1b[2J\\x7f caf\xc3\xa9 \xe2\x82\xac");
    feed_log_escape(out, sizeof out,
                    "\xc2\x9b"
                    "1m \xff \xc3 \xed\xa0\x80");
    assert_string_equal(out, "\\xc2\\x9b1m \\xff \\xc3 \\xed\\xa0\\x80");
    /* Never half an escape or half a character: "ab" then \x0a does not fit in 6. */
    assert_int_equal(feed_log_escape(out, 6, "ab\ncd"), 2);
    assert_string_equal(out, "ab");
    assert_int_equal(feed_log_escape(out, 4,
                                     "a\xc3\xa9"
                                     "b"),
                     3);
    assert_string_equal(out, "a\xc3\xa9");
}

typedef struct cond_case {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool woken;
} cond_case;

/* Takes mu, which the waiter gives up only inside its wait, so the signal comes mid-wait. */
static void *signal_waiter(void *arg)
{
    cond_case *c = arg;
    pthread_mutex_lock(&c->mu);
    c->woken = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Deadlines are feed_now_ns() values: on a CLOCK_REALTIME condition variable they would lie
 * decades in the past and every wait would end at once with FEED_ETIMEDOUT. */
static void test_cond_monotonic(void **state)
{
    (void)state;
    cond_case c = {.woken = false};
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(feed_cond_init(&c.cond), 0);
    pthread_mutex_lock(&c.mu);
    assert_int_equal(feed_cond_timedwait(&c.cond, &c.mu, 0), FEED_ETIMEDOUT);
    assert_int_equal(feed_cond_wait_until(&c.cond, &c.mu, feed_now_ns() - 1), FEED_ETIMEDOUT);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, signal_waiter, &c), 0);
    /* 60 s only guards against a hang: the signal ends the wait. */
    uint64_t until = feed_now_ns() + 60000000000ull;
    int rc = 0;
    while (!c.woken && rc == 0)
        rc = feed_cond_wait_until(&c.cond, &c.mu, until);
    assert_int_equal(rc, 0);
    assert_true(c.woken);
    c.woken = false;
    pthread_mutex_unlock(&c.mu);
    pthread_join(t, NULL);
    pthread_mutex_lock(&c.mu);
    assert_int_equal(pthread_create(&t, NULL, signal_waiter, &c), 0);
    while (!c.woken && rc == 0)
        rc = feed_cond_timedwait(&c.cond, &c.mu, 60000000000ull);
    assert_int_equal(rc, 0);
    pthread_mutex_unlock(&c.mu);
    pthread_join(t, NULL);
    pthread_cond_destroy(&c.cond);
    pthread_mutex_destroy(&c.mu);
}

/* The name rules both sides share: the length bound, the character set, where it breaks. */
static void test_name_check(void **state)
{
    (void)state;
    char name[FEED_NAME_MAX + 2];
    size_t bad = 99;
    assert_int_equal(feed_name_check("", NULL), 0);
    assert_int_equal(feed_name_check("run-Az09_.-:/@+=", NULL), 0);
    memset(name, 'a', FEED_NAME_MAX);
    name[FEED_NAME_MAX] = '\0';
    assert_int_equal(feed_name_check(name, &bad), 0);
    assert_int_equal(bad, 99);
    name[FEED_NAME_MAX] = 'a';
    name[FEED_NAME_MAX + 1] = '\0';
    assert_int_equal(feed_name_check(name, &bad), FEED_EINVAL);
    assert_int_equal(bad, FEED_NAME_MAX);
    assert_int_equal(feed_name_check("job 1", &bad), FEED_EINVAL);
    assert_int_equal(bad, 3);
    assert_int_equal(feed_name_check("a\"b", &bad), FEED_EINVAL);
    assert_int_equal(bad, 1);
    assert_int_equal(feed_name_check("\xc3\xa9", &bad), FEED_EINVAL);
    assert_int_equal(bad, 0);
    assert_true(feed_name_char('@'));
    assert_false(feed_name_char('\\'));
    assert_false(feed_name_char('\0'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_log_escape),
        cmocka_unit_test(test_crc32c_known_answers),
        cmocka_unit_test(test_buf_limit),
        cmocka_unit_test(test_philox_known_answer),
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_rng_neighbour_independence),
        cmocka_unit_test(test_rng_below_uniform),
        cmocka_unit_test(test_parse_u64),
        cmocka_unit_test(test_parse_u32),
        cmocka_unit_test(test_parse_double),
        cmocka_unit_test(test_set_err),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_opts),
        cmocka_unit_test(test_name_check),
        cmocka_unit_test(test_token_file),
        cmocka_unit_test(test_cond_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
