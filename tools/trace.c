// SPDX-License-Identifier: MIT
/*
 * kvbench's request streams (see trace.h): the readers, the synthetic
 * workload, the sub-block mapping, and the offline figures a replay is
 * checked against.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <xxhash.h>

#include "trace.h"

#define KVB_KVDTRC_MAGIC	"KVDTRC01"
#define KVB_MAX_ID		(1ULL << 40)	/* Mooncake hash ids */
#define KVB_MAX_REQS		(1U << 26)

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A value of several keys, for the synthetic workload's choices. */
static uint64_t mix3(uint64_t seed, uint64_t tag, uint64_t a, uint64_t b)
{
	return mix64(mix64(mix64(seed ^ tag) ^ a) ^ b);
}

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

static int grow(void **p, size_t *cap, size_t need, size_t size)
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

struct trace_build {
	struct kvb_trace *tr;
	size_t		reqs_cap, ids_cap;
	uint64_t	t0_us;
	bool		have_t0;
};

static struct kvb_treq *add_req(struct trace_build *b)
{
	struct kvb_trace *tr = b->tr;

	if (grow((void **)&tr->reqs, &b->reqs_cap, tr->nr + 1,
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

static void totals(struct kvb_trace *tr)
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
	if (grow((void **)&tr->ids, &b->ids_cap, tr->nr_ids + n,
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
	r = add_req(b);
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
	r = add_req(b);
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
		if (grow((void **)&tr->tokens, &tcap, tr->nr_tokens + nt + 1,
			 sizeof(*tr->tokens)))
			goto nomem;
		tok = tr->tokens + tr->nr_tokens;
		if (fread(tok, sizeof(uint32_t), nt, f) != nt)
			goto trunc;
		for (uint32_t k = 0; k < nt; k++)
			tok[k] = le32((unsigned char *)&tok[k]);
		r = add_req(b);
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
	totals(tr);
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

/* ---- synthetic ---- */

enum { SYN_SYS = 1, SYN_USER, SYN_OUT, SYN_TURNS, SYN_PICK, SYN_GAP,
       SYN_THINK };

static uint32_t syn_range(uint64_t v, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(v % (hi - lo + 1));
}

static uint32_t syn_sys_len(uint64_t seed, unsigned s)
{
	return syn_range(mix3(seed, SYN_SYS, s, 0), KVB_SYN_SYS_MIN,
			 KVB_SYN_SYS_MAX);
}

static uint32_t syn_msg_len(uint64_t seed, int tag, uint64_t chat,
			    unsigned turn)
{
	return syn_range(mix3(seed, tag, chat, turn), KVB_SYN_MSG_MIN,
			 KVB_SYN_MSG_MAX);
}

static int cmp_treq(const void *a, const void *b)
{
	const struct kvb_treq *x = a, *y = b;

	if (x->t_us != y->t_us)
		return x->t_us < y->t_us ? -1 : 1;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->turn < y->turn ? -1 : x->turn > y->turn;
}

/* One chat starting at @start: its turns as requests. */
static int syn_chat(struct trace_build *b, uint64_t seed, uint64_t chat,
		    uint64_t start)
{
	unsigned turns = syn_range(mix3(seed, SYN_TURNS, chat, 0), 1,
				   KVB_SYN_TURNS_MAX);
	unsigned sys = (unsigned)(mix3(seed, SYN_PICK, chat, 0) %
				  KVB_SYN_SYSTEMS);
	uint32_t len = syn_sys_len(seed, sys);
	uint64_t t = start;

	for (unsigned k = 0; k < turns; k++) {
		struct kvb_treq *r = add_req(b);

		if (!r)
			return -ENOMEM;
		if (k)
			t += KVB_SYN_THINK_MIN_US +
			     mix3(seed, SYN_THINK, chat, k) %
			     (KVB_SYN_THINK_MAX_US - KVB_SYN_THINK_MIN_US + 1);
		len += syn_msg_len(seed, SYN_USER, chat, k);
		r->t_us = t;
		r->in_len = len;
		r->out_len = syn_msg_len(seed, SYN_OUT, chat, k);
		r->first = chat;
		r->turn = (uint16_t)k;
		r->sys = (uint16_t)sys;
		len += r->out_len;
	}
	return 0;
}

int kvb_trace_synthetic(struct kvb_trace *tr, size_t nr, uint64_t seed)
{
	struct trace_build b = { .tr = tr };
	uint64_t chat = 0, start = 0, cut = UINT64_MAX;

	memset(tr, 0, sizeof(*tr));
	tr->fmt = KVB_FMT_SYNTHETIC;
	tr->kind = KVB_TRACE_TOKENS;
	tr->seed = seed;
	if (!nr)
		return -EINVAL;
	/*
	 * Chats start in order; once nr requests exist, every chat that
	 * starts before the nr-th arrival so far can still add an earlier
	 * request, so add those too, then keep the nr earliest.
	 */
	for (;;) {
		if (tr->nr >= nr) {
			if (cut == UINT64_MAX) {
				qsort(tr->reqs, tr->nr, sizeof(*tr->reqs),
				      cmp_treq);
				cut = tr->reqs[nr - 1].t_us;
			}
			if (start > cut)
				break;
		}
		if (syn_chat(&b, seed, chat, start)) {
			kvb_trace_free(tr);
			return -ENOMEM;
		}
		chat++;
		start += mix3(seed, SYN_GAP, chat, 0) %
			 (2 * KVB_SYN_CONV_GAP_US + 1);
	}
	qsort(tr->reqs, tr->nr, sizeof(*tr->reqs), cmp_treq);
	tr->nr = nr;
	totals(tr);
	return 0;
}

/* ---- tokens and ids ---- */

static uint32_t salt32(uint64_t salt)
{
	return (uint32_t)(salt ^ (salt >> 32));
}

/* Token @i of a synthetic segment (system prompt, message, output). */
static void syn_segment(uint64_t key, uint32_t len, uint32_t from,
			uint32_t s32, uint32_t *out)
{
	for (uint32_t i = 0; i < len; i++)
		out[i] = (uint32_t)(mix64(key + from + i) >> 33) ^ s32;
}

static void syn_prompt(const struct kvb_trace *tr, const struct kvb_treq *r,
		       uint32_t s32, uint32_t *out)
{
	uint64_t seed = tr->seed, chat = r->first;
	uint32_t n, pos;

	pos = syn_sys_len(seed, r->sys);
	syn_segment(mix3(seed, SYN_SYS, r->sys, 1), pos, 0, s32, out);
	for (unsigned k = 0; k <= r->turn; k++) {
		n = syn_msg_len(seed, SYN_USER, chat, k);
		syn_segment(mix3(seed, SYN_USER, chat, k + 0x10000), n, 0, s32,
			    out + pos);
		pos += n;
		if (k == r->turn)
			break;
		n = syn_msg_len(seed, SYN_OUT, chat, k);
		syn_segment(mix3(seed, SYN_OUT, chat, k + 0x10000), n, 0, s32,
			    out + pos);
		pos += n;
	}
}

void kvb_trace_prompt(const struct kvb_trace *tr, size_t i, uint64_t salt,
		      uint32_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	uint32_t s32 = salt32(salt);

	if (tr->fmt == KVB_FMT_SYNTHETIC) {
		syn_prompt(tr, r, s32, out);
		return;
	}
	for (uint32_t k = 0; k < r->in_len; k++)
		out[k] = tr->tokens[r->first + k] ^ s32;
}

void kvb_trace_fill(const struct kvb_trace *tr, size_t i, uint64_t salt,
		    uint32_t from, uint32_t to, uint32_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	uint64_t key = mix64(salt ^ 0x6b7662756e71ULL);

	if (tr->fmt == KVB_FMT_SYNTHETIC && from >= r->in_len) {
		syn_segment(mix3(tr->seed, SYN_OUT, r->first,
				 r->turn + 0x10000u),
			    to - from, from - r->in_len, salt32(salt), out);
		return;
	}
	for (uint32_t p = from; p < to; p++)
		out[p - from] = (uint32_t)mix64(key ^ ((uint64_t)i << 32 | p));
}

size_t kvb_trace_subblocks(const struct kvb_trace *tr, size_t i,
			   unsigned block_tokens, uint64_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	size_t n = 0;

	if (!r->nids) {
		/* No prefix information: blocks unique to the request. */
		n = r->in_len / block_tokens;
		for (size_t j = 0; j < n; j++)
			out[j] = KVB_UNIQUE_ID | (uint64_t)i << 24 | j;
		return n;
	}
	for (uint32_t k = 0; k < r->nids; k++) {
		uint64_t h = tr->ids[r->first + k];
		uint32_t per = tr->trace_block / block_tokens;
		uint32_t cov = r->in_len - k * tr->trace_block;

		if (cov < tr->trace_block)
			per = cov / block_tokens;
		for (uint32_t j = 0; j < per; j++)
			out[n++] = h * (tr->trace_block / block_tokens) + j;
	}
	return n;
}

void kvb_subblock_hash(uint64_t id, uint64_t salt, struct kv_hash *h)
{
	unsigned char in[16] = "KVBTRACE";
	XXH128_canonical_t c;

	for (int k = 0; k < 8; k++)
		in[8 + k] = (unsigned char)(id >> (8 * k));
	XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(in, sizeof(in),
							   salt));
	memcpy(h->b, c.digest, sizeof(h->b));
}

/* ---- offline analysis ---- */

/*
 * A u64 -> u32 map with open addressing (linear probing), for block
 * keys: sub-block ids, or the first 8 bytes of a block hash.
 */
struct kmap {
	uint64_t	*keys;
	uint32_t	*vals;
	size_t		mask, nr;
	bool		has_zero;
	uint32_t	zero;
};

static int kmap_init(struct kmap *m, size_t expect)
{
	size_t cap = 1024;

	memset(m, 0, sizeof(*m));
	while (cap < 2 * expect)
		cap *= 2;
	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, sizeof(*m->vals));
	m->mask = cap - 1;
	return m->keys && m->vals ? 0 : -ENOMEM;
}

static void kmap_free(struct kmap *m)
{
	free(m->keys);
	free(m->vals);
}

static int kmap_grow(struct kmap *m)
{
	struct kmap n;

	if (kmap_init(&n, m->mask + 1))
		return -ENOMEM;
	for (size_t i = 0; i <= m->mask; i++) {
		size_t j;

		if (!m->keys[i])
			continue;
		for (j = mix64(m->keys[i]) & n.mask; n.keys[j];
		     j = (j + 1) & n.mask)
			;
		n.keys[j] = m->keys[i];
		n.vals[j] = m->vals[i];
	}
	n.nr = m->nr;
	n.has_zero = m->has_zero;
	n.zero = m->zero;
	kmap_free(m);
	*m = n;
	return 0;
}

/* The value of @key, inserted as 0 (and *@added set) when absent. */
static uint32_t *kmap_get(struct kmap *m, uint64_t key, bool *added)
{
	size_t j;

	*added = false;
	if (!key) {
		*added = !m->has_zero;
		m->has_zero = true;
		return &m->zero;
	}
	if (2 * (m->nr + 1) > m->mask + 1 && kmap_grow(m))
		return NULL;
	for (j = mix64(key) & m->mask; m->keys[j]; j = (j + 1) & m->mask)
		if (m->keys[j] == key)
			return &m->vals[j];
	m->keys[j] = key;
	m->vals[j] = 0;
	m->nr++;
	*added = true;
	return &m->vals[j];
}

static size_t kmap_size(const struct kmap *m)
{
	return m->nr + m->has_zero;
}

/* Scratch for one request's keys. */
struct keybuf {
	uint32_t	*tok;
	struct kv_hash	*hash;
	uint64_t	*keys;
};

static int keybuf_init(struct keybuf *k, const struct kvb_trace *tr,
		       unsigned block_tokens)
{
	size_t blocks = tr->max_total / block_tokens + 1;

	k->tok = malloc((tr->max_total + 1) * sizeof(*k->tok));
	k->hash = malloc(blocks * sizeof(*k->hash));
	k->keys = malloc(blocks * sizeof(*k->keys));
	return k->tok && k->hash && k->keys ? 0 : -ENOMEM;
}

static void keybuf_free(struct keybuf *k)
{
	free(k->tok);
	free(k->hash);
	free(k->keys);
}

/*
 * Keys of request @i's full blocks that can be shared: IDS traces, its
 * prompt's sub-block ids (the rest of its blocks are unique); TOKENS
 * traces, the hashes of every full block of prompt + output, at salt 0.
 * *@nprompt: how many of them are prompt blocks. Returns their number.
 */
static int request_keys(const struct kvb_trace *tr, size_t i,
			unsigned block_tokens, struct keybuf *k,
			size_t *nprompt)
{
	const struct kvb_treq *r = &tr->reqs[i];
	int n;

	if (tr->kind == KVB_TRACE_IDS) {
		*nprompt = kvb_trace_subblocks(tr, i, block_tokens, k->keys);
		return (int)*nprompt;
	}
	kvb_trace_prompt(tr, i, 0, k->tok);
	kvb_trace_fill(tr, i, 0, r->in_len, r->in_len + r->out_len,
		       k->tok + r->in_len);
	n = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, k->tok,
			   r->in_len + r->out_len, block_tokens, NULL,
			   k->hash);
	if (n < 0)
		return n;
	for (int j = 0; j < n; j++)
		memcpy(&k->keys[j], k->hash[j].b, sizeof(uint64_t));
	*nprompt = r->in_len / block_tokens;
	return n;
}

int kvb_trace_bound(const struct kvb_trace *tr, unsigned block_tokens,
		    struct kvb_bound *b)
{
	struct keybuf k = { 0 };
	struct kmap m = { 0 };
	int ret = -ENOMEM;

	memset(b, 0, sizeof(*b));
	if (keybuf_init(&k, tr, block_tokens) ||
	    kmap_init(&m, tr->sum_in / block_tokens / 2 + 1024))
		goto out;
	for (size_t i = 0; i < tr->nr; i++) {
		const struct kvb_treq *r = &tr->reqs[i];
		size_t np;
		int n = request_keys(tr, i, block_tokens, &k, &np);
		bool added;

		if (n < 0) {
			ret = n;
			goto out;
		}
		b->prompt_tokens += r->in_len;
		b->refs += np;
		for (size_t j = 0; j < np; j++) {
			if (!kmap_get(&m, k.keys[j], &added))
				goto out;
			b->hits += !added;
		}
		for (size_t j = np; j < (size_t)n; j++)
			if (!kmap_get(&m, k.keys[j], &added))
				goto out;
		if (tr->kind == KVB_TRACE_IDS)
			b->footprint += (r->in_len + r->out_len) /
					block_tokens - np;
	}
	b->unique = b->refs - b->hits;
	b->footprint += kmap_size(&m);
	ret = 0;
out:
	keybuf_free(&k);
	kmap_free(&m);
	return ret;
}

/* ---- allocator footprints ---- */

struct sim_live {
	uint64_t	*keys;
	size_t		nkeys;
	uint64_t	len;
};

struct sim {
	unsigned	bt;
	struct kvb_alloc_sim *out;
	struct kmap	refs;		/* live holders per key */
	uint64_t	distinct;	/* keys with holders */
	uint64_t	private_blocks;
	uint64_t	st, ch, pg;	/* current slots */
	uint64_t	live;
};

static uint64_t round_up(uint64_t v, uint64_t unit)
{
	return (v + unit - 1) / unit * unit;
}

static int sim_hold(struct sim *s, struct sim_live *l, int sign)
{
	uint64_t chunked = round_up(l->len, s->out->chunk);
	uint64_t paged = round_up(l->len, s->bt);
	uint64_t priv = paged / s->bt - l->nkeys;
	bool added;

	for (size_t j = 0; j < l->nkeys; j++) {
		uint32_t *v = kmap_get(&s->refs, l->keys[j], &added);

		if (!v)
			return -ENOMEM;
		if (sign > 0 && (*v)++ == 0)
			s->distinct++;
		else if (sign < 0 && --(*v) == 0)
			s->distinct--;
	}
	if (sign > 0) {
		s->st += s->out->max_model_len;
		s->ch += chunked;
		s->pg += paged;
		s->private_blocks += priv;
		s->live++;
	} else {
		s->st -= s->out->max_model_len;
		s->ch -= chunked;
		s->pg -= paged;
		s->private_blocks -= priv;
		s->live--;
	}
	return 0;
}

static void sim_peak(struct sim *s)
{
	struct kvb_alloc_sim *o = s->out;
	uint64_t shared = (s->distinct + s->private_blocks) * s->bt;

	if (s->st > o->static_slots) {
		o->static_slots = s->st;
		o->peak_live = s->live;
	}
	if (s->ch > o->chunked_slots)
		o->chunked_slots = s->ch;
	if (s->pg > o->paged_slots)
		o->paged_slots = s->pg;
	if (shared > o->shared_slots)
		o->shared_slots = shared;
}

int kvb_sched_lockstep(size_t nr, unsigned procs, unsigned live,
		       struct kvb_event **out, size_t *nev)
{
	struct kvb_event *ev;
	size_t *cnt, n = 0;

	ev = malloc((2 * nr + 1) * sizeof(*ev));
	cnt = calloc(procs, sizeof(*cnt));
	if (!ev || !cnt) {
		free(ev);
		free(cnt);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nr; i++) {
		size_t p = i % procs;

		if (cnt[p] == live) {
			/* Its oldest is the request admitted live turns ago. */
			ev[n++] = (struct kvb_event){ .t = 2 * i,
				.req = (uint32_t)(i - (size_t)live * procs),
				.sign = -1 };
			cnt[p]--;
		}
		ev[n++] = (struct kvb_event){ .t = 2 * i + 1,
					      .req = (uint32_t)i, .sign = 1 };
		cnt[p]++;
	}
	free(cnt);
	*out = ev;
	*nev = n;
	return 0;
}

int kvb_trace_alloc_sim(const struct kvb_trace *tr, unsigned block_tokens,
			const struct kvb_event *ev, size_t nev,
			struct kvb_alloc_sim *out)
{
	struct sim s = { .bt = block_tokens, .out = out };
	struct sim_live *held;
	struct keybuf k = { 0 };
	int ret = -ENOMEM;

	out->static_slots = out->chunked_slots = out->paged_slots = 0;
	out->shared_slots = out->peak_live = 0;
	held = calloc(tr->nr, sizeof(*held));
	if (!held || keybuf_init(&k, tr, block_tokens) ||
	    kmap_init(&s.refs, 64 * (tr->max_total / block_tokens + 1)))
		goto out;
	for (size_t e = 0; e < nev; e++) {
		size_t i = ev[e].req, np;
		struct sim_live *l;
		int n;

		if (i >= tr->nr) {
			ret = -EINVAL;
			goto out;
		}
		l = &held[i];
		if (ev[e].sign < 0) {
			if (!l->keys)
				continue;	/* never admitted */
			if (sim_hold(&s, l, -1))
				goto out;
			free(l->keys);
			l->keys = NULL;
			continue;
		}
		if (l->keys)
			continue;	/* admitted twice: once counts */
		n = request_keys(tr, i, block_tokens, &k, &np);
		if (n < 0) {
			ret = n;
			goto out;
		}
		l->keys = malloc(((size_t)n + 1) * sizeof(*l->keys));
		if (!l->keys)
			goto out;
		memcpy(l->keys, k.keys, (size_t)n * sizeof(*l->keys));
		l->nkeys = (size_t)n;
		l->len = tr->reqs[i].in_len + tr->reqs[i].out_len;
		if (sim_hold(&s, l, 1))
			goto out;
		sim_peak(&s);
	}
	ret = 0;
out:
	for (size_t i = 0; held && i < tr->nr; i++)
		free(held[i].keys);
	free(held);
	keybuf_free(&k);
	kmap_free(&s.refs);
	return ret;
}
