/*
 * DNS targets ("dns:///name:port"): a resolver thread calls getaddrinfo for
 * each every resolve_interval_ms and posts the address list under mu; a
 * receiver thread applies it (resolve_apply): new addresses become servers,
 * addresses that vanished are failed (their batches re-issued) and marked
 * removed; once the table is full, a removed entry nothing refers to any more
 * is reused (conn_add_server). A failed lookup keeps the previous list: a DNS
 * hiccup must not drop every server of a running job.
 *
 * Locks: the loader's mu (posting a list) and dns_mu (the resolver's timed
 * wait and its stop flag) are never held together, and getaddrinfo runs with
 * neither held (loader_impl.h).
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
#include "loader_impl.h"

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

void resolve_apply(loader *l)
{
    bool is_new[CLIENT_MAX_SERVERS];
    for (uint32_t i = 0; i < l->num_dns; i++) {
        dns_target *d = &l->dns[i];
        if (d->gen == d->applied_gen)
            continue;
        d->applied_gen = d->gen;
        for (uint32_t k = 0; k < l->num_servers; k++)
            l->servers[k].seen = false;
        for (uint32_t a = 0; a < d->num_addrs; a++) {
            server *found = NULL;
            for (uint32_t k = 0; k < l->num_servers && !found; k++) {
                if (l->servers[k].dns_target == d->cfg_index &&
                    strcmp(l->servers[k].target, d->addrs[a]) == 0)
                    found = &l->servers[k];
            }
            is_new[a] = !found;
            if (!found)
                continue;
            if (found->removed)
                client_log(l, FEED_LOG_INFO, "%s is back in DNS", found->target);
            found->removed = false;
            found->seen = true;
        }
        /* Removals first: with the table full, a new address takes a vanished one's entry. */
        for (uint32_t k = 0; k < l->num_servers; k++) {
            server *s = &l->servers[k];
            if (s->dns_target != d->cfg_index || s->seen || s->removed)
                continue;
            sched_fail_server(l, s, "address left DNS", feed_now_ns());
            s->removed = true;
            client_log(l, FEED_LOG_INFO, "server %s removed (no longer in DNS)", s->target);
        }
        for (uint32_t a = 0; a < d->num_addrs; a++) {
            if (!is_new[a])
                continue;
            int idx = conn_add_server(l, d->addrs[a], d->cfg_index);
            if (idx < 0) {
                client_log(l, FEED_LOG_WARN, "server table full; ignoring %s", d->addrs[a]);
                continue;
            }
            l->servers[idx].seen = true;
            client_log(l, FEED_LOG_INFO, "new server %s from %s", d->addrs[a],
                       l->targets[d->cfg_index]);
        }
    }
}
