// SPDX-License-Identifier: MIT
/*
 * kvctl top: kvd's books as a live terminal view. Each interval it asks
 * the admin socket for STATUS (pool, namespaces), PREFIX (lookups, hits,
 * evictions) and TIERS, keeps the previous PREFIX and TIERS replies to
 * turn counters into rates, and redraws with ncurses. The rates use
 * kvd's own uptime between two replies, not our clock, so a slow poll
 * does not skew them.
 */
#include <curses.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kv/abi.h>

#include "admin.h"
#include "top.h"

#define HIST_MAX	256	/* pool pages used, one sample per poll */
#define BAR_WIDTH	40

struct top_reply {
	void		*buf;		/* KV_ADMIN_REPLY_MAX bytes */
	bool		ok;		/* holds a checked reply */
};

struct top {
	const char	*path;
	unsigned	interval_ms;
	struct top_reply st;		/* STATUS */
	struct top_reply pf, pf_prev;	/* PREFIX, now and one poll ago */
	struct top_reply tr, tr_prev;	/* TIERS */
	int		err;		/* of the last poll, -errno */
	bool		paused;
	uint32_t	hist[HIST_MAX];	/* ring of pages_used */
	unsigned	hist_len, hist_head;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const struct kv_admin_status *hdr(const struct top_reply *r)
{
	return r->ok ? r->buf : NULL;
}

/* One call into @r: 0, or -errno (a malformed reply is -EPROTO). */
static int top_call(const char *path, uint32_t cmd, size_t rec,
		    struct top_reply *r)
{
	int ret = kv_admin_get(path, cmd, rec, r->buf);

	r->ok = ret >= 0;
	return ret < 0 ? ret : 0;
}

static void swap_reply(struct top_reply *a, struct top_reply *b)
{
	struct top_reply t = *a;

	*a = *b;
	*b = t;
}

/*
 * A previous reply of another kvd (restarted: new pid, uptime gone
 * back) gives no rates; forget it.
 */
static bool same_kvd(const struct kv_admin_status *now,
		     const struct kv_admin_status *then)
{
	return then && now->pid == then->pid &&
	       now->uptime_ms > then->uptime_ms;
}

static void top_poll(struct top *t)
{
	const struct kv_admin_status *st;

	swap_reply(&t->pf, &t->pf_prev);
	swap_reply(&t->tr, &t->tr_prev);
	t->err = top_call(t->path, KV_ADMIN_STATUS, sizeof(struct kv_admin_ns),
			  &t->st);
	if (!t->err)
		t->err = top_call(t->path, KV_ADMIN_PREFIX,
				  sizeof(struct kv_admin_prefix), &t->pf);
	if (t->err) {
		t->pf.ok = false;
		t->tr.ok = false;
		return;
	}
	/* No tiers, or a kvd too old for TIERS: just no tier rows. */
	top_call(t->path, KV_ADMIN_TIERS, sizeof(struct kv_admin_tier), &t->tr);
	st = hdr(&t->st);
	t->hist[t->hist_head] = st->pages_used;
	t->hist_head = (t->hist_head + 1) % HIST_MAX;
	if (t->hist_len < HIST_MAX)
		t->hist_len++;
}

/* @v bytes as "12.3M" into @buf. */
static const char *human(char buf[16], uint64_t v)
{
	static const char units[] = "BKMGTP";
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, 16, u ? "%.1f%c" : "%.0f%c", d, units[u]);
	return buf;
}

/* @num / @den as "63.2%", or "-" without a denominator. */
static const char *ratio(char buf[16], uint64_t num, uint64_t den)
{
	if (!den)
		snprintf(buf, 16, "-");
	else
		snprintf(buf, 16, "%.1f%%", 100.0 * (double)num / (double)den);
	return buf;
}

/* Counter @now less @then per second over @ms; "-" without a past. */
static const char *rate(char buf[16], bool have, uint64_t now, uint64_t then,
			uint64_t ms)
{
	if (!have || !ms || now < then)
		snprintf(buf, 16, "-");
	else
		snprintf(buf, 16, "%.1f", (double)(now - then) * 1000 / ms);
	return buf;
}

