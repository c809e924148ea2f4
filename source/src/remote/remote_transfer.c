/*
 * One HTTP request of a remote blob, and the pool of connections they share.
 *
 * The pool is a process-wide, bounded set of curl easy handles: a request
 * borrows one (waiting while all are busy), so at most `connections` requests
 * of the process are in flight at once, and a handle keeps its connection
 * alive for the next request to the same host (curl_easy_reset keeps the
 * connection cache). It grows to the largest connections an open asked for
 * and is freed when the last blob closes.
 *
 * A request: HEAD at open, or a ranged GET of exactly the bytes asked for.
 * S3 requests are signed with SigV4 (remote_sigv4.c). The body goes straight
 * into the caller's buffer and a body longer than the range is refused as it
 * arrives; of an error body only the first 1 KiB is read (for S3's <Code>),
 * then the connection is closed. A 206 must carry the Content-Range asked
 * for. 5xx, 408, 429, timeouts, refused and cut connections are retried with
 * exponential backoff and jitter. curl follows no redirect: a 30x fails the
 * request unless the blob allows same-host redirects and it is one.
 * Runs in the calling thread (an engine worker or a read-ahead worker). No
 * message holds a credential, a signature or a query string: they name
 * b->base.name, and a redirect's target through feed_location_redact.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "feed/errors.h"
#include "feed/strutil.h"
#include "remote_internal.h"

#define ERRBODY_CAP 1024u
#define BACKOFF_BASE_MS 50u
#define BACKOFF_MAX_MS 2000u
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The pool. Guarded by pool_lock: every field. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;
static CURL *pool_idle[REMOTE_MAX_CONNECTIONS];
static uint32_t pool_n_idle, pool_n_out, pool_limit;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int remote_pool_start(uint32_t n)
{
    int rc = FEED_EIO;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        goto out;
    rc = 0;
    if (n == 0)
        n = 1;
    if (n > REMOTE_MAX_CONNECTIONS)
        n = REMOTE_MAX_CONNECTIONS;
    pthread_mutex_lock(&pool_lock);
    if (n > pool_limit)
        pool_limit = n;
    pthread_cond_broadcast(&pool_cond);
    pthread_mutex_unlock(&pool_lock);
out:
    return rc;
}

void remote_pool_stop(void)
{
    pthread_mutex_lock(&pool_lock);
    while (pool_n_idle > 0)
        curl_easy_cleanup(pool_idle[--pool_n_idle]);
    if (pool_n_out == 0)
        pool_limit = 0;
    pthread_mutex_unlock(&pool_lock);
}

/* A handle, reset; NULL when curl cannot make one. Waits for a free slot. */
static CURL *pool_acquire(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&pool_lock);
    while (pool_n_idle == 0 && pool_n_out >= pool_limit)
        pthread_cond_wait(&pool_cond, &pool_lock);
    if (pool_n_idle > 0)
        h = pool_idle[--pool_n_idle];
    pool_n_out++;
    pthread_mutex_unlock(&pool_lock);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    if (!h) {
        pthread_mutex_lock(&pool_lock);
        pool_n_out--;
        pthread_cond_signal(&pool_cond);
        pthread_mutex_unlock(&pool_lock);
    }
    return h;
}

/* keep = 0 closes the handle's connection (after a response we refused). */
static void pool_release(CURL *h, int keep)
{
    pthread_mutex_lock(&pool_lock);
    pool_n_out--;
    if (keep && pool_n_idle < pool_limit) {
        pool_idle[pool_n_idle++] = h;
        h = NULL;
    }
    pthread_cond_signal(&pool_cond);
    pthread_mutex_unlock(&pool_lock);
    if (h)
        curl_easy_cleanup(h);
}

/* One attempt's state, filled by curl's callbacks. */
typedef struct attempt {
    CURL *h;
    uint8_t *dst;
    size_t cap;
    size_t got;
    int overflow;
    int errbody_cut; /* an error body ran past ERRBODY_CAP: the rest was not read */
    char errbody[ERRBODY_CAP];
    size_t errlen;
    remote_resp resp;
    char redirect[FEED_REMOTE_MAX_URL]; /* a 30x's Location, resolved; "" when none */
} attempt;

