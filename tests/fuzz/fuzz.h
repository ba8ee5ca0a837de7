/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the libFuzzer targets in tests/fuzz/: a cursor over
 * the input, a memfd to hand file-reading code a path, and the fatal
 * report every target's oracle uses.
 */
#ifndef KVD_FUZZ_H
#define KVD_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The input, consumed front to back; reads past the end give zeros. */
struct fuzz_in {
	const uint8_t	*p;
	size_t		n;
};

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
	uint16_t v = fuzz_u8(in);

	return v | (uint16_t)fuzz_u8(in) << 8;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t v = fuzz_u16(in);

	return v | (uint32_t)fuzz_u16(in) << 16;
}

/* Up to @len bytes into @dst, the rest zeroed; returns how many came. */
static inline size_t fuzz_bytes(struct fuzz_in *in, void *dst, size_t len)
{
	size_t n = len < in->n ? len : in->n;

	memcpy(dst, in->p, n);
	memset((uint8_t *)dst + n, 0, len - n);
	in->p += n;
	in->n -= n;
	return n;
}

/*
 * Memfd @slot (0..FUZZ_MEMFDS-1) holding @len bytes of @data, reached by
 * the path it returns (/proc/self/fd/N); each call rewrites that slot's
 * fd. NULL and errno set on failure.
 */
#define FUZZ_MEMFDS	2
const char *fuzz_memfd_path(unsigned slot, const void *data, size_t len);

/* A broken oracle: print where and why, then abort() for libFuzzer. */
__attribute__((noreturn, format(printf, 3, 4)))
void fuzz_bug(const char *file, int line, const char *fmt, ...);
#define FUZZ_BUG(...)	fuzz_bug(__FILE__, __LINE__, __VA_ARGS__)
#define FUZZ_ASSERT(cond)						\
	do {								\
		if (!(cond))						\
			FUZZ_BUG("assertion failed: %s", #cond);	\
	} while (0)

/*
 * Targets linked against the daemon (fuzz_kvd.c): kvd_log and kvd_now_ns
 * are wrapped (ld --wrap). The log is silent unless KVD_FUZZ_LOG is set,
 * and a broken invariant that kvd reports aborts. With fuzz_clock_on,
 * kvd's clock reads fuzz_clock_ns, which the input advances.
 */
extern bool fuzz_clock_on;
extern uint64_t fuzz_clock_ns;

#endif /* KVD_FUZZ_H */
