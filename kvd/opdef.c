// SPDX-License-Identifier: MIT
/*
 * Opcode table: each KV_OP_* names its checks and its handler, as
 * io_uring/opdef.c does. Every SQE field a handler does not use must be
 * zero, so that a later ABI can give it a meaning.
 */
#include <errno.h>
#include <string.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "opdef.h"
#include "tier.h"
#include "tenant.h"

struct kvd_op_def {
	const char	*name;
	uint32_t	elem;		/* off/nr name an array of elem-byte
					 * entries, 4-byte ids or 40-byte commits */
	uint32_t	args;		/* how many of args[] the op reads */
	bool		waits;		/* KV_SQE_WAIT allowed (args[3]: ms) */
	bool		lookups;	/* KV_SQE_POOL_ONLY allowed */
	int		(*issue)(struct kvd *d, struct kvd_client *c,
				 const struct kv_sqe *sqe);
};

/* Private copies of what a request reads from shared memory. */
#define SCRATCH_IDS(d)		((uint32_t *)(d)->scratch)
#define SCRATCH_HASHES(d)	((struct kv_hash *)((uint8_t *)(d)->scratch + \
				 KV_MAX_DATA_BYTES / 2))

/*
 * Check that [off, off + bytes) lies in the data area. -EINVAL for a
 * misaligned offset, -EFAULT outside. bytes is 64-bit: no overflow.
 */
static int data_range(const struct kvd_client *c, uint64_t off,
		      uint64_t bytes)
{
	if (off % 4)
		return -EINVAL;
	/* Written so that no sum can wrap: off is 64 bits wide. */
	if (off > c->data_bytes || bytes > c->data_bytes - off)
		return -EFAULT;
	return 0;
}

/* Copy an id array out of shared memory so the client cannot change it. */
static const uint32_t *copy_ids(struct kvd *d, const struct kvd_client *c,
				const struct kv_sqe *sqe)
{
	memcpy(SCRATCH_IDS(d), c->data + sqe->off, (size_t)sqe->nr * 4);
	return SCRATCH_IDS(d);
}

/* A hash array at data offset @off, checked and copied: NULL on error. */
static const struct kv_hash *copy_hashes(struct kvd *d,
					 const struct kvd_client *c,
					 uint64_t off, uint32_t nr, int *err)
{
	*err = off % 8 ? -EINVAL : data_range(c, off, (uint64_t)nr * 16);
	if (*err)
		return NULL;
	memcpy(SCRATCH_HASHES(d), c->data + off, (size_t)nr * 16);
	return SCRATCH_HASHES(d);
}

static int op_nop(struct kvd *d, struct kvd_client *c,
		  const struct kv_sqe *sqe)
{
	(void)d, (void)c;
	return sqe->nr || sqe->off ? -EINVAL : 0;
}

static int op_alloc(struct kvd *d, struct kvd_client *c,
		    const struct kv_sqe *sqe)
{
	int ret = kvd_ns_alloc(c->ns, &c->holder, SCRATCH_IDS(d), sqe->nr);

	if (ret > 0)
		memcpy(c->data + sqe->off, SCRATCH_IDS(d), (size_t)ret * 4);
	return ret;
}

/* KV_CQE_HOST_HITS, KV_CQE_DISK_HITS of @n promoted, @disk of them from
 * the disk tier: 16 bits each, saturating (n <= KV_MAX_IDS = 65536). */
static uint32_t cqe_tier_flags(uint32_t n, uint32_t disk)
{
	return (n - disk < 0xffff ? n - disk : 0xffff) |
	       (disk < 0xffff ? disk : 0xffff) << 16;
}

/*
 * The hashes [@h, @nr) a request's pool lookup missed, from the tiers
 * behind the pool (kvd/tier.c): how many came back, said in the CQE's
 * flags too. @fresh: their blocks were allocated already.
 */
static uint32_t promote(struct kvd *d, struct kvd_client *c,
			const struct kv_sqe *sqe, const struct kv_hash *hashes,
			uint32_t h, uint32_t nr, bool fresh)
{
	uint32_t n, disk;

	if (sqe->flags & KV_SQE_POOL_ONLY)
		return 0;
	n = kvd_tier_promote(d, c, hashes, h, nr, SCRATCH_IDS(d), fresh,
			     &disk);
	c->cqe_flags = cqe_tier_flags(n, disk);
	return n;
}