static void header_value(const char *line, size_t n, size_t name_len, char *out, size_t cap)
{
    const char *v = line + name_len;
    size_t len = n - name_len;
    while (len > 0 && (*v == ' ' || *v == '\t'))
        v++, len--;
    while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    if (len >= cap)
        len = cap - 1;
    memcpy(out, v, len);
    out[len] = '\0';
}

/* "bytes FIRST-LAST/TOTAL" (RFC 9110 14.4) into r; -1 when it is not that. */
static int parse_content_range(const char *v, remote_resp *r)
{
    char first[24], last[24];
    const char *dash, *slash;
    size_t fl, ll;
    int rc = -1;
    if (strncasecmp(v, "bytes ", 6) != 0)
        goto out;
    v += 6;
    dash = strchr(v, '-');
    slash = dash ? strchr(dash, '/') : NULL;
    if (!slash)
        goto out;
    fl = (size_t)(dash - v);
    ll = (size_t)(slash - dash - 1);
    if (fl == 0 || fl >= sizeof first || ll == 0 || ll >= sizeof last)
        goto out;
    memcpy(first, v, fl);
    first[fl] = '\0';
    memcpy(last, dash + 1, ll);
    last[ll] = '\0';
    if (feed_parse_u64(first, 0, UINT64_MAX, &r->range_first) == 0 &&
        feed_parse_u64(last, 0, UINT64_MAX, &r->range_last) == 0 &&
        feed_parse_u64(slash + 1, 0, UINT64_MAX, &r->total) == 0 && r->range_first <= r->range_last)
        rc = 0;
out:
    return rc;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    attempt *a = arg;
    size_t n = size * nmemb;
    char v[256];
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        memset(&a->resp, 0, sizeof a->resp); /* a new response (after 100 or a redirect) */
    } else if (n > 5 && strncasecmp(line, "etag:", 5) == 0) {
        header_value(line, n, 5, a->resp.etag, sizeof a->resp.etag);
    } else if (n > 14 && strncasecmp(line, "last-modified:", 14) == 0) {
        header_value(line, n, 14, a->resp.last_modified, sizeof a->resp.last_modified);
    } else if (n > 14 && strncasecmp(line, "content-range:", 14) == 0) {
        header_value(line, n, 14, v, sizeof v);
        if (parse_content_range(v, &a->resp) == 0)
            a->resp.have_total = 2; /* 2: from Content-Range (a 206) */
    } else if (n > 15 && strncasecmp(line, "content-length:", 15) == 0 && a->resp.have_total != 2) {
        header_value(line, n, 15, v, sizeof v);
        if (feed_parse_u64(v, 0, UINT64_MAX, &a->resp.total) == 0)
            a->resp.have_total = 1;
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    attempt *a = arg;
    size_t n = size * nmemb;
    long status = 0;
    size_t ret = n;
    curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) {
        /* Only a prefix, for S3's <Code>: a body without end is not read to its end. */
        size_t room = sizeof a->errbody - 1 - a->errlen;
        size_t k = n < room ? n : room;
        memcpy(a->errbody + a->errlen, data, k);
        a->errlen += k;
        a->errbody[a->errlen] = '\0';
        if (k < n) {
            a->errbody_cut = 1;
            ret = 0; /* curl stops: CURLE_WRITE_ERROR; the connection is closed */
            n = k;
        }
    } else if (!a->dst || n > a->cap - a->got) {
        a->overflow = 1;
        ret = 0; /* curl stops: CURLE_WRITE_ERROR */
    } else {
        memcpy(a->dst + a->got, data, n);
        a->got += n;
    }
    atomic_fetch_add(&remote_stats.bytes, n);
    return ret;
}

/* S3's <Code>...</Code> from an error body, letters and digits only. */
static void s3_code(const char *body, char *out, size_t cap)
{
    const char *p = strstr(body, "<Code>");
    size_t n = 0;
    out[0] = '\0';
    p = p ? p + 6 : "";
    while (n + 1 < cap && ((p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= 'a' && p[n] <= 'z') ||
                           (p[n] >= '0' && p[n] <= '9')))
        n++;
    if (n > 0 && p[n] == '<') {
        memcpy(out, p, n);
        out[n] = '\0';
    }
}

