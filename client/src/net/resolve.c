/*
 * DNS targets ("dns:///name:port"): a resolver thread calls getaddrinfo for
 * each every resolve_interval_ms and posts the address list under mu; a
 * receiver thread applies it to the server table (servers.c). A failed lookup
 * keeps the previous list: a DNS hiccup must not drop every server of a
 * running job.
 *
 * Locks: the loader's mu (posting a list) and dns_mu (the resolver's timed
 * wait and its stop flag) are never held together, and getaddrinfo runs with
 * neither held (client_impl.h).
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "client_impl.h"

int resolve_parse(const char *target, char *host, size_t host_cap, char *port, size_t port_cap)
{
    static const char prefix[] = "dns:///";
    if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
        return FEED_EINVAL;
    const char *hp = target + sizeof(prefix) - 1;
    const char *colon;
    const char *h_start = hp, *h_end;
    if (*hp == '[') {
        h_start = hp + 1;
        h_end = strchr(h_start, ']');
        if (!h_end || h_end[1] != ':')
            return FEED_EINVAL;
        colon = h_end + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon)
            return FEED_EINVAL;
        h_end = colon;
    }
    size_t hl = (size_t)(h_end - h_start);
    size_t pl = strlen(colon + 1);
    if (hl == 0 || hl >= host_cap || pl == 0 || pl >= port_cap)
        return FEED_EINVAL;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return FEED_EINVAL;
    }
    memcpy(host, h_start, hl);
    host[hl] = 0;
    memcpy(port, colon + 1, pl + 1);
    return 0;
}

/* Resolves one target into out[] ("ipv4:a.b.c.d:p", "ipv6:[::1]:p"); count or <0. */
static int lookup(const dns_target *d, char (*out)[CLIENT_TARGET_MAX + 1], uint32_t cap)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(d->host, d->port, &hints, &res) != 0)
        return FEED_ENOTFOUND;
    uint32_t n = 0;
    for (struct addrinfo *ai = res; ai && n < cap; ai = ai->ai_next) {
        char ip[INET6_ADDRSTRLEN];
        char t[CLIENT_TARGET_MAX + 1];
        if (ai->ai_family == AF_INET) {
            const struct sockaddr_in *sa = (const void *)ai->ai_addr;
            inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip));
            snprintf(t, sizeof(t), "ipv4:%s:%s", ip, d->port);
        } else if (ai->ai_family == AF_INET6) {
            const struct sockaddr_in6 *sa = (const void *)ai->ai_addr;
            inet_ntop(AF_INET6, &sa->sin6_addr, ip, sizeof(ip));
            snprintf(t, sizeof(t), "ipv6:[%s]:%s", ip, d->port);
        } else {
            continue;
        }
        bool dup = false;
        for (uint32_t k = 0; k < n; k++)
            dup = dup || strcmp(out[k], t) == 0;
        if (!dup)
            memcpy(out[n++], t, sizeof(t));
    }
    freeaddrinfo(res);
    return (int)n;
}

static void resolve_all(loader *l)
{
    char(*tmp)[CLIENT_TARGET_MAX + 1] = malloc(CLIENT_MAX_SERVERS * sizeof(*tmp));
    if (!tmp)
        return;
    for (uint32_t i = 0; i < l->num_dns; i++) {
        dns_target *d = &l->dns[i];
        int n = lookup(d, tmp, CLIENT_MAX_SERVERS);
        pthread_mutex_lock(&l->mu);
        if (n > 0) {
            memcpy(d->addrs, tmp, (size_t)n * sizeof(*tmp));
            d->num_addrs = (uint32_t)n;
            d->gen++;
        } else {
            client_log(l, FEED_LOG_WARN, "cannot resolve %s; keeping %u known addresses",
                       l->targets[d->cfg_index], d->num_addrs);
        }
        pthread_mutex_unlock(&l->mu);
    }
    free(tmp);
}

int resolve_init(loader *l)
{
    uint32_t n = 0;
    for (size_t i = 0; i < l->cfg.num_targets; i++)
        n += strncmp(l->targets[i], "dns:///", 7) == 0;
    l->num_dns = 0;
    if (!n)
        return 0;
    l->dns = calloc(n, sizeof(*l->dns));
    if (!l->dns)
        return FEED_ENOMEM;
    for (size_t i = 0; i < l->cfg.num_targets; i++) {
        if (strncmp(l->targets[i], "dns:///", 7) != 0)
            continue;
        dns_target *d = &l->dns[l->num_dns++];
        d->cfg_index = (int)i;
        if (resolve_parse(l->targets[i], d->host, sizeof(d->host), d->port, sizeof(d->port)))
            return FEED_EINVAL;
        d->addrs = calloc(CLIENT_MAX_SERVERS, sizeof(*d->addrs));
        if (!d->addrs)
            return FEED_ENOMEM;
    }
    resolve_all(l);
    return 0;
}

static void *dns_main(void *arg)
{
    loader *l = arg;
    pthread_mutex_lock(&l->dns_mu);
    while (!l->dns_stop) {
        uint64_t until = feed_now_ns() + (uint64_t)l->cfg.resolve_interval_ms * 1000000u;
        int rc = 0;
        while (!l->dns_stop && rc != FEED_ETIMEDOUT)
            rc = feed_cond_wait_until(&l->dns_cond, &l->dns_mu, until);
        if (l->dns_stop)
            break;
        pthread_mutex_unlock(&l->dns_mu);
        resolve_all(l);
        pthread_mutex_lock(&l->dns_mu);
    }
    pthread_mutex_unlock(&l->dns_mu);
    return NULL;
}

int resolve_start(loader *l)
{
    if (!l->num_dns)
        return 0;
    if (pthread_create(&l->dns_thread, NULL, dns_main, l))
        return FEED_ENOMEM;
    l->dns_started = true;
    return 0;
}

void resolve_stop(loader *l)
{
    if (!l->dns_started)
        return;
    pthread_mutex_lock(&l->dns_mu);
    l->dns_stop = true;
    pthread_cond_signal(&l->dns_cond);
    pthread_mutex_unlock(&l->dns_mu);
    pthread_join(l->dns_thread, NULL);
    l->dns_started = false;
}

void resolve_free(loader *l)
{
    for (uint32_t i = 0; i < l->num_dns; i++)
        free(l->dns[i].addrs);
    free(l->dns);
    l->dns = NULL;
    l->num_dns = 0;
}

