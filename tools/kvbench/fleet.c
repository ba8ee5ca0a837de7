// SPDX-License-Identifier: MIT
/*
 * The process fleet of the load and replay modes: fork the engine
 * processes, let each connect, start them together on one byte through a
 * pipe, and collect what each sends back (its kvb_result, its samples,
 * with --compare-allocators its spans) while the parent samples kvd for
 * the time series. A process that dies never takes the parent with it;
 * one that fails stops the others (the futex turns of replay.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "fleet.h"
#include "kvd.h"
#include "replay.h"
#include "series.h"

static int worker_init(struct worker *w, const struct kvb_opts *o, unsigned idx)
{
	struct kv_pool_info info;
	char who[32];

	memset(w, 0, sizeof(*w));
	w->o = o;
	w->idx = idx;
	w->model = idx % o->models;
	w->rank = idx / o->models;
	w->mprocs = o->mdl[w->model].procs;
	w->ms = o->sh ? &o->sh->m[w->model] : NULL;
	w->rng = splitmix64(o->seed) ^ splitmix64(idx + 1);
	w->res_rng = ~w->rng;
	w->gen_base = splitmix64(o->seed ^ 0x6b76626eULL);
	w->r.magic = KVB_RESULT_MAGIC;
	if (o->mode == KVB_MODE_REPLAY ? kvb_replay_init(w) :
	    kvb_alloc_init(w)) {
		fprintf(stderr, "kvbench: proc %u: out of memory\n", idx);
		return -ENOMEM;
	}
	snprintf(who, sizeof(who), "proc %u", idx);
	if (kvb_connect(o, w->model, &w->c, who))
		return -1;
	kv_pool_info(w->c, &info);
	/* Device memory is not the CPU's to write: books only on cuda. */
	w->words = info.backend == KV_BACKEND_CUDA || o->no_verify ? 0 :
		   info.block_bytes / sizeof(uint64_t);
	return 0;
}

/* ---- parent and children ---- */

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int kvb_read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_result(struct worker *w, int fd)
{
	for (int k = 0; k < KVB_NR_OPS; k++)
		w->r.op[k].nr = w->s[k].nr;
	w->r.nr_spans = w->nr_spans;
	if (write_full(fd, &w->r, sizeof(w->r)))
		return -1;
	for (int k = 0; k < KVB_NR_OPS; k++)
		if (write_full(fd, w->s[k].v, w->s[k].nr * sizeof(uint64_t)))
			return -1;
	if (write_full(fd, w->spans, w->nr_spans * sizeof(*w->spans)))
		return -1;
	return 0;
}

/* Ready, wait for the parent's go byte, run, report. Never returns. */
static void __attribute__((noreturn))
child_main(const struct kvb_opts *o, unsigned idx, int go_fd, int out_fd)
{
	struct worker w;
	char go = 0;
	int ret;

	ret = worker_init(&w, o, idx);
	if (write_full(out_fd, ret ? "F" : "R", 1) || ret)
		_exit(1);
	if (kvb_read_full(go_fd, &go, 1) || go != 'g')
		_exit(1);
	w.r.t_start_ns = w.t_go = now_ns();
	w.r.syscalls = kv_syscalls(w.c);
	ret = o->mode == KVB_MODE_REPLAY ? kvb_replay_run(&w) :
					  kvb_alloc_run(&w);
	w.r.t_end_ns = now_ns();
	w.r.syscalls = kv_syscalls(w.c) - w.r.syscalls;
	if (ret && o->sh && !w.stopped)
		kvb_turns_stop(o->sh);
	w.r.status = w.stopped ? KVB_STATUS_STOPPED : ret ? 1 : 0;
	kv_disconnect(w.c);
	if (send_result(&w, out_fd))
		_exit(1);
	_exit(ret && !w.stopped ? 1 : 0);
}

