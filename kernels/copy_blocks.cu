// SPDX-License-Identifier: MIT
/*
 * copy_blocks: copy whole blocks inside the pool, for copy-on-write.
 *
 * Grid (n, slices), 256 threads: x is the pair, y a slice of at least
 * 64 KiB of its block (a block of a large model is MiBs: one CUDA block
 * per pair would leave most SMs idle when a few pairs are copied). Each
 * thread moves 16-byte words, four loads in flight before the stores, so
 * a warp reads and writes 512 contiguous bytes per instruction. Offsets
 * are 64-bit. The pairs are read on the device only: a pair whose src is
 * its dst is skipped there (the C reference refuses it with -EINVAL).
 * ptxas (sm_90): 40 registers, no spills, 6 CUDA blocks of 256 per SM.
 */
#include <errno.h>
#include <stdint.h>
#include <cuda_runtime.h>

#include "kv_kernels.h"

#define CB_THREADS	256
#define CB_UNROLL	4
#define CB_SLICE	(64u << 10)	/* bytes of a block per CUDA block, at least */
#define CB_MAX_SLICES	65535u		/* gridDim.y */

__global__ void __launch_bounds__(CB_THREADS)
copy_blocks_kernel(uint4 *pool, uint64_t words, uint64_t slice,
		   const struct kv_block_copy *pairs)
{
	const struct kv_block_copy p = pairs[blockIdx.x];
	const uint4 *src = pool + (uint64_t)p.src * words;
	uint4 *dst = pool + (uint64_t)p.dst * words;
	uint64_t i = blockIdx.y * slice + threadIdx.x;
	uint64_t end = min(words, (blockIdx.y + 1) * slice);

	if (p.src == p.dst)
		return;
	for (; i + (CB_UNROLL - 1) * CB_THREADS < end;
	     i += CB_UNROLL * CB_THREADS) {
		uint4 w[CB_UNROLL];

#pragma unroll
		for (int u = 0; u < CB_UNROLL; u++)
			w[u] = src[i + u * CB_THREADS];
#pragma unroll
		for (int u = 0; u < CB_UNROLL; u++)
			dst[i + u * CB_THREADS] = w[u];
	}
	for (; i < end; i += CB_THREADS)
		dst[i] = src[i];
}

/*
 * kv_cuda_copy_blocks - launch copy_blocks on @stream (a cudaStream_t).
 * @pool (the pool base) and @pairs are device pointers. Returns 0,
 * -EINVAL (bad sizes, NULL or misaligned pointers) or -EIO (the launch
 * failed). Asynchronous: the copy is done when @stream reaches it.
 */
extern "C" int kv_cuda_copy_blocks(void *pool, uint64_t block_bytes,
				   const struct kv_block_copy *pairs,
				   uint32_t n, void *stream)
{
	uint64_t words = block_bytes / 16, slices, slice;

	if (block_bytes % 16 || (n && (!pool || !pairs)))
		return -EINVAL;
	if (!n || !block_bytes)
		return 0;
	if (n > INT32_MAX || (uintptr_t)pool % 16)
		return -EINVAL;
	slices = (block_bytes + CB_SLICE - 1) / CB_SLICE;
	if (slices > CB_MAX_SLICES)
		slices = CB_MAX_SLICES;
	slice = (words + slices - 1) / slices;
	slices = (words + slice - 1) / slice;
	copy_blocks_kernel<<<dim3(n, (unsigned)slices), CB_THREADS, 0,
			     (cudaStream_t)stream>>>((uint4 *)pool, words,
						     slice, pairs);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
