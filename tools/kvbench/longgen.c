// SPDX-License-Identifier: MIT
/*
 * One policy's run of the long generation (--policy): engine processes
 * that each open --seqs prompts under the policy and decode far past
 * max_context, one token to each sequence in turn, as a batch of
 * decodes does; and the parent, which samples the namespace's blocks
 * through a client of its own while they run.
 *
 * What is counted, per append of one token (the engine knows no more
 * than kv_seq tells it): a block was allocated when the block table's
 * last entry is a new one, and the blocks released are those that, with
 * it, make up the table's change in length. kv_seq_range says what is
 * kept and dropped, and up to where the sequence may commit.
 *
 * The processes share with the parent one anonymous mapping (their
 * kvb_lg_proc, then every kvb_lg_seq), written by each process in its
 * own slots only: the parent reads its state (atomic) while it runs,
 * the rest once it has exited.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvbench.h"
#include "kvd.h"
#include "longgen.h"

#define LG_READY_NS	(30 * NSEC_PER_SEC)	/* to connect and open */
#define LG_POLL_NS	1000000L		/* while they get ready */

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

uint32_t kvb_lg_kept_bound(const struct kvb_opts *o,
			   const struct kv_ctx_policy *p,
			   uint32_t max_context)
{
	uint64_t bt = o->geom.block_tokens;
	uint64_t total = (uint64_t)o->prompt_tokens + o->gen_tokens;
	uint64_t all = div_up(total, bt), keep, head;

	switch (p->kind) {
	case KV_CTX_NONE:
	case KV_CTX_TRUNCATE:
		if (!max_context)
			return (uint32_t)all;
		if (!(p->flags & KV_CTX_DROP_OLDEST))
			return (uint32_t)div_up(total < max_context ? total :
						max_context, bt);
		keep = div_up(max_context - 1, bt) + 1;
		break;
	default:	/* W tokens in a row span at most this many blocks */
		head = p->sinks + !!(p->flags & KV_CTX_BOS_EXTRA);
		keep = div_up(head, bt) + div_up(p->window - 1, bt) + 1;
		break;
	}
	return (uint32_t)(keep < all ? keep : all);
}

/* ---- one engine process ---- */

struct lg_engine {
	const struct kvb_opts *o;
	const struct kv_ctx_policy *policy;
	struct kv_client *c;
	struct kv_seq	**s;		/* o->seqs */
	struct kvb_lg_proc *p;
	struct kvb_lg_seq *r;		/* its o->seqs results */
	uint64_t	key;		/* of its tokens */
	unsigned	idx;
	bool		dropping;	/* this step dropped tokens */
};

/* Token @pos of sequence @j: unique to the run, process and sequence. */
static uint32_t lg_token(const struct lg_engine *e, unsigned j, uint64_t pos)
{
	return (uint32_t)(splitmix64(e->key ^ splitmix64((uint64_t)j << 40 ^
							 pos)) >> 32);
}

/* Say why the process failed (the first reason only). */
static int __attribute__((format(printf, 2, 3)))
lg_fail(struct lg_engine *e, const char *fmt, ...)
{
	va_list ap;

	if (!e->p->msg[0]) {
		va_start(ap, fmt);
		vsnprintf(e->p->msg, sizeof(e->p->msg), fmt, ap);
		va_end(ap);
	}
	e->p->status = 1;
	return -1;
}

/* Why the last kv_seq call failed: libkvclient's words, else errno's. */
static const char *lg_why(const struct lg_engine *e, int err)
{
	const char *why = kv_last_error(e->c);

	return why && *why ? why : strerror(-err);
}