/*
 * Before a lookup: what only the disk tier has is read into the host
 * tier first; -EINPROGRESS parks the request until it lands (ring.c).
 */
static int fetch(struct kvd *d, struct kvd_client *c, const struct kv_sqe *sqe,
		 const struct kv_hash *hashes, uint32_t nr)
{
	if ((sqe->flags & KV_SQE_POOL_ONLY) || c->no_fetch)
		return 0;
	return kvd_tier_fetch(d, c, hashes, nr);
}

/* LOOKUP: nr hashes at off; hit ids to args[0]. */
static int op_lookup(struct kvd *d, struct kvd_client *c,
		     const struct kv_sqe *sqe)
{
	const struct kv_hash *hashes;
	int ret;

	ret = data_range(c, sqe->args[0], (uint64_t)sqe->nr * 4);
	if (ret)
		return ret;
	hashes = copy_hashes(d, c, sqe->off, sqe->nr, &ret);
	if (!hashes)
		return ret;
	ret = fetch(d, c, sqe, hashes, sqe->nr);
	if (ret)
		return ret;
	ret = kvd_ns_lookup(c->ns, &c->holder, hashes, sqe->nr, SCRATCH_IDS(d));
	if (ret >= 0)
		ret += promote(d, c, sqe, hashes, (uint32_t)ret, sqe->nr, false);
	if (ret > 0)
		memcpy(c->data + sqe->args[0], SCRATCH_IDS(d), (size_t)ret * 4);
	return ret;
}

/*
 * ALLOC_PREFIX with the host tier: the run past the pool's hits is taken
 * out of the tier first, so that the request's own allocation, which
 * evicts into the tier, cannot push it out; then it lands in the blocks
 * allocated for it.
 */
static int alloc_prefix_tiered(struct kvd *d, struct kvd_client *c,
			       const struct kv_sqe *sqe,
			       const struct kv_hash *hashes)
{
	uint32_t n_hashes = (uint32_t)sqe->args[1], h0, disk;
	struct kvd_tier_run run = { 0 };
	int ret;

	/* no tier, or an empty one: no second pass over the hashes */
	if (!(sqe->flags & KV_SQE_POOL_ONLY) && d->host_tier.nr_entries) {
		h0 = kvd_ns_peek(c->ns, hashes, n_hashes);
		kvd_tier_take(d, c, hashes, h0, n_hashes, &run);
	}
	ret = kvd_ns_alloc_prefix(c->ns, &c->holder, hashes, n_hashes,
				  SCRATCH_IDS(d), sqe->nr);
	if (!run.n)
		return ret;
	if (ret < 0 || (uint32_t)ret != run.from) {
		kvd_tier_untake(d, &run);	/* nothing to land it in */
		return ret;
	}
	ret += kvd_tier_land(d, c, hashes, &run, SCRATCH_IDS(d), true, &disk);
	c->cqe_flags = cqe_tier_flags((uint32_t)ret - run.from, disk);
	return ret;
}

/* ALLOC_PREFIX: nr ids to off; args[1] hashes at args[0]. */
static int op_alloc_prefix(struct kvd *d, struct kvd_client *c,
			   const struct kv_sqe *sqe)
{
	const struct kv_hash *hashes;
	int ret;

	if (sqe->args[1] > sqe->nr)
		return -EINVAL;
	hashes = copy_hashes(d, c, sqe->args[0], (uint32_t)sqe->args[1], &ret);
	if (!hashes)
		return ret;
	ret = fetch(d, c, sqe, hashes, (uint32_t)sqe->args[1]);
	if (ret)
		return ret;
	ret = alloc_prefix_tiered(d, c, sqe, hashes);
	if (ret >= 0)
		memcpy(c->data + sqe->off, SCRATCH_IDS(d), (size_t)sqe->nr * 4);
	return ret;
}

