/*
 * The decode lane's share between epochs; see share_policy.h and
 * docs/design/client.md ("The lane's share") for the rules and why.
 */
#include "share_policy.h"

#include <math.h>
#include <stdio.h>

/* Growth stops this far below the lowest share at which the step slowed. */
#define GAP (CLIENT_SHARE_ONE / 16u)

static double frac(uint32_t s)
{
    return (double)s / CLIENT_SHARE_ONE;
}

static uint32_t quantum(double s)
{
    if (!(s > 0))
        return 0;
    if (s >= 1)
        return CLIENT_SHARE_ONE;
    return (uint32_t)llround(s * CLIENT_SHARE_ONE);
}

void client_share_policy_init(client_share_policy *p, uint32_t share, uint32_t max)
{
    if (max > CLIENT_SHARE_ONE)
        max = CLIENT_SHARE_ONE;
    *p = (client_share_policy){
        .share = share < max ? share : max,
        .max = max,
        .ceiling = CLIENT_SHARE_ONE + GAP + 1,
    };
}

/* The grown share: the servers' part shrinks until what they supplied meets a step that does not
 * wait. Under share s the step waited w of the time, so the servers supplied (1 - s)(1 - w) of
 * what the step could take; the lane takes the rest: s' = 1 - (1 - s)(1 - w). */
static uint32_t grown(const client_share_policy *p, double w)
{
    double s = frac(p->share);
    double target = 1 - (1 - s) * (1 - w);
    if (target > s + CLIENT_SHARE_MAX_MOVE)
        target = s + CLIENT_SHARE_MAX_MOVE;
    uint32_t n = quantum(target);
    if (n > p->max)
        n = p->max;
    if (n + GAP > p->ceiling)
        n = p->ceiling > GAP ? p->ceiling - GAP : 0;
    return n > p->share ? n : p->share;
}

/* What the wait fraction is, for the log line. */
static const char *waited(const client_share_epoch *e)
{
    return e->gpu_idle ? "the GPU waited outside the steps" : "the step waited";
}

uint32_t client_share_policy_next(client_share_policy *p, const client_share_epoch *e, char *why,
                                  size_t why_cap)
{
    uint32_t s = p->share, n = s;
    double w = e->wait_fraction;
    if (e->steps < CLIENT_SHARE_MIN_STEPS || !(e->step_ns > 0)) {
        snprintf(why, why_cap, "share %.3f kept: %llu steps measured, fewer than %u", frac(s),
                 (unsigned long long)e->steps, CLIENT_SHARE_MIN_STEPS);
        return s;
    }
    if (p->base_ns == 0 || s <= p->base_share) {
        p->base_share = s;
        p->base_ns = e->step_ns;
    }
    double slower = e->step_ns / p->base_ns - 1;
    if (s > p->base_share && slower > CLIENT_SHARE_SLOWDOWN) {
        if (s < p->ceiling)
            p->ceiling = s;
        uint32_t down = quantum(CLIENT_SHARE_MAX_MOVE);
        n = s - p->base_share < down ? p->base_share : s - down;
        snprintf(why, why_cap,
                 "share %.3f -> %.3f: the step took %.1f%% longer than at share %.3f "
                 "(%.3f ms against %.3f ms)",
                 frac(s), frac(n), 100 * slower, frac(p->base_share), e->step_ns / 1e6,
                 p->base_ns / 1e6);
    } else if (w > CLIENT_SHARE_WAIT_MIN && e->lane_waits > 0.5) {
        n = quantum(frac(s) * (1 - w));
        snprintf(why, why_cap,
                 "share %.3f -> %.3f: %s %.1f%% of the time, %.0f%% of it for the "
                 "lane's samples",
                 frac(s), frac(n), waited(e), 100 * w, 100 * e->lane_waits);
    } else if (w > CLIENT_SHARE_WAIT_MIN) {
        n = grown(p, w);
        if (n > s)
            snprintf(why, why_cap,
                     "share %.3f -> %.3f: %s %.1f%% of the time for the servers "
                     "and took %.3f ms (%.3f ms at share %.3f)",
                     frac(s), frac(n), waited(e), 100 * w, e->step_ns / 1e6, p->base_ns / 1e6,
                     frac(p->base_share));
        else
            snprintf(why, why_cap,
                     "share %.3f kept: %s %.1f%% of the time, but the share is at "
                     "its %s (%.3f)",
                     frac(s), waited(e), 100 * w, s >= p->max ? "configured maximum" : "ceiling",
                     frac(s >= p->max ? p->max : p->ceiling));
    } else {
        snprintf(why, why_cap, "share %.3f kept: %s %.1f%% of the time", frac(s), waited(e),
                 100 * w);
    }
    p->share = n;
    return n;
}
