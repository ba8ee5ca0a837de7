// SPDX-License-Identifier: MIT
/*
 * The replay, one engine process: request i of the stream is this
 * process's when i % procs is its index. Per request it hashes the
 * prompt's full blocks, opens a kv_seq on them (prefix lookup +
 * allocation), stamps the blocks it has to fill and checks the stamps of
 * the blocks it hit, commits the prompt, appends the output in
 * --decode-chunk pieces, commits, and keeps the request open until it
 * leaves the --live window (FIFO). Prefix lookups happen in arrival order
 * across a model's processes: each waits for its turn on a futex word in
 * the shared mapping; with --models the models take turns in phases.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "replay.h"

/* ---- replay ---- */

/*
 * A block's stamp: KVB_STAMP_BYTES at each end, derived from its hash.
 * Whoever fills a block writes it before committing the block; whoever
 * hits the block checks it, so a hit on the wrong block (another hash's,
 * or one reused while cached) shows.
 */
static uint64_t stamp_word(const struct kv_hash *h, size_t i)
{
	uint64_t a, b;

	memcpy(&a, h->b, 8);
	memcpy(&b, h->b + 8, 8);
	return splitmix64(a ^ splitmix64(b + i));
}

static size_t stamp_words(const struct worker *w)
{
	size_t n = KVB_STAMP_BYTES / sizeof(uint64_t);

	return 2 * n < w->words ? n : w->words;
}

static int stamp_write(struct worker *w, kv_block_t id,
		       const struct kv_hash *h)
{
	uint64_t *p = kv_block_ptr(w->c, id);
	size_t n = stamp_words(w);

	if (!p) {
		fprintf(stderr, "kvbench: proc %u: kvd gave block id %u, outside the pool\n",
			w->idx, id);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		p[i] = stamp_word(h, i);
		p[w->words - 1 - i] = stamp_word(h, ~i);
	}
	return 0;
}

static void stamp_check(struct worker *w, kv_block_t id,
			const struct kv_hash *h, size_t req, size_t pos)
{
	const uint64_t *p = kv_block_ptr(w->c, id);
	size_t n = stamp_words(w), bad = 0;

	if (!p) {
		bad = 1;
	} else {
		for (size_t i = 0; i < n; i++)
			bad += (p[i] != stamp_word(h, i)) +
			       (p[w->words - 1 - i] != stamp_word(h, ~i));
		w->r.bytes_checked += 2 * n * sizeof(uint64_t);
	}
	if (!bad)
		return;
	w->r.bad_blocks++;
	w->r.bad_words += bad;
	if (w->msgs++ < KVB_MAX_MSGS)
		fprintf(stderr, "kvbench: proc %u: request %zu hit block %u at position %zu, but it does not hold that prefix's stamp (%zu words differ)\n",
			w->idx, req, id, pos, bad);
}

static struct rseq *seq_at(struct worker *w, uint32_t i)
{
	return &w->seqs[(w->head + i) % w->o->live];
}

static int seq_close(struct worker *w, bool forced)
{
	struct rseq *q = seq_at(w, 0);
	uint64_t t0 = now_ns(), t1;
	int ret = kv_seq_close(q->s);

	t1 = now_ns();
	kvb_record(w, KVB_OP_CLOSE, t1 - t0, 1);
	if (ret < 0) {
		fprintf(stderr, "kvbench: proc %u: kv_seq_close (request %zu): %s\n",
			w->idx, q->req, strerror(-ret));
		return -1;
	}
	q->span->t_close = t1;
	atomic_fetch_sub_explicit(&w->ms->unused_slots, q->unused,
				  memory_order_relaxed);
	q->s = NULL;
	w->head = (w->head + 1) % w->o->live;
	w->nlive--;
	if (forced)
		w->r.forced++;
	return 0;
}

/* -ENOSPC: close our oldest request, or wait for others to close theirs. */
static int make_room(struct worker *w, uint64_t *stuck_since,
		     unsigned *tries)
{
	w->r.enospc++;
	if (w->nlive)
		return seq_close(w, true);
	if (!w->starving) {
		atomic_fetch_add(&w->o->sh->starved, 1);
		w->starving = true;
	}
	return kvb_wait_for_room(w, stuck_since, tries);
}

static void fed(struct worker *w)
{
	if (w->starving)
		atomic_fetch_sub(&w->o->sh->starved, 1);
	w->starving = false;
}