/*
 * KV_COMMIT_AND_RELEASE: the caller's ref on each committed block goes,
 * in one release of their ids, packed over the entries in the scratch
 * (id i's 4 bytes land on entries before i, already read). The caller
 * holds each (commit checked it, a dedup took a ref on the cached one),
 * so the release cannot fail.
 */
static void commit_release(struct kvd_client *c, struct kv_commit *e,
			   uint32_t nr)
{
	uint32_t *ids = (uint32_t *)e;

	for (uint32_t i = 0; i < nr; i++)
		ids[i] = e[i].id;
	kvd_ns_release(c->ns, &c->holder, ids, nr);
}

/* COMMIT: nr struct kv_commit at off, updated in place. */
static int op_commit(struct kvd *d, struct kvd_client *c,
		     const struct kv_sqe *sqe)
{
	struct kv_commit *e = d->scratch;
	size_t bytes = (size_t)sqe->nr * sizeof(*e);
	int ret;

	if (sqe->off % 8 || sqe->args[0] & ~(uint64_t)KV_COMMIT_AND_RELEASE)
		return -EINVAL;
	memcpy(e, c->data + sqe->off, bytes);
	ret = kvd_ns_commit(c->ns, &c->holder, e, sqe->nr);
	if (ret < 0)
		return ret;
	memcpy(c->data + sqe->off, e, bytes);
	if (sqe->args[0] & KV_COMMIT_AND_RELEASE)
		commit_release(c, e, sqe->nr);
	return ret;
}

static int op_release(struct kvd *d, struct kvd_client *c,
		      const struct kv_sqe *sqe)
{
	return kvd_ns_release(c->ns, &c->holder, copy_ids(d, c, sqe), sqe->nr);
}

static int op_ref(struct kvd *d, struct kvd_client *c,
		  const struct kv_sqe *sqe)
{
	return kvd_ns_ref(c->ns, &c->holder, copy_ids(d, c, sqe), sqe->nr);
}

/*
 * COW: nr held ids at off; each one the client may not write in place is
 * replaced there by a private copy, its bytes copied by the backend (on
 * the device for cuda) before the CQE is posted. res: how many copied.
 */
static int op_cow(struct kvd *d, struct kvd_client *c,
		  const struct kv_sqe *sqe)
{
	uint32_t *ids = SCRATCH_IDS(d), *dst = (uint32_t *)SCRATCH_HASHES(d);
	struct kvd_copy *v = (struct kvd_copy *)(dst + KV_MAX_IDS);
	uint64_t bb = c->ns->block_bytes;
	uint32_t n = 0;
	int ret, err;

	memcpy(ids, c->data + sqe->off, (size_t)sqe->nr * 4);
	ret = kvd_ns_cow_begin(c->ns, &c->holder, ids, dst, sqe->nr);
	if (ret <= 0)
		return ret;
	for (uint32_t i = 0; i < sqe->nr; i++) {
		if (dst[i] == KVD_NIL)
			continue;
		v[n].dst = dst[i] * bb;
		v[n].src = ids[i] * bb;
		v[n++].bytes = bb;
	}
	err = d->be->copy(d, v, n);
	kvd_ns_cow_end(c->ns, &c->holder, ids, dst, sqe->nr, !err);
	if (err)
		return err;
	memcpy(c->data + sqe->off, ids, (size_t)sqe->nr * 4);
	return ret;
}

/*
 * The pool figures a client sees are its own tenant's, never the pool's:
 * pool-wide pages, clients and namespaces move with other tenants'
 * misses and hits, a cross-tenant oracle (they are on the admin socket).
 * pages_free is what the tenant may still take if nobody else held a
 * page: the pool less its own pages, within its max_pages.
 */
static void tenant_stats(struct kvd *d, const struct kvd_client *c,
			 struct kv_stats *st)
{
	const struct kvd_tenant *t = &d->tenants[c->tenant];
	uint32_t used = t->acct.pages, max = t->acct.max_pages;
	uint32_t room = d->pool.nr_pages - used;