typedef struct header_set {
    struct curl_slist *list;
    int failed;
} header_set;

static void add_header(header_set *hs, const char *fmt, const char *a, const char *b)
{
    char line[FEED_REMOTE_MAX_SECRET * 2 + 256];
    struct curl_slist *l;
    if (hs->failed)
        return;
    snprintf(line, sizeof line, fmt, a, b);
    l = curl_slist_append(hs->list, line);
    explicit_bzero(line, sizeof line);
    if (l)
        hs->list = l;
    else
        hs->failed = 1;
}

/* Headers of one request: Range, and for S3 the SigV4 ones and Authorization. */
static int build_headers(const remote_blob *b, int head, const char *range, header_set *hs)
{
    char amz_date[17];
    char auth[2048];
    time_t now = time(NULL);
    struct tm tm;
    feed_sigv4_header sh[5];
    size_t n = 0;
    int rc = 0;

    if (range[0])
        add_header(hs, "Range: %s%s", range, "");
    if (b->t.s3 && b->creds.access_key[0]) {
        gmtime_r(&now, &tm);
        strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
        sh[n++] = (feed_sigv4_header){"host", b->t.host};
        if (range[0])
            sh[n++] = (feed_sigv4_header){"range", range};
        sh[n++] = (feed_sigv4_header){"x-amz-content-sha256", EMPTY_SHA256};
        sh[n++] = (feed_sigv4_header){"x-amz-date", amz_date};
        if (b->creds.session_token[0])
            sh[n++] = (feed_sigv4_header){"x-amz-security-token", b->creds.session_token};
        feed_sigv4_request r = {head ? "HEAD" : "GET", b->t.canonical_uri, "",          sh,  n,
                                EMPTY_SHA256,          amz_date,           b->t.region, "s3"};
        rc = feed_sigv4_authorization(&r, b->creds.access_key, b->creds.secret_key, auth,
                                      sizeof auth);
        if (rc == 0) {
            add_header(hs, "Host: %s%s", b->t.host, "");
            add_header(hs, "x-amz-content-sha256: %s%s", EMPTY_SHA256, "");
            add_header(hs, "x-amz-date: %s%s", amz_date, "");
            if (b->creds.session_token[0])
                add_header(hs, "x-amz-security-token: %s%s", b->creds.session_token, "");
            add_header(hs, "Authorization: %s%s", auth, "");
        }
        explicit_bzero(auth, sizeof auth);
    } else if (b->t.s3) {
        add_header(hs, "Host: %s%s", b->t.host, "");
    }
    if (rc == 0 && hs->failed)
        rc = FEED_ENOMEM;
    return rc;
}

enum verdict { V_DONE, V_RETRY, V_REDIRECT };

/* What to do with a 30x: a->redirect holds its target, or "" when it is refused. */
static void judge_redirect(remote_blob *b, const char *url, attempt *a, int *rc, char *err,
                           size_t err_cap)
{
    char *loc = NULL;
    char shown[512];
    curl_easy_getinfo(a->h, CURLINFO_REDIRECT_URL, &loc);
    feed_location_redact(loc ? loc : "", shown, sizeof shown);
    *rc = FEED_EIO;
    a->redirect[0] = '\0';
    if (!loc || b->t.s3 || b->redirects != FEED_REMOTE_REDIRECTS_SAME_HOST) {
        feed_set_err(err, err_cap, "%s: redirected (HTTP %ld) to %.200s; not followed (%s)",
                     b->base.name, a->resp.status, loc ? shown : "nowhere",
                     b->t.s3 ? "s3:// requests follow none"
                             : "--remote-redirects same-host follows one to the same scheme "
                               "and host");
    } else if (!feed_remote_redirect_allowed(url, loc)) {
        feed_set_err(err, err_cap,
                     "%s: redirected (HTTP %ld) to %.200s, another scheme or host; not followed",
                     b->base.name, a->resp.status, shown);
    } else if (strlen(loc) >= sizeof a->redirect) {
        feed_set_err(err, err_cap, "%s: redirected (HTTP %ld) to a URL over %u bytes", b->base.name,
                     a->resp.status, FEED_REMOTE_MAX_URL - 1);
    } else {
        strcpy(a->redirect, loc);
    }
}