/* ---- arrival order across processes ---- */

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long ns)
{
	struct timespec ts = { 0, ns };

	syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Tell every process to stop waiting for a turn or a phase: one failed. */
void kvb_turns_stop(struct kvb_shared *sh)
{
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++) {
		atomic_store_explicit(&sh->m[m].next, KVB_TURN_STOP,
				      memory_order_release);
		futex_wake_all(&sh->m[m].next);
	}
	atomic_store_explicit(&sh->phase, KVB_TURN_STOP, memory_order_release);
	futex_wake_all(&sh->phase);
}

/*
 * Wait until request @i may open: every earlier request of our model has
 * opened and committed its prompt. Meanwhile close our oldest requests
 * when another process starves for room. -1 when the run is stopping.
 */
static int turn_wait(struct worker *w, size_t i)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v;

	for (;;) {
		/* Acquire: pairs with the release in turn_pass. */
		v = atomic_load_explicit(&w->ms->next, memory_order_acquire);
		if (v == i)
			return 0;
		if (v == KVB_TURN_STOP) {
			w->stopped = true;
			return -1;
		}
		if (w->nlive && atomic_load(&sh->starved)) {
			if (seq_close(w, true))
				return -1;
			continue;
		}
		futex_wait(&w->ms->next, v, KVB_TURN_POLL_NS);
	}
}

static void turn_pass(struct worker *w, size_t i)
{
	uint32_t v = (uint32_t)i;

	/* Release: our commit happened before the next lookup starts. */
	if (atomic_compare_exchange_strong_explicit(&w->ms->next, &v, v + 1,
						    memory_order_release,
						    memory_order_relaxed))
		futex_wake_all(&w->ms->next);
}

/* Wait until phase @ph begins. -1 when the run is stopping. */
static int phase_wait(struct worker *w, uint32_t ph)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v;

	for (;;) {
		/* Acquire: pairs with the release in phase_end. */
		v = atomic_load_explicit(&sh->phase, memory_order_acquire);
		if (v == ph)
			return 0;
		if (v == KVB_TURN_STOP) {
			w->stopped = true;
			return -1;
		}
		futex_wait(&sh->phase, v, KVB_PHASE_POLL_NS);
	}
}

/*
 * This process is done with phase @ph (its requests closed); the last of
 * its model's processes to be done starts the next phase.
 */
static void phase_end(struct worker *w, uint32_t ph)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v = ph;

	if (atomic_fetch_add(&w->ms->done, 1) + 1 < w->mprocs)
		return;
	atomic_store(&w->ms->done, 0);
	/* Not over KVB_TURN_STOP. Release: our closes come first. */
	if (atomic_compare_exchange_strong_explicit(&sh->phase, &v, ph + 1,
						    memory_order_release,
						    memory_order_relaxed))
		futex_wake_all(&sh->phase);
}

static int seq_failed(struct worker *w, const char *op, size_t i, int ret)
{
	fprintf(stderr, "kvbench: proc %u: %s (request %zu of %s): %s\n",
		w->idx, op, i, w->o->trace_path ? w->o->trace_path :
		"the synthetic workload", strerror(-ret));
	if (ret == -EOPNOTSUPP || ret == -ENOSYS)
		fprintf(stderr, "kvbench: this kvd or libkvclient has no prefix cache\n");
	return -1;
}

/* Hash request @i's prompt: w->hash[0..*np), tokens from *tok_base on. */
static int replay_hash(struct worker *w, size_t i, size_t *np,
		       size_t *tok_base)
{
	const struct kvb_opts *o = w->o;
	const struct kvb_trace *tr = o->tr;
	const struct kvb_treq *r = &tr->reqs[i];
	unsigned bt = o->geom.block_tokens;
	uint32_t len = r->in_len + r->out_len;
	uint64_t t0;
	int n;

	if (tr->kind == KVB_TRACE_IDS) {
		t0 = now_ns();
		*np = kvb_trace_subblocks(tr, i, bt, w->sub);
		for (size_t j = 0; j < *np; j++)
			kvb_subblock_hash(w->sub[j], o->salt, &w->hash[j]);
		kvb_record(w, KVB_OP_HASH, now_ns() - t0, 1);
		*tok_base = *np * bt;
		kvb_trace_fill(tr, i, o->salt, (uint32_t)*tok_base, len,
			       w->tok);
		return 0;
	}
	kvb_trace_prompt(tr, i, o->salt, w->tok);
	kvb_trace_fill(tr, i, o->salt, r->in_len, len, w->tok + r->in_len);
	t0 = now_ns();
	n = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, w->tok, r->in_len, bt,
			   NULL, w->hash);
	kvb_record(w, KVB_OP_HASH, now_ns() - t0, 1);
	if (n < 0)
		return seq_failed(w, "kv_hash_blocks", i, n);
	*np = (size_t)n;
	*tok_base = 0;
	return 0;
}

