/* SPDX-License-Identifier: MIT */
/*
 * The disk tier's file (tier_disk.c's, below it): its layout in 4 KiB
 * units, a run per block with its header, and, in tier_file.c, the
 * superblock, the scan that adopts a kept file's blocks, and the
 * opening of the file or device. For tier_disk.c and tier_file.c only.
 */
#ifndef KVD_TIER_FILE_H
#define KVD_TIER_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "tier.h"

#define UNIT		4096U
#define DISK_MAGIC	0x314b53444456444bULL	/* "KVDDSK1" */
#define DISK_VERSION	1

/* The head of a run on disk, its first bytes. */
struct disk_hdr {
	uint64_t	magic;
	uint32_t	version;
	uint32_t	hdr_bytes;
	uint64_t	sig;
	struct kv_hash	key;
	uint64_t	bytes;
	uint64_t	sum;
	uint64_t	seq;		/* write order: the newest copy wins */
};
_Static_assert(sizeof(struct disk_hdr) == 64, "disk_hdr");

static inline uint32_t units_for(uint64_t bytes)
{
	return (uint32_t)((sizeof(struct disk_hdr) + bytes + UNIT - 1) / UNIT);
}

/* Runs of units in a bitmap: the file's, the staging buffer's. */
#define BPL	(8 * sizeof(unsigned long))

static inline bool bit(const unsigned long *m, uint32_t i)
{
	return m[i / BPL] >> (i % BPL) & 1;
}

static inline void set_run(unsigned long *m, uint32_t first, uint32_t n, bool on)
{
	for (uint32_t i = first; i < first + n; i++) {
		if (on)
			m[i / BPL] |= 1UL << (i % BPL);
		else
			m[i / BPL] &= ~(1UL << (i % BPL));
	}
}

/* tier_file.c */
int __kvd_disk_open(struct kvd *d, struct kvd_disk *k, uint64_t *bytes,
		    const char **why);
int __kvd_disk_sb_open(struct kvd *d, struct kvd_tier *t);

#endif /* KVD_TIER_FILE_H */
