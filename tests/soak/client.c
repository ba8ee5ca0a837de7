// SPDX-License-Identifier: MIT
/*
 * A client process of the soak test (tests/soak/soak.c): random
 * prefix-cache work on kvd through the raw calls (ALLOC, LOOKUP,
 * ALLOC_PREFIX, COMMIT, RELEASE, REF + COW forks, COW of committed blocks)
 * and kv_seq, over prompts from a few shared families. Every full block's
 * bytes are a function of its hash, written before it is committed and
 * checked on every prefix hit, deduplication and copy; a private block's
 * bytes are a function of a tag of its holder, checked before it is
 * released. What it did and any mismatch go to its slot in shared memory.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

#define BT		16		/* tokens per block */
#define MAX_FULL	12		/* full blocks per prompt */
#define MAX_BLK		(MAX_FULL + 1)
#define MAX_SEQ		6		/* sequences a client holds */
#define FAMILIES	48
#define BRANCHES	4
#define SHARED_BLK	4		/* blocks a family shares */

struct blk {
	kv_block_t	id;
	bool		full;		/* bytes f(hash), else f(tag) */
	struct kv_hash	hash;
	uint64_t	tag;
};

struct seq {
	bool		live;
	uint32_t	nr;		/* blocks */
	uint32_t	n_full;		/* blocks [0, n_full) are full */
	uint32_t	n_committed;	/* [0, n_committed) published */
	struct blk	b[MAX_BLK];
};

/* One client process. */
struct client {
	int		slot;
	struct kv_client *c;
	struct slot_stats *st;
	uint64_t	rng;
	uint64_t	block_bytes;
	uint64_t	tags;		/* tags handed out */
	struct seq	seq[MAX_SEQ];
};
static struct shared *sh;

static void add(uint64_t *ctr, uint64_t n)
{
	__atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* ---- block contents ---- */

static uint64_t hash_seed(const struct kv_hash *h)
{
	uint64_t a, b;

	memcpy(&a, h->b, 8);
	memcpy(&b, h->b + 8, 8);
	return mix64(a ^ mix64(b));
}

static uint64_t blk_seed(const struct blk *b)
{
	return b->full ? hash_seed(&b->hash) : mix64(b->tag ^ 0x7a67);
}

static void fill(uint64_t *p, size_t words, uint64_t seed)
{
	for (size_t i = 0; i < words; i++)
		p[i] = mix64(seed + i * 0x9e3779b97f4a7c15ULL);
}

/* A client's own error: recorded once for the parent, then _exit. */
static void __attribute__((noreturn, format(printf, 2, 3)))
die(struct client *cl, const char *fmt, ...)
{
	va_list ap;

	add(&cl->st->errors, 1);
	va_start(ap, fmt);
	vsnprintf(cl->st->why, sizeof(cl->st->why), fmt, ap);
	va_end(ap);
	fprintf(stderr, "client %d: %s\n", cl->slot, cl->st->why);
	_exit(2);
}

static uint64_t *ptr(struct client *cl, kv_block_t id)
{
	uint64_t *p = kv_block_ptr(cl->c, id);

	if (!p)
		die(cl, "kv_block_ptr(%u): no mapping for a held block", id);
	return p;
}

static void write_blk(struct client *cl, const struct blk *b)
{
	fill(ptr(cl, b->id), cl->block_bytes / 8, blk_seed(b));
}

/* Are @b's bytes what its hash (or tag) says? Records a mismatch. */
static bool check_blk(struct client *cl, const struct blk *b,
		      const char *what)
{
	const uint64_t *p = ptr(cl, b->id);
	uint64_t seed = blk_seed(b);
	size_t words = cl->block_bytes / 8;

	for (size_t i = 0; i < words; i++) {
		uint64_t want = mix64(seed + i * 0x9e3779b97f4a7c15ULL);

		if (p[i] == want)
			continue;
		if (!cl->st->mismatches)
			snprintf(cl->st->why, sizeof(cl->st->why),
				 "%s: block %u (%s) word %zu is %#llx, not %#llx",
				 what, b->id, b->full ? "full" : "private", i,
				 (unsigned long long)p[i],
				 (unsigned long long)want);
		add(&cl->st->mismatches, 1);
		fprintf(stderr, "client %d: MISMATCH %s: block %u word %zu\n",
			cl->slot, what, b->id, i);
		return false;
	}
	return true;
}

static uint64_t new_tag(struct client *cl)
{
	return mix64(((uint64_t)getpid() << 32) ^ ++cl->tags);
}

/* ---- prompts ---- */

struct prompt {
	uint32_t	tok[MAX_BLK * BT];
	size_t		len;
	uint32_t	n_full;
	struct kv_hash	h[MAX_BLK];
};

/* A family's prompts share SHARED_BLK blocks, then branch; some are unique. */
static void make_prompt(struct client *cl, struct prompt *p)
{
	uint64_t fam = rnd(&cl->rng) % FAMILIES;
	uint64_t br = rnd(&cl->rng) % BRANCHES;
	bool unique = rnd(&cl->rng) % 8 == 0;
	uint32_t nfull = 1 + (uint32_t)(rnd(&cl->rng) % MAX_FULL);
	uint32_t tail = (uint32_t)(rnd(&cl->rng) % BT);
	uint64_t salt = unique ? new_tag(cl) : 0;
	int n;

	p->len = (size_t)nfull * BT + tail;
	for (size_t i = 0; i < p->len; i++) {
		uint64_t key = fam << 40 | i;

		if (i >= SHARED_BLK * BT)
			key |= (br + 1) << 32;
		p->tok[i] = (uint32_t)mix64(key ^ salt);
	}
	n = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, p->tok, p->len, BT,
			   NULL, p->h);
	if (n != (int)nfull)
		die(cl, "kv_hash_blocks: %d, expected %u", n, nfull);
	p->n_full = nfull;
}

