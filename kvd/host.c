// SPDX-License-Identifier: MIT
/*
 * The host backend: each extent is a sealed memfd, mapped at its pool
 * offset in kvd's view and every client's, so a block is at pool base +
 * id * block_bytes everywhere. Without huge pages extents are made on
 * first use and given back when unused (kvd/extent.c); with huge pages
 * they are all made at start, where a shortage should show. While kvd
 * runs, an extent's memory is punched out when it is given back (no page
 * of it in use); when kvd exits it is left to the clients' mappings.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/memfd.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "daemon.h"

static int host_init(struct kvd *d)
{
	void *p = mmap(NULL, d->pool.bytes, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	d->pool_map = p;
	return 0;
}

static void host_exit(struct kvd *d)
{
	if (d->pool_map)
		munmap(d->pool_map, d->pool.bytes);
	d->pool_map = NULL;
}

/* A sealed memfd of @len bytes mapped at its place in kvd's view. */
static int host_ext_create(struct kvd *d, uint32_t e, uint64_t off,
			   uint64_t len)
{
	unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	void *at = (uint8_t *)d->pool_map + off;
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
 * The memory goes back at once, even while clients that have not read
 * their DROP yet still map the memfd: the hole reads as zeros (a
 * hugetlbfs hole faults with SIGBUS), so no later tenant's bytes or
 * earlier one's are ever seen through it. Only a client touching memory
 * it holds no block of can see either.
 */
static void host_ext_destroy(struct kvd *d, uint32_t e, uint64_t off,
			     uint64_t len, int fd)
{
	mmap((uint8_t *)d->pool_map + off, len, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		  (off_t)len);
	close(fd);
}

/*
 * kvd exits: no hole here. An engine that still maps a block it holds
 * keeps reading its bytes (not zeros) until it unmaps; the kernel frees
 * the memfd with its last mapping. Only kvd's view and fd go.
 */
static void host_ext_close(struct kvd *d, uint32_t e, uint64_t off,
			   uint64_t len, int fd)
{
	(void)e;
	munmap((uint8_t *)d->pool_map + off, len);
	close(fd);
}

static int host_copy(struct kvd *d, const struct kvd_copy *v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		memcpy((uint8_t *)d->pool_map + v[i].dst,
		       (uint8_t *)d->pool_map + v[i].src, v[i].bytes);
	return 0;
}

const struct kvd_backend kvd_host_backend = {
	.name		= "host",
	.backend	= KV_BACKEND_HOST,
	.export_kind	= KV_EXPORT_MEMFD,
	.extents	= true,
	.lazy		= true,
	.init		= host_init,
	.exit		= host_exit,
	.ext_create	= host_ext_create,
	.ext_destroy	= host_ext_destroy,
	.ext_close	= host_ext_close,
	.copy		= host_copy,
};
