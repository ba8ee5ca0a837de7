// SPDX-License-Identifier: MIT
/*
 * kvbench's request streams (see trace.h): the readers of the trace
 * files (Mooncake JSONL, Azure CSV, kvdtrc), the format detection, and
 * the growable arrays the synthetic workload (trace_synth.c) shares.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "trace_int.h"

#define KVB_KVDTRC_MAGIC	"KVDTRC01"
#define KVB_MAX_ID		(1ULL << 40)	/* Mooncake hash ids */
#define KVB_MAX_REQS		(1U << 26)

const char *kvb_trace_fmt_name(enum kvb_trace_fmt fmt)
{
	switch (fmt) {
	case KVB_FMT_MOONCAKE:
		return "mooncake";
	case KVB_FMT_AZURE:
		return "azure";
	case KVB_FMT_KVDTRC:
		return "kvdtrc";
	case KVB_FMT_SYNTHETIC:
		return "synthetic";
	}
	return "?";
}

/* ---- growable arrays ---- */

int kvb_grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 1024;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, n * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}


struct kvb_treq *kvb_trace_add_req(struct trace_build *b)
{
	struct kvb_trace *tr = b->tr;

	if (kvb_grow((void **)&tr->reqs, &b->reqs_cap, tr->nr + 1,
		 sizeof(*tr->reqs)))
		return NULL;
	memset(&tr->reqs[tr->nr], 0, sizeof(tr->reqs[0]));
	return &tr->reqs[tr->nr++];
}

/* Arrival relative to the first request (earlier ones count as 0). */
static uint64_t rel_time(struct trace_build *b, uint64_t t_us)
{
	if (!b->have_t0) {
		b->t0_us = t_us;
		b->have_t0 = true;
	}
	return t_us > b->t0_us ? t_us - b->t0_us : 0;
}

void kvb_trace_totals(struct kvb_trace *tr)
{
	tr->sum_in = tr->sum_out = tr->span_us = 0;
	tr->max_in = tr->max_out = tr->max_total = 0;
	for (size_t i = 0; i < tr->nr; i++) {
		const struct kvb_treq *r = &tr->reqs[i];

		tr->sum_in += r->in_len;
		tr->sum_out += r->out_len;
		if (r->in_len > tr->max_in)
			tr->max_in = r->in_len;
		if (r->out_len > tr->max_out)
			tr->max_out = r->out_len;
		if (r->in_len + r->out_len > tr->max_total)
			tr->max_total = r->in_len + r->out_len;
		if (r->t_us > tr->span_us)
			tr->span_us = r->t_us;
	}
}

static int check_len(const char *path, size_t line, uint64_t in,
		     uint64_t out)
{
	/* each first: their sum could wrap (found by the trace fuzzer) */
	if (in <= KVB_MAX_TRACE_TOKENS && out <= KVB_MAX_TRACE_TOKENS &&
	    in + out <= KVB_MAX_TRACE_TOKENS)
		return 0;
	fprintf(stderr, "kvbench: %s:%zu: %llu + %llu tokens; kvbench replays at most %u per request\n",
		path, line, (unsigned long long)in, (unsigned long long)out,
		KVB_MAX_TRACE_TOKENS);
	return -1;
}

/* ---- Mooncake JSONL ---- */

static int json_u64(struct json_object *o, const char *key, uint64_t *v)
{
	struct json_object *f;
	double d;

	if (!json_object_object_get_ex(o, key, &f))
		return -1;
	if (json_object_is_type(f, json_type_int)) {
		int64_t x = json_object_get_int64(f);

		if (x < 0)
			return -1;
		*v = (uint64_t)x;
		return 0;
	}
	if (json_object_is_type(f, json_type_double)) {
		d = json_object_get_double(f);
		if (!(d >= 0 && d < 1e18))
			return -1;
		*v = (uint64_t)d;
		return 0;
	}
	return -1;
}