/* ---- sequences held through the raw calls ---- */

static struct seq *free_seq(struct client *cl)
{
	for (int i = 0; i < MAX_SEQ; i++)
		if (!cl->seq[i].live)
			return &cl->seq[i];
	return NULL;
}

static struct seq *any_seq(struct client *cl)
{
	int start = (int)(rnd(&cl->rng) % MAX_SEQ);

	for (int i = 0; i < MAX_SEQ; i++) {
		struct seq *s = &cl->seq[(start + i) % MAX_SEQ];

		if (s->live)
			return s;
	}
	return NULL;
}

static void ids_of(const struct seq *s, kv_block_t *ids)
{
	for (uint32_t i = 0; i < s->nr; i++)
		ids[i] = s->b[i].id;
}

/* Expected: -ENOSPC when the pool is short; anything else is a bug. */
static void soft_err(struct client *cl, int ret, const char *call)
{
	if (ret != -ENOSPC)
		die(cl, "%s: %s", call, strerror(-ret));
	add(&cl->st->enospc, 1);
}

/* COMMIT the full blocks not yet published; dedups are checked. */
static void seq_commit(struct client *cl, struct seq *s)
{
	struct kv_commit e[MAX_BLK];
	uint32_t n = s->n_full - s->n_committed, i;
	int ret;

	if (!n)
		return;
	memset(e, 0, sizeof(e));
	for (i = 0; i < n; i++) {
		struct blk *b = &s->b[s->n_committed + i];

		check_blk(cl, b, "before commit");
		e[i].id = b->id;
		e[i].hash = b->hash;
		if (s->n_committed + i)
			e[i].parent = s->b[s->n_committed + i - 1].hash;
	}
	ret = kv_commit(cl->c, e, n);
	add(&cl->st->ops[OP_COMMIT], 1);
	if (ret != (int)n)
		die(cl, "kv_commit(%u): %d", n, ret);
	for (i = 0; i < n; i++) {
		struct blk *b = &s->b[s->n_committed + i];

		if (!(e[i].flags & KV_COMMIT_DEDUP))
			continue;
		/* our block was released: the cached one is ours now */
		b->id = e[i].id;
		add(&cl->st->dedups, 1);
		check_blk(cl, b, "dedup");
	}
	s->n_committed = s->n_full;
}