/* Stamp blocks [*from, to) of @q's table with their hashes. */
static int stamp_range(struct worker *w, struct rseq *q, size_t *from,
		       size_t to)
{
	const kv_block_t *tab;
	uint32_t nr = 0;

	tab = kv_seq_block_table(q->s, &nr);
	if (to > nr) {
		fprintf(stderr, "kvbench: proc %u: request %zu has %u blocks, needs %zu\n",
			w->idx, q->req, nr, to);
		return -1;
	}
	for (; *from < to; (*from)++)
		if (stamp_write(w, tab[*from], &w->hash[*from]))
			return -1;
	return 0;
}

/* Append the output in decode chunks, stamping blocks as they fill. */
static int replay_output(struct worker *w, struct rseq *q, size_t np,
			 size_t tok_base)
{
	const struct kvb_opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[q->req];
	unsigned bt = o->geom.block_tokens;
	size_t len = r->in_len + r->out_len, pos = r->in_len, done = np;
	uint64_t stuck = 0;
	unsigned tries = 0;
	int ret;

	/* The hashes kv_seq gives the blocks that fill, to stamp them. */
	if (len / bt > np) {
		ret = kv_hash_blocks(KV_HASH_XXH3_128,
				     np ? &w->hash[np - 1] : NULL, np * bt,
				     w->tok + (np * bt - tok_base),
				     len - np * bt, bt, NULL, w->hash + np);
		if (ret < 0)
			return seq_failed(w, "kv_hash_blocks", q->req, ret);
	}
	while (pos < len) {
		size_t n = o->decode_chunk && o->decode_chunk < len - pos ?
			   o->decode_chunk : len - pos;
		uint64_t t0 = now_ns();

		ret = kv_seq_append(q->s, w->tok + (pos - tok_base), n);
		kvb_record(w, KVB_OP_APPEND, now_ns() - t0, 1);
		if (ret == -ENOSPC) {
			/*
			 * Nothing of ours left to close, and others hold the
			 * rest (maybe waiting for room too): give way.
			 */
			if (!w->nlive && stuck &&
			    now_ns() - stuck > KVB_PREEMPT_NS)
				return -EAGAIN;
			if (make_room(w, &stuck, &tries))
				return -1;
			continue;
		}
		fed(w);
		if (ret < 0)
			return seq_failed(w, "kv_seq_append", q->req, ret);
		pos += n;
		/* Written before the next append commits them. */
		if (stamp_range(w, q, &done, pos / bt))
			return -1;
	}
	return 0;
}

/* Sample the namespace's blocks in use and the waste at this moment. */
static void replay_sample(struct worker *w)
{
	unsigned bt = w->o->geom.block_tokens;
	struct kv_stats st;
	int64_t unused;

	if (kv_stats(w->c, &st))
		return;
	unused = atomic_load_explicit(&w->ms->unused_slots,
				      memory_order_relaxed);
	if (!st.ns_blocks_used)
		return;
	if (st.ns_blocks_used > w->r.peak_used) {
		w->r.peak_used = st.ns_blocks_used;
		w->r.peak_unused = unused;
	}
	w->r.waste_sum += (double)unused / ((double)st.ns_blocks_used * bt);
	w->r.waste_samples++;
}

