// SPDX-License-Identifier: MIT
/*
 * The cuda backend: the pool in one GPU's memory.
 *
 * vmm (default): kvd reserves one device address range for the whole
 * pool and backs it extent by extent with cuMemCreate allocations that
 * can be exported as POSIX fds. Each fd goes to the extent's tenant's
 * clients by SCM_RIGHTS; libkvclient imports it and maps it at the same
 * pool offset in its own reserved range (libkvclient/cuda.c). The pool
 * grows and shrinks by extents (kvd/extent.c).
 *
 * legacy: one cuMemAlloc of the whole pool (what cudaMalloc does) and
 * its IPC handle (byte-compatible with cudaIpcMemHandle_t) in WELCOME.
 * For drivers or containers without VMM fd export; no isolation by
 * extents: every client maps the whole pool.
 *
 * COW copies run on a stream of kvd's, synchronised before the CQE is
 * posted. The driver is reached through struct kv_cu (cudadrv.h), which
 * tests replace with mocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "daemon.h"

#ifdef KV_HAVE_CUDA
#include "../libkvclient/cudadrv.h"
#include "pinned.h"

struct kvd_cuda {
	struct kv_cu	own;		/* the loaded driver table */
	const struct kv_cu *cu;		/* &own, or a test's mock */
	int		ordinal;
	CUdevice	dev;
	CUcontext	ctx;
	bool		ctx_pushed;
	CUstream	stream;		/* COW copies and zeroing */
	CUdeviceptr	va;		/* vmm: kvd's view; legacy: the pool */
	size_t		gran;
	CUmemGenericAllocationHandle *h;	/* vmm: [nr_extents] */
	CUipcMemHandle	ipc;		/* legacy */
	CUuuid		uuid;
	struct kvd_pinned pinned;	/* the host tier's memory */
};

#define CU(d)	((d)->cuda->cu)

static int cu_fail(struct kvd *d, const char *what, CUresult r)
{
	kvd_err("cuda: %s: %s", what, __kv_cu_errname(CU(d), r));
	return __kv_cu_errno(r);
}

static CUmemAllocationProp vmm_prop(const struct kvd_cuda *k)
{
	CUmemAllocationProp p = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
			      .id = k->ordinal },
	};

	return p;
}

/* Zero [p, p + n) and wait: no tenant sees what the memory held before. */
static int zero(struct kvd *d, CUdeviceptr p, size_t n)
{
	CUresult r = CU(d)->memset_d8_async(p, 0, n, d->cuda->stream);

	if (r == CUDA_SUCCESS)
		r = CU(d)->stream_synchronize(d->cuda->stream);
	return r == CUDA_SUCCESS ? 0 : cu_fail(d, "cuMemsetD8Async", r);
}

static int vmm_init(struct kvd *d)
{
	struct kvd_cuda *k = d->cuda;
	CUresult r;

	k->h = calloc(d->pool.nr_extents, sizeof(*k->h));
	if (!k->h)
		return -ENOMEM;
	r = CU(d)->mem_address_reserve(&k->va, d->pool.bytes, k->gran, 0, 0);
	if (r != CUDA_SUCCESS) {
		free(k->h);
		k->h = NULL;
		k->va = 0;
		return cu_fail(d, "cuMemAddressReserve", r);
	}
	d->pool_map = (void *)(uintptr_t)k->va;
	return 0;
}

static void vmm_exit(struct kvd *d)
{
	struct kvd_cuda *k = d->cuda;

	if (k->va)
		CU(d)->mem_address_free(k->va, d->pool.bytes);
	k->va = 0;
	free(k->h);
	k->h = NULL;
	d->pool_map = NULL;
}

/*
 * cuMemCreate -> export fd -> map in kvd's view -> access -> zero. Each
 * failure undoes the steps before it.
 */
