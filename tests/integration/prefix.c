// SPDX-License-Identifier: MIT
/*
 * The prefix cache end to end, with real kvd and real processes: sharing
 * across processes, partial blocks never shared, commit results, leaf-
 * first LRU eviction, held blocks never evicted, no -ENOSPC while cached
 * blocks could go, COMMIT with KV_COMMIT_AND_RELEASE, isolation across
 * models, geometries and tenants, and kv_seq append/fork/close.
 */
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define BT	16

static struct t_kvd k;

static void tokens(uint32_t *t, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = seed * 1000003u + (uint32_t)i * 7919u;
}

static struct kv_stats stats(struct kv_client *c)
{
	struct kv_stats st;

	T_EQ(kv_stats(c, &st), 0);
	return st;
}

/* Child: open the prompt, write a pattern, commit, close: all cached. */
static int writer(const uint32_t *prompt, size_t n)
{
	struct kv_client *c;
	struct kv_seq *s;
	const kv_block_t *bt;
	uint32_t nr;

	if (t_connect(&k, "shared", NULL, &c) || kv_seq_open(c, prompt, n, NULL, &s))
		return 1;
	bt = kv_seq_block_table(s, &nr);
	for (uint32_t i = 0; i < nr; i++)
		memset(kv_block_ptr(c, bt[i]), 0x40 + (int)i, 32 << 10);
	if (kv_seq_commit(s) || kv_seq_close(s))
		return 2;
	kv_disconnect(c);
	return 0;
}

static void run_child(int (*fn)(const uint32_t *, size_t), const uint32_t *p,
		      size_t n)
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(p, n));
	T_EQ(waitpid(pid, &status, 0), pid);
	T_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Another process wrote 70 tokens; we hit 4 full blocks, bytes and all. */
