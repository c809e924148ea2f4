/*
 * The decode lane's share adapted between epochs (docs/design/client.md "The lane's share"):
 * what the loader measures for it (the training thread's waits and the lane's part of them,
 * the steps' own GPU times) and the decision for the next epoch, through the pure policy of
 * share_policy.h. Runs on whichever loader thread holds mu; calls nothing of the scheduler or
 * the transport, which call it.
 */
#include <stdlib.h>

#include "feed/log.h"
#include "feed/timeutil.h"

#include "client_impl.h"
#include "share_policy.h"

void client_lane_note_wait(loader *l, const slot *sl, uint64_t since, uint64_t now)
{
    if (!l->lane_adapt)
        return;
    if (!l->lane_t0_ns) {
        /* Measured from the first batch after a decision: the wait for it is the pipeline
         * filling (as demand.c leaves out the first batch's wait), not the lane's share. */
        l->lane_t0_ns = now;
        return;
    }
    l->lane_batches++;
    if (!since || now <= since)
        return;
    l->lane_wait_ns += now - since;
    /* The part of the wait in which only the lane's samples were missing: from the later of
     * the wait's start and the decoded pieces' end to the lane's end. */
    uint64_t from = since > sl->dec_done_ns ? since : sl->dec_done_ns;
    uint64_t to = sl->lane_done_ns < now ? sl->lane_done_ns : now;
    if (sl->lane_done_ns > sl->dec_done_ns && to > from)
        l->lane_only_wait_ns += to - from;
}

void client_lane_note_step(loader *l, uint64_t ns)
{
    if (!l->lane_adapt)
        return;
    l->lane_step_sum_ns += ns;
    uint64_t us = ns / 1000u;
    l->lane_step_us[l->lane_steps_seen++ % CLIENT_LANE_STEPS] =
        us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void client_lane_decide(loader *l, uint32_t next)
{
    if (!l->lane_adapt || l->lane_decided == next)
        return;
    uint64_t now = feed_now_ns();
    uint64_t span = l->lane_t0_ns && now > l->lane_t0_ns ? now - l->lane_t0_ns : 0;
    uint32_t n =
        l->lane_steps_seen < CLIENT_LANE_STEPS ? (uint32_t)l->lane_steps_seen : CLIENT_LANE_STEPS;
    client_share_epoch e = {0};
    e.steps = n;
    if (span && n >= CLIENT_SHARE_MIN_STEPS && l->lane_batches) {
        /* The GPU's own idle fraction: a loop that runs ahead of the GPU blocks in next()
         * while the GPU still runs its steps, so the training thread's waits would count a
         * busy GPU as starving. Not every step is timed (client_gpu_slot_stream_wait), so the
         * busy time is the mean step time times the batches handed out. */
        double busy =
            (double)l->lane_step_sum_ns / (double)l->lane_steps_seen * (double)l->lane_batches;
        e.wait_fraction = 1.0 - busy / (double)span;
        e.gpu_idle = true;
    } else if (span) {
        e.wait_fraction = (double)l->lane_wait_ns / (double)span;
    }
    if (e.wait_fraction < 0)
        e.wait_fraction = 0;
    if (e.wait_fraction > 1)
        e.wait_fraction = 1;
    if (l->lane_wait_ns)
        e.lane_waits = (double)l->lane_only_wait_ns / (double)l->lane_wait_ns;
    if (n) {
        qsort(l->lane_step_us, n, sizeof(l->lane_step_us[0]), cmp_u32);
        e.step_ns = (double)l->lane_step_us[n / 2] * 1000.0;
    }
    char why[256];
    l->lane_policy.share = l->lane_share_epoch;
    l->lane_share = client_share_policy_next(&l->lane_policy, &e, why, sizeof why);
    client_log(l, FEED_LOG_INFO, "decode lane, epoch %u: %s", next, why);
    l->lane_decided = next;
    l->lane_t0_ns = 0;
    l->lane_wait_ns = l->lane_only_wait_ns = 0;
    l->lane_steps_seen = 0;
    l->lane_step_sum_ns = 0;
    l->lane_batches = 0;
}
