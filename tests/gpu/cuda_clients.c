// SPDX-License-Identifier: MIT
/*
 * GPU check of the cuda backend with a real kvd (tests/gpu/run.sh):
 *
 *   cuda_clients pair SOCKET
 *	two processes connect to kvd; each writes blocks on the device
 *	(cudaMemsetAsync on a non-blocking stream of its own, fenced by
 *	kv_set_stream), commits them, and reads the other's committed
 *	blocks back by prefix lookup; then a COW of a hit block runs on
 *	the device.
 *   cuda_clients reconnect SOCKET FLAGFILE
 *	holds blocks while kvd is killed and restarted (run.sh touches
 *	FLAGFILE when the new one is up): calls fail with -ECONNRESET, no
 *	old mapping is handed out, and a reconnect maps the new pool.
 *
 * Prints PASS/FAIL per check; exit 0 when all pass, 77 (and why) when the
 * CUDA runtime finds no device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

#include <kv/kv.h>

#define NBLK	32

static int failed;

static void check(bool ok, const char *who, const char *what)
{
	printf("%s  %s: %s\n", ok ? "PASS" : "FAIL", who, what);
	fflush(stdout);
	failed |= !ok;
}

static struct kv_geometry geom(void)
{
	/* 4 layers x K/V x 8 heads x 16 slots x 128 x fp16 = 256 KiB */
	return (struct kv_geometry){ .layers = 4, .kv_heads = 8,
		.head_dim = 128, .block_tokens = 16, .dtype = KV_DTYPE_FP16 };
}

static int connect_to(const char *sock, struct kv_client **c)
{
	struct kv_connect_params p = { 0 };
	char err[256] = "";
	int ret;

	p.socket_path = sock;
	p.model_id = "gpu-check";
	p.geom = geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	ret = kv_connect(&p, c);
	if (ret)
		fprintf(stderr, "kv_connect: %s (%s)\n", strerror(-ret), err);
	return ret;
}

static struct kv_hash hash_of(char tag, int i)
{
	struct kv_hash h;

	memset(h.b, 0x42, sizeof(h.b));
	h.b[0] = (uint8_t)tag;
	h.b[1] = (uint8_t)i;
	return h;
}

static uint8_t pat(char tag, int i)
{
	return (uint8_t)(tag * 16 + i * 3 + 1);
}

/* Alloc NBLK blocks, fill each on the device, commit them as a chain
 * (and @release them: cached at ref 0, evictable). */
