// SPDX-License-Identifier: MIT
/*
 * kvd's cuda backend against a mocked driver table: the call sequence of
 * set-up, extent backing (grow), giving back (shrink), tenant hand-over,
 * COW copies and shutdown, and every error path unwinding what it did.
 */
#ifndef KV_HAVE_CUDA
/* Built without the CUDA toolkit's headers: nothing to test (skip). */
int main(void)
{
	return 77;
}
#else
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "cuda_mock.h"
#include "daemon.h"
#include "extent.h"

#define MiB		(1ULL << 20)

static int nr_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;

	while (dir && readdir(dir))
		n++;
	if (dir)
		closedir(dir);
	return n;
}

/* A daemon with an 8 MiB pool in 4 MiB extents on the mocked GPU. */
static struct kvd *mkd(int export_kind, uint64_t ext, int *ret, char *why)
{
	struct kvd *d = calloc(1, sizeof(*d));
	const struct kvd_backend *be = NULL;

	assert_non_null(d);
	d->cfg.device = 0;
	d->cfg.export_kind = export_kind;
	d->cfg.extent_bytes = ext;
	assert_int_equal(kvd_pool_init(&d->pool, 4), 0);
	*ret = kvd_cuda_attach(d, &mock_cu, &be, why, 256);
	d->be = be;
	return d;
}

static void freed(struct kvd *d)
{
	kvd_extents_destroy(d);
	kvd_cuda_close(d);
	kvd_pool_exit(&d->pool);
	free(d);
}

static void ticks(struct kvd *d, int n)
{
	while (n--)
		kvd_extents_tick(d);
}

static void test_vmm_grow_shrink(void **state)
{
	char why[256] = "";
	size_t mark = 0;
	struct kvd *d;
	int ret, fds;

	mock_reset();
	fds = nr_fds();
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, 0);
	assert_string_equal(mock_since(&mark),
			    "count dev uuid attr attr gran retain push stream");
	assert_string_equal(d->be->name, "cuda vmm");
	assert_int_equal(kvd_extents_create(d, 4 * MiB), 0);
	/* lazy: only the address range, no memory yet */
	assert_string_equal(mock_since(&mark), "reserve");
	assert_int_equal(d->backed_bytes, 0);

	/* grow: the first page of extent 1 backs it */
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 2, 2, 0), 0);
	assert_string_equal(mock_since(&mark),
			    "create export map access memset sync");
	assert_int_equal(d->backed_bytes, 4 * MiB);
	assert_true(d->ext_fd[0] >= 0);
	assert_int_equal(d->ext_gen[0], 1);
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0), 2);
	assert_string_equal(mock_since(&mark),
			    "create export map access memset sync");

	/* shrink: extent 0 unused for 4 ticks goes back, 1 stays */
	kvd_pool_free_run(&d->pool, 0, 2);
	ticks(d, 3);
	assert_string_equal(mock_since(&mark), "");
	ticks(d, 1);
	assert_string_equal(mock_since(&mark), "unmap release");
	assert_int_equal(d->ext_fd[0], -1);
	assert_int_equal(d->backed_bytes, 4 * MiB);
	/* used again: backed anew, a new generation for clients */
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0), 0);
	assert_string_equal(mock_since(&mark),
			    "create export map access memset sync");
	assert_int_equal(d->ext_gen[0], 2);

	freed(d);
	assert_string_equal(mock_since(&mark),
			    "unmap release unmap release vafree streamdestroy pop ctxrelease");
	assert_int_equal(mock_live_handles, 0);
	assert_int_equal(mock_live_maps, 0);
	assert_int_equal(nr_fds(), fds);
}

/* Another tenant's extent is remade: its bytes never reach the new one. */
static void test_vmm_tenant_handover(void **state)
{
	char why[256] = "";
	size_t mark = 0;
	struct kvd *d;
	int ret;

	mock_reset();
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, 0);
	assert_int_equal(kvd_extents_create(d, 4 * MiB), 0);
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0), 0);
	kvd_pool_free_run(&d->pool, 0, 1);
	mock_since(&mark);
	/* same tenant within the pause: kept as it is */
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0), 0);
	assert_string_equal(mock_since(&mark), "");
	kvd_pool_free_run(&d->pool, 0, 1);
	/* tenant 1: unmapped, released, made again and zeroed */
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 1), 0);
	assert_string_equal(mock_since(&mark),
			    "unmap release create export map access memset sync");
	assert_int_equal(d->ext_gen[0], 2);
	assert_int_equal(mock_live_handles, 1);
	freed(d);
	assert_int_equal(mock_live_handles, 0);
}

