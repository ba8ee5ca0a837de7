// SPDX-License-Identifier: MIT
/*
 * kvbench's benchmark modes: which one argv asks for, their options, and
 * what they share (latency samples, percentiles, the --json file).
 * kvbench.c hands argv here first; the other modes never see these
 * options, nor these modes theirs.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

enum {
	BOPT_WORKLOAD = 256,
	BOPT_FLOOR,
	BOPT_HASH,
	BOPT_REDIS,
	BOPT_SUMMARY,
	BOPT_JSON,
	BOPT_ADMIN,
	BOPT_KVD,
	BOPT_RUNS,
};

static const struct option bench_long_opts[] = {
	{ "workload",	   required_argument, NULL, BOPT_WORKLOAD },
	{ "floor",	   no_argument,	      NULL, BOPT_FLOOR },
	{ "hash-bench",	   no_argument,	      NULL, BOPT_HASH },
	{ "redis",	   no_argument,	      NULL, BOPT_REDIS },
	{ "bench-summary", required_argument, NULL, BOPT_SUMMARY },
	{ "json",	   required_argument, NULL, BOPT_JSON },
	{ "socket",	   required_argument, NULL, 's' },
	{ "admin-socket",  required_argument, NULL, BOPT_ADMIN },
	{ "kvd",	   required_argument, NULL, BOPT_KVD },
	{ "runs",	   required_argument, NULL, BOPT_RUNS },
	{ "iterations",	   required_argument, NULL, 'n' },
	{ "quiet",	   no_argument,	      NULL, 'q' },
	{ 0 }
};

static const char *const mode_name[] = {
	[BENCH_WORKLOAD] = "--workload", [BENCH_FLOOR] = "--floor",
	[BENCH_HASH] = "--hash-bench", [BENCH_REDIS] = "--redis",
	[BENCH_SUMMARY] = "--bench-summary",
};

/* Does argv name a benchmark? Exact names only: getopt_long would
 * also take abbreviations, but kvbench's own table parses those. */
static bool names_bench(int argc, char **argv)
{
	static const char *const names[] = {
		"--workload", "--floor", "--hash-bench", "--redis",
		"--bench-summary",
	};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			return false;
		for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
			size_t len = strlen(names[k]);

			if (!strncmp(argv[i], names[k], len) &&
			    (!argv[i][len] || argv[i][len] == '='))
				return true;
		}
	}
	return false;
}

