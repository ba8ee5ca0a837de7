/* SPDX-License-Identifier: MIT */
/*
 * kvd internals shared by the daemon's modules: logging, the daemon
 * state, and small helpers. Nothing here is ABI.
 */
#ifndef KVD_KVD_H
#define KVD_KVD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <linux/types.h>
#include <kv/abi.h>

#define KVD_NIL			UINT32_MAX	/* "no index" in u32 links */

#define ARRAY_SIZE(a)		(sizeof(a) / sizeof((a)[0]))
#define likely(x)		__builtin_expect(!!(x), 1)
#define unlikely(x)		__builtin_expect(!!(x), 0)
#define __cold			__attribute__((cold))
#define __printf(a, b)		__attribute__((format(printf, a, b)))

enum { KVD_LOG_ERR, KVD_LOG_WARN, KVD_LOG_INFO, KVD_LOG_DEBUG };
extern int kvd_log_level;
void kvd_log(int level, const char *fmt, ...) __printf(2, 3) __cold;
#define kvd_err(...)	kvd_log(KVD_LOG_ERR, __VA_ARGS__)
#define kvd_warn(...)	kvd_log(KVD_LOG_WARN, __VA_ARGS__)
#define kvd_info(...)	kvd_log(KVD_LOG_INFO, __VA_ARGS__)
#define kvd_dbg(...)	do { if (kvd_log_level >= KVD_LOG_DEBUG) \
				kvd_log(KVD_LOG_DEBUG, __VA_ARGS__); } while (0)

/* Broken invariant: say so once, never abort on what a client can cause. */
#define kvd_warn_on_once(cond) ({					\
	static bool __warned;						\
	bool __c = !!(cond);						\
	if (unlikely(__c) && !__warned) {				\
		__warned = true;					\
		kvd_err("invariant broken at %s:%d: %s",		\
			__FILE__, __LINE__, #cond);			\
	}								\
	__c;								\
})

static inline uint64_t kvd_gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static inline bool kvd_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

uint64_t kvd_now_ns(void);

/*
 * The number shown for the @seq-th client or namespace: a bijection of
 * u32 keyed by @key (xor, odd multiplies and xor-shifts each invert, as
 * in the finalizers of MurmurHash3 and splitmix), so numbers stay unique
 * for 2^32 of them but say nothing of how many came before or of
 * whose. Not a cipher: only nothing to count.
 */
static inline uint32_t kvd_id_permute(const uint32_t key[3], uint32_t seq)
{
	uint32_t x = seq ^ key[0];

	x *= key[1] | 1;
	x ^= x >> 16;
	x *= key[2] | 1;
	x ^= x >> 13;
	return x ^ key[0];
}

/* The next shown number of sequence *@seq: never 0 nor ~0 (kvctl's "all"). */
static inline uint32_t kvd_next_id(uint32_t *seq, const uint32_t key[3])
{
	uint32_t id;

	do
		id = kvd_id_permute(key, ++*seq);
	while (!id || id == UINT32_MAX);
	return id;
}

/* A file kvd made (its sockets): removed at exit only if still this one. */
struct kvd_path_id {
	dev_t		dev;
	ino_t		ino;
	bool		bound;
};

/*
 * At most 10 messages a second of one kind; counts what it suppressed and
 * says so, naming the kind (what: "refused clients", ...), once the
 * second has passed: at the next message, else kvd_ratelimit_flush().
 */
struct kvd_ratelimit {
	const char	*what;
	uint64_t	t0_ns;
	uint32_t	printed;
	uint32_t	missed;
};
bool kvd_ratelimit(struct kvd_ratelimit *rl);
void kvd_ratelimit_flush(struct kvd_ratelimit *rl, bool now);

#endif /* KVD_KVD_H */
