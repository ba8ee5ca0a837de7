// SPDX-License-Identifier: MIT
/*
 * Context overflow policies end to end, against a real kvd: none,
 * truncate (stop, drop), window and sinks through kv_seq. For each
 * policy, token by token and in bursts, the kept blocks, the positions
 * of every slot and kvd's books are checked against a model of what the
 * policy keeps, and the reference decode kernel over kvd's pool, given
 * kv_seq_range's masks, equals a dense double-precision attention over
 * exactly the kept tokens. Then: memory returns as the window slides
 * (kvctl shows it), a sequence that shares the prompt keeps its hits,
 * nothing is committed past the first drop, fork, and bad policies
 * refused with -EINVAL and nothing taken.
 */
#include <math.h>
#include <string.h>
#include <kv/kernels.h>

#include "harness.h"

#define BT		16
#define KVH		2
#define HEADS		4		/* GQA: two query heads per kv head */
#define HD		32
#define MAX_CTX		256
#define MAX_SLOTS	(64 * BT)

static struct t_kvd k;
static struct kv_layout lay;
static const char *cur_policy = "";	/* for messages */

static struct kv_geometry geom(void)
{
	return (struct kv_geometry){ .layers = 1, .kv_heads = KVH,
		.head_dim = HD, .block_tokens = BT, .dtype = KV_DTYPE_FP32 };
}

static struct kv_client *connect_ctx(const char *model, uint32_t max_context)
{
	struct kv_connect_params p;
	struct kv_client *c;
	char err[256] = "";

	t_params(&k, model, &p);
	p.geom = geom();
	p.max_context = max_context;
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	if (kv_connect(&p, &c))
		T_FAIL("kv_connect: %s", err);
	return c;
}

static struct kv_ctx_policy policy(const char *text)
{
	struct kv_ctx_policy p;

	if (kv_ctx_policy_parse(text, &p))
		T_FAIL("kv_ctx_policy_parse(\"%s\")", text);
	return p;
}

static uint32_t token(uint64_t p)
{
	return (uint32_t)(p * 2654435761u + 17);
}

/* K (v 0) or V of original position @p, kv head @h, channel @d. */
static float kv_val(uint64_t p, int v, uint32_t h, uint32_t d)
{
	uint32_t x = (uint32_t)(p * 7919 + v * 104729 + h * 1299709 + d * 31);

	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	return (float)((x & 0xffff) / 32768.0 - 1.0);
}

/* What the policy keeps at length @len: the model the test checks. */
struct keep {
	uint64_t	len, head, window;
	int		drops;
};

static struct keep keep_of(const struct kv_ctx_policy *p, uint32_t max_ctx,
			   uint64_t len)
{
	struct keep m = { .len = len };

	if (p->kind == KV_CTX_TRUNCATE && (p->flags & KV_CTX_DROP_OLDEST)) {
		m.window = max_ctx;
		m.drops = len > max_ctx;
	} else if (p->kind == KV_CTX_WINDOW || p->kind == KV_CTX_SINKS) {
		m.head = p->sinks + !!(p->flags & KV_CTX_BOS_EXTRA);
		m.window = p->window;
		m.drops = len > m.head + m.window;
	}
	return m;
}

static int kept(const struct keep *m, uint64_t p)
{
	return p < m->len &&
	       (!m->drops || p < m->head || p >= m->len - m->window);
}

/* The position of @p among the kept tokens (KV_POS_CACHE). */
static int64_t cache_pos(const struct keep *m, uint64_t p)
{
	if (!m->drops || p < m->head)
		return (int64_t)p;
	return (int64_t)(m->head + p - (m->len - m->window));
}