static int lg_open(struct lg_engine *e)
{
	const struct kvb_opts *o = e->o;
	struct kv_seq_range g;
	uint32_t *tok;
	char who[32];
	int ret = 0;

	snprintf(who, sizeof(who), "proc %u", e->idx);
	if (kvb_connect(o, 0, &e->c, who))
		return lg_fail(e, "could not connect to kvd");
	tok = malloc(o->prompt_tokens * sizeof(*tok));
	e->s = calloc(o->seqs, sizeof(*e->s));
	if (!tok || !e->s) {
		free(tok);
		return lg_fail(e, "out of memory");
	}
	for (unsigned j = 0; j < o->seqs; j++) {
		for (uint64_t i = 0; i < o->prompt_tokens; i++)
			tok[i] = lg_token(e, j, i);
		ret = kv_seq_open_policy(e->c, tok, o->prompt_tokens, NULL,
					 e->policy, &e->s[j]);
		if (ret) {
			lg_fail(e, "seq %u: %s", j, lg_why(e, ret));
			break;
		}
		kv_seq_range(e->s[j], &g);
		e->r[j].end = g;
		e->r[j].peak_blocks = g.nr_blocks;
	}
	free(tok);
	return ret ? -1 : 0;
}

/* The last entry of @s's block table, and its length. */
static kv_block_t lg_last(const struct kv_seq *s, uint32_t *nr)
{
	const kv_block_t *t = kv_seq_block_table(s, nr);

	return *nr ? t[*nr - 1] : 0;
}

/*
 * The blocks one append changed, while it drops tokens: one new at the
 * end of the table, and the released ones that make up the rest of its
 * change in length.
 */
static void lg_count(struct lg_engine *e, kv_block_t last0, uint32_t nr0,
		     kv_block_t last1, uint32_t nr1)
{
	uint64_t alloc = nr1 && (!nr0 || last1 != last0);
	uint64_t rel = nr0 + alloc > nr1 ? nr0 + alloc - nr1 : 0;

	e->dropping = true;
	e->p->slide_ops += alloc + rel;
}

/* One token to sequence @j at @pos; 0 (even when it stopped) or -1. */
static int lg_append(struct lg_engine *e, unsigned j, uint64_t pos)
{
	struct kvb_lg_seq *r = &e->r[j];
	struct kv_seq *s = e->s[j];
	uint32_t tok = lg_token(e, j, pos), nr0, nr1;
	kv_block_t last0 = lg_last(s, &nr0), last1;
	struct kv_seq_range g;
	int ret;

	ret = kv_seq_append(s, &tok, 1);
	if (ret == -E2BIG || ret > 0) {
		/* max_context: none refuses, truncate (stop) takes less */
		r->stop = ret > 0 ? KVB_LG_SHORT : KVB_LG_E2BIG;
		r->err = ret < 0 ? ret : 0;
		e->p->appends += ret > 0 ? (unsigned)ret : 0;
		kv_seq_range(s, &r->end);
		return 0;
	}
	if (ret < 0) {
		r->stop = KVB_LG_FAILED;
		r->err = ret;
		return lg_fail(e, "seq %u at len %llu: %s", j,
			       (unsigned long long)pos, lg_why(e, ret));
	}
	e->p->appends++;
	kv_seq_range(s, &g);
	last1 = lg_last(s, &nr1);
	if (g.dropped)
		lg_count(e, last0, nr0, last1, nr1);
	if (g.dropped && !r->first_drop_len) {
		r->first_drop_len = g.len;
		r->first_drop_commit = g.commit_end;
	}
	if (g.nr_blocks > r->peak_blocks)
		r->peak_blocks = g.nr_blocks;
	r->end = g;
	return 0;
}

/* Decode steps: one token to every sequence still going, in turn. */
static int lg_generate(struct lg_engine *e)
{
	const struct kvb_opts *o = e->o;
	uint64_t pos = o->prompt_tokens, end = pos + o->gen_tokens;
	unsigned going = o->seqs;

	e->p->t_start = now_ns();
	for (; pos < end && going; pos++) {
		e->dropping = false;
		going = 0;
		for (unsigned j = 0; j < o->seqs; j++) {
			if (e->r[j].stop)
				continue;
			if (lg_append(e, j, pos))
				goto out;
			going += !e->r[j].stop;
		}
		if (e->dropping && !e->p->t_slide)
			e->p->t_slide = now_ns();
	}
	for (unsigned j = 0; j < o->seqs; j++)
		if (!e->r[j].stop)
			e->r[j].stop = KVB_LG_DONE;
out:
	e->p->t_end = now_ns();
	return e->p->status ? -1 : 0;
}

