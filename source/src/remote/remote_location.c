/*
 * Where a remote location is fetched from and with which credentials: turns
 * s3://bucket/key (with the endpoint, region and addressing style from the
 * options or the AWS environment variables) or an http(s):// URL into a
 * feed_remote_target, and reads AWS credentials from the environment or the
 * shared credentials file. Runs in the thread that opens a blob; no state.
 *
 * Messages name the location as s3://bucket/key or scheme://host/path
 * (feed_location_redact, the one function every printer of a location
 * uses) and name variables and files, never a value read from them.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "feed/errors.h"
#include "feed/remote.h"
#include "feed/strutil.h"

#define CREDS_FILE_MAX (1u << 20) /* a credentials file larger than this is refused */

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* Copies s into dst (cap bytes); 0, or FEED_ETOOBIG when it does not fit. */
static int copy_str(char *dst, size_t cap, const char *s, size_t n)
{
    int rc = FEED_ETOOBIG;
    if (n < cap) {
        memcpy(dst, s, n);
        dst[n] = '\0';
        rc = 0;
    }
    return rc;
}

static int bucket_ok(const char *b, size_t n)
{
    int ok = n >= 3 && n <= 63;
    for (size_t i = 0; ok && i < n; i++)
        ok = (b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
             b[i] == '.';
    return ok;
}

/*
 * Splits an endpoint URL into scheme ("http"/"https"), host[:port] and a base
 * path without a trailing '/'. Endpoints with userinfo, a query or a fragment
 * are refused.
 */
static int split_endpoint(const char *ep, char *scheme, size_t scheme_cap, char *host,
                          size_t host_cap, char *base, size_t base_cap)
{
    const char *hs;
    const char *path;
    size_t hlen, plen;
    int rc = FEED_EINVAL;
    if (strncmp(ep, "http://", 7) == 0) {
        hs = ep + 7;
        rc = copy_str(scheme, scheme_cap, "http", 4);
    } else if (strncmp(ep, "https://", 8) == 0) {
        hs = ep + 8;
        rc = copy_str(scheme, scheme_cap, "https", 5);
    } else {
        goto out;
    }
    rc = FEED_EINVAL;
    if (strpbrk(hs, "@?#") != NULL)
        goto out;
    path = strchr(hs, '/');
    hlen = path ? (size_t)(path - hs) : strlen(hs);
    if (hlen == 0)
        goto out;
    plen = path ? strlen(path) : 0;
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    rc = copy_str(host, host_cap, hs, hlen);
    if (rc == 0)
        rc = copy_str(base, base_cap, path ? path : "", plen);
out:
    return rc;
}

/*
 * The host[:port] of the authority that starts at hs: after its last '@' (a
 * password may hold an unencoded '@'). *end: where the path, query or
 * fragment starts.
 */
static const char *host_of(const char *hs, const char **end)
{
    const char *host;
    *end = hs + strcspn(hs, "/?#");
    host = *end;
    while (host > hs && host[-1] != '@')
        host--;
    return host;
}

static int resolve_s3(const char *location, const feed_blob_remote_options *o,
                      feed_remote_target *t, char *err, size_t err_cap)
{
    const char *b = location + 5;
    const char *slash = strchr(b, '/');
    const char *endpoint = o && o->endpoint && o->endpoint[0] ? o->endpoint : NULL;
    const char *region = o && o->region && o->region[0] ? o->region : NULL;
    char bucket[64], scheme[8], ep_host[256], base[1024];
    char enc_key[FEED_REMOTE_MAX_URL];
    int path_style = o ? o->path_style : -1;
    int n;
    int rc = FEED_EINVAL;

    feed_location_redact(location, t->name, sizeof t->name); /* "s3://bucket/key" */
    if (!slash || !bucket_ok(b, (size_t)(slash - b)) || slash[1] == '\0' ||
        strlen(slash + 1) > 1024) {
        feed_set_err(err, err_cap,
                     "%.200s: not an S3 location (want s3://bucket/key: a bucket of 3-63 "
                     "characters a-z 0-9 . -, and a key of 1-1024 bytes)",
                     t->name);
        goto out;
    }
    memcpy(bucket, b, (size_t)(slash - b));
    bucket[slash - b] = '\0';
    if (!endpoint)
        endpoint = env_nonempty("AWS_ENDPOINT_URL_S3");
    if (!endpoint)
        endpoint = env_nonempty("AWS_ENDPOINT_URL");
    if (!region)
        region = env_nonempty("AWS_REGION");
    if (!region)
        region = env_nonempty("AWS_DEFAULT_REGION");
    if (!region)
        region = "us-east-1";
    if (copy_str(t->region, sizeof t->region, region, strlen(region)) < 0) {
        feed_set_err(err, err_cap, "%.200s: the region name is longer than %zu bytes", t->name,
                     sizeof t->region - 1);
        goto out;
    }
    if (path_style < 0)
        path_style = endpoint != NULL || strchr(bucket, '.') != NULL;
    if (endpoint) {
        rc = split_endpoint(endpoint, scheme, sizeof scheme, ep_host, sizeof ep_host, base,
                            sizeof base);
        if (rc < 0) {
            feed_set_err(err, err_cap,
                         "%.200s: the S3 endpoint is not an http:// or https:// URL without "
                         "credentials, query or fragment (at most 255 bytes of host)",
                         t->name);
            goto out;
        }
    } else {
        strcpy(scheme, "https");
        base[0] = '\0';
        n = snprintf(ep_host, sizeof ep_host, "s3.%s.amazonaws.com", t->region);
        if (n < 0 || (size_t)n >= sizeof ep_host)
            goto out;
    }
    rc = feed_remote_uri_encode(slash + 1, 1, enc_key, sizeof enc_key);
    if (rc == 0) {
        if (path_style)
            n = snprintf(t->host, sizeof t->host, "%s", ep_host);
        else
            n = snprintf(t->host, sizeof t->host, "%s.%s", bucket, ep_host);
        rc = n < 0 || (size_t)n >= sizeof t->host ? FEED_ETOOBIG : 0;
    }
    if (rc == 0) {
        if (path_style)
            n = snprintf(t->canonical_uri, sizeof t->canonical_uri, "%s/%s/%s", base, bucket,
                         enc_key);
        else
            n = snprintf(t->canonical_uri, sizeof t->canonical_uri, "%s/%s", base, enc_key);
        rc = n < 0 || (size_t)n >= sizeof t->canonical_uri ? FEED_ETOOBIG : 0;
    }
    if (rc == 0) {
        n = snprintf(t->url, sizeof t->url, "%s://%s%s", scheme, t->host, t->canonical_uri);
        rc = n < 0 || (size_t)n >= sizeof t->url ? FEED_ETOOBIG : 0;
    }
    if (rc < 0) {
        feed_set_err(err, err_cap, "%.200s: the request URL would be over %u bytes", t->name,
                     FEED_REMOTE_MAX_URL);
        rc = FEED_EINVAL;
        goto out;
    }
    t->s3 = 1;
out:
    return rc;
}

static int resolve_http(const char *location, feed_remote_target *t, char *err, size_t err_cap)
{
    size_t scheme_len = (size_t)(strstr(location, "://") + 3 - location);
    size_t url_len = strcspn(location, "#");
    size_t name_len = feed_location_redact(location, t->name, sizeof t->name);
    int rc = FEED_EINVAL;

    if (t->name[scheme_len] == '\0' || t->name[scheme_len] == '/') {
        feed_set_err(err, err_cap, "%.*s...: a URL without a host", (int)scheme_len, location);
        goto out;
    }
    if (url_len >= sizeof t->url || name_len >= sizeof t->name) {
        feed_set_err(err, err_cap, "%.200s: the URL is longer than %u bytes", t->name,
                     FEED_REMOTE_MAX_URL - 1);
        goto out;
    }
    memcpy(t->url, location, url_len);
    t->url[url_len] = '\0';
    t->s3 = 0;
    rc = 0;
out:
    return rc;
}

size_t feed_location_redact(const char *location, char *out, size_t cap)
{
    const char *sep = strstr(location, "://");
    const char *hs, *end, *host;
    size_t path_len;
    int n;
    if (!sep) {
        n = snprintf(out, cap, "%s", location);
        goto out;
    }
    hs = sep + 3;
    host = host_of(hs, &end);
    path_len = strcspn(end, "?#");
    n = snprintf(out, cap, "%.*s%.*s%.*s", (int)(hs - location), location, (int)(end - host), host,
                 (int)path_len, end);
out:
    return n < 0 ? cap : (size_t)n;
}

int feed_remote_target_resolve(const char *location, const feed_blob_remote_options *o,
                               feed_remote_target *t, char *err, size_t err_cap)
{
    int rc = FEED_EINVAL;
    memset(t, 0, sizeof *t);
    int is_s3 = strncmp(location, "s3://", 5) == 0;
    for (const char *p = location; *p; p++) {
        /* An S3 key may hold spaces (they are encoded); a URL may not. */
        if ((unsigned char)*p < 0x20 || *p == 0x7f || (*p == ' ' && !is_s3)) {
            feed_set_err(err, err_cap, "a remote location holds a %s",
                         *p == ' ' ? "space (encode it as %20)" : "control character");
            goto out;
        }
    }
    if (is_s3)
        rc = resolve_s3(location, o, t, err, err_cap);
    else if (strncmp(location, "http://", 7) == 0 || strncmp(location, "https://", 8) == 0)
        rc = resolve_http(location, t, err, err_cap);
    else
        feed_set_err(err, err_cap, "not a remote location (s3://, http://, https://)");
out:
    return rc;
}

/* A URL's scheme (ends at *scheme_end) and host[:port] without userinfo (*host, *host_len). */
static int origin(const char *url, const char **scheme_end, const char **host, size_t *host_len)
{
    const char *sep = strstr(url, "://");
    const char *hs, *end;
    if (!sep || strcspn(url, "/?#") < (size_t)(sep - url))
        return -1;
    hs = sep + 3;
    *host = host_of(hs, &end);
    *scheme_end = sep;
    *host_len = (size_t)(end - *host);
    return *host_len > 0 ? 0 : -1;
}

int feed_remote_redirect_allowed(const char *from, const char *to)
{
    const char *fs, *fh, *ts, *th;
    size_t fl, tl;
    if (origin(from, &fs, &fh, &fl) < 0 || origin(to, &ts, &th, &tl) < 0)
        return 0;
    return fs - from == ts - to && strncasecmp(from, to, (size_t)(fs - from)) == 0 && fl == tl &&
           strncasecmp(fh, th, fl) == 0;
}

/* Trims spaces at both ends in place; returns the start. */
static char *trim(char *s)
{
    char *e;
    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Reads the profile's keys from an INI credentials file held in text. */
static int parse_creds_file(char *text, const char *profile, feed_remote_creds *c)
{
    int in_profile = 0;
    int rc = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *l = trim(line);
        char *eq;
        char *dst = NULL;
        if (l[0] == '[') {
            char *close = strchr(l, ']');
            if (close) {
                *close = '\0';
                in_profile = strcmp(trim(l + 1), profile) == 0;
            }
            continue;
        }
        eq = strchr(l, '=');
        if (!in_profile || !eq || l[0] == '#' || l[0] == ';')
            continue;
        *eq = '\0';
        l = trim(l);
        if (strcmp(l, "aws_access_key_id") == 0)
            dst = c->access_key;
        else if (strcmp(l, "aws_secret_access_key") == 0)
            dst = c->secret_key;
        else if (strcmp(l, "aws_session_token") == 0)
            dst = c->session_token;
        if (dst && copy_str(dst, FEED_REMOTE_MAX_SECRET, trim(eq + 1), strlen(trim(eq + 1))) < 0)
            rc = FEED_ETOOBIG;
    }
    return rc;
}

static int load_creds_file(const char *path, const char *profile, feed_remote_creds *c, char *err,
                           size_t err_cap)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t n;
    int rc = 0;
    if (!f)
        goto out; /* no file: anonymous */
    text = malloc(CREDS_FILE_MAX + 1);
    if (!text) {
        rc = FEED_ENOMEM;
        goto out;
    }
    n = fread(text, 1, CREDS_FILE_MAX + 1, f);
    if (n > CREDS_FILE_MAX) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%.200s: credentials file larger than %u bytes", path,
                     CREDS_FILE_MAX);
        goto out;
    }
    text[n] = '\0';
    rc = parse_creds_file(text, profile, c);
    if (rc < 0) {
        feed_set_err(err, err_cap, "%.200s [%.100s]: a credential is longer than %u bytes", path,
                     profile, FEED_REMOTE_MAX_SECRET - 1);
    } else if (c->access_key[0] && !c->secret_key[0]) {
        feed_set_err(err, err_cap,
                     "%.200s [%.100s]: aws_access_key_id without aws_secret_access_key", path,
                     profile);
        rc = FEED_EINVAL;
    }