/* The table's slots against the model: positions and kept blocks. */
static void check_layout(struct kv_seq *s, const struct keep *m,
			 int64_t *orig)
{
	static int64_t cpos[MAX_SLOTS];
	struct kv_seq_range r;
	uint64_t nr_kept_blocks = 0, attended = 0, last_ob = ~0ULL;
	int n;

	T_EQ(kv_seq_range(s, &r), 0);
	n = kv_seq_positions(s, KV_POS_ORIGINAL, orig, MAX_SLOTS);
	T_EQ(n, (int64_t)r.nr_blocks * BT);
	T_ASSERT(n <= MAX_SLOTS);
	T_EQ(kv_seq_positions(s, KV_POS_CACHE, cpos, MAX_SLOTS), n);
	T_EQ(r.len, m->len);
	for (uint64_t ob = 0; ob * BT < m->len; ob++)
		for (uint64_t p = ob * BT; p < ob * BT + BT; p++)
			if (kept(m, p)) {
				nr_kept_blocks++;
				break;
			}
	T_EQ(r.nr_blocks, nr_kept_blocks);
	for (int i = 0; i < n; i++) {
		int64_t p = orig[i];
		int in = i < (int)r.context_len &&
			 (i < (int)r.sink_len || i >= (int)r.window_start);

		if (p < 0) {
			T_EQ(cpos[i], -1);
			T_ASSERT(!in);
			continue;
		}
		T_ASSERT(kept(m, (uint64_t)p));
		T_ASSERT(in);		/* the kernel's mask agrees */
		T_EQ(cpos[i], cache_pos(m, (uint64_t)p));
		T_EQ(p % BT, i % BT);	/* a token keeps its slot */
		if (i % BT == 0 || last_ob == ~0ULL)
			T_ASSERT(last_ob == ~0ULL || (uint64_t)p / BT > last_ob);
		last_ob = (uint64_t)p / BT;
		attended++;
	}
	T_EQ(attended, r.kept);
	T_EQ(r.kept + r.dropped, r.len);
}

/* Write K and V of original positions [from, to) that have a slot. */
static void write_kv(struct kv_client *c, struct kv_seq *s, uint64_t from,
		     uint64_t to, const int64_t *orig, int n)
{
	const kv_block_t *tbl = kv_seq_block_table(s, NULL);

	for (int i = 0; i < n; i++) {
		uint8_t *blk;

		if (orig[i] < (int64_t)from || orig[i] >= (int64_t)to)
			continue;
		blk = kv_block_ptr(c, tbl[i / BT]);
		for (int v = 0; v < 2; v++)
			for (uint32_t h = 0; h < KVH; h++) {
				/* [layer][K|V][kv_head][slot][head_dim] */
				float *row = (float *)blk +
					(((uint64_t)v * KVH + h) * BT +
					 (uint64_t)(i % BT)) * HD;

				for (uint32_t d = 0; d < HD; d++)
					row[d] = kv_val((uint64_t)orig[i], v,
							h, d);
			}
	}
}

/* Decode over the pool with kv_seq's masks against a dense attention. */
static void check_attention(struct kv_client *c, struct kv_seq *s,
			    const struct keep *m)
{
	static float q[HEADS * HD], out[HEADS * HD];
	struct kv_decode_args a = { 0 };
	struct kv_pool_info pi;
	struct kv_seq_range r;
	const kv_block_t *tbl;
	uint32_t nr;

	T_EQ(kv_pool_info(c, &pi), 0);
	T_EQ(kv_seq_range(s, &r), 0);
	tbl = kv_seq_block_table(s, &nr);
	for (int i = 0; i < HEADS * HD; i++)
		q[i] = kv_val(m->len + 1000, 0, 9, (uint32_t)i);
	a.q = q;
	a.out = out;
	a.q_dtype = KV_DTYPE_FP32;
	a.num_seqs = 1;
	a.num_heads = HEADS;
	a.max_blocks_per_seq = nr;
	a.block_tables = tbl;
	a.context_lens = &r.context_len;
	a.sink_lens = &r.sink_len;
	a.window_starts = &r.window_start;
	a.scale = 1.0f / sqrtf(HD);
	a.partition_tokens = 2 * BT;	/* several partitions, some masked */
	T_EQ(kv_ref_paged_attention_decode(&lay, pi.base, pi.pool_bytes, 0,
					   &a), 0);
	for (uint32_t h = 0; h < HEADS; h++) {
		uint32_t kvh = h / (HEADS / KVH);
		double mx = -INFINITY, sum = 0, acc[HD] = { 0 };

		for (uint64_t p = 0; p < m->len; p++) {
			double dot = 0;

			if (!kept(m, p))
				continue;
			for (uint32_t d = 0; d < HD; d++)
				dot += (double)q[h * HD + d] *
				       kv_val(p, 0, kvh, d);
			mx = fmax(mx, dot / sqrt(HD));
		}
		for (uint64_t p = 0; p < m->len; p++) {
			double dot = 0, e;

			if (!kept(m, p))
				continue;
			for (uint32_t d = 0; d < HD; d++)
				dot += (double)q[h * HD + d] *
				       kv_val(p, 0, kvh, d);
			e = exp(dot / sqrt(HD) - mx);
			sum += e;
			for (uint32_t d = 0; d < HD; d++)
				acc[d] += e * kv_val(p, 1, kvh, d);
		}
		for (uint32_t d = 0; d < HD; d++) {
			double want = acc[d] / sum;

			if (fabs(out[h * HD + d] - want) > 1e-4)
				T_FAIL("%s: len %llu head %u dim %u: %g, dense %g",
				       cur_policy, (unsigned long long)m->len,
				       h, d, out[h * HD + d], want);
		}
	}
}