static bool write_commit(struct kv_client *c, char tag, bool release)
{
	struct kv_commit e[NBLK];
	kv_block_t ids[NBLK];
	struct kv_pool_info pi;
	cudaStream_t s;
	bool ok = true;

	kv_pool_info(c, &pi);
	if (cudaSetDevice(pi.device) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
		return false;
	if (kv_alloc(c, NBLK, ids) != NBLK)
		return false;
	for (int i = 0; i < NBLK; i++)
		ok &= cudaMemsetAsync(kv_block_ptr(c, ids[i]), pat(tag, i),
				      pi.block_bytes, s) == cudaSuccess;
	/* The fence: COMMIT leaves only once the memsets are done. */
	kv_set_stream(c, s);
	for (int i = 0; i < NBLK; i++) {
		memset(&e[i], 0, sizeof(e[i]));
		e[i].id = ids[i];
		e[i].hash = hash_of(tag, i);
		if (i)
			e[i].parent = hash_of(tag, i - 1);
	}
	ok &= kv_commit(c, e, NBLK) == NBLK;
	kv_set_stream(c, NULL);
	cudaStreamDestroy(s);
	for (int i = 0; ok && release && i < NBLK; i++)
		ids[i] = e[i].id;
	if (ok && release)
		ok = kv_release(c, ids, NBLK) == NBLK;
	return ok;
}

static bool block_is(struct kv_client *c, kv_block_t id, uint8_t v,
		     uint8_t *buf)
{
	struct kv_pool_info pi;
	void *p = kv_block_ptr(c, id);

	kv_pool_info(c, &pi);
	if (!p || cudaMemcpy(buf, p, pi.block_bytes, cudaMemcpyDeviceToHost) !=
	    cudaSuccess)
		return false;
	for (uint64_t j = 0; j < pi.block_bytes; j++)
		if (buf[j] != v)
			return false;
	return true;
}

/* Look up the other's chain; every hit must hold its bytes. */
static bool read_other(struct kv_client *c, char tag, kv_block_t *ids)
{
	struct kv_hash h[NBLK];
	struct kv_pool_info pi;
	uint8_t *buf;
	bool ok;

	kv_pool_info(c, &pi);
	buf = malloc(pi.block_bytes);
	for (int i = 0; i < NBLK; i++)
		h[i] = hash_of(tag, i);
	ok = kv_lookup(c, h, NBLK, ids) == NBLK;
	for (int i = 0; ok && i < NBLK; i++)
		ok = block_is(c, ids[i], pat(tag, i), buf);
	free(buf);
	return ok;
}

static bool device_pointers(struct kv_client *c, const char *who)
{
	struct cudaPointerAttributes a;
	struct kv_pool_info pi;
	kv_block_t id;
	bool ok;

	kv_pool_info(c, &pi);
	printf("info  %s: backend %s, export %d, device %d (kvd's %d), base %p, block %llu bytes\n",
	       who, pi.backend == KV_BACKEND_CUDA ? "cuda" : "host",
	       pi.export_kind, pi.device, pi.kvd_device, pi.base,
	       (unsigned long long)pi.block_bytes);
	if (kv_alloc(c, 1, &id) != 1)
		return false;
	ok = pi.backend == KV_BACKEND_CUDA && pi.device >= 0 &&
	     cudaPointerGetAttributes(&a, kv_block_ptr(c, id)) == cudaSuccess &&
	     a.type == cudaMemoryTypeDevice && a.device == pi.device;
	kv_release(c, &id, 1);
	return ok;
}

static int child(const char *sock, int rd, int wr)
{
	struct kv_client *c;
	kv_block_t ids[NBLK], x;
	struct kv_pool_info pi;
	uint8_t *buf;
	char m;

	if (connect_to(sock, &c))
		return 1;
	kv_pool_info(c, &pi);
	cudaSetDevice(pi.device);
	check(device_pointers(c, "B"), "B", "kv_block_ptr gives device pointers");
	if (read(rd, &m, 1) != 1)
		return 1;
	check(read_other(c, 'A', ids), "B", "reads A's committed blocks on the device");
	/* COW of a hit: kvd copies on its stream before the CQE */
	buf = malloc(pi.block_bytes);
	x = ids[5];
	check(kv_cow(c, &x, 1) == 1 && x != ids[5] &&
	      block_is(c, x, pat('A', 5), buf), "B", "COW copies a shared block on the device");
	check(cudaMemset(kv_block_ptr(c, x), 0xee, pi.block_bytes) ==
	      cudaSuccess && block_is(c, ids[5], pat('A', 5), buf) &&
	      block_is(c, x, 0xee, buf), "B", "writing the copy leaves the shared block");
	free(buf);
	check(write_commit(c, 'B', false), "B", "writes and commits its blocks");
	if (write(wr, "B", 1) != 1)
		return 1;
	kv_release(c, ids, NBLK);
	kv_release(c, &x, 1);
	kv_disconnect(c);
	return failed;
}

static int pair(const char *sock)
{
	int ab[2], ba[2], status;
	struct kv_client *c;
	kv_block_t ids[NBLK];
	pid_t pid;
	char m;

	if (pipe(ab) || pipe(ba))
		return 1;
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(child(sock, ab[0], ba[1]));
	if (connect_to(sock, &c))
		return 1;
	check(device_pointers(c, "A"), "A", "kv_block_ptr gives device pointers");
	check(write_commit(c, 'A', false), "A", "writes and commits its blocks");
	if (write(ab[1], "A", 1) != 1 || read(ba[0], &m, 1) != 1)
		failed = 1;
	check(read_other(c, 'B', ids), "A", "reads B's committed blocks on the device");
	kv_release(c, ids, NBLK);
	kv_disconnect(c);
	check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      !WEXITSTATUS(status), "A", "B finished without a failure");
	return failed;
}

/* LOOKUP of chain @tag through the ring: hits, and how many came from
 * the host tier (the CQE's flags); the hit blocks held in @ids. */
