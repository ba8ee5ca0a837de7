// SPDX-License-Identifier: MIT
/*
 * Logging to stderr and the monotonic clock, for every daemon module.
 * Each line starts with the UTC time to the millisecond, unless stderr
 * is the systemd journal ($JOURNAL_STREAM set), which stamps lines itself.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kvd.h"

int kvd_log_level = KVD_LOG_INFO;

/* "2026-01-31T12:00:00.123Z ", or "" under the journal; its length. */
static int log_stamp(char *buf, size_t len)
{
	static int journal = -1;
	struct timespec ts;
	struct tm tm;

	if (journal < 0) {
		const char *j = getenv("JOURNAL_STREAM");

		journal = j && *j;
	}
	buf[0] = 0;
	if (journal || clock_gettime(CLOCK_REALTIME, &ts) ||
	    !gmtime_r(&ts.tv_sec, &tm))
		return 0;
	return snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ",
			tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			tm.tm_hour, tm.tm_min, tm.tm_sec,
			ts.tv_nsec / 1000000);
}

/* One write per line, so lines of two threads never mix. */
void kvd_log(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info",
					     "debug" };
	int n, err = errno;	/* for %m */
	char line[1024];
	va_list ap;

	if (level > kvd_log_level)
		return;
	n = log_stamp(line, sizeof(line));
	n += snprintf(line + n, sizeof(line) - n, "kvd[%d]: %s: ",
		      (int)getpid(), names[level]);
	errno = err;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

uint64_t kvd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Say how many messages of @rl's kind were suppressed, if any. */
static void rl_report(struct kvd_ratelimit *rl)
{
	if (!rl->missed)
		return;
	kvd_log(KVD_LOG_WARN, "%u more messages (%s) suppressed",
		rl->missed, rl->what ? rl->what : "of one kind");
	rl->missed = 0;
}

bool kvd_ratelimit(struct kvd_ratelimit *rl)
{
	uint64_t now = kvd_now_ns();

	if (now - rl->t0_ns > 1000000000ULL) {
		rl_report(rl);
		rl->t0_ns = now;
		rl->printed = 0;
	}
	if (rl->printed < 10) {
		rl->printed++;
		return true;
	}
	rl->missed++;
	return false;
}

/*
 * kvd_ratelimit_flush - report @rl's suppressed count once its second
 * has passed (the tick), or at once if @now (exit): a burst followed by
 * silence must not hide how much it said.
 */
void kvd_ratelimit_flush(struct kvd_ratelimit *rl, bool now)
{
	if (rl->missed && (now || kvd_now_ns() - rl->t0_ns > 1000000000ULL))
		rl_report(rl);
}
