// SPDX-License-Identifier: MIT
/*
 * --disk-tier-size: the promotion pass. Once the replay has ended (its
 * figures taken), on the same private kvd, whose pool and host tier
 * hold what the replay's own evictions left there and whose disk tier
 * holds the older rest: --procs processes look up every prompt of the
 * stream again, process i the requests i, i + procs, ..., all at once
 * and none waiting for another (no turns: the reads overlap as far as
 * kvd lets them). Each prompt is one LOOKUP of its full-block hashes,
 * its hits released at once (nothing is allocated, nothing written);
 * a LOOKUP whose CQE counts disk hits (KV_CQE_DISK_HITS) was parked
 * while its blocks were read back, and its interval, submit to CQE,
 * counts towards the time the disk promotions took: the union of those
 * intervals over all processes. The bytes: the disk tier's promotions
 * over the pass (kvctl tiers' disk record) times the block size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "fleet.h"
#include "kvd.h"
#include "promote.h"

#define PASS_MAGIC	0x5350564bU	/* "KVPS" */
/* kvd/tier_disk.c's sizes, for the depth kvd's reads can have */
#define DISK_UNIT	4096U
#define DISK_HDR	64U		/* a run's header, before the bytes */
#define DISK_RING	256U		/* SQ entries of its io_uring */
#define DISK_STAGE_MIN	(64ULL * DISK_UNIT)
#define DISK_STAGE_MAX	(64ULL << 20)

/* What one pass process sends back, then nr_iv intervals. */
struct pass_res {
	uint32_t	magic;
	int32_t		status;
	uint64_t	requests, hits, host, disk, disk_lookups;
	uint64_t	t0, t1;
	uint64_t	nr_iv;
};

/* A LOOKUP that read from the disk tier: submit to CQE. */
struct pass_iv {
	uint64_t	t0, t1;
};

int kvb_tiers_read(const char *admin_path, struct kv_admin_tier *host,
		   bool *have_host, struct kv_admin_tier *disk,
		   bool *have_disk)
{
	struct kv_admin_status *st = malloc(KV_ADMIN_REPLY_MAX);
	const struct kv_admin_tier *t;
	ssize_t n;

	if (!st)
		return -ENOMEM;
	n = kv_admin_call(admin_path, KV_ADMIN_TIERS, 0, 0, st);
	if (n < 0) {
		fprintf(stderr, "kvbench: the tiers' counts, admin socket %s: %s\n",
			admin_path, strerror((int)-n));
		free(st);
		return (int)n;
	}
	t = (const struct kv_admin_tier *)(st + 1);
	if ((size_t)n >= sizeof(*st) && st->magic == KV_MAGIC &&
	    st->type == KV_MSG_ADMIN_REPLY && !st->status &&
	    st->nr_records <= KV_ADMIN_MAX_RECORDS &&
	    sizeof(*st) + st->nr_records * sizeof(*t) <= (size_t)n) {
		for (uint32_t i = 0; i < st->nr_records; i++) {
			if (host && !strncmp(t[i].name, "host",
					     sizeof(t[i].name))) {
				*host = t[i];
				*have_host = true;
			}
			if (disk && !strncmp(t[i].name, "disk",
					     sizeof(t[i].name))) {
				*disk = t[i];
				*have_disk = true;
			}
		}
	}
	free(st);
	return 0;
}

/* Request @i's full prompt blocks, hashed as replay.c hashes them. */
static int prompt_hashes(const struct kvb_opts *o, size_t i, uint64_t *sub,
			 uint32_t *tok, struct kv_hash *h)
{
	const struct kvb_trace *tr = o->tr;
	unsigned bt = o->geom.block_tokens;
	size_t n;

	if (tr->kind == KVB_TRACE_IDS) {
		n = kvb_trace_subblocks(tr, i, bt, sub);
		for (size_t j = 0; j < n; j++)
			kvb_subblock_hash(sub[j], o->salt, &h[j]);
		return (int)n;
	}
	kvb_trace_prompt(tr, i, o->salt, tok);
	return kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, tok,
			      tr->reqs[i].in_len, bt, NULL, h);
}

static int wait_one(struct kv_client *c, int *res, uint32_t *flags)
{
	struct kv_cqe *cqe;
	int ret = kv_submit(c);

	if (ret < 0)
		return ret;
	ret = kv_wait_cqe(c, &cqe);
	if (ret)
		return ret;
	*res = cqe->res;
	*flags = cqe->flags;
	kv_cqe_seen(c, cqe);
	return 0;
}