static int vmm_ext_create(struct kvd *d, uint32_t e, uint64_t off,
			  uint64_t len)
{
	struct kvd_cuda *k = d->cuda;
	CUmemAllocationProp prop = vmm_prop(k);
	CUmemAccessDesc acc = {
		.location = prop.location,
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle h;
	int fd = -1, ret;
	CUresult r;

	r = CU(d)->mem_create(&h, len, &prop, 0);
	if (r != CUDA_SUCCESS)
		return cu_fail(d, "cuMemCreate", r);
	r = CU(d)->mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
			      0);
	if (r != CUDA_SUCCESS || fd < 0) {
		ret = cu_fail(d, "cuMemExportToShareableHandle", r);
		goto err_release;
	}
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	r = CU(d)->mem_map(k->va + off, len, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		ret = cu_fail(d, "cuMemMap", r);
		goto err_close;
	}
	r = CU(d)->mem_set_access(k->va + off, len, &acc, 1);
	if (r != CUDA_SUCCESS) {
		ret = cu_fail(d, "cuMemSetAccess", r);
		goto err_unmap;
	}
	ret = zero(d, k->va + off, len);
	if (ret)
		goto err_unmap;
	k->h[e] = h;
	return fd;

err_unmap:
	CU(d)->mem_unmap(k->va + off, len);
err_close:
	close(fd);
err_release:
	CU(d)->mem_release(h);
	return ret ? ret : -EIO;
}

/* Clients that still map it keep the memory until they unmap (DROP). */
static void vmm_ext_destroy(struct kvd *d, uint32_t e, uint64_t off,
			    uint64_t len, int fd)
{
	struct kvd_cuda *k = d->cuda;
	CUresult r;

	r = CU(d)->mem_unmap(k->va + off, len);
	if (r != CUDA_SUCCESS)
		cu_fail(d, "cuMemUnmap", r);
	r = CU(d)->mem_release(k->h[e]);
	if (r != CUDA_SUCCESS)
		cu_fail(d, "cuMemRelease", r);
	k->h[e] = 0;
	close(fd);
}

static int legacy_init(struct kvd *d)
{
	struct kvd_cuda *k = d->cuda;
	CUresult r;
	int ret;

	r = CU(d)->mem_alloc(&k->va, d->pool.bytes);
	if (r != CUDA_SUCCESS)
		return cu_fail(d, "cuMemAlloc (the whole pool)", r);
	r = CU(d)->ipc_get_mem_handle(&k->ipc, k->va);
	if (r != CUDA_SUCCESS) {
		ret = cu_fail(d, "cuIpcGetMemHandle", r);
		goto err_free;
	}
	ret = zero(d, k->va, d->pool.bytes);
	if (ret)
		goto err_free;
	d->pool_map = (void *)(uintptr_t)k->va;
	return 0;

err_free:
	CU(d)->mem_free(k->va);
	k->va = 0;
	return ret;
}

static void legacy_exit(struct kvd *d)
{
	if (d->cuda->va)
		CU(d)->mem_free(d->cuda->va);
	d->cuda->va = 0;
	d->pool_map = NULL;
}

/* On kvd's stream, waited for: the client sees the copy before the CQE. */
static int cuda_copy(struct kvd *d, const struct kvd_copy *v, uint32_t n)
{
	struct kvd_cuda *k = d->cuda;
	CUresult r = CUDA_SUCCESS;

	for (uint32_t i = 0; i < n && r == CUDA_SUCCESS; i++)
		r = CU(d)->memcpy_dtod_async(k->va + v[i].dst, k->va + v[i].src,
					     v[i].bytes, k->stream);
	if (r == CUDA_SUCCESS)
		r = CU(d)->stream_synchronize(k->stream);
	return r == CUDA_SUCCESS ? 0 : cu_fail(d, "block copy", r);
}

/* ---- the host tier: pinned host memory, copies on kvd's stream ---- */

static void *pinned_chunk(void *ctx, uint64_t bytes)
{
	struct kvd *d = ctx;
	void *p = NULL;
	CUresult r = CU(d)->mem_host_alloc(&p, bytes,
					   CU_MEMHOSTALLOC_PORTABLE);

	if (r != CUDA_SUCCESS) {
		cu_fail(d, "pinned host memory for the host tier", r);
		return NULL;
	}
	return p;
}

static void pinned_chunk_free(void *ctx, void *p, uint64_t bytes)
{
	struct kvd *d = ctx;

	(void)bytes;
	CU(d)->mem_free_host(p);
}

/* Chunks within the tier's size, and one chunk per block size over. */
static void *cuda_tier_alloc(struct kvd *d, uint64_t bytes)
{
	struct kvd_pinned *a = &d->cuda->pinned;

	if (!a->chunk_alloc) {
		a->chunk_alloc = pinned_chunk;
		a->chunk_free = pinned_chunk_free;
		a->ctx = d;
		a->limit = d->cfg.host_tier_bytes +
			   KVD_PINNED_CLASSES * KVD_PINNED_CHUNK;
	}
	return kvd_pinned_get(a, bytes);
}