static void wait_arrival(struct worker *w, size_t i)
{
	uint64_t t = w->o->tr->reqs[i].t_us - w->t_base_us;
	uint64_t at = w->t_go + (uint64_t)((double)t * 1e3 * w->o->ts_scale);
	struct timespec ts = {
		.tv_sec = (time_t)(at / NSEC_PER_SEC),
		.tv_nsec = (long)(at % NSEC_PER_SEC),
	};

	while (now_ns() < at &&
	       clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * Open @q's prompt (prefix lookup + allocation, one round trip), check
 * the stamps of the blocks that hit, stamp the rest, commit them.
 * *@hit: the tokens that hit; *@hs: where kvd found those blocks (the
 * pool, a tier behind it). On failure @q is closed.
 */
static int replay_prompt(struct worker *w, struct rseq *q, size_t np,
			 size_t tok_base, size_t *hit, struct kv_seq_hits *hs)
{
	const struct kvb_opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[q->req];
	unsigned bt = o->geom.block_tokens;
	const kv_block_t *tab;
	uint64_t stuck = 0, t0;
	unsigned tries = 0;
	uint32_t nr = 0;
	size_t hb, done;
	int ret;

	for (;;) {
		t0 = now_ns();
		ret = kv_seq_open_hashes(w->c, w->hash, np,
					 w->tok + (np * bt - tok_base),
					 r->in_len - np * bt, &q->s);
		kvb_record(w, KVB_OP_OPEN, now_ns() - t0, 1);
		if (ret != -ENOSPC)
			break;
		if (make_room(w, &stuck, &tries))
			return -1;
	}
	fed(w);
	if (ret < 0)
		return seq_failed(w, "kv_seq_open_hashes", q->req, ret);
	*hit = kv_seq_hit_tokens(q->s);
	kv_seq_hits(q->s, hs);
	hb = *hit / bt < np ? *hit / bt : np;
	tab = kv_seq_block_table(q->s, &nr);
	for (size_t j = 0; j < hb && j < nr; j++)
		stamp_check(w, tab[j], &w->hash[j], q->req, j);
	done = hb;
	if (stamp_range(w, q, &done, np))
		goto err_close;
	t0 = now_ns();
	ret = kv_seq_commit(q->s);
	kvb_record(w, KVB_OP_COMMIT, now_ns() - t0, 1);
	if (ret < 0) {
		seq_failed(w, "kv_seq_commit", q->req, ret);
		goto err_close;
	}
	return 0;

err_close:
	kv_seq_close(q->s);
	q->s = NULL;
	return -1;
}

/*
 * Preempted (no room to grow, nothing of ours to close): give the blocks
 * back and open the prompt again after a pause, as an engine that
 * recomputes a preempted request does. Its committed blocks may still
 * be cached; its hits count only from the first, in-order open.
 */
static int replay_preempt(struct worker *w, struct rseq *q, size_t np,
			  size_t tok_base, unsigned n)
{
	struct timespec ts = { 0, 1000000L * (w->idx + 1) };
	struct kv_seq_hits hs;
	size_t hit;

	kv_seq_close(q->s);
	q->s = NULL;
	fed(w);
	w->r.preempted++;
	if (n >= KVB_MAX_PREEMPT) {
		fprintf(stderr, "kvbench: proc %u: request %zu preempted %u times; is the pool too small for %u processes?\n",
			w->idx, q->req, n, w->o->procs);
		return -1;
	}
	nanosleep(&ts, NULL);
	return replay_prompt(w, q, np, tok_base, &hit, &hs);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/*
 * Count request @i's prompt: @np full blocks looked up, @hit tokens hit,
 * found where @hs says. Its hit blocks are the host tier's, a disk
 * tier's and the pool's, which add up to them.
 */
static void replay_count(struct worker *w, size_t i, size_t np, size_t hit,
			 const struct kv_seq_hits *hs)
{
	const struct kvb_treq *r = &w->o->tr->reqs[i];
	unsigned bt = w->o->geom.block_tokens;
	uint64_t hb = min_u64(hit / bt, np);
	uint64_t host = min_u64(hs->host, hb);
	uint64_t disk = min_u64(hs->disk, hb - host);

	w->r.requests++;
	w->r.prompt_tokens += r->in_len;
	w->r.hit_tokens += hit;
	w->r.prompt_blocks += np;
	w->r.hit_blocks += hb;
	w->r.host_hit_blocks += host;
	w->r.disk_hit_blocks += disk;
	w->r.pool_hit_blocks += hb - host - disk;
	w->r.output_tokens += r->out_len;
	/* For the parent's time series. */
	atomic_fetch_add_explicit(&w->ms->prompt_blocks, np,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&w->ms->hit_blocks, hb,
				  memory_order_relaxed);
}

/*
 * One request. While it is built it sits in the slot after the live
 * ones, seq_at(nlive), and is not live yet: -ENOSPC closes older
 * requests only (closing the oldest moves head and nlive together, so
 * that slot stays where it is). It joins the live window once its
 * output is appended.
 */
static int replay_one(struct worker *w, size_t i)
{
	const struct kvb_opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[i];
	unsigned bt = o->geom.block_tokens;
	size_t np = 0, tok_base = 0, hit = 0;
	struct kv_seq_hits hs = { 0 };
	struct rseq *q;
	uint32_t nr = 0;
	uint64_t t0;
	int ret = 0;

	if (o->timestamps)
		wait_arrival(w, i);
	if (w->nlive == o->live && seq_close(w, false))
		return -1;
	q = seq_at(w, w->nlive);
	q->req = i;
	if (replay_hash(w, i, &np, &tok_base))
		return -1;
	if (turn_wait(w, i))
		return -1;
	q->span = &w->spans[w->nr_spans];
	q->span->req = (uint32_t)i;
	q->span->t_open = now_ns();
	if (replay_prompt(w, q, np, tok_base, &hit, &hs))
		return -1;
	turn_pass(w, i);
	for (unsigned n = 0; r->out_len; n++) {
		ret = replay_output(w, q, np, tok_base);
		if (ret != -EAGAIN)
			break;
		if (replay_preempt(w, q, np, tok_base, n))
			return -1;
	}
	if (ret)
		goto err_close;
	if (r->out_len) {
		t0 = now_ns();
		ret = kv_seq_commit(q->s);
		kvb_record(w, KVB_OP_COMMIT, now_ns() - t0, 1);
		if (ret < 0) {
			seq_failed(w, "kv_seq_commit", i, ret);
			goto err_close;
		}
	}
	kv_seq_block_table(q->s, &nr);
	q->unused = (int64_t)nr * bt - (int64_t)kv_seq_len(q->s);
	atomic_fetch_add_explicit(&w->ms->unused_slots, q->unused,
				  memory_order_relaxed);
	w->nr_spans++;
	w->nlive++;
	replay_count(w, i, np, hit, &hs);
	replay_sample(w);
	return 0;

err_close:
	kv_seq_close(q->s);
	q->s = NULL;
	return -1;
}

/* Close every open request: the end of a phase or of the run. */
static int replay_drain(struct worker *w)
{
	while (w->nlive)
		if (seq_close(w, false))
			return -1;
	return 0;
}

/*
 * Our model's requests are i with i % mprocs == rank, ours. With one
 * model the stream is one phase; with N, phase ph is model ph % N's
 * requests [c * P, (c + 1) * P), c = ph / N, P = --phase-requests: we
 * wait for each of our model's phases, replay our requests of it, close
 * them all, and say we are done.
 */
int kvb_replay_run(struct worker *w)
{
	const struct kvb_opts *o = w->o;
	size_t nr = o->tr->nr, lo, hi, i;
	uint32_t ph;
	int ret = 0;

	for (ph = w->model; ph < o->phases; ph += o->models) {
		lo = (size_t)(ph / o->models) * o->phase_requests;
		hi = lo + o->phase_requests < nr ? lo + o->phase_requests : nr;
		if (phase_wait(w, ph))
			return -1;
		w->t_go = now_ns();
		w->t_base_us = lo ? o->tr->reqs[lo].t_us : 0;
		i = lo - lo % w->mprocs + w->rank;
		for (i = i < lo ? i + w->mprocs : i; i < hi; i += w->mprocs) {
			ret = replay_one(w, i);
			if (ret)
				break;
		}
		if (replay_drain(w))
			return -1;
		if (ret)
			return ret;
		phase_end(w, ph);
	}
	return 0;
}

int kvb_replay_init(struct worker *w)
{
	const struct kvb_opts *o = w->o;
	const struct kvb_trace *tr = o->tr;
	size_t blocks = tr->max_total / o->geom.block_tokens + 2;
	uint64_t mine = 0, appends = 0;

	for (size_t i = w->rank; i < tr->nr; i += w->mprocs) {
		uint32_t out = tr->reqs[i].out_len, c = o->decode_chunk;

		mine++;
		if (out)
			appends += c ? (out + c - 1) / c : 1;
	}
	mine = mine ? mine : 1;
	w->spans = calloc(mine, sizeof(*w->spans));
	if (mine > KVB_MAX_SAMPLES)
		mine = KVB_MAX_SAMPLES;
	if (appends > KVB_MAX_SAMPLES)
		appends = KVB_MAX_SAMPLES;
	w->seqs = calloc(o->live, sizeof(*w->seqs));
	w->sub = malloc(blocks * sizeof(*w->sub));
	w->hash = malloc(blocks * sizeof(*w->hash));
	w->tok = malloc(((size_t)tr->max_total + 1) * sizeof(*w->tok));
	if (!w->seqs || !w->sub || !w->hash || !w->tok || !w->spans ||
	    kvb_samples_init(&w->s[KVB_OP_HASH], (uint32_t)mine) ||
	    kvb_samples_init(&w->s[KVB_OP_OPEN], (uint32_t)mine) ||
	    kvb_samples_init(&w->s[KVB_OP_COMMIT], (uint32_t)(2 * mine)) ||
	    kvb_samples_init(&w->s[KVB_OP_APPEND], (uint32_t)appends) ||
	    kvb_samples_init(&w->s[KVB_OP_CLOSE], (uint32_t)mine))
		return -ENOMEM;
	return 0;
}
