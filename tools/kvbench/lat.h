/* SPDX-License-Identifier: MIT */
/*
 * Latency samples, the one percentile every report uses (nearest rank),
 * medians, and the JSON files of --json and --bench-summary (written
 * through tools/emit.h, read through json-c). Includes nothing of
 * kvbench above it.
 */
#ifndef KVB_LAT_H
#define KVB_LAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define KVB_NSEC_PER_SEC	1000000000ULL

struct json_object;

/* Latency samples of one operation, in ns. */
struct bench_lat {
	uint64_t	*v;
	size_t		n, cap;
};

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * KVB_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

int bench_lat_init(struct bench_lat *l, size_t cap);
void bench_lat_free(struct bench_lat *l);
static inline void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n < l->cap)
		l->v[l->n++] = ns;
}
/* Sorts @n samples in place. */
void kvb_sort_u64(uint64_t *v, size_t n);
/* Nearest rank: the smallest of sorted @v with @p% (0..100) at or below. */
double kvb_pct(const uint64_t *v, size_t n, unsigned p);
/* Sorts the samples; then kvb_pct on them. */
void bench_lat_sort(struct bench_lat *l);
static inline double bench_lat_pct(const struct bench_lat *l, unsigned p)
{
	return kvb_pct(l->v, l->n, p);
}
/* Sorts @v. */
double bench_median(double *v, size_t n);

/* The file of --json @path, or NULL; prints why it cannot. */
FILE *kvb_json_open(const char *path);
/* Closes it; -1 after saying the write failed. */
int kvb_json_close(const char *path, FILE *f);
/* DIR/NAME parsed, or NULL when it is not there. */
struct json_object *kvb_json_load(const char *dir, const char *name);
/* The number at @path ("a.b.c") under @o, or NAN. */
double kvb_json_num(struct json_object *o, const char *path);
/* Field @field of the row named @name in the "rows" table under @o. */
double kvb_json_row(struct json_object *o, const char *name,
		    const char *field);

#endif /* KVB_LAT_H */
