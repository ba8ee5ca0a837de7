// SPDX-License-Identifier: MIT
/*
 * The host backend's extents: the pool is a row of sealed memfds, one per
 * extent, mapped at their pool offsets (kvd's own mapping and every
 * client's), so a block is still at pool base + id * block_bytes.
 *
 * Isolation by extents: an extent belongs to one tenant while any of its
 * pages is in use (kvd/pool.c), and a client receives only its tenant's
 * extents. When an extent passes to another tenant it gets a new memfd:
 * the old one, which earlier clients may still map, is emptied (hole
 * punched) and dropped, so no tenant ever sees another's KV bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/memfd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "daemon.h"

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

/* A sealed memfd of @len bytes mapped at its place in kvd's view. */
static int ext_map(struct kvd *d, uint32_t e)
{
	unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	uint64_t len = ext_len(d, e);
	void *at = (uint8_t *)d->pool_map + ext_off(d, e);
	int fd;

	if (d->cfg.hugepages)
		flags |= MFD_HUGETLB | MFD_HUGE_2MB;
	fd = memfd_create("kvd-pool", flags);
	if (fd < 0)
		return -errno;
	/* Clients must not resize an extent under kvd or each other. */
	if (ftruncate(fd, (off_t)len) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
	    mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
		 0) == MAP_FAILED) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

/*
 * kvd_extents_create - reserve the pool's address range and back it with
 * extents of @extent_bytes. Huge pages are reserved at mmap time, so a
 * shortage fails here, not in every client.
 */
int kvd_extents_create(struct kvd *d, uint64_t extent_bytes)
{
	uint32_t n;
	int ret;

	ret = kvd_pool_set_extents(&d->pool,
				   (uint32_t)(extent_bytes / KV_PAGE_BYTES));
	if (ret)
		return ret;
	n = d->pool.nr_extents;
	d->ext_fd = malloc(n * sizeof(*d->ext_fd));
	d->ext_gen = calloc(n, sizeof(*d->ext_gen));
	if (!d->ext_fd || !d->ext_gen)
		return -ENOMEM;
	d->pool_map = mmap(NULL, d->pool.bytes, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->pool_map == MAP_FAILED) {
		d->pool_map = NULL;
		return -errno;
	}
	for (uint32_t e = 0; e < n; e++) {
		d->ext_fd[e] = ext_map(d, e);
		if (d->ext_fd[e] < 0) {
			ret = d->ext_fd[e];
			while (e--)
				close(d->ext_fd[e]);
			return ret;
		}
		d->ext_gen[e] = 1;
	}
	d->pool.on_claim = kvd_extent_claim;
	d->pool.priv = d;
	return 0;
}

void kvd_extents_destroy(struct kvd *d)
{
	for (uint32_t e = 0; d->ext_fd && e < d->pool.nr_extents; e++)
		close(d->ext_fd[e]);
	if (d->pool_map)
		munmap(d->pool_map, d->pool.bytes);
	free(d->ext_fd);
	free(d->ext_gen);
}

static int send_extent(struct kvd *d, struct kvd_client *c, uint32_t e)
{
	struct kv_extent_msg m = {
		.magic = KV_MAGIC, .type = KV_MSG_EXTENT, .size = sizeof(m),
		.index = e, .offset = ext_off(d, e), .bytes = ext_len(d, e),
		.gen = d->ext_gen[e],
	};
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &d->ext_fd[e], sizeof(int));
	if (sendmsg(c->sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	c->ext_sent[e] = d->ext_gen[e];
	/* Tell the library to read it before it touches the extent: it
	 * may still map an older memfd of this index. Published with the
	 * CQEs that follow (release), so seen before they are. */
	if (c->sq_kflags)
		kv_atomic_or(c->sq_kflags, KV_SQ_EXTENTS);
	return 0;
}

/*
 * Send @c every extent its tenant owns that it lacks. An idle client's
 * socket may be full of extents it has not read yet (it reads them on its
 * next request): the rest is sent before kvd serves its ring again
 * (ext_behind). A client whose socket is gone is disconnected.
 */
void kvd_extents_send(struct kvd *d, struct kvd_client *c)
{
	c->ext_behind = false;
	for (uint32_t e = 0; e < d->pool.nr_extents; e++) {
		int ret;

		if (d->pool.ext_owner[e] != c->tenant ||
		    c->ext_sent[e] == d->ext_gen[e])
			continue;
		ret = send_extent(d, c, e);
		if (ret == -EAGAIN || ret == -ENOBUFS) {
			c->ext_behind = true;
			return;
		}
		if (ret) {
			c->doomed = "cannot pass it a pool extent";
			d->doomed = true;
			return;
		}
	}
}

/* pool->on_claim: extent @e is now @owner's (it had no page in use). */
int kvd_extent_claim(struct kvd_pool *pool, uint32_t e, int32_t owner)
{
	struct kvd *d = pool->priv;
	int fd;

	if (pool->ext_last[e] != KVD_EXT_FREE && pool->ext_last[e] != owner) {
		/* Another tenant's bytes were here: a fresh memfd. */
		fd = ext_map(d, e);
		if (fd < 0) {
			kvd_err("extent %u: new memfd: %s", e, strerror(-fd));
			return fd;
		}
		fallocate(d->ext_fd[e], FALLOC_FL_PUNCH_HOLE |
			  FALLOC_FL_KEEP_SIZE, 0, (off_t)ext_len(d, e));
		close(d->ext_fd[e]);
		d->ext_fd[e] = fd;
		d->ext_gen[e]++;
	}
	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state == KVD_CLIENT_LIVE && c->tenant == owner)
			kvd_extents_send(d, c);
	}
	return 0;
}
