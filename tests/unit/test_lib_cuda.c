// SPDX-License-Identifier: MIT
/*
 * libkvclient's side of the cuda backend against a mocked driver table:
 * finding kvd's GPU by UUID, reserving the pool range, importing and
 * mapping extents (and every failure of those steps), the legacy IPC
 * handle, the device-write fence before COMMIT/RELEASE/COW, and
 * detaching.
 */
#ifndef KV_HAVE_CUDA
/* Built without the CUDA toolkit's headers: nothing to test (skip). */
int main(void)
{
	return 77;
}
#else
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../libkvclient/lib.h"
#include "cuda_mock.h"

#define MiB		(1ULL << 20)

void __kv_cuda_set_driver(const struct kv_cu *cu);

/* A client as kv_connect leaves it before attaching: 2 extents of 4 MiB. */
static struct kv_client *mkc(void)
{
	struct kv_client *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->backend = KV_BACKEND_CUDA;
	c->pool_bytes = 8 * MiB;
	c->extent_bytes = 4 * MiB;
	c->nr_extents = 2;
	c->ext_gen = calloc(2, sizeof(*c->ext_gen));
	c->ext_bytes = calloc(2, sizeof(*c->ext_bytes));
	c->device = -1;
	return c;
}

static void freec(struct kv_client *c)
{
	__kv_cuda_detach(c);
	free(c->ext_gen);
	free(c->ext_bytes);
	free(c);
}

/* kvd's device is its ordinal 1; the mock's UUIDs end in the ordinal. */
static struct kv_welcome welcome(int export_kind)
{
	struct kv_welcome w = {
		.backend = KV_BACKEND_CUDA, .export_kind = export_kind,
		.device = 1,
	};

	memcpy(w.device_uuid, mock_uuid.bytes, 16);
	w.device_uuid[15] = 1;
	memset(w.ipc_handle, 0x5a, sizeof(w.ipc_handle));
	return w;
}

static int devnull(void)
{
	int fd = open("/dev/null", O_RDONLY);

	assert_true(fd >= 0);
	return fd;
}

static int map(struct kv_client *c, uint32_t e)
{
	int fd = devnull(), ret;

	ret = __kv_cuda_map(c, e, e * c->extent_bytes, c->extent_bytes, fd);
	close(fd);
	if (!ret) {
		c->ext_gen[e] = 1;
		c->ext_bytes[e] = c->extent_bytes;
	}
	return ret;
}

static void test_vmm_attach_map_detach(void **state)
{
	struct kv_welcome w = welcome(KV_EXPORT_VMM);
	struct kv_client *c = mkc();
	size_t mark = 0;

	mock_reset();
	mock_devices = 2;
	assert_int_equal(__kv_cuda_attach(c, &w), 0);
	/* found by UUID (ordinal 1 here too), range reserved, fence ready */
	assert_string_equal(mock_since(&mark),
			    "count dev uuid dev uuid retain push reserve event pop");
	assert_int_equal(c->device, 1);
	assert_ptr_equal(c->pool, (void *)(uintptr_t)mock_va_next);

	assert_int_equal(map(c, 0), 0);
	assert_string_equal(mock_since(&mark),
			    "push import map access release pop");
	/* the mapping keeps the memory; the handle is gone already */
	assert_int_equal(mock_live_handles, 0);
	assert_int_equal(mock_live_maps, 1);
	assert_int_equal(map(c, 1), 0);
	/* a newer generation of extent 0 replaces the old mapping */
	assert_int_equal(map(c, 0), 0);
	mock_since(&mark);
	assert_int_equal(mock_live_maps, 2);
	/* DROP */
	__kv_cuda_unmap(c, 1, 4 * MiB, 4 * MiB);
	c->ext_gen[1] = 0;
	assert_string_equal(mock_since(&mark), "push unmap pop");

	freec(c);
	assert_string_equal(mock_since(&mark),
			    "push record wait pop push unmap vafree eventdestroy pop ctxrelease");
	assert_int_equal(mock_live_maps, 0);
	assert_int_equal(mock_live_handles, 0);
}

