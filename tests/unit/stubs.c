// SPDX-License-Identifier: MIT
/* What kvd/main.c provides to the daemon modules, for unit tests. */
#include <stdarg.h>
#include <time.h>

#include "kvd.h"

int kvd_log_level = KVD_LOG_WARN;

void kvd_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > kvd_log_level)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

uint64_t kvd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
