// SPDX-License-Identifier: MIT
/*
 * The pool's extents: backed by the backend (kvd/host.c, kvd/cuda.c),
 * mapped at their pool offsets in kvd's view and every client's, so a
 * block is still at pool base + id * block_bytes.
 *
 * Grow and shrink: on lazy backends an extent gets memory when a slab
 * first needs a page of it, and gives it back once it has had no page in
 * use for KVD_EXT_IDLE_TICKS ticks (the pause keeps a burst of frees and
 * allocations from remaking it each time).
 *
 * Isolation by extents: an extent belongs to one tenant while any of its
 * pages is in use (kvd/pool.c), and a client receives only its tenant's
 * extents. When an extent passes to another tenant it is remade (new
 * memory, new fd, gen + 1) and the old one dropped, so no tenant ever
 * sees another's KV bytes. Clients that mapped a dropped extent are told
 * to unmap it (KV_EXTENT_DROP) at once, so its memory can go.
 *
 * Extents reach a client lazily: only before kvd posts a completion to
 * it (ring.c), never to idle clients, whose sockets would otherwise fill
 * with fds in flight (charged to kvd's RLIMIT_NOFILE by the kernel). A
 * completion waits until the client has every extent it may name.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "extent.h"

#define KVD_EXT_IDLE_TICKS	4	/* 1 s at the 250 ms tick */

static uint64_t ext_off(const struct kvd *d, uint32_t e)
{
	return (uint64_t)e * d->pool.extent_pages * KV_PAGE_BYTES;
}

static uint64_t ext_len(const struct kvd *d, uint32_t e)
{
	uint64_t end = ext_off(d, e) + (uint64_t)d->pool.extent_pages *
		       KV_PAGE_BYTES;

	return (end < d->pool.bytes ? end : d->pool.bytes) - ext_off(d, e);
}

static int ext_back(struct kvd *d, uint32_t e)
{
	int fd = d->be->ext_create(d, e, ext_off(d, e), ext_len(d, e));

	if (fd < 0)
		return fd;
	d->ext_fd[e] = fd;
	d->ext_gen[e]++;
	d->ext_idle[e] = 0;
	d->ext_epoch++;
	d->backed_bytes += ext_len(d, e);
	return 0;
}

static void ext_unback(struct kvd *d, uint32_t e)
{
	d->be->ext_destroy(d, e, ext_off(d, e), ext_len(d, e), d->ext_fd[e]);
	d->ext_fd[e] = -1;
	d->ext_epoch++;
	d->backed_bytes -= ext_len(d, e);
}

/*
 * kvd_extents_create - set up kvd's view of the pool and its extents of
 * @extent_bytes. Eager backends (host with huge pages) back every extent
 * now, so a shortage fails at start, not in every client.
 */