static void shared_across_processes(struct kv_client *c)
{
	uint32_t p[70], q[64];
	struct kv_seq *s;
	const kv_block_t *bt;
	uint32_t nr;

	tokens(p, 70, 1);
	run_child(writer, p, 70);
	T_EQ(kv_seq_open(c, p, 70, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 64);
	bt = kv_seq_block_table(s, &nr);
	T_EQ(nr, 5);
	for (uint32_t i = 0; i < 4; i++)
		T_EQ(*(uint8_t *)kv_block_ptr(c, bt[i]), 0x40 + i);
	T_EQ(kv_seq_close(s), 0);

	/* An exact 64-token prompt: the last token must be recomputed. */
	memcpy(q, p, sizeof(q));
	T_EQ(kv_seq_open(c, q, 64, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 48);
	T_EQ(kv_seq_commit(s), 0);	/* block 3 dedups to the cached one */
	bt = kv_seq_block_table(s, &nr);
	T_EQ(*(uint8_t *)kv_block_ptr(c, bt[3]), 0x43);
	T_EQ(kv_seq_close(s), 0);

	/* The partial block (6 tokens) of the writer was never shared. */
	p[69] ^= 1;
	T_EQ(kv_seq_open(c, p, 70, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 64);
	T_EQ(kv_seq_close(s), 0);
}

static void commit_results(struct kv_client *c, struct kv_client *other)
{
	struct kv_hash h[3] = { { { 1 } }, { { 2 } }, { { 3 } } };
	struct kv_commit e = { 0 };
	kv_block_t a[2], b, o, ids[3];
	struct kv_stats st;

	T_EQ(kv_alloc(c, 2, a), 2);
	T_EQ(kv_alloc(other, 1, &o), 1);
	e.id = o;				/* not ours */
	e.hash = h[0];
	T_EQ(kv_commit(c, &e, 1), -EPERM);
	e.id = a[0];
	T_EQ(kv_commit(c, &e, 1), 1);
	T_EQ(e.id, a[0]);
	T_EQ(e.flags, 0);
	e.hash = h[1];
	T_EQ(kv_commit(c, &e, 1), -EEXIST);	/* already committed */
	/* The same hash again from another block: deduplicated. */
	st = stats(c);
	e.id = a[1];
	e.hash = h[0];
	T_EQ(kv_commit(c, &e, 1), 1);
	T_EQ(e.id, a[0]);
	T_EQ(e.flags, KV_COMMIT_DEDUP);
	T_EQ(stats(c).client_blocks, st.client_blocks - 1);
	T_EQ(stats(c).client_refs, st.client_refs);	/* a[0] held twice */
	/* From another client: it gets a ref on ours, loses its block. */
	e.id = o;
	e.flags = 0;
	T_EQ(kv_commit(other, &e, 1), 1);
	T_EQ(e.id, a[0]);
	b = a[0];
	T_EQ(kv_release(c, &b, 1), 1);
	T_EQ(kv_release(c, &b, 1), 1);
	T_EQ(kv_release(c, &b, 1), -EPERM);	/* never below zero */
	T_EQ(kv_lookup(c, h, 1, ids), 1);	/* still held by other */
	T_EQ(ids[0], a[0]);
	/* Hits stop at the first miss. */
	T_EQ(kv_lookup(c, (struct kv_hash[]){ h[0], h[2], h[0] }, 3, ids), 1);
	T_EQ(kv_release(c, ids, 1), 1);
	T_EQ(kv_release(c, ids, 1), 1);
	T_EQ(kv_release(other, &e.id, 1), 1);
	/* Batch checks come before any change. */
	T_EQ(kv_alloc(c, 1, &b), 1);
	struct kv_commit two[2] = { { .id = b, .hash = h[1] },
				    { .id = b, .hash = h[2] } };
	T_EQ(kv_commit(c, two, 2), -EINVAL);	/* the same block twice */
	T_EQ(kv_lookup(c, &h[1], 1, ids), 0);
	T_EQ(kv_release(c, &b, 1), 1);
}

/* Isolation: other model id, other geometry, other tenant. */
static int probe_uid(const uint32_t *p, size_t n)
{
	struct kv_client *c;
	struct kv_seq *s;
	int hit;

	if (setgid(65534) || setuid(65534))
		return 3;
	if (t_connect(&k, "shared", NULL, &c) || kv_seq_open(c, p, n, NULL, &s))
		return 1;
	hit = (int)kv_seq_hit_tokens(s);
	kv_seq_close(s);
	kv_disconnect(c);
	return hit ? 2 : 0;
}

static void isolation(void)
{
	struct kv_geometry g = t_geom();
	struct kv_client *c;
	struct kv_seq *s;
	uint32_t p[70];

	tokens(p, 70, 1);			/* cached by the writer */
	T_EQ(t_connect(&k, "other-model", NULL, &c), 0);
	T_EQ(kv_seq_open(c, p, 70, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 0);
	kv_seq_close(s);
	kv_disconnect(c);
	g.dtype = KV_DTYPE_BF16;		/* same bytes, other dtype */
	T_EQ(t_connect(&k, "shared", &g, &c), 0);
	T_EQ(kv_seq_open(c, p, 70, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 0);
	kv_seq_close(s);
	kv_disconnect(c);
	if (geteuid() == 0) {			/* another uid: another tenant */
		chmod(k.dir, 0755);
		run_child(probe_uid, p, 70);
	} else {
		fprintf(stderr, "not root: cross-tenant case skipped\n");
	}
}

static void seq_append_fork(struct kv_client *c, struct kv_client *other)
{
	uint32_t p[20], gen[40];
	struct kv_seq *s, *f, *o;
	const kv_block_t *bs, *bf;
	uint32_t ns, nf;

	tokens(p, 20, 9);
	tokens(gen, 40, 10);
	T_EQ(kv_seq_open(c, p, 20, NULL, &s), 0);
	T_EQ(kv_seq_hit_tokens(s), 0);
	memset(kv_block_ptr(c, kv_seq_block_table(s, NULL)[1]), 0x77, 32 << 10);
	T_EQ(kv_seq_fork(s, &f), 0);
	bs = kv_seq_block_table(s, &ns);
	bf = kv_seq_block_table(f, &nf);
	T_EQ(ns, 2);
	T_EQ(nf, 2);
	T_EQ(bs[0], bf[0]);			/* full block shared */
	T_ASSERT(bs[1] != bf[1]);		/* partial block copied */
	T_EQ(*(uint8_t *)kv_block_ptr(c, bf[1]), 0x77);
	T_EQ(kv_seq_append(s, gen, 40), 0);	/* 60 tokens: 4 blocks */
	T_EQ(kv_seq_len(s), 60);
	kv_seq_block_table(s, &ns);
	T_EQ(ns, 4);
	T_EQ(kv_seq_append(s, gen, 1), 0);	/* commits blocks 1 and 2 */
	/* Another engine sends prompt + generated text: it hits 3 blocks. */
	uint32_t whole[61];
	memcpy(whole, p, sizeof(p));
	memcpy(whole + 20, gen, sizeof(gen));
	whole[60] = gen[0];
	T_EQ(kv_seq_open(other, whole, 61, NULL, &o), 0);
	T_EQ(kv_seq_hit_tokens(o), 48);
	T_EQ(kv_seq_close(o), 0);
	T_EQ(kv_seq_close(f), 0);
	T_EQ(kv_seq_close(s), 0);
}

/*
 * Eviction on a pool of 4 blocks of 1 MiB: LRU among ref-0 committed
 * blocks, leaf first; held blocks never go; no -ENOSPC while a cached
 * block could go.
 */
static void eviction(void)
{
	struct kv_geometry g = { .layers = 32, .kv_heads = 4, .head_dim = 128,
				 .block_tokens = BT, .dtype = KV_DTYPE_FP16 };
	struct kv_hash a[3] = { { { 0xa0 } }, { { 0xa1 } }, { { 0xa2 } } };
	struct kv_hash b0 = { { 0xb0 } };
	struct kv_commit e[3];
	struct t_kvd small;
	struct kv_client *c;
	kv_block_t ids[4], x[4];
	char *js;

	t_kvd_start(&small, "4M", NULL);
	T_EQ(t_connect(&small, "m", &g, &c), 0);
	T_EQ(kv_alloc(c, 4, ids), 4);
	for (int i = 0; i < 3; i++) {
		e[i] = (struct kv_commit){ .id = ids[i], .hash = a[i] };
		if (i)
			e[i].parent = a[i - 1];
	}
	T_EQ(kv_commit(c, e, 3), 3);
	e[0] = (struct kv_commit){ .id = ids[3], .hash = b0 };
	T_EQ(kv_commit(c, e, 1), 1);
	/* The tree shows the blocks but no key bytes (they mix the
	 * tenant's key into the hashes). */
	js = t_kvctl(&small, "prefix --tree --depth 3");
	T_ASSERT(t_json_int(js, "subtree") > 0);	/* nodes shown */
	if (strstr(js, "\"key\""))
		T_FAIL("kvctl prefix --tree shows key bytes: %s", js);
	free(js);
	T_EQ(kv_release(c, ids, 3), 3);		/* chain a: a2 is the leaf */
	T_EQ(kv_release(c, ids + 3, 1), 1);	/* then b0 */
	T_EQ(stats(c).cached_blocks, 4);
	/* Pool full of cached blocks: ALLOC evicts, never -ENOSPC. */
	T_EQ(kv_alloc(c, 1, x), 1);
	T_EQ(x[0], ids[2]);			/* a2: least recent leaf */
	T_EQ(stats(c).evictions, 1);
	T_EQ(kv_lookup(c, a, 3, x + 1), 2);	/* a0, a1 still reachable */
	T_EQ(kv_release(c, x + 1, 2), 2);	/* a1 leaf again, newest */
	T_EQ(kv_alloc(c, 1, x + 1), 1);
	T_EQ(x[1], ids[3]);			/* b0 went before a1 */
	T_EQ(kv_lookup(c, &b0, 1, x + 2), 0);	/* evicted: unreachable */
	/* Hold a0 and a1 (hit): nothing is evictable now. */
	T_EQ(kv_lookup(c, a, 2, x + 2), 2);
	T_EQ(kv_alloc(c, 1, ids), -ENOSPC);
	T_EQ(stats(c).evictions, 2);
	T_EQ(kv_release(c, x, 4), 4);
	T_EQ(kv_alloc(c, 4, ids), 4);		/* 2 free + 2 evicted */
	T_EQ(stats(c).evictions, 4);
	T_EQ(stats(c).cached_blocks, 0);
	T_EQ(kv_release(c, ids, 4), 4);
	kv_disconnect(c);
	t_kvd_stop(&small);
}

/*
 * Namespaces that keep only cached blocks give their slot to a new model
 * when none is free (kvd --max-namespaces 2 here).
 */
static void namespace_reclaim(void)
{
	struct t_kvd small;
	struct kv_client *c;
	struct kv_commit e = { 0 };
	char name[16];

	t_kvd_start(&small, "64M", "--max-namespaces", "2", NULL);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "model-%u", (unsigned)i & 7);
		T_EQ(t_connect(&small, name, NULL, &c), 0);
		T_EQ(kv_alloc(c, 1, &e.id), 1);
		e.hash.b[0] = (uint8_t)(i + 1);
		e.flags = 0;
		T_EQ(kv_commit(c, &e, 1), 1);
		T_EQ(kv_release(c, &e.id, 1), 1);
		T_EQ(stats(c).cached_blocks, 1);
		T_EQ(kv_disconnect(c), 0);
		usleep(20000);	/* let kvd see the close */
	}
	t_kvd_stop(&small);
}

/*
 * COMMIT with KV_COMMIT_AND_RELEASE, published without waiting: the
 * blocks (a dedup's cached one too) end cached at ref 0, and a LOOKUP
 * behind it on the ring hits them; a refused one drops no ref.
 */
static void commit_and_release(struct kv_client *c, struct kv_client *other)
{
	struct kv_commit *e = kv_data_ptr(c, 0, 2 * sizeof(*e));
	struct kv_hash h[2] = { { { 0x51 } }, { { 0x52 } } };
	kv_block_t ids[2], mine;
	struct kv_sqe *sqe;
	struct kv_cqe *cqe;

	T_EQ(kv_alloc(other, 1, &mine), 1);	/* h[0] cached by other first */
	struct kv_commit first = { .id = mine, .hash = h[0] };
	T_EQ(kv_commit(other, &first, 1), 1);
	T_EQ(kv_alloc(c, 2, ids), 2);
	memset(e, 0, 2 * sizeof(*e));
	e[0] = (struct kv_commit){ .id = ids[0], .hash = h[0] };
	e[1] = (struct kv_commit){ .id = ids[1], .hash = h[1], .parent = h[0] };
	sqe = kv_get_sqe(c);
	kv_prep_commit_release(sqe, 0, 2);
	T_EQ(kv_submit(c), 1);
	T_EQ(kv_wait_cqe(c, &cqe), 0);
	T_EQ(cqe->res, 2);
	kv_cqe_seen(c, cqe);
	T_EQ(e[0].id, mine);			/* deduplicated, ref dropped */
	T_EQ(e[0].flags, KV_COMMIT_DEDUP);
	T_EQ(stats(c).client_refs, 0);
	T_EQ(kv_lookup(c, h, 2, ids), 2);
	T_EQ(ids[0], mine);
	T_EQ(kv_release(c, ids, 2), 2);
	/* refused (not held): no ref dropped */
	T_EQ(kv_alloc(c, 1, ids), 1);
	e[0] = (struct kv_commit){ .id = mine, .hash = h[1] };
	sqe = kv_get_sqe(c);
	kv_prep_commit_release(sqe, 0, 1);
	T_EQ(kv_submit(c), 1);
	T_EQ(kv_wait_cqe(c, &cqe), 0);
	T_EQ(cqe->res, -EPERM);
	kv_cqe_seen(c, cqe);
	T_EQ(stats(c).client_refs, 1);
	T_EQ(kv_release(c, ids, 1), 1);
	T_EQ(kv_release(other, &mine, 1), 1);
}

int main(void)
{
	struct kv_client *c, *other;
	struct kv_stats st;
	char *js;

	t_kvd_start(&k, "64M", NULL);
	T_EQ(t_connect(&k, "shared", NULL, &c), 0);
	T_EQ(t_connect(&k, "shared", NULL, &other), 0);
	shared_across_processes(c);
	commit_results(c, other);
	commit_and_release(c, other);
	isolation();
	seq_append_fork(c, other);
	st = stats(c);
	T_ASSERT(st.lookups > 0 && st.hit_blocks > 0);
	T_EQ(st.client_blocks, 0);
	js = t_kvctl(&k, "prefix");
	T_ASSERT(t_json_int(js, "cached_blocks") > 0);
	free(js);
	js = t_kvctl(&k, "evict");
	T_ASSERT(t_json_int(js, "evicted_now") > 0);
	free(js);
	T_EQ(stats(c).cached_blocks, 0);
	T_EQ(kv_disconnect(other), 0);
	T_EQ(kv_disconnect(c), 0);
	t_kvd_stop(&k);
	eviction();
	namespace_reclaim();
	return 0;
}