static uint32_t client_blocks(struct kv_client *c)
{
	struct kv_stats st;

	T_EQ(kv_stats(c, &st), 0);
	return st.client_blocks;
}

/*
 * Open a prompt of @prompt tokens under @text, write and commit it, then
 * grow it to @total tokens in appends of 1, or 7 (bursts that fill and
 * drop blocks inside one call), checking everything at each step.
 */
static void run_policy(struct kv_client *c, const char *text,
		       uint64_t prompt, uint64_t total, int burst)
{
	static int64_t orig[MAX_SLOTS];
	struct kv_ctx_policy pol = policy(text);
	uint32_t tok[8], max_ctx, peak = 0;

	cur_policy = text;
	struct kv_seq *s;
	struct keep m;
	uint64_t len;
	int n;

	T_EQ(kv_ctx_info(c, &max_ctx, NULL, NULL), 0);
	{
		uint32_t *pt = malloc(prompt * sizeof(*pt));

		for (uint64_t i = 0; i < prompt; i++)
			pt[i] = token(i);
		if (kv_seq_open_policy(c, pt, prompt, NULL, &pol, &s))
			T_FAIL("%s: open: %s", text, kv_last_error(c));
		free(pt);
	}
	m = keep_of(&pol, max_ctx, prompt);
	n = kv_seq_positions(s, KV_POS_ORIGINAL, orig, MAX_SLOTS);
	write_kv(c, s, 0, prompt, orig, n);
	T_EQ(kv_seq_commit(s), 0);
	check_layout(s, &m, orig);
	check_attention(c, s, &m);
	for (len = prompt; len < total; ) {
		uint64_t step = burst && len % 3 == 0 ? burst : 1;

		for (uint64_t i = 0; i < step; i++)
			tok[i] = token(len + i);
		T_EQ(kv_seq_append(s, tok, step), 0);
		m = keep_of(&pol, max_ctx, len + step);
		n = kv_seq_positions(s, KV_POS_ORIGINAL, orig, MAX_SLOTS);
		write_kv(c, s, len, len + step, orig, n);
		len += step;
		check_layout(s, &m, orig);
		check_attention(c, s, &m);
		/* this sequence's blocks are all this client holds */
		T_EQ(client_blocks(c), n / BT);
		if ((uint32_t)(n / BT) > peak)
			peak = (uint32_t)(n / BT);
	}
	if (m.drops)	/* bounded by the kept range, whatever the length */
		T_ASSERT(peak <= (m.head + BT - 1) / BT + m.window / BT + 2);
	T_EQ(kv_seq_close(s), 0);
	T_EQ(client_blocks(c), 0);
	fprintf(stderr, "  %-18s len %llu, peak %u blocks\n", text,
		(unsigned long long)total, peak);
}