/* Runs one attempt at url; sets *rc and returns whether to retry or redirect. */
static enum verdict attempt_once(remote_blob *b, const char *url, uint64_t offset, size_t len,
                                 uint8_t *dst, attempt *a, int *rc, char *err, size_t err_cap)
{
    char range[64] = "";
    header_set hs = {NULL, 0};
    enum verdict v = V_DONE;
    CURLcode cc;
    int keep = 1;
    char code[64];

    a->h = pool_acquire();
    if (!a->h) {
        *rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: cannot make a curl handle", b->base.name);
        goto out;
    }
    if (dst)
        snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)offset,
                 (unsigned long long)(offset + len - 1));
    *rc = build_headers(b, dst == NULL, range, &hs);
    if (*rc < 0) {
        feed_set_err(err, err_cap, "%s: cannot sign the request (%s)", b->base.name,
                     feed_strerror(*rc));
        goto out;
    }
    curl_easy_setopt(a->h, CURLOPT_URL, url);
    curl_easy_setopt(a->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(a->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(a->h, CURLOPT_HTTPHEADER, hs.list);
    curl_easy_setopt(a->h, CURLOPT_NOBODY, dst ? 0L : 1L);
    curl_easy_setopt(a->h, CURLOPT_TIMEOUT_MS, (long)b->timeout_ms);
    curl_easy_setopt(a->h, CURLOPT_CONNECTTIMEOUT_MS, (long)b->timeout_ms);
    curl_easy_setopt(a->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(a->h, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(a->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(a->h, CURLOPT_WRITEDATA, a);
    /* curl follows no redirect (its default): judge_redirect decides each one. */
    a->dst = dst;
    a->cap = len;
    atomic_fetch_add(&remote_stats.requests, 1);
    cc = curl_easy_perform(a->h);
    curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &a->resp.status);
    if (a->overflow) {
        keep = 0;
        *rc = FEED_EPROTO;
        feed_set_err(err, err_cap,
                     "%s: the server sent more than the %zu bytes asked for at offset %llu "
                     "(refused)",
                     b->base.name, len, (unsigned long long)offset);
        goto out;
    }
    if (a->errbody_cut)
        keep = 0; /* the rest of the error body is still on the connection */
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && a->errbody_cut)) {
        keep = 0;
        *rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", b->base.name, curl_easy_strerror(cc));
        if (cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_CONNECT ||
            cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
            cc == CURLE_PARTIAL_FILE || cc == CURLE_SSL_CONNECT_ERROR)
            v = V_RETRY;
        goto out;
    }
    s3_code(a->errbody, code, sizeof code);
    if (a->resp.status == 401 || a->resp.status == 403) {
        *rc = FEED_EAUTH;
        feed_set_err(err, err_cap, "%s: access refused (HTTP %ld%s%s); check the credentials",
                     b->base.name, a->resp.status, code[0] ? " " : "", code);
    } else if (a->resp.status == 404 || a->resp.status == 410) {
        *rc = FEED_ENOTFOUND;
        feed_set_err(err, err_cap, "%s: not found (HTTP %ld%s%s)", b->base.name, a->resp.status,
                     code[0] ? " " : "", code);
    } else if (a->resp.status == 412 || a->resp.status == 416) {
        *rc = FEED_ESTATE;
        feed_set_err(err, err_cap, "%s: the object changed since it was opened (HTTP %ld)",
                     b->base.name, a->resp.status);
    } else if (a->resp.status >= 500 || a->resp.status == 408 || a->resp.status == 429) {
        *rc = FEED_EIO;
        v = V_RETRY;
        feed_set_err(err, err_cap, "%s: HTTP %ld%s%s", b->base.name, a->resp.status,
                     code[0] ? " " : "", code);
    } else if (a->resp.status >= 300 && a->resp.status < 400) {
        judge_redirect(b, url, a, rc, err, err_cap);
        if (a->redirect[0])
            v = V_REDIRECT;
    } else if (a->resp.status < 200 || a->resp.status >= 300) {
        *rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: unexpected HTTP %ld", b->base.name, a->resp.status);
    } else if (dst && a->got < len) {
        *rc = FEED_EIO;
        v = V_RETRY;
        feed_set_err(err, err_cap, "%s: the response ended after %zu of %zu bytes", b->base.name,
                     a->got, len);
    } else {
        *rc = 0;
    }
out:
    curl_slist_free_all(hs.list); /* headers hold the signature: the list is freed now */
    if (a->h)
        pool_release(a->h, keep);
    a->h = NULL;
    return v;
}

/* A GET's response against the object the open saw and the range asked for. */
static int check_same_object(remote_blob *b, const attempt *a, uint64_t offset, size_t len,
                             char *err, size_t err_cap)
{
    int rc = 0;
    if (a->resp.status == 200 && (offset != 0 || len != b->base.size)) {
        rc = FEED_EPROTO;
        feed_set_err(err, err_cap, "%s: the server ignored the Range header", b->base.name);
    } else if (a->resp.status == 206 && a->resp.have_total != 2) {
        rc = FEED_EPROTO;
        feed_set_err(err, err_cap,
                     "%s: the server answered 206 without a valid Content-Range (a protocol "
                     "error of the server)",
                     b->base.name);
    } else if (a->resp.status == 206 &&
               (a->resp.range_first != offset || a->resp.range_last != offset + len - 1)) {
        rc = FEED_EPROTO;
        feed_set_err(err, err_cap,
                     "%s: the server sent bytes %llu-%llu for a request of bytes %llu-%llu "
                     "(refused)",
                     b->base.name, (unsigned long long)a->resp.range_first,
                     (unsigned long long)a->resp.range_last, (unsigned long long)offset,
                     (unsigned long long)(offset + len - 1));
    } else if ((a->resp.have_total && a->resp.total != b->base.size) ||
               (b->etag[0] && a->resp.etag[0] && strcmp(b->etag, a->resp.etag) != 0) ||
               (b->last_modified[0] && a->resp.last_modified[0] &&
                strcmp(b->last_modified, a->resp.last_modified) != 0)) {
        rc = FEED_ESTATE;
        feed_set_err(err, err_cap,
                     "%s: the object changed since it was opened (size or version differs)",
                     b->base.name);
    }
    return rc;
}

static void backoff(uint32_t attempt_no, unsigned *seed)
{
    uint64_t ms = (uint64_t)BACKOFF_BASE_MS << (attempt_no < 10 ? attempt_no : 10);
    struct timespec ts;
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    ms = ms / 2 + (uint64_t)rand_r(seed) % (ms / 2 + 1); /* jitter: half to full */
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

int remote_fetch(remote_blob *b, uint64_t offset, size_t len, uint8_t *dst, remote_resp *resp,
                 char *err, size_t err_cap)
{
    attempt *a = malloc(sizeof *a);
    char *url = malloc(FEED_REMOTE_MAX_URL);
    unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)time(NULL);
    uint32_t hops = 0;
    enum verdict v;
    int rc = FEED_ENOMEM;
    if (!a || !url) {
        feed_set_err(err, err_cap, "%s: out of memory", b->base.name);
        goto out;
    }
    snprintf(url, FEED_REMOTE_MAX_URL, "%s", b->t.url);
    for (uint32_t i = 0;;) {
        memset(a, 0, sizeof *a);
        v = attempt_once(b, url, offset, len, dst, a, &rc, err, err_cap);
        if (v == V_REDIRECT && hops < REMOTE_MAX_REDIRECTS) {
            hops++;
            memcpy(url, a->redirect, sizeof a->redirect);
            continue;
        }
        if (v == V_REDIRECT) {
            rc = FEED_EIO;
            feed_set_err(err, err_cap, "%s: more than %u redirects", b->base.name,
                         REMOTE_MAX_REDIRECTS);
        }
        if (v != V_RETRY || i >= b->retries)
            break;
        i++;
        atomic_fetch_add(&remote_stats.retries, 1);
        backoff(i - 1, &seed);
    }
    if (rc == 0 && dst)
        rc = check_same_object(b, a, offset, len, err, err_cap);
    if (resp)
        *resp = a->resp;
out:
    if (url)
        explicit_bzero(url, FEED_REMOTE_MAX_URL); /* a presigned URL's signature */
    free(url);
    free(a);
    return rc;
}