static int mooncake_line(struct trace_build *b, const char *path,
			 size_t line, const char *text)
{
	struct kvb_trace *tr = b->tr;
	struct json_object *o = json_tokener_parse(text), *ids;
	uint64_t ts, in, out, want;
	struct kvb_treq *r;
	size_t n;
	int ret = -1;

	if (!o || !json_object_is_type(o, json_type_object)) {
		fprintf(stderr, "kvbench: %s:%zu: not a JSON object\n", path,
			line);
		goto out;
	}
	if (json_u64(o, "timestamp", &ts) || json_u64(o, "input_length", &in) ||
	    json_u64(o, "output_length", &out) ||
	    !json_object_object_get_ex(o, "hash_ids", &ids) ||
	    !json_object_is_type(ids, json_type_array)) {
		fprintf(stderr, "kvbench: %s:%zu: needs timestamp, input_length, output_length (numbers >= 0) and hash_ids (an array)\n",
			path, line);
		goto out;
	}
	if (check_len(path, line, in, out))
		goto out;
	n = json_object_array_length(ids);
	want = (in + tr->trace_block - 1) / tr->trace_block;
	if (n != want) {
		fprintf(stderr, "kvbench: %s:%zu: %zu hash_ids for %llu input tokens; at --trace-block %u there must be %llu\n",
			path, line, n, (unsigned long long)in, tr->trace_block,
			(unsigned long long)want);
		goto out;
	}
	if (kvb_grow((void **)&tr->ids, &b->ids_cap, tr->nr_ids + n,
		 sizeof(*tr->ids)))
		goto nomem;
	for (size_t k = 0; k < n; k++) {
		struct json_object *e = json_object_array_get_idx(ids, k);
		int64_t h = json_object_get_int64(e);

		if (!json_object_is_type(e, json_type_int) || h < 0 ||
		    (uint64_t)h >= KVB_MAX_ID) {
			fprintf(stderr, "kvbench: %s:%zu: hash_ids[%zu] is not an integer in 0..2^40-1\n",
				path, line, k);
			goto out;
		}
		tr->ids[tr->nr_ids + k] = (uint64_t)h;
	}
	r = kvb_trace_add_req(b);
	if (!r)
		goto nomem;
	r->t_us = rel_time(b, ts * 1000);
	r->in_len = (uint32_t)in;
	r->out_len = (uint32_t)out;
	r->first = tr->nr_ids;
	r->nids = (uint32_t)n;
	tr->nr_ids += n;
	ret = 0;
	goto out;
nomem:
	fprintf(stderr, "kvbench: %s: out of memory\n", path);
out:
	json_object_put(o);
	return ret;
}

static bool blank(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return !*s;
}

static int load_mooncake(struct trace_build *b, FILE *f, const char *path,
			 size_t limit)
{
	size_t cap = 0, line = 0;
	char *text = NULL;
	int ret = 0;

	while ((!limit || b->tr->nr < limit) && getline(&text, &cap, f) > 0) {
		line++;
		if (blank(text))
			continue;
		ret = mooncake_line(b, path, line, text);
		if (ret)
			break;
	}
	free(text);
	return ret;
}

/* ---- Azure CSV ---- */