static void seq_release(struct client *cl, struct seq *s)
{
	kv_block_t ids[MAX_BLK];
	int ret;

	for (uint32_t i = 0; i < s->nr; i++)
		check_blk(cl, &s->b[i], "before release");
	ids_of(s, ids);
	ret = kv_release(cl->c, ids, s->nr);
	add(&cl->st->ops[OP_RELEASE], 1);
	if (ret != (int)s->nr)
		die(cl, "kv_release(%u): %d", s->nr, ret);
	s->live = false;
}

/* ALLOC_PREFIX: hits checked, the rest written; committed now or later. */
static void op_alloc_prefix(struct client *cl)
{
	struct seq *s = free_seq(cl);
	struct prompt p;
	kv_block_t ids[MAX_BLK];
	uint32_t need, n_lookup;
	int h;

	if (!s) {
		seq_release(cl, any_seq(cl));
		return;
	}
	make_prompt(cl, &p);
	need = (uint32_t)((p.len + BT - 1) / BT);
	/* as kv_seq: the last prompt token is always computed */
	n_lookup = rnd(&cl->rng) & 1 ? p.n_full : (uint32_t)((p.len - 1) / BT);
	h = kv_alloc_prefix(cl->c, p.h, n_lookup, need, ids);
	add(&cl->st->ops[OP_ALLOC_PREFIX], 1);
	if (h < 0) {
		soft_err(cl, h, "kv_alloc_prefix");
		return;
	}
	memset(s, 0, sizeof(*s));
	s->live = true;
	s->nr = need;
	s->n_full = p.n_full;
	s->n_committed = (uint32_t)h;
	for (uint32_t i = 0; i < need; i++) {
		struct blk *b = &s->b[i];

		b->id = ids[i];
		b->full = i < p.n_full;
		if (b->full)
			b->hash = p.h[i];
		else
			b->tag = new_tag(cl);
		if (i < (uint32_t)h) {
			if (check_blk(cl, b, "prefix hit (alloc_prefix)"))
				add(&cl->st->hits, 1);
		} else {
			write_blk(cl, b);
		}
	}
	if (rnd(&cl->rng) & 1)
		seq_commit(cl, s);
}

/* LOOKUP: the hits checked, then kept as a sequence or released. */
static void op_lookup(struct client *cl)
{
	struct seq *s = free_seq(cl);
	struct prompt p;
	kv_block_t ids[MAX_BLK];
	int h;

	if (!s) {
		seq_release(cl, any_seq(cl));
		return;
	}
	make_prompt(cl, &p);
	h = kv_lookup(cl->c, p.h, p.n_full, ids);
	add(&cl->st->ops[OP_LOOKUP], 1);
	if (h < 0)
		die(cl, "kv_lookup: %s", strerror(-h));
	if (!h)
		return;
	memset(s, 0, sizeof(*s));
	s->live = true;
	s->nr = s->n_full = s->n_committed = (uint32_t)h;
	for (int i = 0; i < h; i++) {
		s->b[i].id = ids[i];
		s->b[i].full = true;
		s->b[i].hash = p.h[i];
		if (check_blk(cl, &s->b[i], "prefix hit (lookup)"))
			add(&cl->st->hits, 1);
	}
	if (rnd(&cl->rng) & 1)
		seq_release(cl, s);
}

/* ALLOC: private blocks, bytes from tags of ours. */
static void op_alloc(struct client *cl)
{
	struct seq *s = free_seq(cl);
	kv_block_t ids[MAX_BLK];
	unsigned n = 1 + (unsigned)(rnd(&cl->rng) % 8);
	int ret;

	if (!s) {
		seq_release(cl, any_seq(cl));
		return;
	}
	ret = kv_alloc(cl->c, n, ids);
	add(&cl->st->ops[OP_ALLOC], 1);
	if (ret != (int)n) {
		soft_err(cl, ret, "kv_alloc");
		return;
	}
	memset(s, 0, sizeof(*s));
	s->live = true;
	s->nr = n;
	for (unsigned i = 0; i < n; i++) {
		s->b[i].id = ids[i];
		s->b[i].tag = new_tag(cl);
		write_blk(cl, &s->b[i]);
	}
}

/*
 * Fork by hand (what kv_seq_fork does): publish the full blocks, REF
 * every block, COW the partial last one, which must come back as a copy
 * of the parent's bytes; the child then writes its own.
 */
