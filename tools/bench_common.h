/* SPDX-License-Identifier: MIT */
/*
 * kvbench's benchmarks (tools/bench_*.c): the shared_prompts workload,
 * the round-trip floors, block hashing, a Redis comparison and the
 * summary `make bench` prints. Benchmarks measure and report; they never
 * pass or fail on a timing. Each runs in one process (plus the processes
 * it forks and the private kvd it starts); nothing here is thread-safe.
 */
#ifndef KV_TOOLS_BENCH_COMMON_H
#define KV_TOOLS_BENCH_COMMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <kv/kv.h>

#include "emit.h"

#define BENCH_NSEC_PER_SEC	1000000000ULL
#define BENCH_DEFAULT_ITERS	20000U
#define BENCH_DEFAULT_RUNS	5U
#define BENCH_MAX_RUNS		99U
#define BENCH_PRIVATE_POOL	"256M"	/* --private-kvd without a size */

/* What one invocation asked for (one benchmark per invocation). */
enum bench_mode {
	BENCH_NONE,
	BENCH_WORKLOAD,		/* --workload FILE */
	BENCH_FLOOR,		/* --floor */
	BENCH_HASH,		/* --hash-bench */
	BENCH_REDIS,		/* --redis */
	BENCH_SUMMARY,		/* --bench-summary DIR */
};

struct bench_opts {
	enum bench_mode	mode;
	const char	*arg;		/* of --workload, --bench-summary */
	const char	*json_path;
	const char	*socket;	/* a running kvd; NULL: a private one */
	const char	*admin_socket;	/* of that kvd (default beside it) */
	const char	*kvd_bin;	/* --kvd; NULL: beside kvbench */
	unsigned	runs;		/* --runs (workload) */
	unsigned	iters;		/* --iterations (floor, redis) */
	bool		quiet;
};

/* A kvd that kvbench started for itself, on sockets in a temp dir. */
struct bench_kvd {
	pid_t		pid;
	pid_t		owner;		/* only it stops kvd (not a fork) */
	char		dir[64];
	char		sock[108];
	char		admin[108];
	char		log[96];
};

/* Latency samples of one operation, in ns. */
struct bench_lat {
	uint64_t	*v;
	size_t		n, cap;
};

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * BENCH_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/*
 * kvb_bench_main - run the benchmark argv asks for. Returns the exit
 * status (0 done, 1 failed, 2 usage), or -1 when argv names none of
 * them, and kvbench's other modes take over.
 */
int kvb_bench_main(int argc, char **argv);

/* bench_kvd.c */
/*
 * bench_kvd_start - start kvd (@bin, NULL: beside kvbench) with a host
 * pool of @pool_size (kvd's units: 128M, 1G) on sockets in a new temp
 * dir; returns once it answers on its admin socket. The kvd dies with
 * kvbench (PR_SET_PDEATHSIG). 0, or -1 after saying why.
 */
int bench_kvd_start(struct bench_kvd *k, const char *bin,
		    const char *pool_size);
/* A new directory for sockets: $TMPDIR (if short enough) or /tmp. */
int bench_mkdtemp(char *dir, size_t len, const char *name);
/* SIGTERM, wait (SIGKILL after 5 s), remove the temp dir. */
void bench_kvd_stop(struct bench_kvd *k);
/* Drop every cached block of a running kvd (KV_ADMIN_EVICT). */
int bench_kvd_evict(const char *admin_path);
/* The admin socket beside a client socket, into @buf. */
int bench_admin_beside(const char *sock, char *buf, size_t len);
/* kv_connect with @geom, model @model; 0 or -1 after saying why. */
int bench_connect(const char *sock, const char *model,
		  const struct kv_geometry *geom, struct kv_client **c);
/* 1 layer, 1 KV head, head_dim 128, fp16, 16 tokens: 8 KiB blocks. */
struct kv_geometry bench_small_geom(void);
/*
 * bench_open - connect to o->socket, or to a private kvd with a pool of
 * @pool_size started in @k, with the small geometry as model @model.
 * 0, or -1 after saying why (nothing left running). bench_close undoes it.
 */
int bench_open(const struct bench_opts *o, const char *pool_size,
	       const char *model, struct bench_kvd *k, struct kv_client **c);
void bench_close(const struct bench_opts *o, struct bench_kvd *k,
		 struct kv_client *c);

/* bench_main.c: samples and their percentiles. */
/*
 * kvbench --perf-stat (bench_perf.c): kvd's own system calls, page faults
 * and context switches over a run, from perf stat attached to its pid.
 */
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

int bench_perf_start(struct bench_perf *p, pid_t target, const char **why);
int bench_perf_stop(struct bench_perf *p, struct bench_perf_counts *c);

int bench_lat_init(struct bench_lat *l, size_t cap);
void bench_lat_free(struct bench_lat *l);
static inline void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n < l->cap)
		l->v[l->n++] = ns;
}
/* Sorts the samples; then the nearest-rank percentile @p (0..100). */
void bench_lat_sort(struct bench_lat *l);
double bench_lat_pct(const struct bench_lat *l, double p);
double bench_median(double *v, size_t n);
/* The JSON file of --json, or NULL; prints why it cannot. */
FILE *bench_json_open(const struct bench_opts *o);
int bench_json_close(const struct bench_opts *o, FILE *f);

/* One file per benchmark. */
int bench_workload(const struct bench_opts *o);
int bench_floor(const struct bench_opts *o);
int bench_hash(const struct bench_opts *o);
int bench_redis(const struct bench_opts *o);
int bench_summary(const struct bench_opts *o);

#endif /* KV_TOOLS_BENCH_COMMON_H */
