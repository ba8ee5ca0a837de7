// SPDX-License-Identifier: MIT
/*
 * For targets linked with the daemon's modules: kvd_log and kvd_now_ns
 * wrapped with ld --wrap, so calls from kvd's objects come here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kvd.h"

bool fuzz_clock_on;
uint64_t fuzz_clock_ns;

uint64_t __real_kvd_now_ns(void);
uint64_t __wrap_kvd_now_ns(void);
void __wrap_kvd_log(int level, const char *fmt, ...);

uint64_t __wrap_kvd_now_ns(void)
{
	/* Deadlines (KV_SQE_WAIT) must replay the same way every time. */
	return fuzz_clock_on ? fuzz_clock_ns : __real_kvd_now_ns();
}

void __wrap_kvd_log(int level, const char *fmt, ...)
{
	static int verbose = -1;
	/* What kvd says only when its own books are wrong. */
	bool fatal = level == KVD_LOG_ERR &&
		     (strstr(fmt, "invariant broken") ||
		      strstr(fmt, "books broken"));
	va_list ap;

	if (verbose < 0)
		verbose = getenv("KVD_FUZZ_LOG") != NULL;
	if (!fatal && !verbose)
		return;
	fprintf(stderr, "kvd: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (fatal)
		abort();
}
