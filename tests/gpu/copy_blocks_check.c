// SPDX-License-Identifier: MIT
/*
 * GPU check of copy_blocks against its C reference. Needs a CUDA device;
 * exits 77 (skip) without one, so it also proves that a program linked
 * with the kernels starts on a host with no GPU or driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "kv_kernels.h"

int kv_gpu_copy_blocks(void *pool, uint64_t block_bytes,
		       const struct kv_block_copy *pairs, uint32_t n,
		       cudaStream_t stream);

#define NBLK	256
#define BB	(32u << 10)

int main(void)
{
	struct kv_block_copy pairs[NBLK / 2];
	struct kv_block_copy *dpairs;
	uint8_t *host, *ref, *dpool;
	int ndev = 0, ret = 1;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("copy_blocks_check: no CUDA device, skipped\n");
		return 77;
	}
	host = malloc((size_t)NBLK * BB);
	ref = malloc((size_t)NBLK * BB);
	for (size_t i = 0; i < (size_t)NBLK * BB; i++)
		host[i] = (uint8_t)(i * 2654435761u >> 13);
	/* Shuffled, non-contiguous pairs: odd blocks get even ones. */
	for (uint32_t i = 0; i < NBLK / 2; i++) {
		pairs[i].src = (i * 37) % (NBLK / 2) * 2;
		pairs[i].dst = (NBLK - 1) - 2 * i;
	}
	memcpy(ref, host, (size_t)NBLK * BB);
	kv_ref_copy_blocks(ref, BB, pairs, NBLK / 2);

	if (cudaMalloc((void **)&dpool, (size_t)NBLK * BB) ||
	    cudaMalloc((void **)&dpairs, sizeof(pairs)))
		goto out;
	cudaMemcpy(dpool, host, (size_t)NBLK * BB, cudaMemcpyHostToDevice);
	cudaMemcpy(dpairs, pairs, sizeof(pairs), cudaMemcpyHostToDevice);
	if (kv_gpu_copy_blocks(dpool, BB, dpairs, NBLK / 2, 0))
		goto out;
	cudaMemcpy(host, dpool, (size_t)NBLK * BB, cudaMemcpyDeviceToHost);
	if (cudaDeviceSynchronize() != cudaSuccess)
		goto out;
	ret = memcmp(host, ref, (size_t)NBLK * BB) ? 1 : 0;
	printf("copy_blocks_check: %u pairs of %u-byte blocks: %s\n",
	       NBLK / 2, BB, ret ? "MISMATCH" : "match");
out:
	if (ret)
		fprintf(stderr, "copy_blocks_check: failed\n");
	free(host);
	free(ref);
	return ret;
}
