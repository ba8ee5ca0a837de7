// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the SQE decoder and dispatcher (kvd/opdef.c) behind
 * each client's request ring (kvd/ring.c). Two namespaces of different
 * block sizes share a 16-page pool (so one reclaims from the other); the
 * first has two clients, the second one.
 *
 * An input is one setup byte (quotas, failing copies) and then commands,
 * each a byte: client in bits 0-1, command in bits 2-4, CMD_QUEUE and
 * CMD_NOREAP above. SQEs go through the ring as a client would put them
 * there; the builders write id, hash and commit arrays into the data
 * area so that LOOKUP and COMMIT see hits and chains, not only noise.
 *
 * After every command: kvd_ns_check() on both namespaces, every holder's
 * counts against the hold table, quotas and page counts; each SQE's CQE
 * must come back once (out of order behind a parked KV_SQE_WAIT one),
 * with a result its opcode allows (-ECANCELED in a chain), ids written back
 * must be held by the client, and a COW must leave every id private.
 * At the end all clients leave and no block or page may stay used. Every
 * input starts from fresh books; kvd's clock is the input's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "fuzz.h"
#include "ns_internal.h"
#include "ring.h"

#define POOL_PAGES	16
#define NR_NS		2
#define NR_CLIENTS	3
#define SQ_ENTRIES	8
#define CQ_ENTRIES	(2 * SQ_ENTRIES)
#define DATA_BYTES	8192
#define MAX_CMDS	128
#define PEND		32	/* > SQ + CQ entries (parked SQEs keep CQ slots) */
#define ORACLE_IDS	256	/* longest id array checked element-wise */

enum {
	CMD_SQE,	/* compact SQE: opcode, nr, off, args */
	CMD_RAW,	/* 64 raw SQE bytes (user_data replaced) */
	CMD_DATA,	/* bytes into the data area */
	CMD_COMMITS,	/* kv_commit entries: ids from the area, hash numbers */
	CMD_HASHES,	/* a hash array from hash numbers */
	CMD_PROCESS,	/* time passes, the ring is served; index abuse */
	CMD_EXIT,	/* the client goes, a new one takes its slot */
	CMD_MOVE,	/* memmove inside the data area */
};
#define CMD_QUEUE	0x20	/* submit without serving */
#define CMD_NOREAP	0x40	/* leave the CQEs in the ring */

/*
 * ns 0: 32 KiB blocks, 1024 of them, slabs of one page; ns 1: 65 KiB
 * int8 blocks with scales, 504 of them, slabs of plain pages with
 * partial blocks at both ends.
 */
static const struct kv_geometry geoms[NR_NS] = {
	{ .layers = 4, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	  .dtype = KV_DTYPE_FP16 },
	{ .layers = 4, .kv_heads = 2, .head_dim = 256, .block_tokens = 16,
	  .dtype = KV_DTYPE_INT8, .quant = KV_QUANT_TOKEN },
};
static const char *const models[NR_NS] = { "fuzz/model-a", "fuzz/model-b" };
static const unsigned client_ns[NR_CLIENTS] = { 0, 0, 1 };

/* The client side of each ring, and what it has submitted. */
struct fclient {
	uint32_t	sq_tail;
	uint32_t	cq_head;
	uint32_t	seq_posted;	/* every SQE before it has its CQE */
	bool		lied;		/* wrote a bogus cq_head: no checks */
	struct kv_sqe	pend[PEND];	/* by sequence number */
	bool		reaped[PEND];	/* its CQE came (out of order) */
};

static struct kvd d;
static struct kvd_ns ns[NR_NS];
static struct kvd_acct tacct[NR_NS];
static struct kvd_client cl[NR_CLIENTS];
static uint32_t live[NR_CLIENTS];
static struct fclient fc[NR_CLIENTS];
static bool copy_fails;
static bool trace;		/* KVD_FUZZ_TRACE: print each CQE */