int kvd_extents_create(struct kvd *d, uint64_t extent_bytes)
{
	uint32_t n;
	int ret;

	if (!d->be->extents) {
		ret = d->be->init(d);	/* one range: no owners, no isolation */
		d->backed_bytes = ret ? 0 : d->pool.bytes;
		d->be_live = !ret;
		return ret;
	}
	ret = kvd_pool_set_extents(&d->pool,
				   (uint32_t)(extent_bytes / KV_PAGE_BYTES));
	if (ret)
		return ret;
	ret = d->be->init(d);
	if (ret)
		return ret;
	d->be_live = true;
	d->pool.on_claim = kvd_extent_claim;
	d->pool.priv = d;
	n = d->pool.nr_extents;
	d->ext_fd = malloc(n * sizeof(*d->ext_fd));
	d->ext_gen = calloc(n, sizeof(*d->ext_gen));
	d->ext_idle = calloc(n, sizeof(*d->ext_idle));
	if (!d->ext_fd || !d->ext_gen || !d->ext_idle)
		return -ENOMEM;
	for (uint32_t e = 0; e < n; e++)
		d->ext_fd[e] = -1;
	d->ext_lazy = d->be->lazy && !d->cfg.hugepages;
	for (uint32_t e = 0; !d->ext_lazy && e < n; e++) {
		ret = ext_back(d, e);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * kvd_extents_destroy - kvd exits: close every extent. Its memory is not
 * taken back: clients may still map blocks they held, and must read
 * their bytes, not zeros, until their next call tells them kvd is gone.
 */
void kvd_extents_destroy(struct kvd *d)
{
	if (!d->be_live)
		return;
	for (uint32_t e = 0; d->ext_fd && e < d->pool.nr_extents; e++) {
		if (d->ext_fd[e] < 0)
			continue;
		if (d->be->ext_close)
			d->be->ext_close(d, e, ext_off(d, e), ext_len(d, e),
					 d->ext_fd[e]);
		else
			d->be->ext_destroy(d, e, ext_off(d, e),
					   ext_len(d, e), d->ext_fd[e]);
		d->ext_fd[e] = -1;
	}
	d->be->exit(d);
	d->be_live = false;
	free(d->ext_fd);
	free(d->ext_gen);
	free(d->ext_idle);
	d->ext_fd = NULL;
	d->ext_gen = d->ext_idle = NULL;
}

static int send_extent(struct kvd *d, struct kvd_client *c, uint32_t e,
		       bool drop)
{
	struct kv_extent_msg m = {
		.magic = KV_MAGIC, .type = KV_MSG_EXTENT, .size = sizeof(m),
		.index = e, .offset = ext_off(d, e), .bytes = ext_len(d, e),
		.gen = d->ext_gen[e], .flags = drop ? KV_EXTENT_DROP : 0,
	};
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	if (drop) {
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
	} else {
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &d->ext_fd[e], sizeof(int));
	}
	if (sendmsg(c->sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	c->ext_sent[e] = drop ? 0 : d->ext_gen[e];
	/* Tell the library to read it before it touches the extent: it
	 * may still map an older one of this index. Published with the
	 * CQEs that follow (release), so seen before they are. */
	if (c->sq_kflags)
		kv_atomic_or(c->sq_kflags, KV_SQ_EXTENTS);
	return 0;
}

/* What @c should be told about extent @e: 1 map it, -1 drop it, 0 none. */
static int ext_news(const struct kvd *d, const struct kvd_client *c,
		    uint32_t e)
{
	int32_t owner = d->pool.ext_owner[e];
	/* A free extent whose bytes are its tenant's stays mapped: taken
	 * again by that tenant, it needs no message (kvd_extent_claim). */
	bool ours = d->ext_fd[e] >= 0 &&
		    (owner == (int32_t)c->tenant ||
		     (owner == KVD_EXT_FREE &&
		      d->pool.ext_last[e] == (int32_t)c->tenant));

	if (ours)
		return c->ext_sent[e] != d->ext_gen[e];
	/* A free extent it still maps may come back to its tenant as is. */
	if (c->ext_sent[e] && (d->ext_fd[e] < 0 ||
			       c->ext_sent[e] != d->ext_gen[e]))
		return -1;
	return 0;
}

/*
 * Tell @c about its extents: drops of those gone, and (@maps) its
 * tenant's that it lacks. A full socket (or too many fds in flight,
 * ETOOMANYREFS) leaves the rest for later (ext_behind); a client that
 * cannot be sent one for another reason is disconnected.
 */
static void extents_tell(struct kvd *d, struct kvd_client *c, bool maps)
{
	c->ext_behind = false;
	for (uint32_t e = 0; e < d->pool.nr_extents; e++) {
		int news = ext_news(d, c, e), ret;

		if (!news || (news > 0 && !maps))
			continue;
		ret = send_extent(d, c, e, news < 0);
		if (ret == -EAGAIN || ret == -ENOBUFS || ret == -ETOOMANYREFS) {
			c->ext_behind = true;
			return;
		}
		/* It hung up: not an error of kvd's; the read armed on its
		 * socket sees the hang-up and lets it go as any other. */
		if (ret == -EPIPE || ret == -ECONNRESET)
			return;
		if (ret) {
			c->doomed = "cannot pass it a pool extent";
			d->doomed = true;
			return;
		}
	}
	if (maps)
		c->ext_epoch = d->ext_epoch;
}

/* Bring @c up to date: every extent of its tenant, drops of the rest. */
void kvd_extents_send(struct kvd *d, struct kvd_client *c)
{
	extents_tell(d, c, true);
}

/*
 * May kvd post @c a completion now? Only once @c has been sent every
 * extent its tenant owns (ring.c); catches up first when it can.
 */
bool kvd_extents_current(struct kvd *d, struct kvd_client *c)
{
	if (!d->pool.nr_extents)
		return true;
	if (c->ext_epoch == d->ext_epoch && !c->ext_behind)
		return true;
	extents_tell(d, c, true);
	return !c->ext_behind;
}

/* Drops go out at once, so the memory of a dropped extent can go back. */
static void extents_drop_all(struct kvd *d)
{
	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state == KVD_CLIENT_LIVE && c->ext_sent)
			extents_tell(d, c, false);
	}
}

/* pool->on_claim: extent @e is now @owner's (it had no page in use). */
int kvd_extent_claim(struct kvd_pool *pool, uint32_t e, int32_t owner)
{
	struct kvd *d = pool->priv;
	bool dropped = false;
	int ret = 0;

	if (d->ext_fd[e] >= 0 && pool->ext_last[e] != KVD_EXT_FREE &&
	    pool->ext_last[e] != owner) {
		ext_unback(d, e);	/* another tenant's bytes were here */
		dropped = true;
	}
	if (d->ext_fd[e] < 0) {
		ret = ext_back(d, e);
		if (ret && kvd_ratelimit(&d->rl_ext))
			kvd_err("extent %u: cannot back it: %s", e,
				strerror(-ret));
	}
	d->ext_idle[e] = 0;
	/* A new owner: its clients need it. Back to the tenant whose
	 * bytes it holds, it is news to nobody (ext_news), and a client
	 * allocating one block at a time is not rescanned every time. */
	if (pool->ext_last[e] != owner)
		d->ext_epoch++;
	if (dropped)
		extents_drop_all(d);
	/* To the client: kvd could not get the memory, whatever the cause. */
	return ret ? -ENOMEM : 0;
}

/* The tick: give back the memory of extents unused for a while. */
void kvd_extents_tick(struct kvd *d)
{
	bool changed = false;

	if (!d->ext_lazy)
		return;
	for (uint32_t e = 0; e < d->pool.nr_extents; e++) {
		if (d->ext_fd[e] < 0 || d->pool.ext_used[e]) {
			d->ext_idle[e] = 0;
			continue;
		}
		if (++d->ext_idle[e] < KVD_EXT_IDLE_TICKS)
			continue;
		ext_unback(d, e);
		changed = true;
	}
	if (changed)
		extents_drop_all(d);
}
