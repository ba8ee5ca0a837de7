/* SPDX-License-Identifier: MIT */
/*
 * A latency histogram: log2 buckets split in four (quarter octaves, as
 * HdrHistogram's sub-buckets at two significant bits), so a percentile
 * it gives is within 25% of the true one, in 2 KiB and O(1) a sample.
 * Values are nanoseconds; the tiers' I/O (tier_disk.c) and kvctl's
 * percentiles use it. Not thread-safe: kvd's loop alone records.
 */
#ifndef KVD_LAT_H
#define KVD_LAT_H

#include <stdint.h>

#define KVD_LAT_BUCKETS	256

struct kvd_lat {
	uint64_t	n;
	uint64_t	b[KVD_LAT_BUCKETS];
};

/* 0..7 exact; then 4 buckets per power of two. */
static inline uint32_t kvd_lat_bucket(uint64_t ns)
{
	uint32_t msb;

	if (ns < 8)
		return (uint32_t)ns;
	msb = 63 - (uint32_t)__builtin_clzll(ns);
	return (msb - 1) * 4 + (uint32_t)((ns >> (msb - 2)) & 3);
}

/* The largest value of bucket @i. */
static inline uint64_t kvd_lat_upper(uint32_t i)
{
	uint32_t msb = i / 4 + 1, shift;

	if (i < 8)
		return i;
	shift = msb - 2;
	return ((uint64_t)(4 + i % 4) << shift) + (1ULL << shift) - 1;
}

static inline void kvd_lat_add(struct kvd_lat *l, uint64_t ns)
{
	l->b[kvd_lat_bucket(ns)]++;
	l->n++;
}

/* The @pct-th percentile (0..100), its bucket's upper end; 0 if empty. */
static inline uint64_t kvd_lat_pct(const struct kvd_lat *l, uint32_t pct)
{
	uint64_t want = (l->n * pct + 99) / 100, seen = 0;

	if (!l->n)
		return 0;
	for (uint32_t i = 0; i < KVD_LAT_BUCKETS; i++) {
		seen += l->b[i];
		if (seen >= want && seen)
			return kvd_lat_upper(i);
	}
	return UINT64_MAX;
}

#endif /* KVD_LAT_H */