/* One LOOKUP of @np hashes, its hits released; the hits or -errno. */
static int pass_lookup(struct kv_client *c, const struct kv_hash *h,
		       unsigned np, uint32_t *flags, uint64_t *t1)
{
	uint32_t ids_off = np * (uint32_t)sizeof(*h), f;
	void *d = kv_data_ptr(c, 0, ids_off + np * sizeof(kv_block_t));
	struct kv_sqe *sqe = kv_get_sqe(c);
	int hits, res, ret;

	if (!d || !sqe)
		return d ? -EBUSY : -E2BIG;
	memcpy(d, h, ids_off);
	kv_prep_lookup(sqe, 0, np, ids_off);
	ret = wait_one(c, &hits, flags);
	*t1 = now_ns();
	if (ret || hits <= 0)
		return ret ? ret : hits;
	sqe = kv_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	kv_prep_release(sqe, ids_off, (unsigned)hits);
	ret = wait_one(c, &res, &f);
	return ret ? ret : res < 0 ? res : hits;
}

/* The requests of process @idx; its result and intervals to @out. */
static int pass_child(const struct kvb_opts *o, unsigned idx, int ready,
		      int go, int out)
{
	const struct kvb_trace *tr = o->tr;
	size_t blocks = tr->max_total / o->geom.block_tokens + 2;
	struct pass_res r = { .magic = PASS_MAGIC };
	uint64_t *sub = malloc(blocks * sizeof(*sub));
	struct kv_hash *h = malloc(blocks * sizeof(*h));
	uint32_t *tok = malloc(((size_t)tr->max_total + 1) * sizeof(*tok));
	struct pass_iv *iv = calloc(tr->nr / o->procs + 1, sizeof(*iv));
	struct kv_client *c = NULL;
	char who[32], b = 0;
	uint32_t flags = 0;
	uint64_t t0, t1 = 0;
	int n, ret;

	snprintf(who, sizeof(who), "promotion pass, proc %u", idx);
	if (!sub || !h || !tok || !iv) {
		fprintf(stderr, "kvbench: %s: out of memory\n", who);
		return 1;
	}
	if (kvb_connect(o, 0, &c, who))
		return 1;
	/* ready, then ours closed: the parent sees the end of them all
	 * (those that died first included), never waits for one gone */
	if (write(ready, &b, 1) != 1)
		return 1;
	close(ready);
	if (read(go, &b, 1) < 0)
		return 1;
	r.t0 = now_ns();
	for (size_t i = idx; i < tr->nr; i += o->procs) {
		n = prompt_hashes(o, i, sub, tok, h);
		if (n <= 0)
			continue;
		t0 = now_ns();
		ret = pass_lookup(c, h, (unsigned)n, &flags, &t1);
		if (ret < 0) {
			fprintf(stderr, "kvbench: %s: LOOKUP (request %zu): %s\n",
				who, i, strerror(-ret));
			r.status = ret;
			break;
		}
		r.requests++;
		r.hits += (unsigned)ret;
		r.host += KV_CQE_HOST_HITS(flags);
		r.disk += KV_CQE_DISK_HITS(flags);
		if (KV_CQE_DISK_HITS(flags)) {
			iv[r.nr_iv++] = (struct pass_iv){ t0, t1 };
			r.disk_lookups++;
		}
	}
	r.t1 = now_ns();
	kv_disconnect(c);
	if (write(out, &r, sizeof(r)) != sizeof(r) ||
	    write(out, iv, r.nr_iv * sizeof(*iv)) !=
	    (ssize_t)(r.nr_iv * sizeof(*iv)))
		return 1;
	return r.status ? 1 : 0;
}

