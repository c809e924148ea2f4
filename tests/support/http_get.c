/*
 * A minimal HTTP/1.0 GET client for reading feedd's metrics endpoint in
 * tests (the server side is libmicrohttpd). Bounded in size and time.
 */
#include "feedtest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/timeutil.h"

#define HTTP_MAX_BYTES (16u << 20)
#define HTTP_TIMEOUT_MS 10000

static int wait_fd(int fd, short events, uint64_t deadline)
{
    uint64_t now = feed_now_ns();
    if (now >= deadline)
        return FEED_ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r <= 0)
        return r == 0 ? FEED_ETIMEDOUT : FEED_EIO;
    return 0;
}

int feed_test_http_get(int port, const char *path, int *status, char **body)
{
    int rc = FEED_EIO;
    char req[512];
    char *buf = NULL;
    size_t len = 0, cap = 0;
    uint64_t deadline = feed_now_ns() + (uint64_t)HTTP_TIMEOUT_MS * 1000000u;
    *body = NULL;
    *status = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return FEED_EIO;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        goto out;
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (n < 0 || (size_t)n >= sizeof req) {
        rc = FEED_EINVAL;
        goto out;
    }
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w <= 0)
            goto out;
        off += (size_t)w;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > HTTP_MAX_BYTES) {
                rc = FEED_ETOOBIG;
                goto out;
            }
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = FEED_ENOMEM;
                goto out;
            }
            buf = nb;
            cap = ncap;
        }
        rc = wait_fd(fd, POLLIN, deadline);
        if (rc < 0)
            goto out;
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = FEED_EIO;
            goto out;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    rc = FEED_EPROTO;
    if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1)
        goto out;
    char *b = strstr(buf, "\r\n\r\n");
    if (!b)
        goto out;
    b += 4;
    memmove(buf, b, strlen(b) + 1);
    *body = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

int feed_test_metric(const char *text, const char *series, double *value)
{
    size_t sl = strlen(series);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, series, sl) == 0 && line[sl] == ' ') {
            *value = strtod(line + sl + 1, NULL);
            return 0;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return FEED_ENOTFOUND;
}

int feed_test_scrape(int port, const char *series, double *value)
{
    int status = 0;
    char *body = NULL;
    int rc = feed_test_http_get(port, "/metrics", &status, &body);
    if (rc == 0)
        rc = status == 200 ? feed_test_metric(body, series, value) : FEED_EPROTO;
    free(body);
    return rc;
}
