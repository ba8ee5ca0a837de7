// SPDX-License-Identifier: MIT
/*
 * COW and the pool's grow/shrink by extents, on the host backend with a
 * real kvd: a shared or committed block is copied before a holder writes
 * it (and only then), bad COWs change nothing, extents get memory when
 * first used and give it back once unused (clients told to unmap), and
 * --backend auto picks host on a machine with no GPU.
 */
#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static uint32_t refs(struct kv_client *c)
{
	struct kv_stats st;

	T_EQ(kv_stats(c, &st), 0);
	return st.client_refs;
}

static long long backed(struct t_kvd *k)
{
	char *j = t_kvctl(k, "status");
	long long v = t_json_int(j, "backed_bytes");

	free(j);
	return v;
}

static void cow(struct t_kvd *k)
{
	struct kv_client *a, *b;
	struct kv_pool_info pi;
	kv_block_t id, x, y, two[2], hit;
	struct kv_commit e = { 0 };
	struct kv_hash h = { .b = { 7, 7, 7 } };
	uint8_t *p;
	size_t bb;

	T_EQ(t_connect(k, "m", NULL, &a), 0);
	T_EQ(t_connect(k, "m", NULL, &b), 0);
	T_EQ(kv_pool_info(a, &pi), 0);
	T_EQ(pi.backend, KV_BACKEND_HOST);
	T_EQ(pi.export_kind, KV_EXPORT_MEMFD);
	T_EQ(pi.device, -1);
	bb = pi.block_bytes;
	T_EQ(kv_alloc(a, 1, &id), 1);
	p = kv_block_ptr(a, id);
	memset(p, 0xab, bb);

	/* exclusive and uncommitted: written in place, no copy */
	x = id;
	T_EQ(kv_cow(a, &x, 1), 0);
	T_EQ(x, id);

	/* forked (two refs): the copy has the bytes, the original stays */
	T_EQ(kv_ref(a, &id, 1), 1);
	T_EQ(refs(a), 2);
	x = id;
	T_EQ(kv_cow(a, &x, 1), 1);
	T_ASSERT(x != id);
	T_EQ(refs(a), 2);
	T_EQ(memcmp(kv_block_ptr(a, x), p, bb), 0);
	memset(kv_block_ptr(a, x), 0xcd, bb);
	T_EQ(p[bb - 1], 0xab);
	T_EQ(kv_release(a, &x, 1), 1);

	/* committed: another client's hit must copy before writing */
	e.id = id;
	e.hash = h;
	T_EQ(kv_commit(a, &e, 1), 1);
	T_EQ(kv_lookup(b, &h, 1, &hit), 1);
	T_EQ(hit, id);
	y = hit;
	T_EQ(kv_cow(b, &y, 1), 1);
	T_ASSERT(y != id);
	T_EQ(((uint8_t *)kv_block_ptr(b, y))[0], 0xab);
	/* committed with one ref is still copied (later hits) */
	T_EQ(kv_cow(a, &id, 1), 1);

	/* bad input: an error, nothing changes */
	T_EQ(refs(a), 1);
	two[0] = id;
	two[1] = id;
	T_EQ(kv_cow(a, two, 2), -EINVAL);		/* twice */
	two[1] = y;
	T_EQ(kv_cow(a, two, 2), -EPERM);		/* b's, not a's */
	two[1] = pi.max_blocks;
	T_EQ(kv_cow(a, two, 2), -EINVAL);		/* outside */
	T_EQ(two[0], id);
	T_EQ(refs(a), 1);
	T_EQ(kv_cow(a, NULL, 1), -EINVAL);

	T_EQ(kv_disconnect(a), 0);
	T_EQ(kv_disconnect(b), 0);
}

/* No room for the copy: -ENOSPC, and the shared block is still held. */
static void cow_full(struct t_kvd *k)
{
	struct kv_client *a;
	struct kv_pool_info pi;
	kv_block_t id, x;
	int n = 0;

	T_EQ(t_connect(k, "m", NULL, &a), 0);
	T_EQ(kv_pool_info(a, &pi), 0);
	while (kv_alloc(a, 1, &id) == 1)
		n++;
	T_ASSERT(n > 0);
	T_EQ(kv_ref(a, &id, 1), 1);
	x = id;
	T_EQ(kv_cow(a, &x, 1), -ENOSPC);
	T_EQ(x, id);
	T_EQ(refs(a), (uint32_t)n + 1);
	T_EQ(kv_disconnect(a), 0);
}

