/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver API as a table of function pointers, shared by kvd's
 * cuda backend and libkvclient. Nothing links against libcuda: the table
 * is filled at run time from dlopen("libcuda.so.1") and cuGetProcAddress
 * (DESIGN.md "GPU side"), so the same binaries start on hosts with no
 * GPU or driver. Tests fill it with mocks (tests/unit/test_cuda.c).
 *
 * Compiled only where the CUDA toolkit's headers are (KV_HAVE_CUDA); the
 * types are cuda.h's. Entry points are asked for at CUDA 12.0 (the ABI
 * of every call below), so any driver from 12.0 on serves.
 */
#ifndef KV_CUDADRV_H
#define KV_CUDADRV_H

#ifdef KV_HAVE_CUDA
#include <stddef.h>
#include <cuda.h>

#define KV_CU_API_VERSION	12000

struct kv_cu {
	void	*lib;		/* dlopen handle, NULL for a mock */
	CUresult (*init)(unsigned int flags);
	CUresult (*get_error_name)(CUresult err, const char **s);
	CUresult (*device_get_count)(int *n);
	CUresult (*device_get)(CUdevice *dev, int ordinal);
	CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*device_get_attribute)(int *v, CUdevice_attribute a,
					 CUdevice dev);
	CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
	CUresult (*primary_ctx_release)(CUdevice dev);
	CUresult (*ctx_push)(CUcontext ctx);
	CUresult (*ctx_pop)(CUcontext *ctx);
	CUresult (*mem_get_granularity)(size_t *g,
					const CUmemAllocationProp *prop,
					CUmemAllocationGranularity_flags f);
	CUresult (*mem_create)(CUmemGenericAllocationHandle *h, size_t bytes,
			       const CUmemAllocationProp *prop,
			       unsigned long long flags);
	CUresult (*mem_release)(CUmemGenericAllocationHandle h);
	CUresult (*mem_export)(void *shareable, CUmemGenericAllocationHandle h,
			       CUmemAllocationHandleType type,
			       unsigned long long flags);
	CUresult (*mem_import)(CUmemGenericAllocationHandle *h,
			       void *shareable, CUmemAllocationHandleType type);
	CUresult (*mem_address_reserve)(CUdeviceptr *va, size_t bytes,
					size_t align, CUdeviceptr addr,
					unsigned long long flags);
	CUresult (*mem_address_free)(CUdeviceptr va, size_t bytes);
	CUresult (*mem_map)(CUdeviceptr va, size_t bytes, size_t offset,
			    CUmemGenericAllocationHandle h,
			    unsigned long long flags);
	CUresult (*mem_unmap)(CUdeviceptr va, size_t bytes);
	CUresult (*mem_set_access)(CUdeviceptr va, size_t bytes,
				   const CUmemAccessDesc *desc, size_t count);
	CUresult (*mem_alloc)(CUdeviceptr *p, size_t bytes);
	CUresult (*mem_free)(CUdeviceptr p);
	CUresult (*ipc_get_mem_handle)(CUipcMemHandle *h, CUdeviceptr p);
	CUresult (*ipc_open_mem_handle)(CUdeviceptr *p, CUipcMemHandle h,
					unsigned int flags);
	CUresult (*ipc_close_mem_handle)(CUdeviceptr p);
	CUresult (*memset_d8_async)(CUdeviceptr p, unsigned char v, size_t n,
				    CUstream s);
	CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src,
				      size_t n, CUstream s);
	/* kvd's host tier: pinned host memory and copies to and from it */
	CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src, size_t n,
				      CUstream s);
	CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src,
				      size_t n, CUstream s);
	CUresult (*mem_host_alloc)(void **p, size_t bytes, unsigned int flags);
	CUresult (*mem_free_host)(void *p);
	CUresult (*stream_create)(CUstream *s, unsigned int flags);
	CUresult (*stream_destroy)(CUstream s);
	CUresult (*stream_synchronize)(CUstream s);
	CUresult (*event_create)(CUevent *e, unsigned int flags);
	CUresult (*event_destroy)(CUevent e);
	CUresult (*event_record)(CUevent e, CUstream s);
	CUresult (*event_synchronize)(CUevent e);
};

/*
 * __kv_cu_load - fill @cu from the installed driver and call cuInit(0).
 * Returns 0, or -ENOSYS when libcuda.so.1 cannot be loaded (no driver),
 * -ENODEV when cuInit fails (no device, driver/device mismatch), -ENOENT
 * when an entry point is missing (driver older than CUDA 12.0). @why,
 * if not NULL, gets a sentence for the user. Thread-safe.
 */
int __kv_cu_load(struct kv_cu *cu, char *why, size_t len);

/* __kv_cu_unload - forget the table (libcuda itself stays loaded). */
void __kv_cu_unload(struct kv_cu *cu);

/* The driver's name of @err ("CUDA_ERROR_OUT_OF_MEMORY"), never NULL. */
const char *__kv_cu_errname(const struct kv_cu *cu, CUresult err);

/* A CUresult as a negative errno, for callers of the library. */
int __kv_cu_errno(CUresult err);

#endif /* KV_HAVE_CUDA */
#endif /* KV_CUDADRV_H */