static void lg_close(struct lg_engine *e)
{
	for (unsigned j = 0; e->s && j < e->o->seqs; j++)
		if (e->s[j])
			kv_seq_close(e->s[j]);
	free(e->s);
	if (e->c)
		kv_disconnect(e->c);
}

/* A byte from the parent; 0 at its end of file. */
static char lg_word(int fd)
{
	char c = 0;
	ssize_t n;

	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? c : 0;
}

/*
 * Open, say ready, wait for the go, generate, then hold the sequences
 * until the parent has sampled them (it closes @hold_fd's other end).
 * Never returns.
 */
static void __attribute__((noreturn))
lg_child(const struct kvb_opts *o, struct kvb_lg_run *run, unsigned idx,
	 int go_fd, int hold_fd)
{
	struct lg_engine e = {
		.o = o, .policy = &run->policy, .idx = idx,
		.p = &run->proc[idx], .r = &run->seq[(size_t)idx * o->seqs],
		.key = splitmix64(run->salt ^ splitmix64(idx + 1)),
	};
	int ret;

	ret = lg_open(&e);
	/* pairs with the acquire in lg_state(): the parent reads msg */
	atomic_store_explicit(&e.p->state, ret ? KVB_LG_UNREADY : KVB_LG_READY,
			      memory_order_release);
	if (ret || lg_word(go_fd) != 'g') {
		lg_close(&e);
		_exit(1);
	}
	ret = lg_generate(&e);
	/* pairs with the acquire in lg_state() */
	atomic_store_explicit(&e.p->state, KVB_LG_GENERATED,
			      memory_order_release);
	lg_word(hold_fd);
	lg_close(&e);
	_exit(ret ? 1 : 0);
}

/* ---- the parent ---- */

static int lg_map(const struct kvb_opts *o, struct kvb_lg_run *run)
{
	size_t procs = o->procs * sizeof(*run->proc);
	size_t seqs = (size_t)o->procs * o->seqs * sizeof(*run->seq);
	void *m;

	run->map_bytes = procs + seqs;
	m = mmap(NULL, run->map_bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("kvbench: mmap");
		run->map_bytes = 0;
		return -1;
	}
	/* zero-filled: every state KVB_LG_STARTING */
	run->proc = m;
	run->seq = (struct kvb_lg_seq *)((char *)m + procs);
	return 0;
}

static void lg_sleep(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };

	nanosleep(&ts, NULL);
}

/* Fork the processes; how many started (the rest failed to fork). */
static unsigned lg_spawn(const struct kvb_opts *o, struct kvb_lg_run *run,
			 pid_t *pid, int go[2], int hold[2])
{
	pid_t parent = getpid();
	unsigned n;

	fflush(NULL);
	for (n = 0; n < o->procs; n++) {
		pid[n] = fork();
		if (pid[n] < 0) {
			perror("kvbench: fork");
			break;
		}
		if (pid[n])
			continue;
		/* Never outlive the parent; it may have died already. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(go[1]);
		close(hold[1]);
		lg_child(o, run, n, go[0], hold[0]);
	}
	return n;
}

/* Reap what has exited; true when all @n have. */
static bool lg_reap(pid_t *pid, int *wst, unsigned n, bool block)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!pid[i])
			continue;
		if (waitpid(pid[i], &wst[i], block ? 0 : WNOHANG) == pid[i])
			pid[i] = 0;
		else
			left++;
	}
	return !left;
}

/* Process @i's state; what it wrote before its store is visible. */
static uint32_t lg_state(const struct kvb_lg_run *run, unsigned i)
{
	/* pairs with the release store in lg_child() */
	return atomic_load_explicit(&run->proc[i].state, memory_order_acquire);
}