static int parse_count(const char *name, const char *s, unsigned max,
		       unsigned *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (!isdigit((unsigned char)*s) || errno || *end || !v || v > max) {
		fprintf(stderr, "kvbench: %s: '%s' is not a number in 1..%u\n",
			name, s, max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

static int set_mode(struct bench_opts *o, enum bench_mode m, const char *arg)
{
	if (o->mode && o->mode != m) {
		fprintf(stderr, "kvbench: %s and %s: one benchmark at a time\n",
			mode_name[o->mode], mode_name[m]);
		return -1;
	}
	o->mode = m;
	o->arg = arg;
	return 0;
}

static int parse_one(struct bench_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case BOPT_WORKLOAD:
		return set_mode(o, BENCH_WORKLOAD, arg);
	case BOPT_FLOOR:
		return set_mode(o, BENCH_FLOOR, NULL);
	case BOPT_HASH:
		return set_mode(o, BENCH_HASH, NULL);
	case BOPT_REDIS:
		return set_mode(o, BENCH_REDIS, NULL);
	case BOPT_SUMMARY:
		return set_mode(o, BENCH_SUMMARY, arg);
	case BOPT_JSON:
		o->json_path = arg;
		return 0;
	case 's':
		o->socket = arg;
		return 0;
	case BOPT_ADMIN:
		o->admin_socket = arg;
		return 0;
	case BOPT_KVD:
		o->kvd_bin = arg;
		return 0;
	case BOPT_RUNS:
		return parse_count("--runs", arg, BENCH_MAX_RUNS, &o->runs);
	case 'n':
		return parse_count("--iterations", arg, 10000000, &o->iters);
	case 'q':
		o->quiet = true;
		return 0;
	}
	return -1;
}

/* Options that do not apply to the chosen benchmark are mistakes. */
static int check_opts(const struct bench_opts *o, bool runs, bool iters)
{
	const char *m = mode_name[o->mode];
	bool kvd = o->mode == BENCH_WORKLOAD || o->mode == BENCH_FLOOR ||
		   o->mode == BENCH_REDIS;

	if (runs && o->mode != BENCH_WORKLOAD) {
		fprintf(stderr, "kvbench: --runs goes with --workload, not %s\n",
			m);
		return -1;
	}
	if (iters && o->mode != BENCH_FLOOR && o->mode != BENCH_REDIS) {
		fprintf(stderr, "kvbench: --iterations goes with --floor or --redis, not %s\n",
			m);
		return -1;
	}
	if (!kvd && (o->socket || o->admin_socket || o->kvd_bin)) {
		fprintf(stderr, "kvbench: %s runs no kvd (--socket, --admin-socket, --kvd)\n",
			m);
		return -1;
	}
	if (o->socket && o->kvd_bin) {
		fprintf(stderr, "kvbench: --socket uses a running kvd; --kvd starts one\n");
		return -1;
	}
	if (o->mode == BENCH_SUMMARY && o->json_path) {
		fprintf(stderr, "kvbench: --bench-summary reads JSON, it writes none\n");
		return -1;
	}
	return 0;
}

static void bench_bad_option(int opt, const char *arg)
{
	if (opt == ':')
		fprintf(stderr, "kvbench: option '%s' needs a value\n", arg);
	else
		fprintf(stderr, "kvbench: option '%s' does not apply to the benchmarks (see kvbench --help)\n",
			arg);
}

static int parse_args(struct bench_opts *o, int argc, char **argv)
{
	bool runs = false, iters = false;
	int opt;

	memset(o, 0, sizeof(*o));
	o->runs = BENCH_DEFAULT_RUNS;
	o->iters = BENCH_DEFAULT_ITERS;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":s:n:q", bench_long_opts,
				  NULL)) != -1) {
		if (opt == '?' || opt == ':') {
			bench_bad_option(opt, argv[optind - 1]);
			return -1;
		}
		runs |= opt == BOPT_RUNS;
		iters |= opt == 'n';
		if (parse_one(o, opt, optarg))
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "kvbench: unexpected argument '%s'\n",
			argv[optind]);
		return -1;
	}
	return check_opts(o, runs, iters);
}

int kvb_bench_main(int argc, char **argv)
{
	struct bench_opts o;

	if (!names_bench(argc, argv))
		return -1;
	if (parse_args(&o, argc, argv)) {
		fprintf(stderr, "Try 'kvbench --help'.\n");
		return 2;
	}
	switch (o.mode) {
	case BENCH_WORKLOAD:
		return bench_workload(&o);
	case BENCH_FLOOR:
		return bench_floor(&o);
	case BENCH_HASH:
		return bench_hash(&o);
	case BENCH_REDIS:
		return bench_redis(&o);
	case BENCH_SUMMARY:
		return bench_summary(&o);
	case BENCH_NONE:
		break;
	}
	return 2;
}

/* ---- samples ---- */

int bench_lat_init(struct bench_lat *l, size_t cap)
{
	l->n = 0;
	l->cap = cap;
	l->v = calloc(cap ? cap : 1, sizeof(*l->v));
	if (!l->v) {
		fprintf(stderr, "kvbench: out of memory for %zu samples\n",
			cap);
		return -1;
	}
	return 0;
}

void bench_lat_free(struct bench_lat *l)
{
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bench_lat_sort(struct bench_lat *l)
{
	qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
}

double bench_lat_pct(const struct bench_lat *l, double p)
{
	size_t rank;

	if (!l->n)
		return 0;
	/* Nearest rank: the smallest sample with p% at or below it. */
	rank = (size_t)(p / 100.0 * (double)l->n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > l->n)
		rank = l->n;
	return (double)l->v[rank - 1];
}

static int cmp_f64(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double bench_median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_f64);
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

FILE *bench_json_open(const struct bench_opts *o)
{
	FILE *f = fopen(o->json_path, "w");

	if (!f)
		fprintf(stderr, "kvbench: --json %s: %s\n", o->json_path,
			strerror(errno));
	return f;
}

int bench_json_close(const struct bench_opts *o, FILE *f)
{
	if (ferror(f) | fclose(f)) {
		fprintf(stderr, "kvbench: --json %s: write failed\n",
			o->json_path);
		return -1;
	}
	return 0;
}