static void op_fork(struct client *cl)
{
	struct seq *s = any_seq(cl), *f = free_seq(cl);
	kv_block_t ids[MAX_BLK];
	struct blk *last;
	int ret;

	if (!s || !f)
		return;
	seq_commit(cl, s);
	ids_of(s, ids);
	ret = kv_ref(cl->c, ids, s->nr);
	add(&cl->st->ops[OP_REF], 1);
	if (ret != (int)s->nr)
		die(cl, "kv_ref(%u): %d", s->nr, ret);
	*f = *s;
	if (f->nr == f->n_full)
		return;
	last = &f->b[f->nr - 1];
	ret = kv_cow(cl->c, &last->id, 1);
	add(&cl->st->ops[OP_COW], 1);
	if (ret == -ENOSPC) {
		/* no room for the copy: drop the child's refs */
		add(&cl->st->enospc, 1);
		if (kv_release(cl->c, ids, f->nr) != (int)f->nr)
			die(cl, "kv_release of a child: failed");
		f->live = false;
		return;
	}
	if (ret != 1)
		die(cl, "kv_cow of a shared block: %d, expected 1", ret);
	if (check_blk(cl, last, "fork copy"))
		add(&cl->st->copies, 1);
	last->tag = new_tag(cl);
	write_blk(cl, last);
	check_blk(cl, &s->b[s->nr - 1], "fork parent after copy");
}

/* COW of a committed block: a private copy of its bytes; the original
 * stays as it was. */
static void op_cow(struct client *cl)
{
	struct seq *s = any_seq(cl);
	struct blk copy;
	int ret;

	if (!s || !s->n_committed)
		return;
	copy = s->b[rnd(&cl->rng) % s->n_committed];
	ret = kv_ref(cl->c, &copy.id, 1);
	add(&cl->st->ops[OP_REF], 1);
	if (ret != 1)
		die(cl, "kv_ref of a committed block: %d", ret);
	ret = kv_cow(cl->c, &copy.id, 1);
	add(&cl->st->ops[OP_COW], 1);
	if (ret != 1) {
		kv_release(cl->c, &copy.id, 1);
		if (ret == -ENOSPC) {
			add(&cl->st->enospc, 1);
			return;
		}
		die(cl, "kv_cow of a committed block: %d, expected 1", ret);
	}
	if (check_blk(cl, &copy, "cow copy"))
		add(&cl->st->copies, 1);
	copy.full = false;
	copy.tag = new_tag(cl);
	write_blk(cl, &copy);
	for (uint32_t i = 0; i < s->n_committed; i++)
		check_blk(cl, &s->b[i], "committed block after cow");
	ret = kv_release(cl->c, &copy.id, 1);
	add(&cl->st->ops[OP_RELEASE], 1);
	if (ret != 1)
		die(cl, "kv_release of a copy: %d", ret);
}

/* ---- kv_seq: open, prefill, commit, append, fork, close ---- */

/*
 * @s's blocks against the hashes of @p (the partial one against
 * @tail_tag): checked below @from_write, written from there on. @hits:
 * the checked ones are prefix hits.
 */
static void kvseq_blocks(struct client *cl, struct kv_seq *s,
			 const struct prompt *p, uint32_t from_write,
			 uint64_t tail_tag, const char *what, bool hits)
{
	uint32_t nr, full = (uint32_t)(kv_seq_len(s) / BT);
	const kv_block_t *bt = kv_seq_block_table(s, &nr);

	for (uint32_t i = 0; i < nr; i++) {
		struct blk b = {
			.id = bt[i], .full = i < full, .tag = tail_tag,
		};

		if (b.full)
			b.hash = p->h[i];
		if (i >= from_write)
			write_blk(cl, &b);
		else if (check_blk(cl, &b, what) && hits)
			add(&cl->st->hits, 1);
	}
}

