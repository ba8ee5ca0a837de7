// SPDX-License-Identifier: MIT
/*
 * kvbench --floor: what a cross-process round trip costs on this machine
 * at best, and how far kvd's round trips are from it. Two processes
 * (fork), pinned nowhere, pass a 64-byte message and its answer:
 *
 *  spin       through shared memory, both sides spinning on a sequence
 *             word (release store, acquire load): the floor of any ring;
 *  eventfd    the same, but the server sleeps in read() on an eventfd
 *             that the client writes after each request (the client
 *             spins for the answer): a daemon that sleeps when idle, as
 *             kvd does;
 *  seqpacket  a Unix SOCK_SEQPACKET request and response, both blocking;
 *
 * then kvd's own, against a private kvd (or --socket), with the
 * synchronous API: NOP, one-block ALLOC and RELEASE, and a NOP to a kvd
 * that has slept 50 ms (as the eventfd floor after the same idle time).
 * Each figure is the p50 and p99 of --iterations round trips (the idle
 * ones: at most 100), after a warm-up, or of those done in 5 s when the
 * machine is too busy for that many (the report gives the counts).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "../emit.h"
#include "kvd.h"
#include "lat.h"
#include "modes.h"

#define FL_WARMUP		1000U
#define FL_IDLE_ITERS		100U
#define FL_IDLE_US		50000U	/* long enough for kvd to sleep */
/*
 * A peer that is not running will not answer: after ~1 ms give it the
 * CPU. Not sooner: on a busy machine an early yield hands the CPU to
 * others for a whole time slice and measures the scheduler instead.
 */
#define FL_SPINS_BEFORE_YIELD	(1U << 16)
#define FL_PHASE_NS		(5 * KVB_NSEC_PER_SEC)	/* per figure */
#define FL_STOP			UINT64_MAX

/* One 64-byte message on its own cache line; seq publishes it. */
struct fl_msg {
	uint64_t	seq;
	uint8_t		payload[56];
} __attribute__((aligned(64)));

struct fl_shm {
	struct fl_msg	req;
	struct fl_msg	resp;
};

enum fl_kind {
	FL_SPIN,
	FL_EVENTFD,
	FL_SEQPACKET,
	FL_EVENTFD_IDLE,
	FL_NOP,
	FL_ALLOC,
	FL_RELEASE,
	FL_ALLOC_RELEASE,
	FL_ALLOC_RELEASE_1RT,
	FL_NOP_IDLE,
	FL_NR,
};

static const char *const fl_name[FL_NR] = {
	"spin", "eventfd", "seqpacket", "eventfd_idle", "nop", "alloc",
	"release", "alloc_release", "alloc_release_1rt", "nop_idle",
};

static const char *const fl_label[FL_NR] = {
	"shm, both spin", "eventfd wake, client spins", "SOCK_SEQPACKET",
	"eventfd after 50 ms idle", "kvd NOP", "kvd ALLOC 1 block",
	"kvd RELEASE 1 block", "kvd ALLOC+RELEASE", "kvd ALLOC+RELEASE, 1 trip",
	"kvd NOP after 50 ms idle",
};

/* Wait for *seq to become @want; yields only if spinning is hopeless. */
static void fl_spin_until(const uint64_t *seq, uint64_t want)
{
	unsigned n = 0;

	while (kv_smp_load_acquire(seq) != want) {
		kv_cpu_relax();
		if (++n == FL_SPINS_BEFORE_YIELD) {
			n = 0;
			sched_yield();
		}
	}
}

static void fl_answer(struct fl_shm *m, uint64_t seq)
{
	memcpy(m->resp.payload, m->req.payload, sizeof(m->resp.payload));
	kv_smp_store_release(&m->resp.seq, seq);
}

/* The server side of spin and eventfd: answer until FL_STOP. */
static void fl_serve_shm(struct fl_shm *m, int efd)
{
	uint64_t seq, last = 0, v;
	unsigned n;

	for (;;) {
		if (efd >= 0 && read(efd, &v, sizeof(v)) != sizeof(v))
			_exit(1);
		n = 0;
		while ((seq = kv_smp_load_acquire(&m->req.seq)) == last) {
			kv_cpu_relax();
			if (++n == FL_SPINS_BEFORE_YIELD) {
				n = 0;
				sched_yield();
			}
		}
		if (seq == FL_STOP)
			_exit(0);
		fl_answer(m, seq);
		last = seq;
	}
}