static void test_policies(void)
{
	static const char *const pols[] = {
		"window 40", "window 16", "window 10", "window 15",
		"window 17", "window 33 bos-extra", "sinks 4 36 bos",
		"sinks 0 40", "sinks 20 30", "sinks 16 32", "sinks 4 20 bos-extra",
		"sinks 1 1", "none", "truncate drop",
	};
	struct kv_client *c = connect_ctx("pol", MAX_CTX);
	struct kv_client *u = connect_ctx("pol-unlimited", 0);

	/* more sink blocks than the table has yet: no drop to make */
	run_policy(u, "sinks 1000000 8", 1, 70, 7);
	run_policy(u, "sinks 4294967000 8", 1, 40, 0);
	kv_disconnect(u);
	for (size_t i = 0; i < sizeof(pols) / sizeof(*pols); i++) {
		run_policy(c, pols[i], 5, 200, 0);
		run_policy(c, pols[i], 30, 230, 7);
		if (strcmp(pols[i], "none"))
			run_policy(c, pols[i], 150, 260, 7); /* drops at open */
	}
	kv_disconnect(c);
}

/* none and truncate at max_context 48. */
static void test_limits(void)
{
	struct kv_client *c = connect_ctx("limit", 48);
	struct kv_ctx_policy none = policy("none"), stop = policy("truncate");
	struct kv_ctx_policy drop = policy("truncate drop");
	uint32_t t[64];
	struct kv_seq *s;
	uint32_t nr;

	for (int i = 0; i < 64; i++)
		t[i] = token((uint64_t)i);
	T_EQ(kv_seq_open_policy(c, t, 49, NULL, &none, &s), -E2BIG);
	if (!strstr(kv_last_error(c), "max_context"))
		T_FAIL("%s", kv_last_error(c));
	T_EQ(kv_seq_open_policy(c, t, 49, NULL, &stop, &s), -E2BIG);
	T_EQ(client_blocks(c), 0);
	T_EQ(kv_seq_open_policy(c, t, 40, NULL, &none, &s), 0);
	kv_seq_block_table(s, &nr);
	T_EQ(kv_seq_append(s, t, 9), -E2BIG);	/* changes nothing */
	T_EQ(kv_seq_len(s), 40);
	T_EQ(client_blocks(c), nr);
	T_EQ(kv_seq_append(s, t, 8), 0);
	T_EQ(kv_seq_append(s, t, 1), -E2BIG);
	T_EQ(kv_seq_len(s), 48);
	T_EQ(kv_seq_close(s), 0);

	T_EQ(kv_seq_open_policy(c, t, 40, NULL, &stop, &s), 0);
	T_EQ(kv_seq_append(s, t, 20), 8);	/* cut short at 48 */
	T_EQ(kv_seq_len(s), 48);
	T_EQ(kv_seq_append(s, t, 1), -E2BIG);
	T_EQ(kv_seq_len(s), 48);
	T_EQ(kv_seq_close(s), 0);

	T_EQ(kv_seq_open_policy(c, t, 64, NULL, &drop, &s), 0);
	T_EQ(kv_seq_len(s), 64);
	kv_seq_block_table(s, &nr);
	T_EQ(nr, 3);		/* tokens 16..63 */
	T_EQ(kv_seq_close(s), 0);
	T_EQ(client_blocks(c), 0);
	kv_disconnect(c);
}

/* Refused at open, with -EINVAL and the reason; nothing taken. */
static void refuse(struct kv_client *c, struct kv_ctx_policy p,
		   const char *why)
{
	uint32_t t[4] = { 1, 2, 3, 4 };
	struct kv_seq *s = (struct kv_seq *)&s;

	T_EQ(kv_seq_open_policy(c, t, 4, NULL, &p, &s), -EINVAL);
	T_ASSERT(s == NULL);
	if (!strstr(kv_last_error(c), why))
		T_FAIL("kv_last_error \"%s\" does not say \"%s\"",
		       kv_last_error(c), why);
	T_EQ(client_blocks(c), 0);
}