static int by_start(const void *a, const void *b)
{
	const struct pass_iv *x = a, *y = b;

	return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* The time covered by at least one of @n intervals. */
static uint64_t union_ns(struct pass_iv *iv, size_t n)
{
	uint64_t sum = 0, lo = 0, hi = 0;

	qsort(iv, n, sizeof(*iv), by_start);
	for (size_t i = 0; i < n; i++) {
		if (i && iv[i].t0 <= hi) {
			if (iv[i].t1 > hi)
				hi = iv[i].t1;
			continue;
		}
		sum += hi - lo;
		lo = iv[i].t0;
		hi = iv[i].t1;
	}
	return sum + hi - lo;
}

/* What kvd reads per block, and how many such reads it holds at once. */
static void disk_shape(struct kvb_promo *p, uint64_t block_bytes,
		       uint64_t cap)
{
	uint64_t units = (DISK_HDR + block_bytes + DISK_UNIT - 1) / DISK_UNIT;
	uint64_t stage = cap / 8;

	if (stage > DISK_STAGE_MAX)
		stage = DISK_STAGE_MAX;
	if (stage < DISK_STAGE_MIN)
		stage = DISK_STAGE_MIN;
	p->block_bytes = block_bytes;
	p->read_bytes = units * DISK_UNIT;
	p->depth = (unsigned)(stage / DISK_UNIT / units);
	if (p->depth > DISK_RING)
		p->depth = DISK_RING;
	if (!p->depth)
		p->depth = 1;
}

/* Fork the pass's processes; *@nr of them started, their pipes. */
static int pass_fork(const struct kvb_opts *o, pid_t *pid, int *out,
		     int ready[2], int go[2], unsigned *nr)
{
	pid_t parent = getpid();
	int fd[2];

	for (*nr = 0; *nr < o->procs; (*nr)++) {
		if (pipe(fd))
			return -1;
		fflush(NULL);
		pid[*nr] = fork();
		if (pid[*nr] < 0) {
			close(fd[0]);
			close(fd[1]);
			return -1;
		}
		if (!pid[*nr]) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(1);
			close(fd[0]);
			close(ready[0]);
			close(go[1]);
			_exit(pass_child(o, *nr, ready[1], go[0], fd[1]));
		}
		close(fd[1]);
		out[*nr] = fd[0];
	}
	return 0;
}

/* Each process's result and intervals; the pass's figures into @p. */
static int pass_collect(const struct kvb_opts *o, struct kvb_promo *p,
			const int *out, unsigned nr)
{
	struct pass_iv *all = calloc(o->tr->nr + 1, sizeof(*all));
	uint64_t t0 = UINT64_MAX, t1 = 0, niv = 0;
	struct pass_res r;
	int ret = 0;

	if (!all)
		return -1;
	for (unsigned i = 0; i < nr; i++) {
		if (kvb_read_full(out[i], &r, sizeof(r)) || r.magic != PASS_MAGIC ||
		    r.nr_iv > o->tr->nr - niv ||
		    kvb_read_full(out[i], all + niv, r.nr_iv * sizeof(*all))) {
			ret = -1;
			continue;
		}
		niv += r.nr_iv;
		p->requests += r.requests;
		p->hit_blocks += r.hits;
		p->host_blocks += r.host;
		p->disk_blocks += r.disk;
		p->disk_lookups += r.disk_lookups;
		t0 = r.t0 < t0 ? r.t0 : t0;
		t1 = r.t1 > t1 ? r.t1 : t1;
		if (r.status)
			ret = -1;
	}
	p->wall_ns = t1 > t0 ? t1 - t0 : 0;
	p->busy_ns = union_ns(all, niv);
	free(all);
	return ret;
}

int kvb_promotion_pass(const struct kvb_opts *o, struct agg *a)
{
	struct kvb_promo *p = &a->promo;
	struct kv_admin_tier d0 = { 0 };
	pid_t pid[KVB_MAX_PROCS];
	int out[KVB_MAX_PROCS], ready[2] = { -1, -1 }, go[2] = { -1, -1 };
	unsigned nr = 0, up = 0;
	bool have0 = false;
	int ret = -1, st;
	char b;

	disk_shape(p, a->info[0].block_bytes, a->disk_tier.cap_bytes);
	if (kvb_tiers_read(o->admin_path, NULL, NULL, &d0, &have0) || !have0) {
		fprintf(stderr, "kvbench: promotion pass: kvd reports no disk tier\n");
		return -1;
	}
	if (pipe(ready) || pipe(go)) {
		perror("kvbench: pipe");
		goto out;
	}
	if (pass_fork(o, pid, out, ready, go, &nr))
		perror("kvbench: promotion pass: fork");
	close(ready[1]);
	close(go[0]);
	ready[1] = go[0] = -1;
	while (up < nr && read(ready[0], &b, 1) == 1)
		up++;
	close(go[1]);		/* all go at once: read() sees the end */
	go[1] = -1;
	if (up == nr && nr == o->procs)
		ret = pass_collect(o, p, out, nr);
	for (unsigned i = 0; i < nr; i++) {
		close(out[i]);
		if (waitpid(pid[i], &st, 0) == pid[i] &&
		    !(WIFEXITED(st) && !WEXITSTATUS(st)))
			ret = -1;
	}
	if (kvb_tiers_read(o->admin_path, NULL, NULL, &p->disk,
			   &p->have_disk) || !p->have_disk)
		ret = -1;
	else
		p->promotions = p->disk.promotions - d0.promotions;
	p->ran = !ret;
	if (ret)
		fprintf(stderr, "kvbench: the promotion pass did not finish: no promotion bandwidth\n");
out:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (go[i] >= 0)
			close(go[i]);
	}
	return ret;
}