static void test_map_failures(void **state)
{
	static const struct {
		const char *at;
		CUresult err;
		const char *log;
		int ret;
		const char *why;
	} cases[] = {
		{ "import", CUDA_ERROR_NOT_SUPPORTED, "push import pop",
		  -EOPNOTSUPP, "cannot import" },
		{ "import", CUDA_ERROR_NOT_PERMITTED, "push import pop",
		  -EPERM, "cannot import" },
		{ "map", CUDA_ERROR_OUT_OF_MEMORY, "push import map release pop",
		  -ENOMEM, "cannot map" },
		{ "access", CUDA_ERROR_INVALID_DEVICE,
		  "push import map access unmap release pop", -ENODEV,
		  "cannot enable access" },
		{ "push", CUDA_ERROR_INVALID_CONTEXT, "push", -EIO,
		  "cuCtxPushCurrent" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kv_welcome w = welcome(KV_EXPORT_VMM);
		struct kv_client *c = mkc();
		size_t mark = 0;

		mock_reset();
		mock_devices = 2;
		assert_int_equal(__kv_cuda_attach(c, &w), 0);
		mock_since(&mark);
		mock_fail_at = cases[i].at;
		mock_err = cases[i].err;
		assert_int_equal(map(c, 0), cases[i].ret);
		assert_string_equal(mock_since(&mark), cases[i].log);
		assert_non_null(strstr(c->why, cases[i].why));
		assert_int_equal(c->ext_gen[0], 0);
		assert_int_equal(mock_live_maps, 0);
		assert_int_equal(mock_live_handles, 0);
		mock_fail_at = NULL;
		freec(c);
	}
}

static void test_attach_failures(void **state)
{
	struct kv_welcome w = welcome(KV_EXPORT_VMM);
	struct kv_client *c = mkc();

	/* kvd's GPU is not among ours (CUDA_VISIBLE_DEVICES) */
	mock_reset();
	mock_devices = 1;
	assert_int_equal(__kv_cuda_attach(c, &w), -ENODEV);
	assert_string_equal(mock_log, "count dev uuid");
	assert_non_null(strstr(c->why, "not visible in this process"));
	assert_null(c->cuda);

	/* no address range: the context goes again */
	mock_reset();
	mock_devices = 2;
	mock_fail_at = "reserve";
	assert_int_equal(__kv_cuda_attach(c, &w), -ENOMEM);
	assert_string_equal(mock_log,
			    "count dev uuid dev uuid retain push reserve pop ctxrelease");
	assert_null(c->cuda);

	/* no event: the range goes too */
	mock_reset();
	mock_devices = 2;
	mock_fail_at = "event";
	assert_int_equal(__kv_cuda_attach(c, &w), -ENOMEM);
	assert_string_equal(mock_log,
			    "count dev uuid dev uuid retain push reserve event vafree pop ctxrelease");
	freec(c);
}

static void test_legacy(void **state)
{
	struct kv_welcome w = welcome(KV_EXPORT_LEGACY);
	struct kv_client *c = mkc();
	size_t mark = 0;

	mock_reset();
	mock_devices = 2;
	assert_int_equal(__kv_cuda_attach(c, &w), 0);
	assert_string_equal(mock_since(&mark),
			    "count dev uuid dev uuid retain push ipcopen event pop");
	assert_ptr_equal(c->pool, (void *)0x610000000000ULL);
	freec(c);
	assert_string_equal(mock_since(&mark),
			    "push record wait pop push ipcclose eventdestroy pop ctxrelease");

	c = mkc();
	mock_reset();
	mock_devices = 2;
	mock_fail_at = "ipcopen";
	mock_err = CUDA_ERROR_INVALID_VALUE;
	assert_int_equal(__kv_cuda_attach(c, &w), -EINVAL);
	assert_non_null(strstr(c->why, "CUDA IPC handle"));
	assert_string_equal(mock_log,
			    "count dev uuid dev uuid retain push ipcopen pop ctxrelease");
	freec(c);
}

/* The fence: an event on the caller's stream, waited for. */
static void test_fence(void **state)
{
	struct kv_welcome w = welcome(KV_EXPORT_VMM);
	struct kv_client *c = mkc();
	size_t mark = 0;

	mock_reset();
	mock_devices = 2;
	assert_int_equal(__kv_cuda_attach(c, &w), 0);
	mock_since(&mark);
	assert_int_equal(__kv_cuda_fence(c), 0);
	assert_string_equal(mock_since(&mark), "push record wait pop");
	assert_null(mock_last_stream);	/* the legacy default stream */
	assert_int_equal(kv_set_stream(c, (void *)0x4444), 0);
	assert_int_equal(__kv_cuda_fence(c), 0);
	assert_ptr_equal(mock_last_stream, (void *)0x4444);
	mock_since(&mark);
	assert_int_equal(kv_set_stream(c, KV_STREAM_NONE), 0);
	assert_int_equal(__kv_cuda_fence(c), 0);
	assert_string_equal(mock_since(&mark), "");
	/* a kernel that faulted: the error comes back */
	assert_int_equal(kv_set_stream(c, NULL), 0);
	mock_fail_at = "wait";
	mock_err = CUDA_ERROR_ILLEGAL_ADDRESS;
	assert_int_equal(__kv_cuda_fence(c), -EIO);
	assert_non_null(strstr(c->why, "waiting for the stream"));
	mock_fail_at = NULL;
	freec(c);
}

/* kv_submit fences exactly when a COMMIT, RELEASE or COW goes out. */
static void test_submit_fences(void **state)
{
	static uint32_t words[64];
	static struct kv_sqe sqes[4];
	struct kv_welcome w = welcome(KV_EXPORT_VMM);
	struct kv_client *c = mkc();
	struct kv_sqe *sqe;
	size_t mark = 0;

	mock_reset();
	mock_devices = 2;
	assert_int_equal(__kv_cuda_attach(c, &w), 0);
	c->sq_khead = &words[0];
	c->sq_ktail = &words[16];
	c->sq_kflags = &words[32];
	c->sq_entries = 4;
	c->sqes = sqes;
	c->sq_evfd = -1;
	mock_since(&mark);

	sqe = kv_get_sqe(c);
	kv_prep_alloc(sqe, 0, 1);
	assert_int_equal(kv_submit(c), 1);
	assert_string_equal(mock_since(&mark), "");
	words[0] = 1;	/* kvd took it */

	sqe = kv_get_sqe(c);
	kv_prep_nop(sqe);
	sqe = kv_get_sqe(c);
	kv_prep_release(sqe, 0, 1);
	assert_int_equal(kv_submit(c), 2);
	assert_string_equal(mock_since(&mark), "push record wait pop");
	words[0] = 3;

	/* the fence fails: nothing is published */
	sqe = kv_get_sqe(c);
	kv_prep_cow(sqe, 0, 1);
	mock_fail_at = "wait";
	mock_err = CUDA_ERROR_LAUNCH_FAILED;
	assert_int_equal(kv_submit(c), -EIO);
	assert_int_equal(words[16], 3);
	mock_fail_at = NULL;
	assert_int_equal(kv_submit(c), 1);
	assert_int_equal(words[16], 4);
	c->inflight = 0;
	freec(c);
}

/* Without a driver (this CPU-only host) the error says so. */
static void test_no_driver(void **state)
{
	struct kv_welcome w = welcome(KV_EXPORT_VMM);
	struct kv_client *c = mkc();
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	if (h) {
		dlclose(h);
		freec(c);
		skip();
	}
	__kv_cuda_set_driver(NULL);
	assert_int_equal(__kv_cuda_attach(c, &w), -ENOSYS);
	assert_non_null(strstr(c->why, "no CUDA driver"));
	__kv_cuda_set_driver(&mock_cu);
	freec(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vmm_attach_map_detach),
		cmocka_unit_test(test_map_failures),
		cmocka_unit_test(test_attach_failures),
		cmocka_unit_test(test_legacy),
		cmocka_unit_test(test_fence),
		cmocka_unit_test(test_submit_fences),
		cmocka_unit_test(test_no_driver),
	};

	__kv_cuda_set_driver(&mock_cu);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* KV_HAVE_CUDA */