static void test_bad_policies(void)
{
	struct kv_client *c = connect_ctx("bad", MAX_CTX);
	struct kv_client *u = connect_ctx("bad-unlimited", 0);
	struct kv_ctx_policy p = policy("window 8");
	char buf[64];

	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_WINDOW }, "window 0");
	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_SINKS, .sinks = 4 },
	       "window 0");
	refuse(c, policy("sinks 4 253"), "above max_context");
	refuse(c, policy("sinks 4 252 bos-extra"), "above max_context");
	refuse(c, policy("window 257"), "above max_context");
	refuse(c, policy("sinks 0 8 bos"), "0 sinks");
	refuse(c, (struct kv_ctx_policy){ .kind = 9 }, "unknown");
	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_WINDOW, .window = 8,
					  .flags = 1U << 9 }, "flag");
	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_WINDOW, .window = 8,
					  .sinks = 2 }, "sinks given");
	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_NONE, .window = 8 },
	       "given to none");
	refuse(c, (struct kv_ctx_policy){ .kind = KV_CTX_SINKS, .sinks = 2,
		.window = 8, .flags = KV_CTX_BOS | KV_CTX_BOS_EXTRA }, "together");
	refuse(u, policy("truncate"), "needs a max_context");
	/* no max_context: any window */
	T_EQ(kv_ctx_policy_check(&p, 0, NULL), 0);
	p = policy("sinks 4 100000");
	T_EQ(kv_ctx_policy_check(&p, 0, NULL), 0);
	/* the grammar */
	T_EQ(kv_ctx_policy_parse("window", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("window -1", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("window 4294967296", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("sinks 4", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("truncate sideways", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("", &p), -EINVAL);
	T_EQ(kv_ctx_policy_parse("sinks 4 8 bos", &p), 0);
	T_EQ(kv_ctx_policy_format(&p, buf, sizeof(buf)), 13);
	T_ASSERT(!strcmp(buf, "sinks 4 8 bos"));
	T_EQ(kv_seq_open_policy(c, NULL, 4, NULL, &p, NULL), -EINVAL);
	kv_disconnect(u);
	kv_disconnect(c);
}

/* Open @n tokens with policy @text (NULL: none), written and committed. */
static struct kv_seq *open_written(struct kv_client *c, const uint32_t *t,
				   size_t n, const char *text)
{
	static int64_t orig[MAX_SLOTS];
	struct kv_ctx_policy p = policy(text ? text : "none");
	struct kv_seq *s;
	int nr;

	if (kv_seq_open_policy(c, t, n, NULL, &p, &s))
		T_FAIL("open: %s", kv_last_error(c));
	nr = kv_seq_positions(s, KV_POS_ORIGINAL, orig, MAX_SLOTS);
	write_kv(c, s, 0, n, orig, nr);
	T_EQ(kv_seq_commit(s), 0);
	return s;
}

static long long ns_blocks_used(void)
{
	char *js = t_kvctl(&k, "status");
	long long n = t_json_int(js, "blocks_used");

	free(js);
	return n;
}

/*
 * The prefix cache with policies: B's hits on a prompt survive A's
 * window sliding over it; A commits what it wrote before its first drop
 * and nothing after (a later sequence hits exactly those blocks); kvd's
 * books (kvctl) give back A's blocks as they fall out.
 */
static void test_prefix(void)
{
	struct kv_client *c = connect_ctx("share", 0);	/* first: kvctl's */
	uint32_t t[400];
	struct kv_seq *a, *b, *d;
	struct kv_seq_range r;
	long long used0;

	for (int i = 0; i < 400; i++)
		t[i] = token((uint64_t)i + 5000);
	/* A: 20 tokens under window 40, then grown to 300, one by one */
	a = open_written(c, t, 20, "window 40");
	used0 = ns_blocks_used();
	T_EQ(used0, 2);
	for (int i = 20; i < 300; i++) {
		T_EQ(kv_seq_append(a, &t[i], 1), 0);
		if (i == 150)
			T_ASSERT(ns_blocks_used() <= 4);
	}
	T_EQ(kv_seq_range(a, &r), 0);
	T_EQ(r.commit_end, 40);
	T_ASSERT(r.nr_blocks <= 4);
	T_ASSERT(ns_blocks_used() <= 4);	/* kvd freed the rest */
	/* D, no policy, on A's whole sequence: hits blocks 0 and 1 only
	 * (tokens 0..31, computed before A dropped anything) */
	d = open_written(c, t, 300, NULL);
	T_EQ(kv_seq_hit_tokens(d), 32);
	T_EQ(kv_seq_close(d), 0);
	T_EQ(kv_seq_close(a), 0);

	/* B holds a 100-token prompt; A' slides a window over the same
	 * prompt; a new sequence still hits all of B's full blocks */
	b = open_written(c, t + 100, 100, NULL);
	a = open_written(c, t + 100, 100, "sinks 4 28");
	T_EQ(kv_seq_hit_tokens(a), 16);		/* its sink block */
	for (int i = 200; i < 260; i++)
		T_EQ(kv_seq_append(a, &t[i], 1), 0);
	d = open_written(c, t + 100, 100, NULL);
	T_EQ(kv_seq_hit_tokens(d), 96);		/* 6 full blocks */
	T_EQ(kv_seq_close(d), 0);
	T_EQ(kv_seq_close(b), 0);
	T_EQ(kv_seq_close(a), 0);
	T_EQ(client_blocks(c), 0);
	kv_disconnect(c);
}

/*
 * Tokens that come in and are dropped in the same call never had a
 * slot: no block holding one is committed (a later sequence would hit
 * bytes nobody wrote). A prompt longer than the policy keeps, and an
 * append that crosses the window at once.
 */
static void test_unwritten(void)
{
	struct kv_client *c = connect_ctx("unwritten", 0);
	static const struct { const char *pol; size_t open, add; } cases[] = {
		{ "window 16", 20, 0 }, { "sinks 4 28", 100, 0 },
		{ "window 16", 2, 20 }, { "sinks 4 12", 10, 40 },
	};
	uint32_t t[200];

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct kv_seq *s, *d;
		struct kv_seq_range r;

		for (int j = 0; j < 200; j++)
			t[j] = token((uint64_t)j + 20000 + i * 1000);
		s = open_written(c, t, cases[i].open, cases[i].pol);
		if (cases[i].add) {
			T_EQ(kv_seq_append(s, t + cases[i].open, cases[i].add), 0);
			T_EQ(kv_seq_commit(s), 0);
		}
		T_EQ(kv_seq_range(s, &r), 0);
		T_EQ(kv_seq_close(s), 0);
		d = open_written(c, t, 150, NULL);
		if (kv_seq_hit_tokens(d) != r.commit_end / BT * BT)
			T_FAIL("%s: a later sequence hits %zu tokens, commit_end %llu",
			       cases[i].pol, kv_seq_hit_tokens(d),
			       (unsigned long long)r.commit_end);
		T_ASSERT(r.commit_end < BT);	/* no whole block written */
		T_EQ(kv_seq_close(d), 0);
		T_EQ(kv_ctx_info(c, NULL, NULL, NULL), 0);
	}
	kv_disconnect(c);
}

/* A fork under a window slides on its own; both give everything back. */
static void test_fork(void)
{
	static int64_t po[MAX_SLOTS], fo[MAX_SLOTS];
	struct kv_client *c = connect_ctx("fork", MAX_CTX);
	struct kv_ctx_policy p = policy("sinks 4 20");
	uint32_t t[200];
	struct kv_seq *s, *f;
	struct keep m;
	int n;

	for (int i = 0; i < 200; i++)
		t[i] = token((uint64_t)i + 9000);
	T_EQ(kv_seq_open_policy(c, t, 30, NULL, &p, &s), 0);
	for (int i = 30; i < 61; i++)
		T_EQ(kv_seq_append(s, &t[i], 1), 0);
	T_EQ(kv_seq_fork(s, &f), 0);
	n = kv_seq_positions(s, KV_POS_ORIGINAL, po, MAX_SLOTS);
	T_EQ(kv_seq_positions(f, KV_POS_ORIGINAL, fo, MAX_SLOTS), n);
	T_ASSERT(!memcmp(po, fo, (size_t)n * sizeof(*po)));
	for (int i = 61; i < 120; i++)
		T_EQ(kv_seq_append(f, &t[i], 1), 0);
	m = keep_of(&p, MAX_CTX, 120);
	check_layout(f, &m, fo);
	m = keep_of(&p, MAX_CTX, 61);
	check_layout(s, &m, po);
	T_EQ(kv_seq_close(f), 0);
	T_EQ(kv_seq_close(s), 0);
	T_EQ(client_blocks(c), 0);
	kv_disconnect(c);
}

int main(void)
{
	struct kv_geometry g = geom();

	T_EQ(kv_layout_init(&lay, &g), 0);
	t_kvd_start(&k, "64M", NULL);
	test_prefix();
	test_unwritten();
	test_limits();
	test_bad_policies();
	test_fork();
	test_policies();
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	printf("ctx_policy: ok\n");
	return 0;
}
