// SPDX-License-Identifier: MIT
/*
 * A client that writes garbage into its own ring: thousands of random
 * SQEs each get a CQE, then corrupt ring indices get it disconnected.
 * kvd survives, a bystander is unaffected, and no block leaks.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Random SQEs, biased towards valid opcodes and small offsets. */
static void random_sqes(struct kv_client *c, int n)
{
	int sent = 0, got = 0;
	struct kv_cqe *cqe;

	while (got < n) {
		struct kv_sqe *sqe;

		while (sent < n && (sqe = kv_get_sqe(c))) {
			uint64_t *w = (uint64_t *)sqe;

			for (int i = 0; i < 8; i++)
				w[i] = next();
			if (next() & 1) {
				memset(sqe, 0, sizeof(*sqe));
				sqe->opcode = next() % (KV_OP__MAX + 1);
				sqe->nr = next() % 8;
				sqe->off = (next() % 64) * 4;
			}
			sent++;
		}
		T_ASSERT(kv_submit(c) >= 0);
		T_EQ(kv_wait_cqe(c, &cqe), 0);
		do {
			T_ASSERT(cqe->res <= 8 || cqe->res == sizeof(struct kv_stats));
			kv_cqe_seen(c, cqe);
			got++;
		} while (kv_peek_cqe(c, &cqe) == 0);
	}
}

/* Map the client's ring memfd ourselves and break its SQ tail. */
static void corrupt_indices(void)
{
	char path[64], target[128];
	int ring_fd = -1;

	/* The newest ring is the hostile client's (it connected last). */
	for (int fd = 3; fd < 256; fd++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			if (strstr(target, "kvd-ring"))
				ring_fd = fd;
		}
	}
	T_ASSERT(ring_fd >= 0);
	uint32_t *hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			     ring_fd, 0);
	T_ASSERT(hdr != MAP_FAILED);
	hdr[64 / 4] = hdr[0] + 100000;		/* sq_tail far past sq_head */
	munmap(hdr, 4096);
	/* Ring every eventfd we have: one is the doorbell. */
	for (int fd = 3; fd < 256; fd++) {
		uint64_t one = 1;
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			if (strstr(target, "eventfd"))
				(void)!write(fd, &one, sizeof(one));
		}
	}
}

int main(void)
{
	struct kv_client *c, *by;
	kv_block_t ids[3];
	struct t_kvd k;
	char *js;
	int ret = 0;

	t_kvd_start(&k, "16M", NULL);
	T_EQ(t_connect(&k, "m", NULL, &by), 0);
	T_EQ(kv_alloc(by, 3, ids), 3);
	T_EQ(t_connect(&k, "m", NULL, &c), 0);
	random_sqes(c, 20000);
	T_EQ(kv_nop(by), 0);

	corrupt_indices();
	usleep(200000);		/* let kvd look before we touch the ring */
	for (int i = 0; i < 200; i++) {
		ret = kv_nop(c);
		if (ret == -ECONNRESET)
			break;
		usleep(10000);
	}
	T_EQ(ret, -ECONNRESET);
	kv_disconnect(c);

	T_EQ(kv_release(by, ids, 3), 3);
	T_EQ(kv_nop(by), 0);
	T_EQ(kv_disconnect(by), 0);
	js = t_status_idle(&k);
	T_EQ(t_json_int(js, "nr_namespaces"), 0);	/* idle: freed */
	T_EQ(t_json_int(js, "pages_used"), 0);
	free(js);
	t_kvd_stop(&k);
	return 0;
}
