// SPDX-License-Identifier: MIT
/*
 * copy_blocks: copy whole blocks inside the pool, for copy-on-write.
 *
 * Grid: one CUDA block per (src, dst) pair (gridDim.x = n); each thread
 * moves 16-byte words (uint4) strided by blockDim.x, so a warp reads and
 * writes 512 contiguous bytes at a time. block_bytes is a multiple of 256
 * (kvd enforces it), hence of 16. Offsets are 64-bit.
 */
#include <errno.h>
#include <cuda_runtime.h>

#include "kv_kernels.h"

__global__ void copy_blocks_kernel(uint4 *pool, uint64_t words_per_block,
				   const struct kv_block_copy *pairs)
{
	const struct kv_block_copy p = pairs[blockIdx.x];
	const uint4 *src = pool + (uint64_t)p.src * words_per_block;
	uint4 *dst = pool + (uint64_t)p.dst * words_per_block;

	for (uint64_t i = threadIdx.x; i < words_per_block; i += blockDim.x)
		dst[i] = src[i];
}

/*
 * kv_gpu_copy_blocks - launch copy_blocks on @stream. @pool is a device
 * pointer (the pool base), @pairs a device array of @n pairs. Returns 0
 * or -EINVAL (bad sizes) / -EIO (launch failed). Asynchronous: the copy
 * is done when @stream reaches this point.
 */
extern "C" int kv_gpu_copy_blocks(void *pool, uint64_t block_bytes,
				  const struct kv_block_copy *pairs,
				  uint32_t n, cudaStream_t stream)
{
	if (!n)
		return 0;
	if (block_bytes % 16 || n > 0x7fffffffU)
		return -EINVAL;
	copy_blocks_kernel<<<n, 256, 0, stream>>>((uint4 *)pool,
						  block_bytes / 16, pairs);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