static int lookup_chain(struct kv_client *c, char tag, kv_block_t *ids,
			uint32_t *host)
{
	struct kv_hash *h = kv_data_ptr(c, 0, NBLK * sizeof(*h));
	kv_block_t *out = kv_data_ptr(c, 4096, NBLK * sizeof(*out));
	struct kv_sqe *sqe = kv_get_sqe(c);
	struct kv_cqe *cqe;
	int res;

	if (!h || !out || !sqe)
		return -1;
	for (int i = 0; i < NBLK; i++)
		h[i] = hash_of(tag, i);
	kv_prep_lookup(sqe, 0, NBLK, 4096);
	if (kv_submit_and_wait(c, 1) != 1 || kv_wait_cqe(c, &cqe))
		return -1;
	res = cqe->res;
	*host = KV_CQE_HOST_HITS(cqe->flags);
	kv_cqe_seen(c, cqe);
	if (res > 0)
		memcpy(ids, out, (size_t)res * sizeof(*ids));
	return res;
}

/*
 * The host tier behind a device pool (kvd --host-tier-size): chains of
 * twice the pool written and released, so most are evicted into pinned
 * host memory; each read back whole, every byte as written, and some of
 * them brought back by host-to-device copies.
 */
static int tier(const char *sock)
{
	enum { CHAINS = 16 };
	uint32_t promoted = 0, host = 0;
	struct kv_pool_info pi;
	kv_block_t ids[NBLK];
	struct kv_client *c;
	bool all = true;
	uint8_t *buf;

	if (connect_to(sock, &c))
		return 1;
	kv_pool_info(c, &pi);
	buf = malloc(pi.block_bytes);
	for (int t = 0; t < CHAINS; t++)
		all &= write_commit(c, (char)('a' + t), true);
	check(all, "T", "chains of twice the pool written and committed");
	for (int t = 0; t < CHAINS; t++) {
		int n = lookup_chain(c, (char)('a' + t), ids, &host);
		bool same = n == NBLK;

		for (int i = 0; same && i < NBLK; i++)
			same = block_is(c, ids[i], pat((char)('a' + t), i), buf);
		all &= same;
		promoted += host;
		if (n > 0)
			kv_release(c, ids, (unsigned)n);
	}
	check(all, "T", "every chain read back whole, every byte as written");
	check(promoted > 0, "T", "blocks came back from the host tier (pinned memory to device)");
	printf("tier: %u of %d blocks promoted from the host tier\n", promoted,
	       CHAINS * NBLK);
	free(buf);
	kv_disconnect(c);
	return failed;
}

static int reconnect(const char *sock, const char *flag)
{
	struct kv_client *c;
	kv_block_t ids[4];
	struct stat st;
	uint8_t *buf;
	int ret = -1;

	if (connect_to(sock, &c) || kv_alloc(c, 4, ids) != 4)
		return 1;
	printf("READY\n");
	fflush(stdout);
	for (int i = 0; i < 600 && stat(flag, &st); i++)
		usleep(100000);
	check(kv_nop(c) == -ECONNRESET, "R", "calls fail with -ECONNRESET after kvd restarted");
	check(kv_block_ptr(c, ids[0]) == NULL, "R", "no mapping of the old kvd is handed out");
	kv_disconnect(c);
	for (int i = 0; i < 100 && (ret = connect_to(sock, &c)); i++)
		usleep(100000);
	check(!ret, "R", "reconnects to the new kvd");
	if (ret)
		return 1;
	buf = malloc(geom().layers * 2 * geom().kv_heads * 16 * 128 * 2);
	check(kv_alloc(c, 1, ids) == 1 &&
	      cudaMemset(kv_block_ptr(c, ids[0]), 0x77, 256 << 10) == cudaSuccess &&
	      block_is(c, ids[0], 0x77, buf), "R", "the new pool is mapped and writable");
	free(buf);
	kv_disconnect(c);
	return failed;
}

int main(int argc, char **argv)
{
	cudaError_t e;
	int n = 0;

	/* The reason goes to run.sh: a driver too old for this runtime is
	 * not the same as no GPU. */
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || !n) {
		printf("cuda_clients: no CUDA device (%s), skipped\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	if (argc == 3 && !strcmp(argv[1], "pair"))
		return pair(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "reconnect"))
		return reconnect(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "tier"))
		return tier(argv[2]);
	fprintf(stderr, "usage: cuda_clients pair SOCKET | reconnect SOCKET FLAGFILE | tier SOCKET\n");
	return 2;
}