/* Each step of backing an extent fails in turn; nothing is left over. */
static void test_vmm_backing_failures(void **state)
{
	static const struct {
		const char *at;
		const char *log;
		int err;
	} cases[] = {
		{ "create", "create", -ENOMEM },
		{ "export", "create export release", -ENOMEM },
		{ "map", "create export map release", -ENOMEM },
		{ "access", "create export map access unmap release", -ENOMEM },
		{ "memset", "create export map access memset unmap release",
		  -ENOMEM },
		{ "sync", "create export map access memset sync unmap release",
		  -ENOMEM },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char why[256] = "";
		size_t mark = 0;
		struct kvd *d;
		int ret, fds;

		mock_reset();
		fds = nr_fds();
		d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
		assert_int_equal(ret, 0);
		assert_int_equal(kvd_extents_create(d, 4 * MiB), 0);
		mock_since(&mark);
		mock_fail_at = cases[i].at;
		assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0),
				 cases[i].err);
		assert_string_equal(mock_since(&mark), cases[i].log);
		assert_int_equal(d->ext_fd[0], -1);
		assert_int_equal(d->backed_bytes, 0);
		assert_int_equal(d->pool.pages_used, 0);
		assert_int_equal(mock_live_handles, 0);
		assert_int_equal(mock_live_maps, 0);
		/* the driver recovers: the next ALLOC backs it */
		mock_fail_at = NULL;
		assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 1, 1, 0), 0);
		freed(d);
		assert_int_equal(nr_fds(), fds);
		assert_int_equal(mock_live_handles, 0);
	}
}

static void test_attach_errors(void **state)
{
	char why[256] = "";
	struct kvd *d;
	int ret;

	mock_reset();
	mock_devices = 0;
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, -ENODEV);
	assert_non_null(strstr(why, "no CUDA device 0"));
	assert_null(d->cuda);
	freed(d);

	mock_reset();
	mock_posix_fd = 0;
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, -EOPNOTSUPP);
	assert_non_null(strstr(why, "--export legacy"));
	freed(d);

	mock_reset();
	mock_gran = 4 * MiB;
	d = mkd(KV_EXPORT_VMM, 6 * MiB, &ret, why);
	assert_int_equal(ret, -EINVAL);
	assert_non_null(strstr(why, "granularity"));
	freed(d);

	/* a context that cannot be made: nothing retained stays */
	mock_reset();
	mock_fail_at = "stream";
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, -ENOMEM);
	assert_string_equal(mock_log,
			    "count dev uuid attr attr gran retain push stream pop ctxrelease");
	freed(d);

	/* no address range: kvd cannot start */
	mock_reset();
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, 0);
	mock_fail_at = "reserve";
	assert_int_equal(kvd_extents_create(d, 4 * MiB), -ENOMEM);
	freed(d);
}

static void test_legacy(void **state)
{
	struct kv_welcome w = { 0 };
	char why[256] = "";
	size_t mark = 0;
	struct kvd *d;
	int ret;

	mock_reset();
	d = mkd(KV_EXPORT_LEGACY, 0, &ret, why);
	assert_int_equal(ret, 0);
	assert_string_equal(mock_since(&mark),
			    "count dev uuid retain push stream");
	assert_string_equal(d->be->name, "cuda legacy");
	assert_false(d->be->extents);
	assert_int_equal(kvd_extents_create(d, 0), 0);
	assert_string_equal(mock_since(&mark), "alloc ipcget memset sync");
	assert_int_equal(d->backed_bytes, 8 * MiB);
	assert_int_equal(d->pool.nr_extents, 0);
	kvd_cuda_welcome(d, &w);
	assert_int_equal(w.device, 0);
	assert_int_equal(w.ipc_handle[0], 0x5a);
	assert_int_equal(w.ipc_handle[63], 0x5a);
	assert_memory_equal(w.device_uuid, mock_uuid.bytes, 15);
	/* no extents: any tenant's run is just pages */
	assert_int_equal(kvd_pool_alloc_run_for(&d->pool, 4, 1, 3), 0);
	assert_string_equal(mock_since(&mark), "");
	freed(d);
	assert_string_equal(mock_since(&mark),
			    "free streamdestroy pop ctxrelease");

	mock_reset();
	d = mkd(KV_EXPORT_LEGACY, 0, &ret, why);
	mock_fail_at = "ipcget";
	assert_int_equal(kvd_extents_create(d, 0), -ENOMEM);
	assert_non_null(strstr(mock_log, "alloc ipcget free"));
	freed(d);
}

