// SPDX-License-Identifier: MIT
/*
 * Filling struct kv_cu from the installed driver: dlopen libcuda.so.1,
 * then cuGetProcAddress for every entry point at CUDA 12.0's ABI (the
 * way the CUDA runtime's cudaGetDriverEntryPoint works, without linking
 * a runtime that would demand a newer driver than the calls need), in
 * their legacy-stream flavour: stream 0 is the legacy default stream.
 */
#ifdef KV_HAVE_CUDA
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cudadrv.h"

typedef CUresult (*get_proc_fn)(const char *sym, void **pfn, int ver,
				cuuint64_t flags,
				CUdriverProcAddressQueryResult *status);

static const struct {
	const char	*sym;
	size_t		off;
} cu_syms[] = {
#define E(sym, field)	{ sym, offsetof(struct kv_cu, field) }
	E("cuInit", init),
	E("cuGetErrorName", get_error_name),
	E("cuDeviceGetCount", device_get_count),
	E("cuDeviceGet", device_get),
	E("cuDeviceGetUuid", device_get_uuid),
	E("cuDeviceGetAttribute", device_get_attribute),
	E("cuDevicePrimaryCtxRetain", primary_ctx_retain),
	E("cuDevicePrimaryCtxRelease", primary_ctx_release),
	E("cuCtxPushCurrent", ctx_push),
	E("cuCtxPopCurrent", ctx_pop),
	E("cuMemGetAllocationGranularity", mem_get_granularity),
	E("cuMemCreate", mem_create),
	E("cuMemRelease", mem_release),
	E("cuMemExportToShareableHandle", mem_export),
	E("cuMemImportFromShareableHandle", mem_import),
	E("cuMemAddressReserve", mem_address_reserve),
	E("cuMemAddressFree", mem_address_free),
	E("cuMemMap", mem_map),
	E("cuMemUnmap", mem_unmap),
	E("cuMemSetAccess", mem_set_access),
	E("cuMemAlloc", mem_alloc),
	E("cuMemFree", mem_free),
	E("cuIpcGetMemHandle", ipc_get_mem_handle),
	E("cuIpcOpenMemHandle", ipc_open_mem_handle),
	E("cuIpcCloseMemHandle", ipc_close_mem_handle),
	E("cuMemsetD8Async", memset_d8_async),
	E("cuMemcpyDtoDAsync", memcpy_dtod_async),
	E("cuMemcpyDtoHAsync", memcpy_dtoh_async),
	E("cuMemcpyHtoDAsync", memcpy_htod_async),
	E("cuMemHostAlloc", mem_host_alloc),
	E("cuMemFreeHost", mem_free_host),
	E("cuStreamCreate", stream_create),
	E("cuStreamDestroy", stream_destroy),
	E("cuStreamSynchronize", stream_synchronize),
	E("cuEventCreate", event_create),
	E("cuEventDestroy", event_destroy),
	E("cuEventRecord", event_record),
	E("cuEventSynchronize", event_synchronize),
#undef E
};

static void say(char *why, size_t len, const char *fmt, const char *a)
{
	if (why && len)
		snprintf(why, len, fmt, a);
}

int __kv_cu_load(struct kv_cu *cu, char *why, size_t len)
{
	get_proc_fn get_proc;
	CUresult r;

	memset(cu, 0, sizeof(*cu));
	cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		say(why, len, "no CUDA driver (%s)", dlerror());
		return -ENOSYS;
	}
	get_proc = (get_proc_fn)dlsym(cu->lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		say(why, len, "the CUDA driver is older than 12.0%s", "");
		goto err_close;
	}
	for (size_t i = 0; i < sizeof(cu_syms) / sizeof(cu_syms[0]); i++) {
		CUdriverProcAddressQueryResult st;
		void **slot = (void **)((char *)cu + cu_syms[i].off);

		r = get_proc(cu_syms[i].sym, slot, KV_CU_API_VERSION,
			     CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st);
		if (r != CUDA_SUCCESS || !*slot) {
			say(why, len, "the CUDA driver lacks %s",
			    cu_syms[i].sym);
			goto err_close;
		}
	}
	r = cu->init(0);
	if (r != CUDA_SUCCESS) {
		say(why, len, "cuInit: %s", __kv_cu_errname(cu, r));
		__kv_cu_unload(cu);
		return -ENODEV;
	}
	return 0;

err_close:
	__kv_cu_unload(cu);
	return -ENOENT;
}

/*
 * Forget the table; the library stays loaded. cuInit starts driver
 * threads that run its code, so libcuda is never dlclose'd (the CUDA
 * runtime does not unload it either).
 */
void __kv_cu_unload(struct kv_cu *cu)
{
	memset(cu, 0, sizeof(*cu));
}

const char *__kv_cu_errname(const struct kv_cu *cu, CUresult err)
{
	const char *s = NULL;

	if (!cu->get_error_name || cu->get_error_name(err, &s) != CUDA_SUCCESS ||
	    !s)
		return "unknown CUDA error";
	return s;
}

int __kv_cu_errno(CUresult err)
{
	switch (err) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EPERM;
	default:
		return -EIO;
	}
}
#endif /* KV_HAVE_CUDA */