/* Memory follows use: backed on first use, given back when unused. */
static void grow_shrink(struct t_kvd *k)
{
	struct kv_client *a;
	kv_block_t ids[130], again;
	long long v = -1;

	free(t_status_idle(k));
	for (int i = 0; i < 40 && backed(k); i++)
		usleep(100000);		/* the earlier tests' extents */
	T_EQ(backed(k), 0);
	T_EQ(t_connect(k, "m", NULL, &a), 0);
	/* 32 KiB blocks, 2 MiB extents: 64 blocks each, 130 span three */
	T_EQ(kv_alloc(a, 130, ids), 130);
	T_EQ(backed(k), 6 << 20);
	memset(kv_block_ptr(a, ids[129]), 0x5a, 4096);
	T_EQ(kv_release(a, ids, 130), 130);
	for (int i = 0; i < 40 && (v = backed(k)); i++)
		usleep(100000);
	T_EQ(v, 0);
	/* the client was told: those blocks are not mapped any more */
	T_ASSERT(kv_block_ptr(a, ids[129]) == NULL);
	/* used again: fresh memory, no old bytes */
	T_EQ(kv_alloc(a, 1, &again), 1);
	T_ASSERT(kv_block_ptr(a, again) != NULL);
	T_EQ(((uint8_t *)kv_block_ptr(a, again))[0], 0);
	T_EQ(backed(k), 2 << 20);
	T_EQ(kv_disconnect(a), 0);
}

/*
 * An ALLOC whose slabs claim more extents than fit in the client's
 * socket (~278 messages): kvd holds the completion back until the client
 * has been sent them all, and a client that only polls (kv_peek_cqe)
 * reads them meanwhile. Every held block is mapped (a hostile test found
 * NULL pointers for held blocks before).
 */
static void many_extents(void)
{
	struct kv_geometry g = { .layers = 4, .kv_heads = 8, .head_dim = 128,
				 .block_tokens = 16, .dtype = KV_DTYPE_FP16 };
	struct t_kvd k;
	struct kv_client *c;
	struct kv_sqe *sqe;
	struct kv_cqe *cqe;
	kv_block_t *ids;
	int n = 3900, ret;

	t_kvd_start(&k, "1G", "--extent-size", "2M", NULL);
	T_EQ(t_connect(&k, "big", &g, &c), 0);		/* 256 KiB blocks */
	sqe = kv_get_sqe(c);
	kv_prep_alloc(sqe, 0, n);
	T_EQ(kv_submit(c), 1);
	for (int i = 0; (ret = kv_peek_cqe(c, &cqe)) == -EAGAIN; i++) {
		T_ASSERT(i < 20000);
		usleep(1000);
	}
	T_EQ(ret, 0);
	T_EQ(cqe->res, n);
	kv_cqe_seen(c, cqe);
	ids = kv_data_ptr(c, 0, n * 4);
	for (int i = 0; i < n; i++)
		T_ASSERT(kv_block_ptr(c, ids[i]) != NULL);
	memset(kv_block_ptr(c, ids[n - 1]), 1, 4096);
	T_EQ(kv_disconnect(c), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/* --backend auto with no CUDA device: the host backend. */
static void auto_host(void)
{
	struct t_kvd k;
	char *j;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	if (h) {
		dlclose(h);
		return;
	}
	t_kvd_start(&k, "8M", "--backend", "auto", NULL);
	j = t_kvctl(&k, "status");
	T_ASSERT(strstr(j, "\"backend\":\"host\"") ||
		 strstr(j, "\"backend\": \"host\""));
	T_EQ(t_json_int(j, "device"), -1);
	free(j);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

int main(void)
{
	struct t_kvd k;

	t_kvd_start(&k, "16M", "--extent-size", "2M", NULL);
	cow(&k);
	cow_full(&k);
	grow_shrink(&k);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	many_extents();
	auto_host();
	return 0;
}
