// SPDX-License-Identifier: MIT
/*
 * The client's side of the cuda backend: find kvd's GPU among this
 * process's devices (by UUID: CUDA_VISIBLE_DEVICES may renumber it),
 * reserve one device address range as large as the pool and map each
 * extent kvd sends at its pool offset (vmm), or open the one legacy IPC
 * handle. Block offsets are then the same in every process.
 *
 * Ordering of device writes (the fence): before a COMMIT, RELEASE or COW
 * leaves this process, the library records an event on the caller's
 * stream (kv_set_stream; by default the legacy default stream, which
 * follows all work of the blocking streams) and waits for it, so no
 * other engine reads a block that is still being written and no block is
 * reused under a running kernel.
 *
 * Every call runs with the device's primary context pushed and popped,
 * so the caller's current context is left as it was.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib.h"

#ifdef KV_HAVE_CUDA
#include "cudadrv.h"

struct kv_cuda {
	const struct kv_cu *cu;
	int		ordinal;	/* this process's ordinal of kvd's GPU */
	CUdevice	dev;
	CUcontext	ctx;
	CUdeviceptr	va;
	bool		legacy;
	CUevent		ev;		/* the fence */
	CUstream	stream;
	bool		no_fence;
};

static struct kv_cu lib_cu;
static const struct kv_cu *lib_cu_override;
static pthread_once_t lib_cu_once = PTHREAD_ONCE_INIT;
static int lib_cu_err;
static char lib_cu_why[120];

static void lib_cu_load(void)
{
	lib_cu_err = __kv_cu_load(&lib_cu, lib_cu_why, sizeof(lib_cu_why));
}

/* Tests: use @cu instead of the installed driver (NULL: the driver). */
void __kv_cuda_set_driver(const struct kv_cu *cu)
{
	lib_cu_override = cu;
}

static const struct kv_cu *driver(char *why, size_t len)
{
	if (lib_cu_override)
		return lib_cu_override;
	pthread_once(&lib_cu_once, lib_cu_load);
	if (lib_cu_err) {
		snprintf(why, len, "kvd's pool is on a GPU, but %s", lib_cu_why);
		return NULL;
	}
	return &lib_cu;
}

static int fail(struct kv_client *c, const char *what, CUresult r)
{
	snprintf(c->why, sizeof(c->why), "%s: %s", what,
		 __kv_cu_errname(c->cuda->cu, r));
	return __kv_cu_errno(r);
}

static int push(struct kv_client *c)
{
	CUresult r = c->cuda->cu->ctx_push(c->cuda->ctx);

	return r == CUDA_SUCCESS ? 0 : fail(c, "cuCtxPushCurrent", r);
}

static void pop(struct kv_client *c)
{
	CUcontext old;

	c->cuda->cu->ctx_pop(&old);
}

/* kvd's GPU among ours, by UUID. */
static int find_device(struct kv_client *c, const struct kv_welcome *w)
{
	struct kv_cuda *k = c->cuda;
	const struct kv_cu *cu = k->cu;
	int n = 0;

	if (cu->device_get_count(&n) != CUDA_SUCCESS)
		n = 0;
	for (int i = 0; i < n; i++) {
		CUuuid u;

		if (cu->device_get(&k->dev, i) != CUDA_SUCCESS ||
		    cu->device_get_uuid(&u, k->dev) != CUDA_SUCCESS)
			continue;
		if (!memcmp(u.bytes, w->device_uuid, sizeof(u.bytes))) {
			k->ordinal = i;
			return 0;
		}
	}
	snprintf(c->why, sizeof(c->why),
		 "kvd's GPU (its device %d) is not visible in this process (%d devices; CUDA_VISIBLE_DEVICES?)",
		 w->device, n);
	return -ENODEV;
}

