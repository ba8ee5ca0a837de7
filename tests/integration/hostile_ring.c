// SPDX-License-Identifier: MIT
/*
 * A client that writes garbage into its own ring: thousands of random
 * SQEs each get a CQE, then corrupt ring indices get it disconnected.
 * kvd survives, a bystander is unaffected, and no block leaks. A client
 * that never reaps its CQ does not keep kvd busy, kv_submit_and_wait
 * refuses a count its CQ could never hold, and an SQ slot is free by the
 * time its CQE is seen.
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

/* CPU seconds kvd (@pid) has used, from /proc. */
static double cpu_s(pid_t pid)
{
	char path[64];
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	T_ASSERT(f);
	/* pid (comm) state ppid ... utime stime: fields 14 and 15 */
	T_EQ(fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
		    &ut, &st), 2);
	fclose(f);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * SQEs queued behind a CQ the client does not reap are not work: kvd
 * sleeps (a spinning kvd would burn the whole second), and serves them
 * once the client reaps.
 */
static void full_cq(struct t_kvd *k)
{
	struct kv_connect_params p = { 0 };
	struct kv_cqe *cqe;
	struct kv_client *c;
	struct kv_sqe *sqe;
	unsigned n = 0;
	double t0;

	p.socket_path = k->sock;
	p.model_id = "m";
	p.geom = t_geom();
	p.sq_entries = 8;			/* CQ of 16 */
	T_EQ(kv_connect(&p, &c), 0);
	/* a full CQ (16) and a full SQ (8) behind it */
	for (int tries = 0; n < 24 && tries < 5000; tries++) {
		sqe = kv_get_sqe(c);
		if (!sqe) {
			usleep(1000);		/* kvd has not taken them yet */
			continue;
		}
		kv_prep_nop(sqe);
		T_ASSERT(kv_submit(c) == 1);
		n++;
	}
	T_EQ(n, 24);
	T_EQ(kv_submit_and_wait(c, 17), -EINVAL);	/* > cq_entries */
	usleep(200000);
	t0 = cpu_s(k->pid);
	sleep(1);
	/* An idle kvd uses ~0; a spinning one ~1 s of this second. */
	T_ASSERT(cpu_s(k->pid) - t0 < 0.3);
	for (unsigned got = 0; got < n; got++) {
		T_EQ(kv_wait_cqe(c, &cqe), 0);
		T_EQ(cqe->res, 0);
		kv_cqe_seen(c, cqe);
	}
	T_EQ(kv_disconnect(c), 0);
}

/*
 * A slot is free once its CQE is seen: reap a full SQ's completions and
 * the next kv_get_sqe succeeds at once, every time (kvd publishes the SQ
 * head before the CQ tail, as io_uring does).
 */
static void sq_slot_order(struct t_kvd *k)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	struct kv_sqe *sqe;

	p.socket_path = k->sock;
	p.model_id = "m";
	p.geom = t_geom();
	p.sq_entries = 8;
	T_EQ(kv_connect(&p, &c), 0);
	for (int round = 0; round < 20000; round++) {
		for (int i = 0; i < 8; i++) {
			sqe = kv_get_sqe(c);
			T_ASSERT(sqe);		/* all 8 reaped last round */
			kv_prep_nop(sqe);
		}
		T_EQ(kv_submit_and_wait(c, 8), 8);
		kv_cq_advance(c, 8);
	}
	T_EQ(kv_disconnect(c), 0);
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

	full_cq(&k);
	sq_slot_order(&k);
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