static int spawn(const struct kvb_opts *o, struct child *ch, unsigned idx,
		 int go[2])
{
	pid_t parent = getpid();
	int p[2];

	if (pipe2(p, O_CLOEXEC)) {
		perror("kvbench: pipe");
		return -1;
	}
	ch->pid = fork();
	if (ch->pid < 0) {
		perror("kvbench: fork");
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (ch->pid == 0) {
		/* Never outlive the parent; it may have died already. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(p[0]);
		close(go[1]);
		child_main(o, idx, go[0], p[1]);
	}
	close(p[1]);
	ch->fd = p[0];
	return 0;
}

/* Tell every process to start ('g') or to give up ('a'). */
static void release_all(int go_fd, unsigned n, char what)
{
	char buf[KVB_MAX_PROCS];

	memset(buf, what, n);
	if (write_full(go_fd, buf, n))
		perror("kvbench: start pipe");
}

/* Read one process's results; ch->r is set only when all arrived. */
static void collect(struct child *ch, unsigned idx)
{
	struct kvb_result r;

	if (kvb_read_full(ch->fd, &r, sizeof(r)) || r.magic != KVB_RESULT_MAGIC)
		return;
	for (int k = 0; k < KVB_NR_OPS; k++) {
		ch->samp[k] = malloc(((size_t)r.op[k].nr + 1) *
				     sizeof(uint64_t));
		if (!ch->samp[k]) {
			fprintf(stderr, "kvbench: out of memory for proc %u's samples\n",
				idx);
			return;
		}
		if (kvb_read_full(ch->fd, ch->samp[k],
			      r.op[k].nr * sizeof(uint64_t)))
			return;
	}
	ch->spans = malloc(((size_t)r.nr_spans + 1) * sizeof(*ch->spans));
	if (!ch->spans ||
	    kvb_read_full(ch->fd, ch->spans, r.nr_spans * sizeof(*ch->spans)))
		return;
	ch->r = r;
	ch->got = true;
}

/* Milliseconds until the next sample is due (taking it when it is). */
static int sample_due(const struct kvb_opts *o, struct agg *a, uint64_t *next)
{
	uint64_t period = (uint64_t)o->sample_ms * 1000000ULL, t = now_ns();

	if (!o->sample_ms)
		return -1;
	if (t >= *next) {
		kvb_sample_take(o, a, NULL);
		*next += period;
		t = now_ns();
		if (*next <= t)		/* fell behind: skip, not burst */
			*next = t + period;
	}
	return (int)((*next - t + 999999) / 1000000);
}

/*
 * Results in the order they come, samples every --sample-ms meanwhile.
 * A process that ends without results, or with a failure, stops the
 * others' replay (they may wait for its turn or phase).
 */
static void collect_all(const struct kvb_opts *o, struct agg *a,
			struct child *ch, unsigned n)
{
	uint64_t next = a->t_go + (uint64_t)o->sample_ms * 1000000ULL;
	struct pollfd pf[KVB_MAX_PROCS];
	unsigned left = n;

	for (unsigned i = 0; i < n; i++) {
		ch[i].started = true;
		pf[i] = (struct pollfd){ .fd = ch[i].fd, .events = POLLIN };
	}
	while (left) {
		if (poll(pf, n, sample_due(o, a, &next)) < 0) {
			if (errno == EINTR)
				continue;
			perror("kvbench: poll");
			break;
		}
		for (unsigned i = 0; i < n; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			collect(&ch[i], i);
			pf[i].fd = -1;
			left--;
			if (o->sh && (!ch[i].got || ch[i].r.status == 1))
				kvb_turns_stop(o->sh);
		}
	}
}

/* Why a process failed, or NULL when it did not. */
static const char *child_failure(const struct child *ch, char *buf,
				 size_t len)
{
	int st = ch->wstatus;

	if (WIFSIGNALED(st)) {
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
		return buf;
	}
	if (!ch->ready) {
		snprintf(buf, len, "could not connect to kvd (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	if (!ch->started || ch->r.status == KVB_STATUS_STOPPED)
		return NULL;	/* stopped because another one failed */
	if (!ch->got) {
		snprintf(buf, len, "sent no results (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	if (WEXITSTATUS(st) || ch->r.status) {
		snprintf(buf, len, "failed during the run (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	return NULL;
}

static unsigned reap_all(struct child *ch, unsigned n)
{
	unsigned failed = 0;
	char why[96];

	for (unsigned i = 0; i < n; i++) {
		while (waitpid(ch[i].pid, &ch[i].wstatus, 0) < 0 &&
		       errno == EINTR)
			;
		close(ch[i].fd);
		if (child_failure(&ch[i], why, sizeof(why))) {
			fprintf(stderr, "kvbench: proc %u (pid %d) %s\n", i,
				(int)ch[i].pid, why);
			failed++;
		}
	}
	return failed;
}

/*
 * Replay: one more client, connected while the engines are, keeps the
 * namespace (and its prefix-cache counters) alive from before the run to
 * after it, so the counters' differences are this run's.
 */
static int monitor_begin(const struct kvb_opts *o, struct agg *a)
{
	int ret;

	for (unsigned m = 0; m < o->models; m++) {
		if (kvb_connect(o, m, &a->mon[m], "pool stats"))
			return -1;
		kv_pool_info(a->mon[m], &a->info[m]);
		ret = kv_stats(a->mon[m], &a->before[m]);
		if (ret) {
			fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
			return -1;
		}
	}
	return o->sample_ms ? kvb_series_begin(o, a) : 0;
}

/* --perf-stat: attach perf stat to kvd just before the start. */
static bool perf_begin(const struct kvb_opts *o, struct agg *a,
		       struct bench_perf *perf)
{
	struct kv_admin_status st;
	const char *why = "kvd's pid is unknown";
	int ret;

	if (!o->perf_stat)
		return false;
	ret = kvb_admin_status(o, a, &st);
	if (ret >= 0)
		ret = bench_perf_start(perf, (pid_t)st.pid, &why);
	if (!ret)
		return true;
	fprintf(stderr, "kvbench: --perf-stat: %s (%s); no kvd counts\n",
		why, strerror(-ret));
	return false;
}

/*
 * Fork all, wait until each is connected, start them together, collect.
 * Returns 0 when all ran fine, 1 when one failed, -1 when none started.
 */
int kvb_run_children(const struct kvb_opts *o, struct child *ch,
		     struct agg *a)
{
	unsigned started = 0, ready = 0;
	struct bench_perf perf;
	bool perf_on;
	int go[2];
	char b;

	if (pipe2(go, O_CLOEXEC)) {
		perror("kvbench: pipe");
		return -1;
	}
	fflush(NULL);
	for (; started < o->procs; started++)
		if (spawn(o, &ch[started], started, go))
			break;
	close(go[0]);
	for (unsigned i = 0; i < started; i++) {
		ch[i].ready = !kvb_read_full(ch[i].fd, &b, 1) && b == 'R';
		ready += ch[i].ready;
	}
	if (ready == o->procs && o->mode == KVB_MODE_REPLAY &&
	    monitor_begin(o, a))
		ready = 0;
	if (!a->t_go)
		a->t_go = now_ns();
	perf_on = ready == o->procs && perf_begin(o, a, &perf);
	release_all(go[1], started, ready == o->procs ? 'g' : 'a');
	close(go[1]);
	if (ready == o->procs)
		collect_all(o, a, ch, started);
	if (perf_on)
		a->have_perf = !bench_perf_stop(&perf, &a->perf);
	if (ready == o->procs && o->sample_ms)
		kvb_series_end(o, a);
	if (reap_all(ch, started) || ready < o->procs) {
		if (ready < o->procs)
			fprintf(stderr, "kvbench: %u of %u processes ready; run not started\n",
				ready, o->procs);
		return ready < o->procs ? -1 : 1;
	}
	return 0;
}

const char *kvb_proc_status(const struct child *ch)
{
	char why[96];

	return ch->r.bad_blocks || child_failure(ch, why, sizeof(why)) ?
	       "FAIL" : "ok";
}
