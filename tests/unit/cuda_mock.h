/* SPDX-License-Identifier: MIT */
/*
 * A mocked CUDA driver table (struct kv_cu) for the cmocka tests of
 * kvd's cuda backend and libkvclient's import side. Every entry point
 * appends its name to mock_log ("create export map ..."), so a test can
 * check the whole call sequence, and fails with mock_err when its name
 * is mock_fail_at (the n-th such call with mock_fail_nth).
 */
#ifndef KV_CUDA_MOCK_H
#define KV_CUDA_MOCK_H

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../../libkvclient/cudadrv.h"

static char mock_log[4096];
static const char *mock_fail_at;	/* entry point name, NULL: none */
static int mock_fail_nth;		/* 0: its first call */
static CUresult mock_err = CUDA_ERROR_OUT_OF_MEMORY;
static int mock_devices = 1;
static int mock_vmm = 1, mock_posix_fd = 1;
static size_t mock_gran = 2 << 20;
static CUuuid mock_uuid = { .bytes = "GPU-mock-uuid-1" };
static int mock_live_handles;		/* created or imported, not released */
static int mock_live_maps;		/* mapped, not unmapped */
static int mock_open_fds;		/* exported fds not yet closed by kvd */
static CUstream mock_last_stream;
static CUdeviceptr mock_va_next = 0x7f0000000000ULL;
static unsigned long long mock_copied;	/* bytes copied */

static void mock_reset(void)
{
	mock_log[0] = 0;
	mock_fail_at = NULL;
	mock_fail_nth = 0;
	mock_err = CUDA_ERROR_OUT_OF_MEMORY;
	mock_devices = 1;
	mock_vmm = mock_posix_fd = 1;
	mock_gran = 2 << 20;
	mock_live_handles = mock_live_maps = 0;
	mock_copied = 0;
}

static CUresult called(const char *name)
{
	size_t n = strlen(mock_log);

	snprintf(mock_log + n, sizeof(mock_log) - n, "%s%s", n ? " " : "",
		 name);
	if (mock_fail_at && !strcmp(mock_fail_at, name))
		if (mock_fail_nth-- == 0)
			return mock_err;
	return CUDA_SUCCESS;
}

