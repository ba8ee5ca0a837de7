// SPDX-License-Identifier: MIT
/*
 * Opcode table: each KV_OP_* names its checks and its handler, as
 * io_uring/opdef.c does. Every SQE field a handler does not use must be
 * zero, so that a later ABI can give it a meaning.
 */
#include <errno.h>
#include <string.h>

#include "daemon.h"

struct kvd_op_def {
	const char	*name;
	bool		ids;		/* off/nr name an id array */
	int		(*issue)(struct kvd *d, struct kvd_client *c,
				 const struct kv_sqe *sqe);
};

/*
 * Check that [off, off + bytes) lies in the data area. -EINVAL for a
 * misaligned offset, -EFAULT outside. bytes is 64-bit: no overflow.
 */
static int data_range(const struct kvd_client *c, uint32_t off,
		      uint64_t bytes)
{
	if (off % 4)
		return -EINVAL;
	if ((uint64_t)off + bytes > c->data_bytes)
		return -EFAULT;
	return 0;
}

/* Copy an id array out of shared memory so the client cannot change it. */
static const uint32_t *copy_ids(struct kvd *d, const struct kvd_client *c,
				const struct kv_sqe *sqe)
{
	memcpy(d->scratch, c->data + sqe->off, (size_t)sqe->nr * 4);
	return d->scratch;
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
	int ret = kvd_ns_alloc(c->ns, &c->holder, d->scratch, sqe->nr);

	if (ret > 0)
		memcpy(c->data + sqe->off, d->scratch, (size_t)ret * 4);
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
	st.pages_used = d->pool.pages_used;
	st.pages_free = d->pool.nr_pages - d->pool.pages_used;
	st.peak_pages_used = d->pool.peak_pages_used;
	st.nr_clients = d->nr_clients;
	st.nr_namespaces = d->nr_ns;
	st.block_bytes = c->ns->block_bytes;
	st.ns_slabs = c->ns->nr_slabs;
	st.ns_blocks = c->ns->nr_blocks;
	st.ns_blocks_used = c->ns->blocks_used;
	st.ns_max_blocks = c->ns->max_blocks;
	st.client_blocks = c->holder.nr_blocks;
	st.client_refs = c->holder.nr_refs;
	st.ops = c->ops + 1;	/* this one included */
	memcpy(c->data + sqe->off, &st, sizeof(st));
	return sizeof(st);
}

static const struct kvd_op_def kvd_op_defs[KV_OP__MAX] = {
	[KV_OP_NOP]	= { .name = "NOP",	.issue = op_nop },
	[KV_OP_ALLOC]	= { .name = "ALLOC",	.ids = true, .issue = op_alloc },
	[KV_OP_RELEASE]	= { .name = "RELEASE",	.ids = true, .issue = op_release },
	[KV_OP_REF]	= { .name = "REF",	.ids = true, .issue = op_ref },
	[KV_OP_STATS]	= { .name = "STATS",	.issue = op_stats },
};

int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe)
{
	const struct kvd_op_def *def;
	int ret;

	if (sqe->opcode >= KV_OP__MAX)
		return -EOPNOTSUPP;
	def = &kvd_op_defs[sqe->opcode];
	if (sqe->flags)
		return -EINVAL;
	if (sqe->resv0 || sqe->resv1 || sqe->resv2 || sqe->args[0] ||
	    sqe->args[1] || sqe->args[2] || sqe->args[3])
		return -EINVAL;
	if (def->ids) {
		if (!sqe->nr)
			return -EINVAL;
		ret = data_range(c, sqe->off, (uint64_t)sqe->nr * 4);
		if (ret)
			return ret;
		if (sqe->nr > KV_MAX_IDS)	/* bounds the time one SQE takes */
			return -E2BIG;
	}
	return def->issue(d, c, sqe);
}