static void fl_serve_sock(int fd)
{
	uint8_t buf[64];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0)
			_exit(n < 0);
		if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
			_exit(1);
	}
}

/* Fork the server of @kind; it dies with us. */
static pid_t fl_fork(enum fl_kind kind, struct fl_shm *m, int efd, int sock)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	if (kind == FL_SEQPACKET)
		fl_serve_sock(sock);
	fl_serve_shm(m, kind == FL_SPIN ? -1 : efd);
	_exit(0);
}

/* One shared-memory round trip (the payload is the server's to copy). */
static uint64_t fl_shm_trip(struct fl_shm *m, int efd, uint64_t seq)
{
	uint64_t one = 1, t0 = bench_now_ns();

	memset(m->req.payload, (int)seq, sizeof(m->req.payload));
	kv_smp_store_release(&m->req.seq, seq);
	if (efd >= 0 && write(efd, &one, sizeof(one)) != sizeof(one))
		return 0;
	fl_spin_until(&m->resp.seq, seq);
	return bench_now_ns() - t0;
}

static uint64_t fl_sock_trip(int fd, uint64_t seq)
{
	uint8_t buf[64];
	uint64_t t0 = bench_now_ns();

	memset(buf, (int)seq, sizeof(buf));
	if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != sizeof(buf) ||
	    recv(fd, buf, sizeof(buf), 0) != sizeof(buf))
		return 0;
	return bench_now_ns() - t0;
}

/*
 * Measure @kind's round trips into @l (and, for eventfd, the idle ones
 * into @idle). A round trip that failed reads 0 and fails the floor.
 */
static int fl_measure(enum fl_kind kind, unsigned iters,
		      struct bench_lat *l, struct bench_lat *idle)
{
	struct fl_shm *m;
	int efd = -1, sv[2] = { -1, -1 }, status, ret = -1;
	uint64_t seq = 0, ns, one = 1, end;
	pid_t pid;

	m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		fprintf(stderr, "kvbench: mmap: %s\n", strerror(errno));
		return -1;
	}
	memset(m, 0, sizeof(*m));
	if (kind == FL_EVENTFD)
		efd = eventfd(0, EFD_CLOEXEC);
	if (kind == FL_SEQPACKET &&
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		goto out_unmap;
	if (kind == FL_EVENTFD && efd < 0)
		goto out_unmap;
	pid = fl_fork(kind, m, efd, sv[1]);
	if (pid < 0)
		goto out_close;
	end = bench_now_ns() + FL_PHASE_NS;
	for (unsigned i = 0; i < FL_WARMUP + iters; i++) {
		ns = kind == FL_SEQPACKET ? fl_sock_trip(sv[0], ++seq) :
		     fl_shm_trip(m, efd, ++seq);
		if (!ns)
			goto out_stop;
		if (i >= FL_WARMUP)
			bench_lat_add(l, ns);
		if (bench_now_ns() > end && l->n)
			break;
	}
	for (unsigned i = 0; idle && i < idle->cap; i++) {
		usleep(FL_IDLE_US);
		ns = fl_shm_trip(m, efd, ++seq);
		if (!ns)
			goto out_stop;
		bench_lat_add(idle, ns);
	}
	ret = 0;
out_stop:
	if (kind == FL_SEQPACKET) {
		shutdown(sv[0], SHUT_RDWR);
	} else {
		kv_smp_store_release(&m->req.seq, FL_STOP);
		if (efd >= 0 && write(efd, &one, sizeof(one)) < 0)
			kill(pid, SIGKILL);
	}
	waitpid(pid, &status, 0);
out_close:
	if (efd >= 0)
		close(efd);
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
out_unmap:
	munmap(m, sizeof(*m));
	if (ret)
		fprintf(stderr, "kvbench: %s round trips failed: %s\n",
			fl_name[kind], strerror(errno));
	return ret;
}