static CUresult m_init(unsigned int f) { return called("init"); }
static CUresult m_errname(CUresult e, const char **s)
{
	*s = e == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" :
	     "CUDA_ERROR_MOCK";
	return CUDA_SUCCESS;
}
static CUresult m_count(int *n) { *n = mock_devices; return called("count"); }
static CUresult m_dev(CUdevice *d, int i) { *d = i; return called("dev"); }
static CUresult m_uuid(CUuuid *u, CUdevice d)
{
	*u = mock_uuid;
	u->bytes[15] = (char)d;
	return called("uuid");
}
static CUresult m_attr(int *v, CUdevice_attribute a, CUdevice d)
{
	*v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ?
	     mock_vmm : mock_posix_fd;
	return called("attr");
}
static CUresult m_retain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)0x1000;
	return called("retain");
}
static CUresult m_ctx_release(CUdevice d) { return called("ctxrelease"); }
static CUresult m_push(CUcontext c) { return called("push"); }
static CUresult m_pop(CUcontext *c) { *c = NULL; return called("pop"); }
static CUresult m_gran(size_t *g, const CUmemAllocationProp *p,
		       CUmemAllocationGranularity_flags f)
{
	*g = mock_gran;
	return called("gran");
}
static CUresult m_create(CUmemGenericAllocationHandle *h, size_t n,
			 const CUmemAllocationProp *p, unsigned long long f)
{
	CUresult r = called("create");

	if (r)
		return r;
	if (p->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !n ||
	    n % mock_gran)
		return CUDA_ERROR_INVALID_VALUE;
	*h = 0x100 + (unsigned)mock_live_handles++;
	return CUDA_SUCCESS;
}
static CUresult m_release(CUmemGenericAllocationHandle h)
{
	mock_live_handles--;
	return called("release");
}
static CUresult m_export(void *out, CUmemGenericAllocationHandle h,
			 CUmemAllocationHandleType t, unsigned long long f)
{
	CUresult r = called("export");

	if (r)
		return r;
	*(int *)out = open("/dev/null", O_RDONLY);
	mock_open_fds++;
	return CUDA_SUCCESS;
}
static CUresult m_import(CUmemGenericAllocationHandle *h, void *fd,
			 CUmemAllocationHandleType t)
{
	CUresult r = called("import");

	if (r)
		return r;
	if (t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    fcntl((int)(uintptr_t)fd, F_GETFD) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*h = 0x900 + (unsigned)mock_live_handles++;
	return CUDA_SUCCESS;
}
static CUresult m_reserve(CUdeviceptr *va, size_t n, size_t align,
			  CUdeviceptr addr, unsigned long long f)
{
	CUresult r = called("reserve");

	if (!r)
		*va = mock_va_next;
	return r;
}
static CUresult m_vafree(CUdeviceptr va, size_t n) { return called("vafree"); }
static CUresult m_map(CUdeviceptr va, size_t n, size_t off,
		      CUmemGenericAllocationHandle h, unsigned long long f)
{
	CUresult r = called("map");

	if (!r)
		mock_live_maps++;
	return r;
}
static CUresult m_unmap(CUdeviceptr va, size_t n)
{
	mock_live_maps--;
	return called("unmap");
}
static CUresult m_access(CUdeviceptr va, size_t n, const CUmemAccessDesc *d,
			 size_t cnt)
{
	if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE || cnt != 1)
		return CUDA_ERROR_INVALID_VALUE;
	return called("access");
}
static CUresult m_alloc(CUdeviceptr *p, size_t n)
{
	CUresult r = called("alloc");

	if (!r)
		*p = 0x600000000000ULL;
	return r;
}
static CUresult m_free(CUdeviceptr p) { return called("free"); }
static CUresult m_ipc_get(CUipcMemHandle *h, CUdeviceptr p)
{
	memset(h, 0x5a, sizeof(*h));
	return called("ipcget");
}
static CUresult m_ipc_open(CUdeviceptr *p, CUipcMemHandle h, unsigned f)
{
	CUresult r = called("ipcopen");

	if (!r)
		*p = h.reserved[0] == 0x5a ? 0x610000000000ULL : 0;
	return r;
}
static CUresult m_ipc_close(CUdeviceptr p) { return called("ipcclose"); }
static CUresult m_memset(CUdeviceptr p, unsigned char v, size_t n,
			 CUstream s)
{
	return called("memset");
}
static CUresult m_copy(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
	CUresult r = called("copy");

	if (!r)
		mock_copied += n;
	return r;
}
static int mock_pinned;			/* host allocations not yet freed */
static CUresult m_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream st)
{
	CUresult r = called("dtoh");

	if (!r)
		mock_copied += n;
	return r;
}
static CUresult m_htod(CUdeviceptr dst, const void *src, size_t n,
		       CUstream st)
{
	CUresult r = called("htod");

	if (!r)
		mock_copied += n;
	return r;
}
static CUresult m_hostalloc(void **p, size_t n, unsigned int f)
{
	CUresult r = called("hostalloc");

	if (r)
		return r;
	*p = malloc(n);		/* stands in for page-locked memory */
	if (!*p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mock_pinned++;
	return CUDA_SUCCESS;
}
static CUresult m_freehost(void *p)
{
	free(p);
	mock_pinned--;
	return called("freehost");
}
static CUresult m_screate(CUstream *s, unsigned f)
{
	*s = (CUstream)0x2000;
	return called("stream");
}
static CUresult m_sdestroy(CUstream s) { return called("streamdestroy"); }
static CUresult m_ssync(CUstream s) { return called("sync"); }
static CUresult m_ecreate(CUevent *e, unsigned f)
{
	*e = (CUevent)0x3000;
	return called("event");
}
static CUresult m_edestroy(CUevent e) { return called("eventdestroy"); }
static CUresult m_erecord(CUevent e, CUstream s)
{
	mock_last_stream = s;
	return called("record");
}
static CUresult m_esync(CUevent e) { return called("wait"); }

static const struct kv_cu mock_cu = {
	.init = m_init, .get_error_name = m_errname,
	.device_get_count = m_count, .device_get = m_dev,
	.device_get_uuid = m_uuid, .device_get_attribute = m_attr,
	.primary_ctx_retain = m_retain, .primary_ctx_release = m_ctx_release,
	.ctx_push = m_push, .ctx_pop = m_pop,
	.mem_get_granularity = m_gran, .mem_create = m_create,
	.mem_release = m_release, .mem_export = m_export,
	.mem_import = m_import, .mem_address_reserve = m_reserve,
	.mem_address_free = m_vafree, .mem_map = m_map, .mem_unmap = m_unmap,
	.mem_set_access = m_access, .mem_alloc = m_alloc, .mem_free = m_free,
	.ipc_get_mem_handle = m_ipc_get, .ipc_open_mem_handle = m_ipc_open,
	.ipc_close_mem_handle = m_ipc_close, .memset_d8_async = m_memset,
	.memcpy_dtod_async = m_copy, .memcpy_dtoh_async = m_dtoh,
	.memcpy_htod_async = m_htod, .mem_host_alloc = m_hostalloc,
	.mem_free_host = m_freehost, .stream_create = m_screate,
	.stream_destroy = m_sdestroy, .stream_synchronize = m_ssync,
	.event_create = m_ecreate, .event_destroy = m_edestroy,
	.event_record = m_erecord, .event_synchronize = m_esync,
};

/* The log since the last mark, for checking one step's sequence. */
static const char *mock_since(size_t *mark)
{
	const char *s = mock_log + *mark;

	*mark = strlen(mock_log);
	return *s == ' ' ? s + 1 : s;
}

#endif /* KV_CUDA_MOCK_H */