/* Processes ready, or -1 when one cannot be (unready, or died). */
static int lg_ready(const struct kvb_lg_run *run, pid_t *pid, int *wst,
		    unsigned n)
{
	int ready = 0;

	for (unsigned i = 0; i < n; i++) {
		uint32_t st = lg_state(run, i);

		if (st == KVB_LG_UNREADY)
			return -1;
		if (st == KVB_LG_READY) {
			ready++;
			continue;
		}
		if (waitpid(pid[i], &wst[i], WNOHANG) == pid[i]) {
			pid[i] = 0;	/* died before it was ready */
			return -1;
		}
	}
	return ready;
}

/* Until every process is ready: false when one is not, or died. */
static bool lg_wait_ready(const struct kvb_lg_run *run, pid_t *pid,
			  int *wst, unsigned n)
{
	uint64_t t0 = now_ns();
	int ready;

	while ((ready = lg_ready(run, pid, wst, n)) >= 0) {
		if ((unsigned)ready == n)
			return true;
		if (now_ns() - t0 > LG_READY_NS) {
			fprintf(stderr, "kvbench: %s: %d of %u processes ready after %llu s\n",
				run->name, ready, n,
				LG_READY_NS / NSEC_PER_SEC);
			return false;
		}
		lg_sleep(LG_POLL_NS);
	}
	return false;
}

/* One sample of the namespace: its blocks in use, and cached. */
static void lg_sample(struct kvb_lg_run *run, struct kv_client *mon)
{
	struct kv_stats st;
	int ret = kv_stats(mon, &st);

	if (ret) {
		if (!run->sample_errors++)
			fprintf(stderr, "kvbench: %s: STATS: %s; the pool's peak misses samples\n",
				run->name, strerror(-ret));
		return;
	}
	/* the first, before the processes: what earlier runs left */
	if (!run->samples++)
		run->cached0 = st.cached_blocks;
	if (st.ns_blocks_used > run->pool_peak_used)
		run->pool_peak_used = st.ns_blocks_used;
	if (st.cached_blocks > run->cached0 &&
	    st.cached_blocks - run->cached0 > run->pool_peak_cached)
		run->pool_peak_cached = st.cached_blocks - run->cached0;
}

/* Every process done generating (or gone), its sequences held. */
static bool lg_all_generated(const struct kvb_lg_run *run, const pid_t *pid,
			     unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (pid[i] && lg_state(run, i) != KVB_LG_GENERATED)
			return false;
	return true;
}

/*
 * While they run: a sample every --sample-ms; once all are done, one
 * more with every sequence still open (none's peak is at its end, which
 * a short run reaches between two samples), then let them close, and
 * sample no more: closing is no part of the policy.
 */
static void lg_watch(const struct kvb_opts *o, struct kvb_lg_run *run,
		     struct kv_client *mon, pid_t *pid, int *wst, unsigned n,
		     int *hold_fd)
{
	while (!lg_reap(pid, wst, n, false)) {
		lg_sample(run, mon);
		if (lg_all_generated(run, pid, n))
			break;
		lg_sleep((long)o->sample_ms * 1000000L);
	}
	close(*hold_fd);
	*hold_fd = -1;
}

/* Say which processes failed, and why; how many. */
static unsigned lg_failures(const struct kvb_opts *o,
			    const struct kvb_lg_run *run, const pid_t *pid,
			    const int *wst, unsigned n)
{
	unsigned failed = o->procs - n;	/* never forked */
	char why[224];

	for (unsigned i = 0; i < n; i++) {
		const struct kvb_lg_proc *p = &run->proc[i];

		if (WIFSIGNALED(wst[i]))
			snprintf(why, sizeof(why), "killed by signal %d (%s)",
				 WTERMSIG(wst[i]), strsignal(WTERMSIG(wst[i])));
		else if (p->msg[0])
			snprintf(why, sizeof(why), "%s", p->msg);
		else if (run->ran && (WEXITSTATUS(wst[i]) || p->status))
			snprintf(why, sizeof(why), "failed (exit %d)",
				 WEXITSTATUS(wst[i]));
		else
			continue;	/* told to give up: another failed */
		fprintf(stderr, "kvbench: %s: proc %u (pid %d): %s\n",
			run->name, i, (int)pid[i], why);
		failed++;
	}
	return failed;
}

