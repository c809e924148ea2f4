/*
 * Unit tests of the remote blob's socket-free parts (feed/remote.h): AWS
 * Signature V4 against AWS's published examples, URI encoding, where an
 * s3:// or http(s):// location is sent and how it is named, and where
 * credentials come from. The transfers themselves are tested against real
 * servers in tests/remote.
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

#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/remote.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define EX_KEY "AKIAIOSFODNN7EXAMPLE"
#define EX_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static const char *signature_of(const char *auth)
{
    const char *s = strstr(auth, "Signature=");
    return s ? s + 10 : "";
}

/* AWS S3 API reference, "Signature Calculations for the Authorization Header", GET Object. */
static void test_sigv4_s3_get_object(void **state)
{
    (void)state;
    feed_sigv4_header h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                             {"range", "bytes=0-9"},
                             {"x-amz-content-sha256", EMPTY_SHA256},
                             {"x-amz-date", "20130524T000000Z"}};
    feed_sigv4_request r = {"GET",        "/test.txt",        "",          h,   4,
                            EMPTY_SHA256, "20130524T000000Z", "us-east-1", "s3"};
    char auth[1024];
    assert_int_equal(feed_sigv4_authorization(&r, EX_KEY, EX_SECRET, auth, sizeof auth), 0);
    assert_string_equal(
        auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
              "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
              "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

/* Same page: GET Bucket Lifecycle and GET Bucket (List Objects), with queries. */
static void test_sigv4_s3_queries(void **state)
{
    (void)state;
    feed_sigv4_header h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                             {"x-amz-content-sha256", EMPTY_SHA256},
                             {"x-amz-date", "20130524T000000Z"}};
    feed_sigv4_request r = {"GET",       "/", "lifecycle=", h, 3, EMPTY_SHA256, "20130524T000000Z",
                            "us-east-1", "s3"};
    char auth[1024];
    assert_int_equal(feed_sigv4_authorization(&r, EX_KEY, EX_SECRET, auth, sizeof auth), 0);
    assert_string_equal(signature_of(auth),
                        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
    r.canonical_query = "max-keys=2&prefix=J";
    assert_int_equal(feed_sigv4_authorization(&r, EX_KEY, EX_SECRET, auth, sizeof auth), 0);
    assert_string_equal(signature_of(auth),
                        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

/* The SigV4 test suite's get-vanilla (service "service"). */
static void test_sigv4_get_vanilla(void **state)
{
    (void)state;
    feed_sigv4_header h[] = {{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
    feed_sigv4_request r = {"GET",       "/",      "", h, 2, EMPTY_SHA256, "20150830T123600Z",
                            "us-east-1", "service"};
    char auth[1024];
    assert_int_equal(feed_sigv4_authorization(&r, "AKIDEXAMPLE",
                                              "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", auth,
                                              sizeof auth),
                     0);
    assert_string_equal(signature_of(auth),
                        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    /* Too small an output, a malformed date: refused, not cut. */
    assert_int_equal(feed_sigv4_authorization(&r, "AKIDEXAMPLE", "x", auth, 40), FEED_ETOOBIG);
    r.amz_date = "2015-08-30";
    assert_int_equal(feed_sigv4_authorization(&r, "AKIDEXAMPLE", "x", auth, sizeof auth),
                     FEED_EINVAL);
}

static void test_uri_encode(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(feed_remote_uri_encode("a b/c~d+é", 1, out, sizeof out), 0);
    assert_string_equal(out, "a%20b/c~d%2B%C3%A9");
    assert_int_equal(feed_remote_uri_encode("a/b", 0, out, sizeof out), 0);
    assert_string_equal(out, "a%2Fb");
    assert_int_equal(feed_remote_uri_encode("abcdef", 1, out, 4), FEED_ETOOBIG);
}

static void clear_aws_env(void)
{
    const char *vars[] = {
        "AWS_ENDPOINT_URL",   "AWS_ENDPOINT_URL_S3",         "AWS_REGION",
        "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",  "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_resolve_s3(void **state)
{
    (void)state;
    feed_remote_target t;
    feed_blob_remote_options o = {0};
    char err[256];
    clear_aws_env();
    o.path_style = -1;
    /* AWS itself: virtual-host style, the region from the environment. */
    setenv("AWS_REGION", "eu-west-1", 1);
    assert_int_equal(
        feed_remote_target_resolve("s3://my-bucket/train/shard 0.tar", &o, &t, err, sizeof err), 0);
    assert_string_equal(t.url, "https://my-bucket.s3.eu-west-1.amazonaws.com/train/shard%200.tar");
    assert_string_equal(t.host, "my-bucket.s3.eu-west-1.amazonaws.com");
    assert_string_equal(t.canonical_uri, "/train/shard%200.tar");
    assert_string_equal(t.name, "s3://my-bucket/train/shard 0.tar");
    assert_string_equal(t.region, "eu-west-1");
    assert_int_equal(t.s3, 1);
    /* A bucket with dots: path style (its name would break the TLS host check). */
    assert_int_equal(feed_remote_target_resolve("s3://my.bucket/k", &o, &t, err, sizeof err), 0);
    assert_string_equal(t.url, "https://s3.eu-west-1.amazonaws.com/my.bucket/k");
    /* An endpoint (MinIO, Ceph): path style unless asked otherwise; options beat the env. */
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    assert_int_equal(feed_remote_target_resolve("s3://data/x", &o, &t, err, sizeof err), 0);
    assert_string_equal(t.url, "http://127.0.0.1:9000/data/x");
    assert_string_equal(t.host, "127.0.0.1:9000");
    assert_string_equal(t.canonical_uri, "/data/x");
    o.endpoint = "https://storage.example.com/base";
    o.region = "auto";
    o.path_style = 0;
    assert_int_equal(feed_remote_target_resolve("s3://data/x", &o, &t, err, sizeof err), 0);
    assert_string_equal(t.url, "https://data.storage.example.com/base/x");
    assert_string_equal(t.canonical_uri, "/base/x");
    assert_string_equal(t.region, "auto");
    /* Refused: no key, a bad bucket, an endpoint with credentials in it. */
    assert_int_equal(feed_remote_target_resolve("s3://data/", &o, &t, err, sizeof err),
                     FEED_EINVAL);
    assert_int_equal(feed_remote_target_resolve("s3://Data_1/k", &o, &t, err, sizeof err),
                     FEED_EINVAL);
    o.endpoint = "http://user:hunter2@host/";
    assert_int_equal(feed_remote_target_resolve("s3://data/k", &o, &t, err, sizeof err),
                     FEED_EINVAL);
    assert_null(strstr(err, "hunter2"));
    clear_aws_env();
}

static void test_resolve_http(void **state)
{
    (void)state;
    feed_remote_target t;
    char err[256];
    assert_int_equal(feed_remote_target_resolve(
                         "https://u:hunter2@cdn.example.com:8443/d/s-01.tar?X-Amz-Signature=abc#f",
                         NULL, &t, err, sizeof err),
                     0);
    assert_string_equal(t.name, "https://cdn.example.com:8443/d/s-01.tar");
    assert_string_equal(t.url,
                        "https://u:hunter2@cdn.example.com:8443/d/s-01.tar?X-Amz-Signature=abc");
    assert_int_equal(t.s3, 0);
    assert_int_equal(feed_remote_target_resolve("http://a b/", NULL, &t, err, sizeof err),
                     FEED_EINVAL);
    assert_int_equal(feed_remote_target_resolve("http://u:hunter2@/x", NULL, &t, err, sizeof err),
                     FEED_EINVAL);
    assert_null(strstr(err, "hunter2"));
    assert_int_equal(feed_remote_target_resolve("ftp://h/x", NULL, &t, err, sizeof err),
                     FEED_EINVAL);
}

/* Every location kind as messages show it: no userinfo, no query, no fragment. */
static void test_location_redact(void **state)
{
    static const char *const cases[][2] = {
        {"http://user:PASS@host:8080/d/shard.tar", "http://host:8080/d/shard.tar"},
        {"https://u:p@ss@cdn.example/x.tar?X-Amz-Signature=abc&X-Amz-Credential=AKIA%2F",
         "https://cdn.example/x.tar"},
        {"https://h/s-{000000..000002}.tar?token=T#frag", "https://h/s-{000000..000002}.tar"},
        {"http://@h/a", "http://h/a"},
        {"http://u:p@h?q=SECRET", "http://h"},
        {"s3://bucket/key.tar", "s3://bucket/key.tar"},
        {"s3://user:pw@bucket/key", "s3://bucket/key"},
        {"imagenet=http://u:PASS@h/a.tar", "imagenet=http://h/a.tar"},
        {"/data/train.pack", "/data/train.pack"},
        {"dir/shard-{0..3}.tar", "dir/shard-{0..3}.tar"},
    };
    char out[256];
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = feed_location_redact(cases[i][0], out, sizeof out);
        assert_string_equal(out, cases[i][1]);
        assert_int_equal(n, strlen(cases[i][1]));
    }
    /* Cut to the buffer, still terminated, and the length says so. */
    assert_int_equal(feed_location_redact("http://u:p@host/abcdef", out, 8), 18);
    assert_string_equal(out, "http://");
}

static void test_redirect_allowed(void **state)
{
    (void)state;
    assert_true(feed_remote_redirect_allowed("http://h:81/a.tar?x=1", "http://h:81/mirror/a.tar"));
    assert_true(feed_remote_redirect_allowed("https://u:p@H.example/a", "HTTPS://h.example/b"));
    assert_false(feed_remote_redirect_allowed("https://h/a", "http://h/a")); /* downgrade */
    assert_false(feed_remote_redirect_allowed("http://h/a", "https://h/a")); /* another scheme */
    assert_false(feed_remote_redirect_allowed("http://h:81/a", "http://h:82/a")); /* port */
    assert_false(feed_remote_redirect_allowed("http://h/a", "http://h:80/a"));
    assert_false(feed_remote_redirect_allowed("http://h/a", "http://evil/a"));
    assert_false(feed_remote_redirect_allowed("http://h/a", "http://h@evil/a"));
    assert_false(feed_remote_redirect_allowed("http://h/a", "http://hh/a"));
    assert_false(feed_remote_redirect_allowed("http://h/a", "/relative"));
    assert_false(feed_remote_redirect_allowed("http://h/a", "file:///etc/passwd"));
}

static void test_creds(void **state)
{
    (void)state;
    feed_remote_creds c;
    char err[256] = "";
    char path[] = "/tmp/feed-creds-XXXXXX";
    const char file[] = "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key=sd\n"
                        "[ci]\n aws_access_key_id=AKCI \naws_secret_access_key = s3cr3t-ci\n"
                        "aws_session_token=tok\n[half]\naws_access_key_id=AKHALF\n";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, file, sizeof file - 1), (ssize_t)(sizeof file - 1));
    close(fd);
    clear_aws_env();
    setenv("HOME", "/nonexistent-home", 1);
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), 0);
    assert_string_equal(c.access_key, ""); /* nothing anywhere: anonymous */
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), 0);
    assert_string_equal(c.access_key, "AKDEFAULT");
    assert_string_equal(c.secret_key, "sd");
    setenv("AWS_PROFILE", "ci", 1);
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), 0);
    assert_string_equal(c.access_key, "AKCI");
    assert_string_equal(c.secret_key, "s3cr3t-ci");
    assert_string_equal(c.session_token, "tok");
    setenv("AWS_PROFILE", "half", 1);
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "half"));
    assert_string_equal(c.access_key, ""); /* wiped on failure */
    /* The environment wins over the file; half of it set is an error naming the variable. */
    setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-env", 1);
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), 0);
    assert_string_equal(c.access_key, "AKENV");
    assert_string_equal(c.session_token, "");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    assert_int_equal(feed_remote_creds_load(&c, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "AWS_SECRET_ACCESS_KEY"));
    assert_null(strstr(err, "AKENV"));
    feed_remote_creds_wipe(&c);
    unlink(path);
    clear_aws_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv4_s3_get_object),
        cmocka_unit_test(test_sigv4_s3_queries),
        cmocka_unit_test(test_sigv4_get_vanilla),
        cmocka_unit_test(test_uri_encode),
        cmocka_unit_test(test_resolve_s3),
        cmocka_unit_test(test_resolve_http),
        cmocka_unit_test(test_location_redact),
        cmocka_unit_test(test_redirect_allowed),
        cmocka_unit_test(test_creds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
