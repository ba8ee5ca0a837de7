/* SPDX-License-Identifier: MIT */
/*
 * Pool backends: where the pool's bytes live and how they reach clients.
 * kvd's books (pool.c, ns.c) never touch the bytes; the backend backs
 * and exports extents, and runs the block copies of COW.
 *
 *   host         sealed memfds in host RAM        (kvd/host.c)
 *   cuda vmm     cuMemCreate extents, POSIX fds   (kvd/cuda.c)
 *   cuda legacy  one cuMemAlloc, a CUDA IPC handle (kvd/cuda.c)
 */
#ifndef KVD_BACKEND_H
#define KVD_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

struct kvd;

/* One block copy, in pool byte offsets. */
struct kvd_copy {
	uint64_t	dst;
	uint64_t	src;
	uint64_t	bytes;
};

struct kvd_backend {
	const char	*name;		/* "host", "cuda vmm", "cuda legacy" */
	int		backend;	/* KV_BACKEND_* */
	int		export_kind;	/* KV_EXPORT_* */
	bool		extents;	/* exports extents (else one range) */
	bool		lazy;		/* extents backed on first use and given
					 * back when unused (grow and shrink) */
	/* kvd's own view of the pool: d->pool_map, no memory behind yet */
	int		(*init)(struct kvd *d);
	void		(*exit)(struct kvd *d);
	/* back extent @e = [off, off + len) and map it in kvd's view;
	 * returns the fd that clients get, or -errno */
	int		(*ext_create)(struct kvd *d, uint32_t e, uint64_t off,
				      uint64_t len);
	/* unmap, free the memory (clients that still map it keep theirs
	 * until they unmap) and close the fd */
	void		(*ext_destroy)(struct kvd *d, uint32_t e, uint64_t off,
				       uint64_t len, int fd);
	/* kvd exits: let go of extent @e without taking its bytes from
	 * clients that still map it (they keep it until they unmap);
	 * NULL: ext_destroy already leaves them their mappings */
	void		(*ext_close)(struct kvd *d, uint32_t e, uint64_t off,
				     uint64_t len, int fd);
	/* @n block copies, finished (visible to every client) on return */
	int		(*copy)(struct kvd *d, const struct kvd_copy *v,
				uint32_t n);
	/*
	 * The host tier's memory (kvd/tier.c): room for one block of
	 * @bytes, NULL when there is none, and its return. NULL ops:
	 * malloc and free. cuda: pinned (page-locked) host memory, which
	 * the GPU copies to and from at full speed (kvd/pinned.c).
	 */
	void		*(*tier_alloc)(struct kvd *d, uint64_t bytes);
	void		(*tier_free)(struct kvd *d, void *p, uint64_t bytes);
	/* @bytes between pool offset @off and host tier memory @host: out
	 * of the pool (@out) or into it, finished on return; 0 or -errno.
	 * NULL: memcpy through d->pool_map (the host backend's) */
	int		(*tier_copy)(struct kvd *d, void *host, uint64_t off,
				     uint64_t bytes, bool out);
};

extern const struct kvd_backend kvd_host_backend;

/*
 * kvd_cuda_open - load the driver, check device d->cfg.device and set
 * up the cuda backend of export d->cfg.export_kind; *be gets its ops.
 * -ENOSYS no driver (or built without CUDA), -ENODEV no such device,
 * -EOPNOTSUPP the device cannot export that way, -EINVAL extent size
 * not a multiple of the granularity; @why says which, for the user.
 */
int kvd_cuda_open(struct kvd *d, const struct kvd_backend **be, char *why,
		  size_t len);

/* kvd_cuda_probe - is there a CUDA device to use (--backend auto)? */
bool kvd_cuda_probe(char *why, size_t len);

/* kvd_cuda_close - after kvd_extents_destroy: context, stream, driver. */
void kvd_cuda_close(struct kvd *d);

/* kvd_cuda_welcome - the device and (legacy) IPC handle for WELCOME. */
struct kv_welcome;
void kvd_cuda_welcome(const struct kvd *d, struct kv_welcome *w);

/* For tests: the cuda backend through a driver table of their own. */
struct kv_cu;
int kvd_cuda_attach(struct kvd *d, const struct kv_cu *cu,
		    const struct kvd_backend **be, char *why, size_t len);

#endif /* KVD_BACKEND_H */