static void test_copy(void **state)
{
	struct kvd_copy v[3] = {
		{ .dst = 0, .src = 1 * MiB, .bytes = 4096 },
		{ .dst = 8192, .src = 2 * MiB, .bytes = 4096 },
		{ .dst = 16384, .src = 3 * MiB, .bytes = 4096 },
	};
	char why[256] = "";
	size_t mark = 0;
	struct kvd *d;
	int ret;

	mock_reset();
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(kvd_extents_create(d, 4 * MiB), 0);
	mock_since(&mark);
	assert_int_equal(d->be->copy(d, v, 3), 0);
	/* all queued on kvd's stream, then waited for before the CQE */
	assert_string_equal(mock_since(&mark), "copy copy copy sync");
	assert_int_equal(mock_copied, 3 * 4096);
	mock_fail_at = "copy";
	mock_fail_nth = 1;
	mock_err = CUDA_ERROR_ILLEGAL_ADDRESS;
	assert_int_equal(d->be->copy(d, v, 3), -EIO);
	assert_string_equal(mock_since(&mark), "copy copy");
	mock_fail_at = "sync";
	mock_fail_nth = 0;
	assert_int_equal(d->be->copy(d, v, 1), -EIO);
	freed(d);
}

/*
 * The host tier's path: pinned memory taken in chunks (one
 * cuMemHostAlloc serves many blocks of a size), copies to and from it on
 * kvd's stream, waited for; a failed copy is an error, not a hang;
 * every chunk freed at the end.
 */
static void test_tier(void **state)
{
	char why[256] = "";
	size_t mark = 0;
	void *p, *q, *big;
	struct kvd *d;
	int ret;

	mock_reset();
	d = mkd(KV_EXPORT_VMM, 4 * MiB, &ret, why);
	assert_int_equal(ret, 0);
	d->cfg.host_tier_bytes = 1 * MiB;
	mock_since(&mark);
	p = d->be->tier_alloc(d, 32 << 10);
	q = d->be->tier_alloc(d, 32 << 10);
	assert_non_null(p);
	assert_non_null(q);
	assert_ptr_not_equal(p, q);
	assert_string_equal(mock_since(&mark), "hostalloc");
	memset(p, 7, 32 << 10);		/* host memory, really */
	assert_int_equal(d->be->tier_copy(d, p, 8192, 32 << 10, true), 0);
	assert_int_equal(d->be->tier_copy(d, q, 8192, 32 << 10, false), 0);
	assert_string_equal(mock_since(&mark), "dtoh sync htod sync");
	assert_int_equal(mock_copied, 2 * (32 << 10));
	mock_fail_at = "dtoh";
	mock_err = CUDA_ERROR_ILLEGAL_ADDRESS;
	assert_int_equal(d->be->tier_copy(d, p, 0, 4096, true), -EIO);
	assert_string_equal(mock_since(&mark), "dtoh");
	mock_fail_at = "sync";
	mock_fail_nth = 0;
	assert_int_equal(d->be->tier_copy(d, p, 0, 4096, false), -EIO);
	mock_fail_at = NULL;
	/* past the limit (tier + one chunk per size class): refused */
	big = d->be->tier_alloc(d, 600 * MiB);
	assert_null(big);
	d->be->tier_free(d, q, 32 << 10);
	assert_ptr_equal(d->be->tier_alloc(d, 32 << 10), q);	/* reused */
	d->be->tier_free(d, q, 32 << 10);
	d->be->tier_free(d, p, 32 << 10);
	mock_since(&mark);
	assert_int_equal(mock_pinned, 1);
	freed(d);
	assert_int_equal(mock_pinned, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tier),
		cmocka_unit_test(test_vmm_grow_shrink),
		cmocka_unit_test(test_vmm_tenant_handover),
		cmocka_unit_test(test_vmm_backing_failures),
		cmocka_unit_test(test_attach_errors),
		cmocka_unit_test(test_legacy),
		cmocka_unit_test(test_copy),
	};

	kvd_log_level = -1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* KV_HAVE_CUDA */