/*
 * ALLOC+RELEASE in one round trip, as an engine step frees one block and
 * takes another: RELEASE of the block the last trip allocated and ALLOC
 * of the next, two SQEs behind one submit. Ids at data offsets 0 and 64.
 */
static int fl_kvd_pair_trips(struct kv_client *c, unsigned iters,
			     struct bench_lat *lat)
{
	uint64_t t0, t1, end = bench_now_ns() + FL_PHASE_NS;
	kv_block_t *rel = kv_data_ptr(c, 0, sizeof(kv_block_t));
	kv_block_t *got = kv_data_ptr(c, 64, sizeof(kv_block_t));
	struct kv_cqe *cqes[2];
	struct kv_sqe *sqe;

	if (!rel || !got || kv_alloc(c, 1, got) != 1)
		return -1;
	for (unsigned i = 0; i < FL_WARMUP + iters; i++) {
		t0 = bench_now_ns();
		*rel = *got;
		if (!(sqe = kv_get_sqe(c)))
			return -1;
		kv_prep_release(sqe, 0, 1);
		if (!(sqe = kv_get_sqe(c)))
			return -1;
		kv_prep_alloc(sqe, 64, 1);
		if (kv_submit_and_wait(c, 2) < 0 ||
		    kv_peek_batch_cqe(c, cqes, 2) != 2 || cqes[0]->res != 1 ||
		    cqes[1]->res != 1)
			return -1;
		kv_cq_advance(c, 2);
		t1 = bench_now_ns();
		if (i < FL_WARMUP)
			continue;
		bench_lat_add(lat, t1 - t0);
		if (t1 > end)
			break;
	}
	return kv_release(c, got, 1) == 1 ? 0 : -1;
}

/* kvd's round trips, synchronous API, on one client. */
static int fl_kvd_trips(struct kv_client *c, unsigned iters,
			struct bench_lat *lat)
{
	uint64_t t0, t1, t2, end = bench_now_ns() + FL_PHASE_NS;
	kv_block_t id;

	for (unsigned i = 0; i < FL_WARMUP + iters; i++) {
		t0 = bench_now_ns();
		if (kv_nop(c))
			return -1;
		t1 = bench_now_ns();
		if (i >= FL_WARMUP)
			bench_lat_add(&lat[FL_NOP], t1 - t0);
		if (t1 > end && lat[FL_NOP].n)
			break;
	}
	end = bench_now_ns() + FL_PHASE_NS;
	for (unsigned i = 0; i < FL_WARMUP + iters; i++) {
		t0 = bench_now_ns();
		if (kv_alloc(c, 1, &id) != 1)
			return -1;
		t1 = bench_now_ns();
		if (kv_release(c, &id, 1) != 1)
			return -1;
		t2 = bench_now_ns();
		if (i < FL_WARMUP)
			continue;
		bench_lat_add(&lat[FL_ALLOC], t1 - t0);
		bench_lat_add(&lat[FL_RELEASE], t2 - t1);
		bench_lat_add(&lat[FL_ALLOC_RELEASE], t2 - t0);
		if (t2 > end)
			break;
	}
	if (fl_kvd_pair_trips(c, iters, &lat[FL_ALLOC_RELEASE_1RT]))
		return -1;
	for (unsigned i = 0; i < lat[FL_NOP_IDLE].cap; i++) {
		usleep(FL_IDLE_US);
		t0 = bench_now_ns();
		if (kv_nop(c))
			return -1;
		bench_lat_add(&lat[FL_NOP_IDLE], bench_now_ns() - t0);
	}
	return 0;
}

static int fl_kvd(const struct kvb_opts *o, unsigned iters,
		  struct bench_lat *lat)
{
	struct bench_kvd k = { 0 };
	struct kv_client *c;
	int ret;

	if (bench_open(o, "64M", "kvbench-floor", &k, &c))
		return -1;
	ret = fl_kvd_trips(c, iters, lat);
	if (ret)
		fprintf(stderr, "kvbench: a round trip to kvd failed\n");
	bench_close(o, &k, c);
	return ret;
}