out:
    if (text) {
        explicit_bzero(text, CREDS_FILE_MAX + 1);
        free(text);
    }
    if (f)
        fclose(f);
    return rc;
}

int feed_remote_creds_load(feed_remote_creds *c, char *err, size_t err_cap)
{
    const char *id = env_nonempty("AWS_ACCESS_KEY_ID");
    const char *secret = env_nonempty("AWS_SECRET_ACCESS_KEY");
    const char *token = env_nonempty("AWS_SESSION_TOKEN");
    const char *file = env_nonempty("AWS_SHARED_CREDENTIALS_FILE");
    const char *profile = env_nonempty("AWS_PROFILE");
    const char *home = env_nonempty("HOME");
    char path[4096];
    int rc = 0;

    memset(c, 0, sizeof *c);
    if (id || secret) {
        if (!id || !secret) {
            feed_set_err(err, err_cap, "%s is set without %s",
                         id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                         id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
            rc = FEED_EINVAL;
            goto out;
        }
        if (copy_str(c->access_key, sizeof c->access_key, id, strlen(id)) < 0 ||
            copy_str(c->secret_key, sizeof c->secret_key, secret, strlen(secret)) < 0 ||
            (token &&
             copy_str(c->session_token, sizeof c->session_token, token, strlen(token)) < 0)) {
            feed_set_err(err, err_cap,
                         "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN is "
                         "longer than %u bytes",
                         FEED_REMOTE_MAX_SECRET - 1);
            rc = FEED_ETOOBIG;
        }
        goto out;
    }
    if (!file) {
        if (!home)
            goto out;
        if (snprintf(path, sizeof path, "%s/.aws/credentials", home) >= (int)sizeof path)
            goto out;
        file = path;
    }
    rc = load_creds_file(file, profile ? profile : "default", c, err, err_cap);
out:
    if (rc < 0)
        feed_remote_creds_wipe(c);
    return rc;
}

void feed_remote_creds_wipe(feed_remote_creds *c)
{
    explicit_bzero(c, sizeof *c);
}
