/*
 * Built instead of step_cuda.cu when CUDA is absent (FEED_HAVE_CUDA off): the
 * benchmark then has the CPU step only.
 */
#include "step.h"

#include <stdio.h>

#include "feed/errors.h"

int step_cuda_device_count(void)
{
    return 0;
}

int step_cuda_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap)
{
    (void)cfg, (void)out;
    snprintf(err, err_cap, "built without CUDA");
    return FEED_EUNSUPPORTED;
}