static int attach_range(struct kv_client *c, const struct kv_welcome *w)
{
	struct kv_cuda *k = c->cuda;
	CUipcMemHandle h;
	CUresult r;

	if (!k->legacy) {
		r = k->cu->mem_address_reserve(&k->va, c->pool_bytes,
					       KV_PAGE_BYTES, 0, 0);
		return r == CUDA_SUCCESS ? 0 :
		       fail(c, "cannot reserve the pool's device address range (cuMemAddressReserve)", r);
	}
	memcpy(&h, w->ipc_handle, sizeof(h));
	r = k->cu->ipc_open_mem_handle(&k->va, h,
				       CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	return r == CUDA_SUCCESS ? 0 :
	       fail(c, "cannot open kvd's CUDA IPC handle (cuIpcOpenMemHandle; another container or PID namespace?)", r);
}

/*
 * __kv_cuda_attach - after WELCOME: the device, its primary context, the
 * pool's address range (c->pool) and the fence event. On error c->why
 * says what failed and nothing is left behind.
 */
int __kv_cuda_attach(struct kv_client *c, const struct kv_welcome *w)
{
	struct kv_cuda *k;
	CUresult r;
	int ret;

	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	c->cuda = k;
	k->cu = driver(c->why, sizeof(c->why));
	if (!k->cu) {
		ret = -ENOSYS;
		goto err_free;
	}
	k->legacy = w->export_kind == KV_EXPORT_LEGACY;
	ret = find_device(c, w);
	if (ret)
		goto err_free;
	r = k->cu->primary_ctx_retain(&k->ctx, k->dev);
	if (r != CUDA_SUCCESS) {
		ret = fail(c, "cuDevicePrimaryCtxRetain", r);
		goto err_free;
	}
	ret = push(c);
	if (ret)
		goto err_release;
	ret = attach_range(c, w);
	if (ret)
		goto err_pop;
	r = k->cu->event_create(&k->ev, CU_EVENT_DISABLE_TIMING);
	if (r != CUDA_SUCCESS) {
		ret = fail(c, "cuEventCreate", r);
		goto err_range;
	}
	pop(c);
	c->pool = (void *)(uintptr_t)k->va;
	c->device = k->ordinal;
	return 0;

err_range:
	if (k->legacy)
		k->cu->ipc_close_mem_handle(k->va);
	else
		k->cu->mem_address_free(k->va, c->pool_bytes);
err_pop:
	pop(c);
err_release:
	k->cu->primary_ctx_release(k->dev);
err_free:
	free(k);
	c->cuda = NULL;
	return ret;
}

/*
 * __kv_cuda_map - import extent fd @fd (kvd's cuMemCreate export) and
 * map it at pool offset @off, replacing an older mapping of @e. The
 * mapping keeps the memory; the handle and fd go at once. On error no
 * part stays mapped.
 */
int __kv_cuda_map(struct kv_client *c, uint32_t e, uint64_t off,
		  uint64_t bytes, int fd)
{
	struct kv_cuda *k = c->cuda;
	const struct kv_cu *cu = k->cu;
	CUmemAccessDesc acc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
			      .id = k->ordinal },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle h;
	CUresult r;
	int ret;

	ret = push(c);
	if (ret)
		return ret;
	if (c->ext_gen[e]) {
		cu->mem_unmap(k->va + off, c->ext_bytes[e]);
		c->ext_gen[e] = 0;
	}
	r = cu->mem_import(&h, (void *)(uintptr_t)fd,
			   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS) {
		ret = fail(c, "cannot import a pool extent (cuMemImportFromShareableHandle)", r);
		goto out;
	}
	r = cu->mem_map(k->va + off, bytes, 0, h, 0);
	if (r != CUDA_SUCCESS) {
		ret = fail(c, "cannot map a pool extent (cuMemMap)", r);
		goto out_release;
	}
	r = cu->mem_set_access(k->va + off, bytes, &acc, 1);
	if (r != CUDA_SUCCESS) {
		ret = fail(c, "cannot enable access to a pool extent (cuMemSetAccess)", r);
		cu->mem_unmap(k->va + off, bytes);
	}
out_release:
	cu->mem_release(h);
out:
	pop(c);
	return ret;
}

/* __kv_cuda_unmap - kvd dropped extent @e: give its memory back. */
void __kv_cuda_unmap(struct kv_client *c, uint32_t e, uint64_t off,
		     uint64_t bytes)
{
	if (push(c))
		return;
	c->cuda->cu->mem_unmap(c->cuda->va + off, bytes);
	pop(c);
}

int __kv_cuda_fence(struct kv_client *c)
{
	struct kv_cuda *k = c->cuda;
	CUresult r;
	int ret;

	if (k->no_fence)
		return 0;
	ret = push(c);
	if (ret)
		return ret;
	r = k->cu->event_record(k->ev, k->stream);
	if (r == CUDA_SUCCESS)
		r = k->cu->event_synchronize(k->ev);
	pop(c);
	return r == CUDA_SUCCESS ? 0 : fail(c, "waiting for the stream's work on kvd blocks", r);
}

/* __kv_cuda_detach - the stream's work done, every mapping gone. */
void __kv_cuda_detach(struct kv_client *c)
{
	struct kv_cuda *k = c->cuda;

	if (!k)
		return;
	__kv_cuda_fence(c);
	if (!push(c)) {
		for (uint32_t e = 0; !k->legacy && e < c->nr_extents; e++)
			if (c->ext_gen[e])
				k->cu->mem_unmap(k->va + (uint64_t)e *
						 c->extent_bytes,
						 c->ext_bytes[e]);
		if (k->legacy)
			k->cu->ipc_close_mem_handle(k->va);
		else
			k->cu->mem_address_free(k->va, c->pool_bytes);
		k->cu->event_destroy(k->ev);
		pop(c);
	}
	k->cu->primary_ctx_release(k->dev);
	free(k);
	c->cuda = NULL;
}

int kv_set_stream(struct kv_client *c, void *stream)
{
	if (!c)
		return -EINVAL;
	if (c->backend != KV_BACKEND_CUDA)
		return stream && stream != KV_STREAM_NONE ? -EOPNOTSUPP : 0;
	c->cuda->no_fence = stream == KV_STREAM_NONE;
	c->cuda->stream = c->cuda->no_fence ? NULL : (CUstream)stream;
	return 0;
}

#else /* !KV_HAVE_CUDA */

int __kv_cuda_attach(struct kv_client *c, const struct kv_welcome *w)
{
	snprintf(c->why, sizeof(c->why),
		 "kvd's pool is on a GPU, but libkvclient was built without CUDA");
	return -ENOSYS;
}

int __kv_cuda_map(struct kv_client *c, uint32_t e, uint64_t off,
		  uint64_t bytes, int fd)
{
	return -ENOSYS;
}

void __kv_cuda_unmap(struct kv_client *c, uint32_t e, uint64_t off,
		     uint64_t bytes)
{
}

int __kv_cuda_fence(struct kv_client *c)
{
	return 0;
}

void __kv_cuda_detach(struct kv_client *c)
{
}

int kv_set_stream(struct kv_client *c, void *stream)
{
	if (!c)
		return -EINVAL;
	return stream && stream != KV_STREAM_NONE ? -EOPNOTSUPP : 0;
}
#endif /* KV_HAVE_CUDA */