static void cuda_tier_free(struct kvd *d, void *p, uint64_t bytes)
{
	kvd_pinned_put(&d->cuda->pinned, p, bytes);
}

/* Waited for: a demoted block's bytes are read before it is reused, a
 * promoted one's written before the CQE that names it. */
static int cuda_tier_copy(struct kvd *d, void *host, uint64_t off,
			  uint64_t bytes, bool out)
{
	struct kvd_cuda *k = d->cuda;
	CUresult r;

	if (out)
		r = CU(d)->memcpy_dtoh_async(host, k->va + off, bytes,
					     k->stream);
	else
		r = CU(d)->memcpy_htod_async(k->va + off, host, bytes,
					     k->stream);
	if (r == CUDA_SUCCESS)
		r = CU(d)->stream_synchronize(k->stream);
	return r == CUDA_SUCCESS ? 0 : cu_fail(d, out ?
			"host tier: copy out of the pool" :
			"host tier: copy into the pool", r);
}

static const struct kvd_backend cuda_vmm_backend = {
	.name		= "cuda vmm",
	.backend	= KV_BACKEND_CUDA,
	.export_kind	= KV_EXPORT_VMM,
	.extents	= true,
	.lazy		= true,
	.init		= vmm_init,
	.exit		= vmm_exit,
	.ext_create	= vmm_ext_create,
	.ext_destroy	= vmm_ext_destroy,
	.copy		= cuda_copy,
	.tier_alloc	= cuda_tier_alloc,
	.tier_free	= cuda_tier_free,
	.tier_copy	= cuda_tier_copy,
};

static const struct kvd_backend cuda_legacy_backend = {
	.name		= "cuda legacy",
	.backend	= KV_BACKEND_CUDA,
	.export_kind	= KV_EXPORT_LEGACY,
	.init		= legacy_init,
	.exit		= legacy_exit,
	.copy		= cuda_copy,
	.tier_alloc	= cuda_tier_alloc,
	.tier_free	= cuda_tier_free,
	.tier_copy	= cuda_tier_copy,
};

