// SPDX-License-Identifier: MIT
/* Logging to stderr and the monotonic clock, for every daemon module. */
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "kvd.h"

int kvd_log_level = KVD_LOG_INFO;

void kvd_log(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info",
					     "debug" };
	va_list ap;

	if (level > kvd_log_level)
		return;
	fprintf(stderr, "kvd[%d]: %s: ", (int)getpid(), names[level]);
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

bool kvd_ratelimit(struct kvd_ratelimit *rl)
{
	uint64_t now = kvd_now_ns();

	if (now - rl->t0_ns > 1000000000ULL) {
		if (rl->missed)
			kvd_log(KVD_LOG_WARN, "%u messages like the next suppressed",
				rl->missed);
		rl->t0_ns = now;
		rl->printed = 0;
		rl->missed = 0;
	}
	if (rl->printed < 10) {
		rl->printed++;
		return true;
	}
	rl->missed++;
	return false;
}
