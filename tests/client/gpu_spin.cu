/*
 * A spin kernel for test_client_gpu's timeline check: stands in for a
 * training step that keeps the GPU busy for a known number of clock cycles.
 */
#include <cuda_runtime.h>

__global__ void spin_kernel(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

extern "C" int feedtest_gpu_spin(void *stream, long long cycles)
{
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
