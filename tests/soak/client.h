/* SPDX-License-Identifier: MIT */
/*
 * What the soak's parent (soak.c) and its client processes (client.c)
 * share: the per-client stats in shared memory, which survive SIGKILL,
 * and the random numbers.
 */
#ifndef KV_TEST_SOAK_CLIENT_H
#define KV_TEST_SOAK_CLIENT_H

#include <stdint.h>
#include <time.h>

#include "../integration/harness.h"

#define NCLIENTS	8

enum {
	OP_ALLOC, OP_LOOKUP, OP_ALLOC_PREFIX, OP_COMMIT, OP_RELEASE, OP_REF,
	OP_COW, OP_SEQ, NR_OPS,
};

/* Per client slot, in memory shared with the parent: survives SIGKILL. */
struct slot_stats {
	uint64_t	ops[NR_OPS];
	uint64_t	hits;		/* prefix-hit blocks, bytes checked */
	uint64_t	dedups;		/* commits to a cached block */
	uint64_t	copies;		/* COW copies checked */
	uint64_t	enospc;
	uint64_t	mismatches;
	uint64_t	errors;
	char		why[160];	/* the first mismatch or error */
};

struct shared {
	int		stop;
	struct slot_stats s[NCLIENTS];
};

/* Seeds are mixed (splitmix64's finalizer), streams are xorshift64*. */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static inline uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Client @slot's process: random prefix-cache work on @kvd until
 * @sh->stop, then it releases what it holds and _exits 0. A mismatch or
 * error is recorded in @sh->s[@slot] and ends it with _exit(2).
 */
void __attribute__((noreturn))
soak_client(struct t_kvd *kvd, struct shared *sh, int slot, uint64_t seed);

#endif
