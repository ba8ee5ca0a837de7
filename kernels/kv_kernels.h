/* SPDX-License-Identifier: MIT */
/*
 * kvd kernels and their C reference implementations.
 *
 * Addressing follows DESIGN.md's one address rule: block id b of a
 * namespace with block_bytes bb starts at pool + (uint64_t)b * bb. All
 * offsets are computed in 64 bits, so pools over 4 GiB address correctly.
 */
#ifndef KV_KERNELS_H
#define KV_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One copy-on-write step: the bytes of block src are copied to dst. */
struct kv_block_copy {
	uint32_t	src;
	uint32_t	dst;
};

/*
 * kv_ref_copy_blocks - C reference of copy_blocks: for each of the @n
 * pairs, copy @block_bytes from block src to block dst of @pool.
 * Returns 0, or -EINVAL when a pair copies a block onto itself or
 * block_bytes is not a multiple of 16. Thread-safe for disjoint pairs.
 */
int kv_ref_copy_blocks(void *pool, uint64_t block_bytes,
		       const struct kv_block_copy *pairs, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif /* KV_KERNELS_H */