/* COW's copies: must stay inside the pool, block to block. */
static int fuzz_copy(struct kvd *dd, const struct kvd_copy *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!v[i].bytes || v[i].src == v[i].dst ||
		    v[i].src > dd->pool.bytes ||
		    v[i].bytes > dd->pool.bytes - v[i].src ||
		    v[i].dst > dd->pool.bytes ||
		    v[i].bytes > dd->pool.bytes - v[i].dst)
			FUZZ_BUG("COW copy %llu -> %llu (%llu bytes) outside the pool",
				 (unsigned long long)v[i].src,
				 (unsigned long long)v[i].dst,
				 (unsigned long long)v[i].bytes);
		if (v[i].src % v[i].bytes || v[i].dst % v[i].bytes)
			FUZZ_BUG("COW copy not block aligned");
	}
	return copy_fails ? -EIO : 0;
}

static const struct kvd_backend fuzz_backend = {
	.name		= "fuzz",
	.backend	= KV_BACKEND_HOST,
	.export_kind	= KV_EXPORT_MEMFD,
	.copy		= fuzz_copy,
};

static uint64_t tag(unsigned i, uint32_t seq)
{
	return (uint64_t)0xf022 << 48 | (uint64_t)i << 32 | seq;
}

/* A new client in slot @i: fresh ring, nothing held. */
static void client_up(unsigned i)
{
	struct kvd_client *c = &cl[i];

	if (kvd_ring_setup(c, SQ_ENTRIES, DATA_BYTES))
		FUZZ_BUG("ring setup: out of memfds?");
	c->slot = i;
	c->id = i + 1;
	c->state = KVD_CLIENT_LIVE;
	c->ns = &ns[client_ns[i]];
	c->tenant = (int)client_ns[i];
	c->ops = 0;
	kvd_holder_init(&c->holder, i);
	memset(&fc[i], 0, sizeof(fc[i]));
}

