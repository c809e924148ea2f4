/*
 * The decode lane's share, adapted between epochs (docs/design/client.md,
 * "The lane's share"): which fraction of the samples the training GPU's JPEG
 * engines decode in the next epoch, from what this epoch measured. It grows
 * while the training step waits for the servers and the step's own time
 * (CUDA events on the caller's stream) has not grown, and shrinks when the
 * step slowed or the lane itself was what the step waited for. A share
 * changes only between epochs, so that the samples the lane decodes are a
 * function of (seed, epoch, sample, the epoch's share) and a run with the
 * same shares is the same run.
 *
 * Pure: no clock, no CUDA; the caller owns the struct.
 */
#ifndef FEED_CLIENT_SHARE_POLICY_H
#define FEED_CLIENT_SHARE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Steps an epoch must have measured before its step time is trusted. */
#define CLIENT_SHARE_MIN_STEPS 32u
/* The step's time may grow by this fraction over the baseline before the share backs off. */
#define CLIENT_SHARE_SLOWDOWN 0.05
/* A step that waited less than this fraction of the time is not short of data. */
#define CLIENT_SHARE_WAIT_MIN 0.02
/* The most the share moves up in one epoch; a back-off moves it down by this much. */
#define CLIENT_SHARE_MAX_MOVE 0.25
/* Shares are multiples of 1 / CLIENT_SHARE_ONE (the assignment's resolution). */
#define CLIENT_SHARE_ONE 65536u

typedef struct client_share_policy {
    uint32_t share;      /* in force this epoch, in 1/CLIENT_SHARE_ONE */
    uint32_t max;        /* the configured ceiling */
    uint32_t ceiling;    /* the lowest share at which the step slowed; above max until then */
    uint32_t base_share; /* the lowest share measured so far, and the step time there */
    double base_ns;      /* 0: nothing measured yet */
} client_share_policy;

/* What one epoch measured. */
typedef struct client_share_epoch {
    /* Of the epoch's wall time, the part the step was short of data: the GPU's idle fraction
     * outside the steps (gpu_idle), or else the training thread's time blocked in next(). */
    double wait_fraction;
    bool gpu_idle;
    double lane_waits; /* of that waiting, the part in which only the lane's samples were
                          missing from the batch waited for (0..1) */
    double step_ns;    /* median step time on the GPU; 0: not measured */
    uint64_t steps;    /* steps measured */
} client_share_epoch;

/* Start at share (clamped to max), both in 1/CLIENT_SHARE_ONE. */
void client_share_policy_init(client_share_policy *p, uint32_t share, uint32_t max);
/*
 * The share for the next epoch from what the epoch just ended measured under
 * p->share, which becomes it; why gets one line saying what was decided and
 * on which numbers (for the log).
 */
uint32_t client_share_policy_next(client_share_policy *p, const client_share_epoch *e, char *why,
                                  size_t why_cap);

#endif