/* kvd takes the run: the namespace's context, and room in the pool. */
static int lg_probe(const struct kvb_opts *o, struct kvb_lg_run *run,
		    struct kv_client **mon)
{
	struct kv_pool_info pi;
	uint64_t need;
	uint32_t pinned;

	if (kvb_connect(o, 0, mon, "cannot use kvd"))
		return 2;
	kv_ctx_info(*mon, &run->max_context, NULL, NULL);
	kv_pool_info(*mon, &pi);
	run->kept_bound = kvb_lg_kept_bound(o, &run->policy,
					    run->max_context);
	/* and the committed blocks a window drops while their children
	 * are held: cached, but not evictable yet (leaf first) */
	pinned = run->policy.flags & KV_CTX_DROP_OLDEST ? run->max_context :
		 run->policy.window;
	pinned = (uint32_t)div_up(pinned, o->geom.block_tokens);
	need = (uint64_t)o->procs * o->seqs * (run->kept_bound + pinned);
	if (need > pi.max_blocks) {
		fprintf(stderr, "kvbench: %s: %u processes x %u sequences x up to %u blocks (%u kept, %u committed and dropped) need %llu blocks; the pool holds %u blocks of %llu bytes (--private-kvd=SIZE, fewer --seqs or a smaller --max-context)\n",
			run->name, o->procs, o->seqs,
			run->kept_bound + pinned, run->kept_bound, pinned,
			(unsigned long long)need, pi.max_blocks,
			(unsigned long long)pi.block_bytes);
		return 2;
	}
	lg_sample(run, *mon);
	return 0;
}

int kvb_lg_run(const struct kvb_opts *o, unsigned idx, uint64_t salt,
	       struct kvb_lg_run *run)
{
	pid_t pid[KVB_MAX_PROCS], pid0[KVB_MAX_PROCS];
	int wst[KVB_MAX_PROCS] = { 0 }, go[2], hold[2];
	struct kv_client *mon = NULL;
	char buf[KVB_MAX_PROCS];
	unsigned n;
	int ret;

	memset(run, 0, sizeof(*run));
	run->idx = idx;
	run->policy = o->policy[idx];
	run->salt = splitmix64(salt ^ splitmix64(idx + 1));
	kv_ctx_policy_format(&run->policy, run->name, sizeof(run->name));
	ret = lg_probe(o, run, &mon);
	if (ret)
		goto out;
	ret = 1;
	if (lg_map(o, run))
		goto out;
	if (pipe2(go, O_CLOEXEC)) {
		perror("kvbench: pipe");
		goto out;
	}
	if (pipe2(hold, O_CLOEXEC)) {
		perror("kvbench: pipe");
		close(go[0]);
		close(go[1]);
		goto out;
	}
	n = lg_spawn(o, run, pid, go, hold);
	close(go[0]);
	close(hold[0]);
	memcpy(pid0, pid, n * sizeof(*pid));
	run->ran = n == o->procs && lg_wait_ready(run, pid, wst, n);
	/* the go, or the word to give up; a process gone makes no SIGPIPE
	 * of it (the mode ignores that signal) */
	memset(buf, run->ran ? 'g' : 'a', n);
	if (n && write(go[1], buf, n) != (ssize_t)n && run->ran)
		perror("kvbench: start pipe");
	close(go[1]);
	if (run->ran)
		lg_watch(o, run, mon, pid, wst, n, &hold[1]);
	if (hold[1] >= 0)
		close(hold[1]);
	lg_reap(pid, wst, n, true);
	run->failed = lg_failures(o, run, pid0, wst, n);
	ret = 0;
out:
	if (mon)
		kv_disconnect(mon);
	return ret;
}

void kvb_lg_run_free(struct kvb_lg_run *run)
{
	if (run->map_bytes)
		munmap(run->proc, run->map_bytes);
	run->proc = NULL;
	run->seq = NULL;
	run->map_bytes = 0;
}