/* "2023-11-16 18:15:46.6805900" -> microseconds since the epoch. */
static int azure_time(const char *s, uint64_t *us)
{
	struct tm tm = { 0 };
	uint64_t frac = 0, scale = 1000000;
	time_t t;
	int n = 0;

	if (sscanf(s, "%d-%d-%d %d:%d:%d%n", &tm.tm_year, &tm.tm_mon,
		   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
		return -1;
	s += n;
	if (*s == '.') {
		for (s++; isdigit((unsigned char)*s); s++) {
			if (scale > 1) {
				scale /= 10;
				frac += (uint64_t)(*s - '0') * scale;
			}
		}
	}
	if (*s)
		return -1;
	/* in range before the arithmetic (found by the trace fuzzer) */
	if (tm.tm_year < 1970 || tm.tm_year > 9999 || tm.tm_mon < 1 ||
	    tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
	    tm.tm_hour < 0 || tm.tm_hour > 23 || tm.tm_min < 0 ||
	    tm.tm_min > 59 || tm.tm_sec < 0 || tm.tm_sec > 60)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	if (t < 0)
		return -1;
	*us = (uint64_t)t * 1000000 + frac;
	return 0;
}

static int azure_row(struct trace_build *b, const char *path, size_t line,
		     char *text)
{
	char *ts = text, *ctx, *gen, *end;
	unsigned long long in, out;
	struct kvb_treq *r;
	uint64_t us;

	ctx = strchr(text, ',');
	gen = ctx ? strchr(ctx + 1, ',') : NULL;
	if (!gen)
		goto bad;
	*ctx++ = 0;
	*gen++ = 0;
	errno = 0;
	in = strtoull(ctx, &end, 10);
	if (errno || end == ctx || *end || !isdigit((unsigned char)*ctx))
		goto bad;
	out = strtoull(gen, &end, 10);
	if (errno || end == gen || *end || !isdigit((unsigned char)*gen))
		goto bad;
	if (azure_time(ts, &us))
		goto bad;
	if (check_len(path, line, in, out))
		return -1;
	r = kvb_trace_add_req(b);
	if (!r) {
		fprintf(stderr, "kvbench: %s: out of memory\n", path);
		return -1;
	}
	r->t_us = rel_time(b, us);
	r->in_len = (uint32_t)in;
	r->out_len = (uint32_t)out;
	return 0;
bad:
	fprintf(stderr, "kvbench: %s:%zu: expected TIMESTAMP,ContextTokens,GeneratedTokens (YYYY-MM-DD HH:MM:SS[.fraction],count,count)\n",
		path, line);
	return -1;
}

static void chomp(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = 0;
}

static int load_azure(struct trace_build *b, FILE *f, const char *path,
		      size_t limit)
{
	size_t cap = 0, line = 0;
	char *text = NULL;
	int ret = 0;

	while ((!limit || b->tr->nr < limit) && getline(&text, &cap, f) > 0) {
		line++;
		chomp(text);
		if (line == 1 && !strncasecmp(text, "TIMESTAMP,", 10))
			continue;
		if (blank(text))
			continue;
		ret = azure_row(b, path, line, text);
		if (ret)
			break;
	}
	free(text);
	return ret;
}

/* ---- kvdtrc (shared_prompts) ---- */

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int load_kvdtrc(struct trace_build *b, FILE *f, const char *path,
		       size_t limit)
{
	struct kvb_trace *tr = b->tr;
	unsigned char h[24], rh[12];
	uint32_t n;
	size_t tcap = 0;

	if (fread(h, 1, sizeof(h), f) != sizeof(h) ||
	    memcmp(h, KVB_KVDTRC_MAGIC, 8))
		goto trunc;
	n = le32(h + 8);
	if (n > KVB_MAX_REQS) {
		fprintf(stderr, "kvbench: %s: %u requests; at most %u\n", path,
			n, KVB_MAX_REQS);
		return -1;
	}
	for (uint32_t i = 0; i < n && (!limit || tr->nr < limit); i++) {
		struct kvb_treq *r;
		uint32_t nt, *tok;

		if (fread(rh, 1, sizeof(rh), f) != sizeof(rh))
			goto trunc;
		nt = le32(rh + 8);
		if (check_len(path, i + 1, nt, 0))
			return -1;
		/* a request of 0 tokens may come first: no array yet */
		if (kvb_grow((void **)&tr->tokens, &tcap, tr->nr_tokens + nt + 1,
			 sizeof(*tr->tokens)))
			goto nomem;
		tok = tr->tokens + tr->nr_tokens;
		if (fread(tok, sizeof(uint32_t), nt, f) != nt)
			goto trunc;
		for (uint32_t k = 0; k < nt; k++)
			tok[k] = le32((unsigned char *)&tok[k]);
		r = kvb_trace_add_req(b);
		if (!r)
			goto nomem;
		r->in_len = nt;
		r->first = tr->nr_tokens;
		tr->nr_tokens += nt;
	}
	return 0;
trunc:
	fprintf(stderr, "kvbench: %s: not a kvdtrc file, or truncated (after %zu requests)\n",
		path, tr->nr);
	return -1;
nomem:
	fprintf(stderr, "kvbench: %s: out of memory\n", path);
	return -1;
}

/* ---- loading ---- */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcasecmp(s + n - m, suffix);
}

static int detect(FILE *f, const char *path, enum kvb_trace_fmt *fmt)
{
	char head[64] = "";
	size_t n = fread(head, 1, sizeof(head) - 1, f), i = 0;

	rewind(f);
	if (n >= 8 && !memcmp(head, KVB_KVDTRC_MAGIC, 8)) {
		*fmt = KVB_FMT_KVDTRC;
		return 0;
	}
	while (i < n && isspace((unsigned char)head[i]))
		i++;
	if (i < n && head[i] == '{') {
		*fmt = KVB_FMT_MOONCAKE;
		return 0;
	}
	if (!strncasecmp(head, "TIMESTAMP,", 10)) {
		*fmt = KVB_FMT_AZURE;
		return 0;
	}
	if (ends_with(path, ".jsonl") || ends_with(path, ".json")) {
		*fmt = KVB_FMT_MOONCAKE;
	} else if (ends_with(path, ".csv")) {
		*fmt = KVB_FMT_AZURE;
	} else if (ends_with(path, ".kvdtrc")) {
		*fmt = KVB_FMT_KVDTRC;
	} else {
		fprintf(stderr, "kvbench: %s: unknown trace format (Mooncake .jsonl, Azure .csv or .kvdtrc)\n",
			path);
		return -1;
	}
	return 0;
}

int kvb_trace_load(struct kvb_trace *tr, const char *path, size_t limit,
		   unsigned trace_block)
{
	struct trace_build b = { .tr = tr };
	FILE *f;
	int ret;

	memset(tr, 0, sizeof(*tr));
	tr->path = path;
	tr->trace_block = trace_block;
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "kvbench: --trace %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	ret = detect(f, path, &tr->fmt);
	if (!ret) {
		switch (tr->fmt) {
		case KVB_FMT_MOONCAKE:
			tr->kind = KVB_TRACE_IDS;
			ret = load_mooncake(&b, f, path, limit);
			break;
		case KVB_FMT_AZURE:
			tr->kind = KVB_TRACE_IDS;
			tr->trace_block = 0;
			ret = load_azure(&b, f, path, limit);
			break;
		case KVB_FMT_KVDTRC:
			tr->kind = KVB_TRACE_TOKENS;
			tr->trace_block = 0;
			ret = load_kvdtrc(&b, f, path, limit);
			break;
		default:
			ret = -1;
		}
	}
	if (!ret && ferror(f)) {
		fprintf(stderr, "kvbench: %s: read error\n", path);
		ret = -1;
	}
	fclose(f);
	if (!ret && !tr->nr) {
		fprintf(stderr, "kvbench: %s: no requests\n", path);
		ret = -1;
	}
	if (ret) {
		kvb_trace_free(tr);
		return -1;
	}
	kvb_trace_totals(tr);
	return 0;
}

void kvb_trace_free(struct kvb_trace *tr)
{
	free(tr->reqs);
	free(tr->ids);
	free(tr->tokens);
	tr->reqs = NULL;
	tr->ids = NULL;
	tr->tokens = NULL;
	tr->nr = tr->nr_ids = tr->nr_tokens = 0;
}
