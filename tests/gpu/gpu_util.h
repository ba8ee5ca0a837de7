/* SPDX-License-Identifier: MIT */
/*
 * What the GPU check programs share: stop on a CUDA error, naming the
 * call and line, and a small xorshift64* generator (reproducible inputs
 * from a seed). Define GPU_PROG to the program's name first.
 */
#ifndef KV_GPU_UTIL_H
#define KV_GPU_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

#define CK(x)	ck((x), #x, __LINE__)

static void ck(cudaError_t e, const char *what, int line)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, GPU_PROG ":%d: %s: %s\n", line, what,
		cudaGetErrorString(e));
	exit(1);
}

/* xorshift64*: seed @rng (non-zero) before the first call. */
static uint64_t rng;

static uint32_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

#endif /* KV_GPU_UTIL_H */
