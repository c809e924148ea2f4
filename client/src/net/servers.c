/*
 * The loader's server table: one entry per configured address and per address
 * a DNS target resolves to. Entries are added at open and when a DNS list
 * brings a new address (servers_apply_dns, a receiver thread applying what
 * resolve.c posted); an address that left DNS is failed (its batches
 * re-issued) and marked removed, and once the table is full a removed entry
 * nothing refers to any more is reused. The loader's mu held throughout.
 */
#include <stdio.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "client_impl.h"

/* Whether anything may still use s: a piece in flight to it or being landed from it (the
 * receiver landing uses s when it retakes mu), or a call still attached to it. */
static bool server_in_use(const loader *l, const server *s)
{
    return sched_server_in_use(l, s) || s->describe || s->stream || s->channel;
}

int servers_add(loader *l, const char *target, int dns_index)
{
    if (strlen(target) > CLIENT_TARGET_MAX)
        return FEED_ETOOBIG;
    server *s = NULL;
    if (l->num_servers < CLIENT_MAX_SERVERS) {
        s = &l->servers[l->num_servers++];
    } else {
        /* Full: take an entry whose address left DNS. sched_fail_server detached its calls
         * (their tags carry the call, whose srv is NULL) and re-issued its batches. */
        for (uint32_t i = 0; i < l->num_servers && !s; i++) {
            if (l->servers[i].removed && !server_in_use(l, &l->servers[i]))
                s = &l->servers[i];
        }
        if (!s)
            return FEED_ETOOBIG;
        sched_forget_server(l, s); /* stale, on a landed or handed out batch */
    }
    memset(s, 0, sizeof(*s));
    snprintf(s->target, sizeof(s->target), "%s", target);
    s->dns_target = dns_index;
    s->state = SRV_DOWN;
    s->backoff_ms = CLIENT_BACKOFF_FIRST_MS;
    s->retry_at_ns = 0;
    return (int)(s - l->servers);
}

void servers_apply_dns(loader *l)
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
            int idx = servers_add(l, d->addrs[a], d->cfg_index);
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