static void draw_title(const struct top *t, const struct kv_admin_status *st)
{
	uint64_t s = st->uptime_ms / 1000;
	char ver[32] = "unknown";

	if (st->version)
		snprintf(ver, sizeof(ver), "%u.%u.%u", st->version >> 16,
			 (st->version >> 8) & 0xff, st->version & 0xff);
	attron(A_BOLD);
	printw("kvctl top");
	attroff(A_BOLD);
	printw(" - kvd pid %u, version %s, ABI %u.%u, up %llud %02llu:%02llu:%02llu",
	       st->pid, ver, st->abi_major, st->abi_minor,
	       (unsigned long long)(s / 86400),
	       (unsigned long long)(s / 3600 % 24),
	       (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
	printw("   every %u ms  (q quit, p %s)\n", t->interval_ms,
	       t->paused ? "resume" : "pause");
}

static void draw_pool(const struct kv_admin_status *st)
{
	int fill = st->nr_pages ? (int)((uint64_t)st->pages_used * BAR_WIDTH /
					st->nr_pages) : 0;
	char b[16], pb[16];

	printw("pool  %s %s, page %s, pages %u/%u used [", human(b, st->pool_bytes),
	       st->backend == KV_BACKEND_CUDA ? "cuda" : "host",
	       human(pb, st->page_bytes), st->pages_used, st->nr_pages);
	for (int i = 0; i < BAR_WIDTH; i++)
		addch(i < fill ? '#' : '.');
	printw("] %s, peak %u\n", ratio(b, st->pages_used, st->nr_pages),
	       st->peak_pages_used);
}

/* Pool pages used over the last polls, scaled to the window's peak. */
static void draw_history(const struct top *t)
{
	static const char levels[] = " _.-=+*#%@";
	int width = COLS - 40, n = (int)t->hist_len;
	uint32_t peak = 1;

	if (width > n)
		width = n;
	if (width < 1)
		width = 1;
	for (int i = 0; i < width; i++) {
		uint32_t v = t->hist[(t->hist_head + HIST_MAX - width + i) % HIST_MAX];

		if (v > peak)
			peak = v;
	}
	printw("pages used, last %5.1f s, peak %u [",
	       (double)width * t->interval_ms / 1000, peak);
	for (int i = 0; i < width; i++) {
		uint32_t v = t->hist[(t->hist_head + HIST_MAX - width + i) % HIST_MAX];

		addch(levels[(uint64_t)v * (sizeof(levels) - 2) / peak]);
	}
	printw("]\n");
}

static const struct kv_admin_prefix *find_prefix(const struct top_reply *r,
						 uint32_t ns_id)
{
	const struct kv_admin_status *st = hdr(r);
	const struct kv_admin_prefix *p;

	if (!st)
		return NULL;
	p = (const void *)(st + 1);
	for (uint32_t i = 0; i < st->nr_records; i++)
		if (p[i].ns_id == ns_id)
			return &p[i];
	return NULL;
}

/* A model id as text: kvd checks it is printable; be safe anyway. */
static void printable(char out[KV_MODEL_ID_MAX], const char *in)
{
	memcpy(out, in, KV_MODEL_ID_MAX);
	out[KV_MODEL_ID_MAX - 1] = 0;
	for (char *p = out; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			*p = '?';
}

static void draw_ns(const struct top *t, const struct kv_admin_ns *ns,
		    uint64_t ms)
{
	const struct kv_admin_prefix *p = find_prefix(&t->pf, ns->id);
	const struct kv_admin_prefix *q = find_prefix(&t->pf_prev, ns->id);
	char model[KV_MODEL_ID_MAX], all[16], now[16], ev[16];
	bool past = p && q && ms;

	printable(model, ns->model_id);
	if (p)
		ratio(all, p->hit_blocks, p->lookup_blocks);
	else
		snprintf(all, sizeof(all), "-");
	if (past && p->lookup_blocks >= q->lookup_blocks)
		ratio(now, p->hit_blocks - q->hit_blocks,
		      p->lookup_blocks - q->lookup_blocks);
	else
		snprintf(now, sizeof(now), "-");
	rate(ev, past, p ? p->evictions : 0, q ? q->evictions : 0, ms);
	printw("%10u %-24.24s %8u %8u %8u %8u %8s %8s %9s %7u\n", ns->id, model,
	       ns->blocks, ns->blocks_used, ns->cached_blocks,
	       ns->pinned_blocks, all, now, ev, ns->nr_clients);
}

static void draw_namespaces(const struct top *t, uint64_t ms)
{
	const struct kv_admin_status *st = hdr(&t->st);
	const struct kv_admin_ns *ns = (const void *)(st + 1);

	attron(A_REVERSE);
	printw("%10s %-24s %8s %8s %8s %8s %8s %8s %9s %7s", "NS", "MODEL",
	       "BLOCKS", "USED", "CACHED", "PINNED", "HIT%", "HIT%NOW",
	       "EVICT/S", "CLIENTS");
	attroff(A_REVERSE);
	addch('\n');
	if (!st->nr_records)
		printw("%10s (no namespace yet: no client has connected a model)\n", "");
	for (uint32_t i = 0; i < st->nr_records && getcury(stdscr) < LINES - 6; i++)
		draw_ns(t, &ns[i], ms);
}

static void draw_tiers(const struct top *t)
{
	const struct kv_admin_status *st = hdr(&t->tr), *ps = hdr(&t->tr_prev);
	const struct kv_admin_tier *r, *q;
	char u[16], c[16], d[16], p[16];
	uint64_t ms;
	bool past;

	if (!st || !st->nr_records)
		return;
	past = same_kvd(st, ps) && ps->nr_records == st->nr_records;
	ms = past ? st->uptime_ms - ps->uptime_ms : 0;
	r = (const void *)(st + 1);
	q = past ? (const void *)(ps + 1) : NULL;
	addch('\n');
	attron(A_REVERSE);
	printw("%-8s %17s %10s %9s %9s %9s %9s", "TIER", "USED/CAP", "BLOCKS",
	       "DEMOT/S", "PROMOT/S", "DROPS", "CORRUPT");
	attroff(A_REVERSE);
	addch('\n');
	for (uint32_t i = 0; i < st->nr_records && getcury(stdscr) < LINES - 2; i++) {
		char name[17], uc[40];

		snprintf(name, sizeof(name), "%.16s", r[i].name);
		snprintf(uc, sizeof(uc), "%s/%s", human(u, r[i].used_bytes),
			 r[i].cap_bytes ? human(c, r[i].cap_bytes) : "off");
		printw("%-8s %17s %10llu %9s %9s %9llu %9llu\n", name, uc,
		       (unsigned long long)r[i].blocks,
		       rate(d, past, r[i].demotions, q ? q[i].demotions : 0, ms),
		       rate(p, past, r[i].promotions, q ? q[i].promotions : 0, ms),
		       (unsigned long long)r[i].drops,
		       (unsigned long long)r[i].corrupt);
	}
}

static void draw_error(const struct top *t)
{
	attron(A_BOLD | A_REVERSE);
	mvprintw(LINES - 1, 0, "kvd not answering on %s: %s; retrying every %u ms",
		 t->path, strerror(-t->err), t->interval_ms);
	attroff(A_BOLD | A_REVERSE);
	clrtoeol();
}

static void top_draw(const struct top *t)
{
	const struct kv_admin_status *st = hdr(&t->st);
	const struct kv_admin_status *pf = hdr(&t->pf), *pp = hdr(&t->pf_prev);
	uint64_t ms = 0;

	erase();
	move(0, 0);
	if (!st) {
		printw("kvctl top - waiting for kvd on %s   (q quit)\n", t->path);
	} else {
		if (pf && same_kvd(pf, pp))
			ms = pf->uptime_ms - pp->uptime_ms;
		draw_title(t, st);
		draw_pool(st);
		draw_history(t);
		printw("clients %u, namespaces %u, ops %llu, reclaims %llu%s\n\n",
		       st->nr_clients, st->nr_namespaces,
		       (unsigned long long)st->ops,
		       (unsigned long long)st->reclaims,
		       t->paused ? "   [paused]" : "");
		draw_namespaces(t, ms);
		draw_tiers(t);
	}
	if (t->err)
		draw_error(t);
	refresh();
}

/*
 * Read keys until @deadline (now_ms): true when the user asked to quit.
 * p pauses polling (the view stays), any key redraws.
 */
static bool top_keys(struct top *t, uint64_t deadline)
{
	uint64_t now;
	int ch;

	while ((now = now_ms()) < deadline) {
		timeout((int)(deadline - now));
		ch = getch();
		if (ch == ERR)
			continue;
		if (ch == 'q' || ch == 'Q')
			return true;
		if (ch == 'p' || ch == 'P')
			t->paused = !t->paused;
		top_draw(t);
	}
	return false;
}

static int top_alloc(struct top *t)
{
	struct top_reply *r[] = { &t->st, &t->pf, &t->pf_prev, &t->tr,
				  &t->tr_prev };

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		r[i]->buf = calloc(1, KV_ADMIN_REPLY_MAX);
		if (!r[i]->buf)
			return -ENOMEM;
	}
	return 0;
}

static void top_free(struct top *t)
{
	free(t->st.buf);
	free(t->pf.buf);
	free(t->pf_prev.buf);
	free(t->tr.buf);
	free(t->tr_prev.buf);
}

int kvctl_top(const char *path, unsigned interval_ms)
{
	struct top t = { .path = path, .interval_ms = interval_ms };
	SCREEN *scr;
	int ret = 1;

	/* A view redrawn in place is no use in a pipe or a file. */
	if (!isatty(STDOUT_FILENO)) {
		fprintf(stderr, "kvctl: top needs a terminal on stdout (for a script: kvctl status --json, kvctl prefix --json)\n");
		return 2;
	}
	if (top_alloc(&t)) {
		fprintf(stderr, "kvctl: top: out of memory\n");
		goto out_free;
	}
	scr = newterm(NULL, stdout, stdin);
	if (!scr) {
		fprintf(stderr, "kvctl: top: cannot set up the terminal (TERM=%s)\n",
			getenv("TERM") ? getenv("TERM") : "");
		goto out_free;
	}
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	for (;;) {
		uint64_t deadline = now_ms() + interval_ms;

		if (!t.paused)
			top_poll(&t);
		top_draw(&t);
		if (top_keys(&t, deadline))
			break;
	}
	ret = 0;
	endwin();
	delscreen(scr);
out_free:
	top_free(&t);
	return ret;
}