static void op_kvseq(struct client *cl)
{
	struct kv_seq *s, *f;
	struct prompt p;
	uint32_t hit, n_open;
	uint64_t tag = new_tag(cl);
	int ret;

	make_prompt(cl, &p);
	/* open on a prefix, append the rest: blocks fill and commit */
	n_open = 1 + (uint32_t)(rnd(&cl->rng) % p.len);
	ret = kv_seq_open(cl->c, p.tok, n_open, NULL, &s);
	add(&cl->st->ops[OP_SEQ], 1);
	if (ret) {
		soft_err(cl, ret, "kv_seq_open");
		return;
	}
	if (p.n_full + 1 > MAX_BLK)
		die(cl, "prompt too long");
	/* kv_seq hashed n_open tokens: its full blocks' hashes are p.h[] */
	hit = (uint32_t)(kv_seq_hit_tokens(s) / BT);
	kvseq_blocks(cl, s, &p, hit, tag, "prefix hit (kv_seq)", true);
	if ((ret = kv_seq_commit(s)))
		die(cl, "kv_seq_commit: %d", ret);
	kvseq_blocks(cl, s, &p, UINT32_MAX, tag, "kv_seq after commit",
		     false);
	if (n_open < p.len) {
		uint32_t nr0, from;

		kv_seq_block_table(s, &nr0);
		/* a partial last block gets more tokens; a full one is
		 * committed: never written again */
		from = n_open % BT ? nr0 - 1 : nr0;
		ret = kv_seq_append(s, p.tok + n_open, p.len - n_open);
		if (ret == -ENOSPC) {
			add(&cl->st->enospc, 1);
			kv_seq_close(s);
			return;
		}
		if (ret)
			die(cl, "kv_seq_append: %d", ret);
		kvseq_blocks(cl, s, &p, from, tag, "kv_seq append", false);
	}
	ret = kv_seq_fork(s, &f);
	if (ret == -ENOSPC) {
		add(&cl->st->enospc, 1);
	} else if (ret) {
		die(cl, "kv_seq_fork: %d", ret);
	} else {
		/* the child: same full blocks, a copy of the partial one */
		kvseq_blocks(cl, f, &p, UINT32_MAX, tag, "kv_seq fork child",
			     false);
		if (p.len % BT)
			add(&cl->st->copies, 1);
		kv_seq_close(f);
	}
	kvseq_blocks(cl, s, &p, UINT32_MAX, tag, "kv_seq before close",
		     false);
	if ((ret = kv_seq_close(s)))
		die(cl, "kv_seq_close: %d", ret);
}

static void __attribute__((noreturn)) client_stop(struct client *cl)
{
	for (int i = 0; i < MAX_SEQ; i++)
		if (cl->seq[i].live)
			seq_release(cl, &cl->seq[i]);
	kv_disconnect(cl->c);
	_exit(0);
}

/* Never returns; never exit(): the harness' atexit would stop kvd. */
void __attribute__((noreturn))
soak_client(struct t_kvd *kvd, struct shared *shared, int slot, uint64_t seed)
{
	struct kv_geometry g = {
		.layers = 2, .kv_heads = 1, .head_dim = 64,
		.block_tokens = BT, .dtype = KV_DTYPE_FP16,
	};	/* 8 KiB blocks */
	struct client cl = { .slot = slot, .st = &shared->s[slot] };
	struct kv_pool_info info;
	int ret;

	sh = shared;
	cl.rng = mix64(seed ^ (uint64_t)getpid()) | 1;
	ret = t_connect(kvd, "soak-model", &g, &cl.c);
	if (ret)
		die(&cl, "kv_connect: %s", strerror(-ret));
	kv_pool_info(cl.c, &info);
	cl.block_bytes = info.block_bytes;
	while (!__atomic_load_n(&sh->stop, __ATOMIC_RELAXED)) {
		struct seq *s;

		switch (rnd(&cl.rng) % 16) {
		case 0 ... 3:
			op_alloc_prefix(&cl);
			break;
		case 4 ... 5:
			op_lookup(&cl);
			break;
		case 6:
			op_alloc(&cl);
			break;
		case 7 ... 8:
			s = any_seq(&cl);
			if (s)
				seq_commit(&cl, s);
			break;
		case 9 ... 11:
			s = any_seq(&cl);
			if (s)
				seq_release(&cl, s);
			break;
		case 12:
			op_fork(&cl);
			break;
		case 13:
			op_cow(&cl);
			break;
		default:
			op_kvseq(&cl);
			break;
		}
	}
	client_stop(&cl);
}
