// SPDX-License-Identifier: MIT
/*
 * Latency samples and their percentiles, medians, and the JSON files
 * (see lat.h). One percentile for every report: nearest rank, in
 * integer arithmetic, so p50 of the same samples is the same figure in
 * the load report, the floors and the Redis comparison.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <json-c/json.h>

#include "lat.h"

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

void kvb_sort_u64(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
}

double kvb_pct(const uint64_t *v, size_t n, unsigned p)
{
	uint64_t rank = ((uint64_t)n * p + 99) / 100;

	if (!n)
		return 0;
	return (double)v[rank ? rank - 1 : 0];
}

void bench_lat_sort(struct bench_lat *l)
{
	kvb_sort_u64(l->v, l->n);
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

FILE *kvb_json_open(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		fprintf(stderr, "kvbench: --json %s: %s\n", path,
			strerror(errno));
	return f;
}

int kvb_json_close(const char *path, FILE *f)
{
	if (ferror(f) | fclose(f)) {
		fprintf(stderr, "kvbench: --json %s: write failed\n", path);
		return -1;
	}
	return 0;
}

struct json_object *kvb_json_load(const char *dir, const char *name)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (access(path, R_OK))
		return NULL;
	return json_object_from_file(path);
}

double kvb_json_num(struct json_object *o, const char *path)
{
	char key[64];
	const char *dot;

	while (o && *path) {
		dot = strchrnul(path, '.');
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		if (!json_object_object_get_ex(o, key, &o))
			return NAN;
		path = *dot ? dot + 1 : dot;
	}
	if (!o || (!json_object_is_type(o, json_type_double) &&
		   !json_object_is_type(o, json_type_int)))
		return NAN;
	return json_object_get_double(o);
}

double kvb_json_row(struct json_object *o, const char *name,
		    const char *field)
{
	struct json_object *rows, *row, *n;

	if (!o || !json_object_object_get_ex(o, "rows", &rows) ||
	    !json_object_is_type(rows, json_type_array))
		return NAN;
	for (size_t i = 0; i < json_object_array_length(rows); i++) {
		row = json_object_array_get_idx(rows, i);
		if (json_object_object_get_ex(row, "name", &n) &&
		    !strcmp(json_object_get_string(n), name))
			return kvb_json_num(row, field);
	}
	return NAN;
}