	if (max && room > (max > used ? max - used : 0))
		room = max > used ? max - used : 0;
	st->pages_used = used;
	st->pages_free = room;
	st->peak_pages_used = t->acct.peak_pages;
	st->nr_clients = t->nr_clients;
	for (uint32_t i = 0; i < d->cfg.max_namespaces; i++)
		st->nr_namespaces += d->ns[i].live &&
				     d->ns[i].tenant == (uint32_t)c->tenant;
}

static int op_stats(struct kvd *d, struct kvd_client *c,
		    const struct kv_sqe *sqe)
{
	struct kv_stats st = { 0 };
	int ret = data_range(c, sqe->off, sqe->nr);

	if (ret)
		return ret;
	if (sqe->nr < sizeof(st))
		return -EINVAL;
	st.pool_bytes = d->pool.bytes;
	st.nr_pages = d->pool.nr_pages;
	tenant_stats(d, c, &st);
	st.block_bytes = c->ns->block_bytes;
	st.ns_slabs = c->ns->nr_slabs;
	st.ns_blocks = c->ns->nr_blocks;
	st.ns_blocks_used = c->ns->blocks_used;
	st.ns_max_blocks = c->ns->max_blocks;
	st.client_blocks = c->holder.nr_blocks;
	st.client_refs = c->holder.nr_refs;
	st.ops = c->ops + 1;	/* this one included */
	st.lookups = c->ns->lookups;
	st.hit_blocks = c->ns->hit_blocks;
	st.lookup_blocks = c->ns->lookup_blocks;
	st.quota_why = c->holder.quota_why;
	st.quota_limit = c->holder.quota_limit;
	st.evictions = c->ns->evictions;
	st.cached_blocks = c->ns->cached_blocks;
	st.committed_blocks = c->ns->committed_blocks;
	memcpy(c->data + sqe->off, &st, sizeof(st));
	return sizeof(st);
}

/*
 * RETAIN: nr held committed ids at off; args[0] priority (0: as it is),
 * args[1] pin ms, args[2] KV_RETAIN_* (kvd/retain.c).
 */
static int op_retain(struct kvd *d, struct kvd_client *c,
		     const struct kv_sqe *sqe)
{
	if (sqe->args[0] > KV_PRIO_MAX || sqe->args[2] > UINT32_MAX)
		return -EINVAL;
	return kvd_ns_retain(c->ns, &c->holder, copy_ids(d, c, sqe), sqe->nr,
			     (uint32_t)sqe->args[0], sqe->args[1],
			     (uint32_t)sqe->args[2], kvd_now_ns());
}

static const struct kvd_op_def kvd_op_defs[KV_OP__MAX] = {
	[KV_OP_NOP]	= { .name = "NOP",	.issue = op_nop },
	[KV_OP_ALLOC]	= { .name = "ALLOC",	.elem = 4, .waits = true,
			    .issue = op_alloc },
	[KV_OP_RELEASE]	= { .name = "RELEASE",	.elem = 4, .issue = op_release },
	[KV_OP_REF]	= { .name = "REF",	.elem = 4, .issue = op_ref },
	[KV_OP_STATS]	= { .name = "STATS",	.issue = op_stats },
	[KV_OP_LOOKUP]	= { .name = "LOOKUP",	.elem = 16, .args = 1,
			    .lookups = true, .issue = op_lookup },
	[KV_OP_ALLOC_PREFIX] = { .name = "ALLOC_PREFIX", .elem = 4, .args = 2,
			    .waits = true, .lookups = true,
			    .issue = op_alloc_prefix },
	[KV_OP_COMMIT]	= { .name = "COMMIT",	.elem = sizeof(struct kv_commit),
			    .args = 1, .issue = op_commit },
	[KV_OP_COW]	= { .name = "COW",	.elem = 4, .waits = true,
			    .issue = op_cow },
	[KV_OP_RETAIN]	= { .name = "RETAIN",	.elem = 4, .args = 3,
			    .issue = op_retain },
};

/*
 * Which limit refused @sqe -EDQUOT: the client's own (max_client_blocks),
 * else the namespace's max_pages, else its tenant's; noted for the
 * client's kv_stats (libkvclient's kv_last_error text) and logged.
 */