/* clock_gettime's own cost, which every sample includes once. */
static double fl_timer_ns(void)
{
	uint64_t t0 = bench_now_ns(), t1 = t0;

	for (unsigned i = 0; i < 100000; i++)
		t1 = bench_now_ns();
	return (double)(t1 - t0) / 100000;
}

static const struct kv_emit_col fl_cols[] = {
	{ "name", "", -26 }, { "n", "n", 6 }, { "p50_ns", "p50 ns", 10 },
	{ "p99_ns", "p99 ns", 10 }, { "vs_spin", "/spin", 8 },
	{ "vs_eventfd", "/eventfd", 8 }, { "vs_seqpacket", "/seqpkt", 8 },
};

static void fl_emit(struct kv_emit *e, struct bench_lat *lat, unsigned iters,
		    double timer)
{
	double spin = bench_lat_pct(&lat[FL_SPIN], 50);
	double evfd = bench_lat_pct(&lat[FL_EVENTFD], 50);
	double sock = bench_lat_pct(&lat[FL_SEQPACKET], 50);

	kv_emit_obj_begin(e, "floor", "round trips, 64-byte message (two processes, unpinned)");
	kv_emit_u64(e, "iterations", "iterations", iters);
	kv_emit_u64(e, "idle_iterations", "after 50 ms idle",
		    (uint64_t)lat[FL_NOP_IDLE].n);
	kv_emit_f64(e, "timer_ns", "clock_gettime (ns)", timer);
	kv_emit_table_begin(e, "rows", fl_cols, 7);
	for (int k = 0; k < FL_NR; k++) {
		double p50 = bench_lat_pct(&lat[k], 50);

		kv_emit_row_begin(e);
		kv_emit_cell_str(e, e->json ? fl_name[k] : fl_label[k]);
		kv_emit_cell_u64(e, lat[k].n);
		kv_emit_cell_f64(e, p50);
		kv_emit_cell_f64(e, bench_lat_pct(&lat[k], 99));
		kv_emit_cell_f64(e, spin ? p50 / spin : 0);
		kv_emit_cell_f64(e, evfd ? p50 / evfd : 0);
		kv_emit_cell_f64(e, sock ? p50 / sock : 0);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}

static int fl_lat_init(struct bench_lat *lat, unsigned iters)
{
	unsigned idle = iters < FL_IDLE_ITERS ? iters : FL_IDLE_ITERS;

	for (int k = 0; k < FL_NR; k++)
		if (bench_lat_init(&lat[k], k == FL_EVENTFD_IDLE ||
				   k == FL_NOP_IDLE ? idle : iters))
			return -1;
	return 0;
}

int kvb_mode_floor(struct kvb_opts *o)
{
	struct bench_lat lat[FL_NR] = { 0 };
	struct kv_emit e;
	double timer;
	FILE *json;
	int ret = 1;

	if (fl_lat_init(lat, o->iters))
		goto out;
	timer = fl_timer_ns();
	if (fl_measure(FL_SPIN, o->iters, &lat[FL_SPIN], NULL) ||
	    fl_measure(FL_EVENTFD, o->iters, &lat[FL_EVENTFD],
		       &lat[FL_EVENTFD_IDLE]) ||
	    fl_measure(FL_SEQPACKET, o->iters, &lat[FL_SEQPACKET], NULL) ||
	    fl_kvd(o, o->iters, lat))
		goto out;
	for (int k = 0; k < FL_NR; k++)
		bench_lat_sort(&lat[k]);
	if (!o->quiet) {
		kv_emit_begin(&e, stdout, false);
		fl_emit(&e, lat, o->iters, timer);
		kv_emit_end(&e);
	}
	ret = 0;
	if (!o->json_path)
		goto out;
	json = kvb_json_open(o->json_path);
	if (json) {
		kv_emit_begin(&e, json, true);
		fl_emit(&e, lat, o->iters, timer);
		kv_emit_end(&e);
	}
	if (!json || kvb_json_close(o->json_path, json))
		ret = 1;
out:
	for (int k = 0; k < FL_NR; k++)
		bench_lat_free(&lat[k]);
	return ret;
}