static int attr(const struct kv_cu *cu, CUdevice dev, CUdevice_attribute a)
{
	int v = 0;

	return cu->device_get_attribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

/* Can device k->dev export the way we were asked to? */
static int check_device(struct kvd *d, char *why, size_t len)
{
	struct kvd_cuda *k = d->cuda;
	const struct kv_cu *cu = k->cu;
	CUmemAllocationProp prop = vmm_prop(k);
	uint64_t ext = d->cfg.extent_bytes;
	CUresult r;

	if (d->cfg.export_kind == KV_EXPORT_LEGACY)
		return 0;
	if (!attr(cu, k->dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) ||
	    !attr(cu, k->dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)) {
		snprintf(why, len, "device %d cannot export memory as POSIX fds (CUDA VMM); try --export legacy",
			 k->ordinal);
		return -EOPNOTSUPP;
	}
	r = cu->mem_get_granularity(&k->gran, &prop,
				    CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS || !k->gran) {
		snprintf(why, len, "cuMemGetAllocationGranularity: %s",
			 __kv_cu_errname(cu, r));
		return __kv_cu_errno(r ? r : CUDA_ERROR_UNKNOWN);
	}
	if (KV_PAGE_BYTES % k->gran || ext % k->gran) {
		snprintf(why, len, "the extent size (%llu bytes) is not a multiple of device %d's allocation granularity (%zu bytes)",
			 (unsigned long long)ext, k->ordinal, k->gran);
		return -EINVAL;
	}
	return 0;
}

static void cuda_free(struct kvd *d)
{
	struct kvd_cuda *k = d->cuda;

	if (!k)
		return;
	if (k->pinned.chunk_alloc)
		kvd_pinned_exit(&k->pinned);	/* the tiers are gone */
	if (k->stream)
		k->cu->stream_destroy(k->stream);
	if (k->ctx_pushed) {
		CUcontext old;

		k->cu->ctx_pop(&old);
	}
	if (k->ctx)
		k->cu->primary_ctx_release(k->dev);
	if (k->own.lib)
		__kv_cu_unload(&k->own);
	free(k);
	d->cuda = NULL;
}

/*
 * kvd_cuda_attach - the cuda backend on device d->cfg.device through the
 * driver table @cu (the real one, or a test's; d->cuda NULL then). Leaves
 * kvd's context current: kvd is one thread. On error d->cuda is freed.
 */
int kvd_cuda_attach(struct kvd *d, const struct kv_cu *cu,
		    const struct kvd_backend **be, char *why, size_t len)
{
	struct kvd_cuda *k = d->cuda;
	int n = 0, ret;
	CUresult r;

	if (!k) {
		k = d->cuda = calloc(1, sizeof(*k));
		if (!k)
			return -ENOMEM;
	}
	k->cu = cu;
	k->ordinal = d->cfg.device;
	r = cu->device_get_count(&n);
	if (r != CUDA_SUCCESS || k->ordinal >= n) {
		snprintf(why, len, "no CUDA device %d (this host has %d)",
			 k->ordinal, r == CUDA_SUCCESS ? n : 0);
		ret = -ENODEV;
		goto err;
	}
	r = cu->device_get(&k->dev, k->ordinal);
	if (r == CUDA_SUCCESS)
		r = cu->device_get_uuid(&k->uuid, k->dev);
	if (r != CUDA_SUCCESS) {
		snprintf(why, len, "device %d: %s", k->ordinal,
			 __kv_cu_errname(cu, r));
		ret = -ENODEV;
		goto err;
	}
	ret = check_device(d, why, len);
	if (ret)
		goto err;
	r = cu->primary_ctx_retain(&k->ctx, k->dev);
	if (r == CUDA_SUCCESS) {
		r = cu->ctx_push(k->ctx);
		k->ctx_pushed = r == CUDA_SUCCESS;
	}
	if (r == CUDA_SUCCESS) {
		CUstream s = NULL;

		r = cu->stream_create(&s, CU_STREAM_NON_BLOCKING);
		if (r == CUDA_SUCCESS)
			k->stream = s;
	}
	if (r != CUDA_SUCCESS) {
		snprintf(why, len, "device %d: context: %s", k->ordinal,
			 __kv_cu_errname(cu, r));
		ret = __kv_cu_errno(r);
		goto err;
	}
	*be = d->cfg.export_kind == KV_EXPORT_LEGACY ? &cuda_legacy_backend :
						       &cuda_vmm_backend;
	return 0;
err:
	cuda_free(d);
	return ret;
}

int kvd_cuda_open(struct kvd *d, const struct kvd_backend **be, char *why,
		  size_t len)
{
	int ret;

	d->cuda = calloc(1, sizeof(*d->cuda));
	if (!d->cuda)
		return -ENOMEM;
	ret = __kv_cu_load(&d->cuda->own, why, len);
	if (ret) {
		free(d->cuda);
		d->cuda = NULL;
		return ret;
	}
	return kvd_cuda_attach(d, &d->cuda->own, be, why, len);
}

void kvd_cuda_close(struct kvd *d)
{
	cuda_free(d);
}

bool kvd_cuda_probe(char *why, size_t len)
{
	struct kv_cu cu;
	int n = 0;

	if (__kv_cu_load(&cu, why, len))
		return false;
	if (cu.device_get_count(&n) != CUDA_SUCCESS || n < 1)
		snprintf(why, len, "the CUDA driver sees no device");
	__kv_cu_unload(&cu);
	return n > 0;
}

void kvd_cuda_welcome(const struct kvd *d, struct kv_welcome *w)
{
	const struct kvd_cuda *k = d->cuda;

	w->device = k->ordinal;
	memcpy(w->device_uuid, &k->uuid, sizeof(w->device_uuid));
	if (d->be->export_kind == KV_EXPORT_LEGACY)
		memcpy(w->ipc_handle, &k->ipc, sizeof(w->ipc_handle));
}

#else /* !KV_HAVE_CUDA */

int kvd_cuda_open(struct kvd *d, const struct kvd_backend **be, char *why,
		  size_t len)
{
	snprintf(why, len, "kvd was built without the CUDA toolkit (cuda.h not found)");
	return -ENOSYS;
}

void kvd_cuda_close(struct kvd *d)
{
}

bool kvd_cuda_probe(char *why, size_t len)
{
	snprintf(why, len, "kvd was built without the CUDA toolkit");
	return false;
}

void kvd_cuda_welcome(const struct kvd *d, struct kv_welcome *w)
{
}
#endif /* KV_HAVE_CUDA */
