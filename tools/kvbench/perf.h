/* SPDX-License-Identifier: MIT */
/*
 * kvbench --perf-stat: kvd's own system calls, page faults and context
 * switches over a run, from perf stat attached to its pid.
 */
#ifndef KVB_PERF_H
#define KVB_PERF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum {
	BENCH_PERF_SYSCALLS,
	BENCH_PERF_FAULTS,
	BENCH_PERF_CSW,
	BENCH_PERF_NR,
};

struct bench_perf_counts {
	uint64_t	v[BENCH_PERF_NR];
	bool		have[BENCH_PERF_NR];
};

struct bench_perf {
	pid_t		pid;		/* perf, -1 when none */
	int		ctl, ack;	/* its --control pipes */
	char		dir[64];
	char		path[96];	/* its CSV report */
};

/* Attach perf stat to @target; 0, or -errno with *@why. */
int bench_perf_start(struct bench_perf *p, pid_t target, const char **why);
/* Stop it and read its counts; 0 or -1. */
int bench_perf_stop(struct bench_perf *p, struct bench_perf_counts *c);

#endif /* KVB_PERF_H */