static void quota_refused(struct kvd *d, struct kvd_client *c,
			  const struct kvd_op_def *def,
			  const struct kv_sqe *sqe)
{
	static const char *const what[] = {
		[KV_QUOTA_NONE] = "a quota",
		[KV_QUOTA_NAMESPACE] = "the namespace's max_pages",
		[KV_QUOTA_TENANT] = "the tenant's max_pages",
		[KV_QUOTA_CLIENT] = "max_client_blocks",
		[KV_QUOTA_PINS] = "the namespace's pin limit",
	};
	const struct kvd_ns *ns = c->ns;
	struct kvd_holder *hr = &c->holder;
	const struct kvd_acct *t = ns->tacct;

	hr->quota_why = KV_QUOTA_NONE;
	hr->quota_limit = 0;
	if (sqe->opcode == KV_OP_RETAIN) {
		hr->quota_why = KV_QUOTA_PINS;
		hr->quota_limit = kvd_ns_pin_limit(ns);
	} else if (!kvd_holder_room(hr, sqe->nr)) {
		hr->quota_why = KV_QUOTA_CLIENT;
		hr->quota_limit = hr->max_refs;
	} else if (ns->acct.max_pages &&
		   ns->acct.pages + ns->slab_pages > ns->acct.max_pages) {
		hr->quota_why = KV_QUOTA_NAMESPACE;
		hr->quota_limit = ns->acct.max_pages;
	} else if (t && t->max_pages &&
		   t->pages + ns->slab_pages > t->max_pages) {
		hr->quota_why = KV_QUOTA_TENANT;
		hr->quota_limit = t->max_pages;
	}
	if (kvd_ratelimit(&d->rl_quota))
		kvd_warn("client %u (pid %d): %s of %u refused (EDQUOT): tenant %s, namespace %u (%s) at %s (%u)",
			 c->id, (int)c->pid, def->name, sqe->nr,
			 d->tenants[c->tenant].name, ns->handle, ns->model_id,
			 what[hr->quota_why], hr->quota_limit);
}

const char *kvd_op_name(uint32_t opcode)
{
	return opcode < KV_OP__MAX ? kvd_op_defs[opcode].name : "UNKNOWN";
}

/* One sampled SQE's service time into its opcode's buckets. */
void kvd_op_stat_time(struct kvd_op_stat *s, uint64_t ns)
{
	static const uint64_t le[KV_ADMIN_OP_BUCKETS] = KV_ADMIN_OP_LE_NS;
	uint32_t i = 0;

	while (i < KV_ADMIN_OP_BUCKETS && ns > le[i])
		i++;
	if (i < KV_ADMIN_OP_BUCKETS)
		s->bucket[i]++;
	s->timed++;
	s->timed_ns += ns;
}

int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe)
{
	const struct kvd_op_def *def;
	int ret;

	if (sqe->opcode >= KV_OP__MAX)
		return -EOPNOTSUPP;
	def = &kvd_op_defs[sqe->opcode];
	if (sqe->resv0 || sqe->resv1 || sqe->resv2)
		return -EINVAL;
	c->cqe_flags = 0;
	if (sqe->flags & ~(KV_SQE_WAIT | KV_SQE_LINK | KV_SQE_POOL_ONLY))
		return -EINVAL;
	if ((sqe->flags & KV_SQE_POOL_ONLY) && !def->lookups)
		return -EINVAL;
	if (sqe->flags & KV_SQE_WAIT) {
		if (!def->waits || !sqe->args[3] ||
		    sqe->args[3] > KV_WAIT_MAX_MS)
			return -EINVAL;
	}
	for (uint32_t i = def->args; i < ARRAY_SIZE(sqe->args); i++)
		if (sqe->args[i] && !(i == 3 && (sqe->flags & KV_SQE_WAIT)))
			return -EINVAL;
	if (def->elem) {
		if (!sqe->nr)
			return -EINVAL;
		ret = data_range(c, sqe->off, (uint64_t)sqe->nr * def->elem);
		if (ret)
			return ret;
		if (sqe->nr > KV_MAX_IDS)	/* bounds the time one SQE takes */
			return -E2BIG;
	}
	ret = def->issue(d, c, sqe);
	if (ret == -EDQUOT)
		quota_refused(d, c, def, sqe);
	return ret;
}