static void client_down(unsigned i)
{
	kvd_ns_release_all(cl[i].ns, &cl[i].holder);
	kvd_ring_teardown(&cl[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fuzz_clock_on = true;
	trace = getenv("KVD_FUZZ_TRACE") != NULL;
	d.be = &fuzz_backend;
	d.ns = ns;
	d.cfg.max_namespaces = NR_NS;
	d.cfg.sq_budget = 64;
	d.clients = cl;
	d.live = live;
	d.nr_slots = NR_CLIENTS;
	d.scratch = malloc(KV_MAX_DATA_BYTES);
	if (!d.scratch)
		abort();
	for (unsigned i = 0; i < NR_CLIENTS; i++) {
		cl[i].ring_fd = -1;
		/* written only when the client asks (KV_CQ_NEED_WAKEUP) */
		cl[i].cq_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		cl[i].sq_evfd = -1;
		cl[i].sock = -1;
	}
	return 0;
}

static void setup(uint8_t cfg)
{
	fuzz_clock_ns = 1000000000ULL;
	copy_fails = cfg & 0x80;
	if (kvd_pool_init(&d.pool, POOL_PAGES))
		abort();
	d.pool.ns = ns;
	d.pool.nr_ns = NR_NS;
	for (unsigned i = 0; i < NR_NS; i++) {
		struct kvd_tenant_key key = { { (uint8_t)i } };

		if (kvd_ns_init(&ns[i], &d.pool, i, models[i], "", &geoms[i], i,
				&key))
			FUZZ_BUG("kvd_ns_init %u failed", i);
		memset(&tacct[i], 0, sizeof(tacct[i]));
		ns[i].tacct = &tacct[i];
		ns[i].nr_clients = i ? 1 : 2;
	}
	/* Quotas in pages: 0 is none; minimums protect from reclaim. */
	ns[0].acct.max_pages = (cfg & 3) * 3;
	ns[1].acct.min_pages = (cfg >> 2 & 3) * 2;
	tacct[0].max_pages = cfg & 0x10 ? 5 : 0;
	tacct[1].min_pages = cfg & 0x20 ? 4 : 0;
	ns[1].acct.max_pages = cfg & 0x40 ? 8 : 0;
	d.nr_ns = NR_NS;
	d.nr_clients = NR_CLIENTS;
	for (unsigned i = 0; i < NR_CLIENTS; i++) {
		live[i] = i;
		cl[i].live_idx = i;
		client_up(i);
	}
}

/* Every holder's counts against the hold table (a walk of all holds). */
__attribute__((no_sanitize("coverage")))
static void check_holders(unsigned n, const char *when)
{
	const struct kvd_ns *s = &ns[n];
	uint32_t refs[NR_CLIENTS] = { 0 }, blocks[NR_CLIENTS] = { 0 };
	uint32_t holds = 0;

	/* each live hold node: one block, count refs, of one client */
	for (uint32_t k = 0; k < s->holds.used; k++) {
		const struct kvd_hold *hd = &s->holds.nodes[k];

		if (!kvd_hold_live(s, k))
			continue;
		if (hd->client >= NR_CLIENTS || client_ns[hd->client] != n ||
		    !hd->count)
			FUZZ_BUG("namespace %u %s: hold of client %u, count %u",
				 n, when, hd->client, hd->count);
		refs[hd->client] += hd->count;
		blocks[hd->client]++;
		holds++;
	}
	for (unsigned i = 0; i < NR_CLIENTS; i++) {
		const struct kvd_holder *h = &cl[i].holder;
		uint32_t owned = 0;

		if (client_ns[i] != n)
			continue;
		/* blocks it owns: their refs are counted in the block */
		for (uint32_t id = h->own_head; id != KVD_NIL;
		     id = s->blocks[id].own_next) {
			if (s->blocks[id].owner != h->slot + 1 ||
			    ++owned > s->max_blocks)
				FUZZ_BUG("client %u %s: owner list broken at block %u",
					 i, when, id);
			refs[i] += s->blocks[id].own_refs;
			blocks[i]++;
		}
		holds += owned;
		if (refs[i] != h->nr_refs || blocks[i] != h->nr_blocks)
			FUZZ_BUG("client %u %s: holder says %u refs on %u blocks, hold table %u on %u",
				 i, when, h->nr_refs, h->nr_blocks, refs[i],
				 blocks[i]);
	}
	if (holds != s->holds.nr + s->holds.owned)
		FUZZ_BUG("namespace %u %s: %u holds in use, holders have %u",
			 n, when, s->holds.nr + s->holds.owned, holds);
}

/*
 * kvd_ns_check() on both namespaces, pages against slabs and quotas;
 * with @holders, the holders' counts too (slow: at the end of an input).
 */
__attribute__((no_sanitize("coverage")))
static void check_books(const char *when, bool holders)
{
	uint32_t pages = 0;

	for (unsigned n = 0; n < NR_NS; n++) {
		const struct kvd_ns *s = &ns[n];
		const char *why = "?";

		if (kvd_ns_check(&ns[n], &why))
			FUZZ_BUG("namespace %u %s: %s", n, when, why);
		if (holders)
			check_holders(n, when);
		if (s->acct.pages != s->nr_slabs * s->slab_pages)
			FUZZ_BUG("namespace %u %s: %u pages charged for %u slabs of %u",
				 n, when, s->acct.pages, s->nr_slabs,
				 s->slab_pages);
		if (s->acct.max_pages && s->acct.pages > s->acct.max_pages)
			FUZZ_BUG("namespace %u %s: %u pages, quota %u", n, when,
				 s->acct.pages, s->acct.max_pages);
		if (tacct[n].pages != s->acct.pages)
			FUZZ_BUG("tenant %u %s: %u pages, its namespace %u",
				 n, when, tacct[n].pages, s->acct.pages);
		if (tacct[n].max_pages && tacct[n].pages > tacct[n].max_pages)
			FUZZ_BUG("tenant %u %s: %u pages, quota %u", n, when,
				 tacct[n].pages, tacct[n].max_pages);
		pages += s->acct.pages;
	}
	if (pages != d.pool.pages_used)
		FUZZ_BUG("%s: pool has %u pages used, namespaces %u", when,
			 d.pool.pages_used, pages);
}

static void teardown(void)
{
	check_books("at the end", true);
	for (unsigned i = 0; i < NR_CLIENTS; i++)
		client_down(i);
	check_books("after every client left", true);
	for (unsigned n = 0; n < NR_NS; n++) {
		if (ns[n].blocks_used)
			FUZZ_BUG("namespace %u: %u blocks used with no client",
				 n, ns[n].blocks_used);
		kvd_ns_exit(&ns[n]);
	}
	if (d.pool.pages_used)
		FUZZ_BUG("%u pages used after every namespace went",
			 d.pool.pages_used);
	kvd_pool_exit(&d.pool);
}

static uint32_t data_u32(const struct kvd_client *c, uint64_t off)
{
	uint32_t v;

	memcpy(&v, c->data + off, sizeof(v));
	return v;
}

/* Each of @nr ids at data[@off] is held by client @i, as often as listed. */
__attribute__((no_sanitize("coverage")))
static void check_held(unsigned i, uint64_t off, uint32_t nr, const char *op)
{
	const struct kvd_client *c = &cl[i];

	if (nr > ORACLE_IDS || off + (uint64_t)nr * 4 > DATA_BYTES)
		return;
	for (uint32_t k = 0; k < nr; k++) {
		uint32_t id = data_u32(c, off + 4 * k), times = 0;

		if (id >= c->ns->max_blocks)
			FUZZ_BUG("%s returned id %u of %u", op, id,
				 c->ns->max_blocks);
		for (uint32_t j = 0; j < nr; j++)
			times += data_u32(c, off + 4 * j) == id;
		if (kvd_ns_hold_count(c->ns, i, id) < times)
			FUZZ_BUG("%s returned id %u %u times; client %u holds it %u times",
				 op, id, times, i,
				 kvd_ns_hold_count(c->ns, i, id));
	}
}

/* What the data area holds right after @sqe completed with @res. */
__attribute__((no_sanitize("coverage")))
static void check_output(unsigned i, const struct kv_sqe *sqe, int res)
{
	const struct kvd_client *c = &cl[i];

	if (res < 0)
		return;
	switch (sqe->opcode) {
	case KV_OP_ALLOC:
		check_held(i, sqe->off, (uint32_t)res, "ALLOC");
		if (res > ORACLE_IDS)
			break;
		for (uint32_t k = 0; k < (uint32_t)res; k++)
			for (uint32_t j = 0; j < k; j++)
				if (data_u32(c, sqe->off + 4 * k) ==
				    data_u32(c, sqe->off + 4 * j))
					FUZZ_BUG("ALLOC returned one id twice");
		break;
	case KV_OP_LOOKUP:
		check_held(i, sqe->args[0], (uint32_t)res, "LOOKUP");
		break;
	case KV_OP_ALLOC_PREFIX:
		check_held(i, sqe->off, sqe->nr, "ALLOC_PREFIX");
		break;
	case KV_OP_COW:
		check_held(i, sqe->off, sqe->nr, "COW");
		/* Every id it hands back may be written in place. */
		for (uint32_t k = 0; k < sqe->nr && k < ORACLE_IDS; k++) {
			uint32_t id = data_u32(c, sqe->off + 4 * k);
			const struct kvd_block *b;

			if (id >= c->ns->max_blocks)
				FUZZ_BUG("COW returned id %u", id);
			b = &c->ns->blocks[id];
			if (b->ref != 1 || b->committed)
				FUZZ_BUG("COW left id %u shared (ref %u, committed %d)",
					 id, b->ref, b->committed);
		}
		break;
	case KV_OP_COMMIT:
		for (uint32_t k = 0; k < sqe->nr && k < ORACLE_IDS; k++) {
			struct kv_commit e;

			memcpy(&e, c->data + sqe->off + k * sizeof(e),
			       sizeof(e));
			if (e.id >= c->ns->max_blocks ||
			    !kvd_ns_hold_count(c->ns, i, e.id))
				FUZZ_BUG("COMMIT entry %u: id %u not held", k,
					 e.id);
			if (!c->ns->blocks[e.id].committed && !e.flags &&
			    c->ns->blocks[e.id].ref < KVD_REF_MAX)
				FUZZ_BUG("COMMIT entry %u: id %u not committed",
					 k, e.id);
		}
		break;
	}
}

/* The results each opcode may complete with. */
__attribute__((no_sanitize("coverage")))
static void check_res(const struct kv_sqe *sqe, int res)
{
	int max = -1;

	if (res < -4095)
		FUZZ_BUG("opcode %u: res %d is no errno", sqe->opcode, res);
	if (sqe->opcode >= KV_OP__MAX && res != -EOPNOTSUPP)
		FUZZ_BUG("opcode %u: res %d", sqe->opcode, res);
	if (res < 0)
		return;
	switch (sqe->opcode) {
	case KV_OP_NOP:
		max = 0;
		break;
	case KV_OP_ALLOC:
	case KV_OP_RELEASE:
	case KV_OP_REF:
	case KV_OP_COMMIT:
		if (res != (int)sqe->nr)
			FUZZ_BUG("opcode %u: res %d for nr %u", sqe->opcode,
				 res, sqe->nr);
		return;
	case KV_OP_LOOKUP:
	case KV_OP_COW:
		max = (int)sqe->nr;
		break;
	case KV_OP_ALLOC_PREFIX:
		max = (int)sqe->args[1];
		break;
	case KV_OP_STATS:
		max = sizeof(struct kv_stats);
		break;
	}
	if (res > max)
		FUZZ_BUG("opcode %u: res %d above %d", sqe->opcode, res, max);
}

/* -ECANCELED, and the SQE before @seq was linked to it: a chain failed. */
static bool cancelled(const struct fclient *f, uint32_t seq, int res)
{
	return res == -ECANCELED && seq &&
	       (f->pend[(seq - 1) % PEND].flags & KV_SQE_LINK);
}

/*
 * Take the CQEs kvd posted: one for each SQE submitted, none twice, each
 * with a result it may have; out of SQE order only behind a parked one.
 */
__attribute__((no_sanitize("coverage")))
static void reap(unsigned i)
{
	struct kvd_client *c = &cl[i];
	struct fclient *f = &fc[i];
	uint32_t tail = kv_smp_load_acquire(c->cq_ktail);

	if (!f->lied && tail - f->cq_head > CQ_ENTRIES)
		FUZZ_BUG("client %u: %u CQEs in a CQ of %u", i,
			 tail - f->cq_head, CQ_ENTRIES);
	for (; f->cq_head != tail; f->cq_head++) {
		const struct kv_cqe *cqe =
			&c->cqes[f->cq_head & (CQ_ENTRIES - 1)];
		uint32_t seq = (uint32_t)cqe->user_data;
		const struct kv_sqe *sqe = &f->pend[seq % PEND];

		if (f->lied)
			continue;
		if (cqe->user_data != tag(i, seq) ||
		    seq - f->seq_posted >= f->sq_tail - f->seq_posted ||
		    f->reaped[seq % PEND])
			FUZZ_BUG("client %u: CQE %llx, not of an SQE in flight (%u..%u)",
				 i, (unsigned long long)cqe->user_data,
				 f->seq_posted, f->sq_tail);
		if (cqe->flags)
			FUZZ_BUG("CQE flags %x", cqe->flags);
		if (trace)
			fprintf(stderr, "client %u: SQE %u opcode %u nr %u off %u: %d\n",
				i, seq, sqe->opcode, sqe->nr, sqe->off,
				cqe->res);
		if (!cancelled(f, seq, cqe->res))
			check_res(sqe, cqe->res);
		f->reaped[seq % PEND] = true;
		while (f->seq_posted != f->sq_tail &&
		       f->reaped[f->seq_posted % PEND])
			f->reaped[f->seq_posted++ % PEND] = false;
	}
	kv_smp_store_release(c->cq_khead, f->cq_head);
}

/* Serve client @i's ring as the event loop would. */
static int serve(unsigned i, uint32_t budget, bool do_reap)
{
	struct kvd_client *c = &cl[i];
	uint32_t head = kv_smp_load_acquire(c->sq_khead);
	int ret = kvd_ring_process(&d, c, budget);
	uint32_t nhead = kv_smp_load_acquire(c->sq_khead);

	if (ret < 0)
		FUZZ_BUG("client %u: kvd_ring_process %d on sane indices", i,
			 ret);
	if (nhead - head > fc[i].sq_tail - head)
		FUZZ_BUG("client %u: sq_head %u ran past sq_tail %u", i,
			 nhead, fc[i].sq_tail);
	if (do_reap)
		reap(i);
	return ret;
}

/* Put @sqe on client @i's ring; unless queued only, serve and reap it. */
static void submit(unsigned i, struct kv_sqe *sqe, uint8_t cmd)
{
	struct kvd_client *c = &cl[i];
	struct fclient *f = &fc[i];
	uint32_t seq = f->sq_tail, cq_before;
	bool alone;

	if (f->sq_tail - kv_smp_load_acquire(c->sq_khead) >= SQ_ENTRIES) {
		/* SQ full: a real client reaps and waits; we serve it. */
		reap(i);
		serve(i, 64, true);
		if (f->sq_tail - kv_smp_load_acquire(c->sq_khead) >= SQ_ENTRIES)
			return;		/* sq_entries parked, or the CQ full */
	}
	sqe->user_data = tag(i, seq);
	f->pend[seq % PEND] = *sqe;
	c->sqes[seq & (SQ_ENTRIES - 1)] = *sqe;
	/* Alone in the ring: its CQE, if it comes now, is the next one. */
	alone = !kvd_ring_parked(c) && !f->lied &&
		kv_smp_load_acquire(c->sq_khead) == seq &&
		kv_smp_load_acquire(c->cq_ktail) == f->cq_head;
	kv_smp_store_release(c->sq_ktail, ++f->sq_tail);
	if (cmd & CMD_QUEUE)
		return;
	cq_before = f->cq_head;
	serve(i, 64, false);
	if (alone && kv_smp_load_acquire(c->cq_ktail) == cq_before + 1) {
		const struct kv_cqe *cqe =
			&c->cqes[cq_before & (CQ_ENTRIES - 1)];

		if (!cancelled(f, seq, cqe->res)) {
			check_res(sqe, cqe->res);
			check_output(i, sqe, cqe->res);
		}
	}
	if (!(cmd & CMD_NOREAP))
		reap(i);
}

/* A small offset into the data area, alignment left to the input. */
static uint32_t data_off(struct fuzz_in *in)
{
	return fuzz_u16(in) % (DATA_BYTES + 256);
}

static void cmd_sqe(unsigned i, uint8_t cmd, struct fuzz_in *in)
{
	struct kv_sqe sqe = { 0 };
	uint8_t wait = 0;

	sqe.opcode = fuzz_u8(in);
	if (sqe.opcode & 0x80) {
		/* KV_SQE_WAIT, up to a few seconds */
		wait = fuzz_u8(in);
		sqe.flags = KV_SQE_WAIT;
		sqe.args[3] = wait ? (uint64_t)wait * 20 : 0;
	}
	sqe.opcode &= 0x0f;
	sqe.nr = fuzz_u8(in);
	sqe.off = data_off(in);
	if (sqe.opcode == KV_OP_LOOKUP || sqe.opcode == KV_OP_ALLOC_PREFIX)
		sqe.args[0] = data_off(in);
	if (sqe.opcode == KV_OP_ALLOC_PREFIX)
		sqe.args[1] = fuzz_u8(in);
	if (sqe.opcode == KV_OP_STATS && sqe.nr)
		sqe.nr = sizeof(struct kv_stats) + (sqe.nr & 7) - 4;
	submit(i, &sqe, cmd);
}

static void cmd_raw(unsigned i, uint8_t cmd, struct fuzz_in *in)
{
	struct kv_sqe sqe;

	fuzz_bytes(in, &sqe, sizeof(sqe));
	submit(i, &sqe, cmd);
}

/* Write into the data area, clipped to it. */
static void put_data(unsigned i, uint32_t off, const void *p, size_t len)
{
	if (off >= DATA_BYTES)
		return;
	if (len > DATA_BYTES - off)
		len = DATA_BYTES - off;
	memcpy(cl[i].data + off, p, len);
}

static void cmd_data(unsigned i, struct fuzz_in *in)
{
	uint32_t off = data_off(in);
	uint8_t buf[256];
	size_t len = fuzz_u8(in);

	len = fuzz_bytes(in, buf, len);
	put_data(i, off, buf, len);
}

static void cmd_move(unsigned i, struct fuzz_in *in)
{
	uint32_t src = fuzz_u16(in) % DATA_BYTES;
	uint32_t dst = fuzz_u16(in) % DATA_BYTES;
	uint32_t len = fuzz_u8(in) * 4;

	if (len > DATA_BYTES - src)
		len = DATA_BYTES - src;
	if (len > DATA_BYTES - dst)
		len = DATA_BYTES - dst;
	memmove(cl[i].data + dst, cl[i].data + src, len);
}

/* Hash number @x: a few distinct values make hits; 0 is a root parent. */
static struct kv_hash hash_of(uint8_t x)
{
	struct kv_hash h = { 0 };

	if (!x)
		return h;
	h.b[0] = x;
	h.b[7] = 0x6b;
	h.b[15] = (uint8_t)~x;
	return h;
}

static void cmd_hashes(unsigned i, struct fuzz_in *in)
{
	uint32_t off = data_off(in) & ~7U;
	uint32_t n = fuzz_u8(in) % 32 + 1;

	for (uint32_t k = 0; k < n; k++) {
		struct kv_hash h = hash_of(fuzz_u8(in));

		put_data(i, off + 16 * k, &h, sizeof(h));
	}
}

/* COMMIT entries: id from the data area, hash and parent by number. */
static void cmd_commits(unsigned i, struct fuzz_in *in)
{
	uint32_t off = data_off(in) & ~7U;
	uint32_t n = fuzz_u8(in) % 16 + 1;

	for (uint32_t k = 0; k < n; k++) {
		struct kv_commit e = { 0 };
		uint32_t from = fuzz_u16(in) % DATA_BYTES & ~3U;

		e.id = data_u32(&cl[i], from);
		e.hash = hash_of(fuzz_u8(in));
		e.parent = hash_of(fuzz_u8(in));
		put_data(i, off + k * sizeof(e), &e, sizeof(e));
	}
}

static void cmd_process(unsigned i, uint8_t cmd, struct fuzz_in *in)
{
	struct kvd_client *c = &cl[i];
	uint8_t adv = fuzz_u8(in), abuse = fuzz_u8(in);
	uint32_t budget = fuzz_u8(in) % 64 + 1;
	int ret;

	fuzz_clock_ns += (uint64_t)adv * 20 * 1000000;
	if (abuse & 1) {
		/* an sq_tail past the ring: refused, nothing touched */
		uint32_t head = kv_smp_load_acquire(c->sq_khead);
		uint32_t ahead = SQ_ENTRIES + 1 + (abuse >> 1);

		kv_smp_store_release(c->sq_ktail, head + ahead);
		ret = kvd_ring_process(&d, c, budget);
		if (ret != -EPROTO)
			FUZZ_BUG("sq_tail %u entries ahead: %d, not -EPROTO",
				 ahead, ret);
		kv_smp_store_release(c->sq_ktail, fc[i].sq_tail);
	}
	if (abuse & 2) {
		/* a cq_head that lies: kvd may overwrite CQEs, never more */
		fc[i].lied = true;
		kv_smp_store_release(c->cq_khead, fc[i].cq_head + (abuse >> 2));
	}
	serve(i, budget, !(cmd & CMD_NOREAP));
}

/* Runs one command; false if it cannot have changed the books. */
static bool run_cmd(struct fuzz_in *in)
{
	uint8_t cmd = fuzz_u8(in);
	unsigned i = (cmd & 3) % NR_CLIENTS;

	switch (cmd >> 2 & 7) {
	case CMD_SQE:
		cmd_sqe(i, cmd, in);
		return !(cmd & CMD_QUEUE);
	case CMD_RAW:
		cmd_raw(i, cmd, in);
		return !(cmd & CMD_QUEUE);
	case CMD_DATA:
		cmd_data(i, in);
		return false;
	case CMD_COMMITS:
		cmd_commits(i, in);
		return false;
	case CMD_HASHES:
		cmd_hashes(i, in);
		return false;
	case CMD_PROCESS:
		cmd_process(i, cmd, in);
		return true;
	case CMD_EXIT:
		client_down(i);
		client_up(i);
		return true;
	case CMD_MOVE:
		cmd_move(i, in);
		return false;
	}
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	setup(fuzz_u8(&in));
	for (unsigned n = 0; in.n && n < MAX_CMDS; n++)
		if (run_cmd(&in))
			check_books("after a command", false);
	teardown();
	return 0;
}
