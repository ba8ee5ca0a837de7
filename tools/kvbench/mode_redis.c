// SPDX-License-Identifier: MIT
/*
 * kvbench --redis: a prefix lookup in kvd against the same lookup in
 * Redis, the store a remote tier of block hashes would likely use
 * (DESIGN.md "Beyond one host"). Both hold the block hashes of
 * BR_PREFIXES prefixes of 32 blocks each:
 *  - a private redis-server (Unix socket in a temp dir, no persistence)
 *    with one key per block (the 16-byte hash, the block id as value);
 *    a lookup is one 32-key MGET round trip, spoken in RESP by hand;
 *  - a private kvd (or --socket) with the same blocks committed and
 *    cached; a lookup is one 32-hash LOOKUP round trip (kv_lookup), the
 *    RELEASE of the 32 hits timed apart.
 * Skipped, with status 0, when no redis-server is on PATH.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../emit.h"
#include "kvd.h"
#include "lat.h"
#include "modes.h"

#define BR_PREFIXES		64U
#define BR_BLOCKS		32U	/* per prefix: one lookup */
#define BR_WARMUP		1000U
#define BR_START_MS		10000
#define BR_BUF			8192
#define BR_MODEL		"kvbench-redis"

enum br_op {
	BR_MGET,
	BR_LOOKUP,
	BR_RELEASE,
	BR_NR,
};

static const char *const br_key[BR_NR] = { "mget", "lookup", "release" };
static const char *const br_label[BR_NR] = {
	"redis MGET 32 keys", "kvd LOOKUP 32 blocks", "kvd RELEASE 32 blocks",
};

struct br_redis {
	pid_t		pid;
	int		fd;
	char		dir[64];
	char		sock[108];
	size_t		len;		/* bytes in buf */
	char		buf[BR_BUF];
};

/* redis-server on PATH, into @path. */
static bool br_find(char *path, size_t len)
{
	const char *p = getenv("PATH");
	const char *end;

	for (; p && *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		snprintf(path, len, "%.*s/redis-server", (int)(end - p), p);
		if (end > p && !access(path, X_OK))
			return true;
	}
	return false;
}

/* ---- RESP, as much as MSET, MGET and PING need ---- */

static int br_send(struct br_redis *r, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(r->fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Append one bulk string ("$len\r\nbytes\r\n") at @p. */
static char *br_bulk(char *p, const void *b, size_t len)
{
	p += sprintf(p, "$%zu\r\n", len);
	memcpy(p, b, len);
	p += len;
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

/* A line of r->buf starting at @off: its end (the \r), or NULL. */
static const char *br_line(const struct br_redis *r, size_t off)
{
	const char *p = memchr(r->buf + off, '\r', r->len - off);

	return p && p + 1 < r->buf + r->len ? p : NULL;
}

/*
 * Length of the complete reply at the start of r->buf, 0 if more must
 * be read; a simple string, an error, or an array of bulk strings.
 * *hits counts the non-nil bulks; *err is set for an error reply.
 */
static size_t br_parse(const struct br_redis *r, unsigned *hits, bool *err)
{
	const char *e = br_line(r, 0);
	size_t off;
	long n, len;

	if (!e)
		return 0;
	*err = r->buf[0] == '-';
	if (r->buf[0] != '*')
		return (size_t)(e - r->buf) + 2;
	n = strtol(r->buf + 1, NULL, 10);
	off = (size_t)(e - r->buf) + 2;
	for (*hits = 0; n > 0; n--) {
		e = off < r->len ? br_line(r, off) : NULL;
		if (!e)
			return 0;
		len = strtol(r->buf + off + 1, NULL, 10);
		off = (size_t)(e - r->buf) + 2;
		if (len < 0)
			continue;
		if (off + (size_t)len + 2 > r->len)
			return 0;
		off += (size_t)len + 2;
		(*hits)++;
	}
	return off;
}

/* Read one reply; returns its hits, or -1 (error reply, EOF). */
static int br_reply(struct br_redis *r)
{
	unsigned hits = 0;
	bool err = false;
	size_t used;
	ssize_t n;

	r->len = 0;
	while (!(used = br_parse(r, &hits, &err))) {
		if (r->len == sizeof(r->buf))
			return -1;
		n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		r->len += (size_t)n;
	}
	if (err) {
		fprintf(stderr, "kvbench: redis: %.*s\n", (int)used - 2, r->buf);
		return -1;
	}
	return (int)hits;
}

static int br_connect(struct br_redis *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", r->sock);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->fd < 0)
		return -1;
	if (!connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !br_send(r, "*1\r\n$4\r\nPING\r\n", 14) && br_reply(r) >= 0)
		return 0;
	close(r->fd);
	r->fd = -1;
	return -1;
}

/* ---- the private redis-server ---- */

static void br_exec(struct br_redis *r, const char *bin, pid_t parent)
{
	char log[96];
	const char *argv[] = {
		bin, "--port", "0", "--unixsocket", r->sock,
		"--unixsocketperm", "700", "--save", "", "--appendonly", "no",
		"--dir", r->dir, "--logfile", log, "--daemonize", "no", NULL,
	};

	snprintf(log, sizeof(log), "%s/redis.log", r->dir);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	execv(bin, (char **)argv);
	_exit(127);
}

static void br_stop(struct br_redis *r)
{
	char path[128];
	int status;

	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	if (r->pid > 0) {
		kill(r->pid, SIGTERM);
		waitpid(r->pid, &status, 0);
		r->pid = 0;
	}
	if (!r->dir[0])
		return;
	unlink(r->sock);
	snprintf(path, sizeof(path), "%s/redis.log", r->dir);
	unlink(path);
	rmdir(r->dir);
	r->dir[0] = 0;
}

static int br_start(struct br_redis *r, const char *bin)
{
	pid_t parent = getpid();
	int status;

	r->fd = -1;
	if (bench_mkdtemp(r->dir, sizeof(r->dir), "kvbench-redis"))
		return -1;
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
	fflush(NULL);
	r->pid = fork();
	if (r->pid < 0)
		goto err;
	if (!r->pid)
		br_exec(r, bin, parent);
	for (int ms = 0; ms < BR_START_MS; ms += 10) {
		if (!br_connect(r))
			return 0;
		if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
			r->pid = 0;
			break;
		}
		usleep(10000);
	}
err:
	fprintf(stderr, "kvbench: %s did not start (see its log in %s)\n", bin,
		r->dir);
	br_stop(r);
	return -1;
}

/* ---- the two stores ---- */

/* BR_PREFIXES chains of BR_BLOCKS hashes, all distinct. */
static int br_hashes(struct kv_hash *h)
{
	uint32_t tok[BR_BLOCKS * 16];
	uint64_t x = 0x2545f4914f6cdd1dULL;

	for (unsigned p = 0; p < BR_PREFIXES; p++) {
		for (unsigned i = 0; i < BR_BLOCKS * 16; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			tok[i] = (uint32_t)x;
		}
		if (kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, tok,
				   BR_BLOCKS * 16, 16, NULL,
				   h + p * BR_BLOCKS) != (int)BR_BLOCKS)
			return -1;
	}
	return 0;
}

/* Commit every prefix, then release it: cached, ref 0. */
static int br_fill_kvd(struct kv_client *c, const struct kv_hash *h,
		       kv_block_t *ids)
{
	struct kv_commit e[BR_BLOCKS];
	kv_block_t b[BR_BLOCKS];

	for (unsigned p = 0; p < BR_PREFIXES; p++) {
		const struct kv_hash *ph = h + p * BR_BLOCKS;

		if (kv_alloc(c, BR_BLOCKS, b) != (int)BR_BLOCKS)
			return -1;
		for (unsigned j = 0; j < BR_BLOCKS; j++) {
			memset(&e[j], 0, sizeof(e[j]));
			e[j].id = b[j];
			e[j].hash = ph[j];
			if (j)
				e[j].parent = ph[j - 1];
		}
		if (kv_commit(c, e, BR_BLOCKS) != (int)BR_BLOCKS)
			return -1;
		for (unsigned j = 0; j < BR_BLOCKS; j++)
			ids[p * BR_BLOCKS + j] = b[j] = e[j].id;
		if (kv_release(c, b, BR_BLOCKS) != (int)BR_BLOCKS)
			return -1;
	}
	return 0;
}

/* One MSET per prefix: hash -> block id. */
static int br_fill_redis(struct br_redis *r, const struct kv_hash *h,
			 const kv_block_t *ids)
{
	static char cmd[BR_BLOCKS * 64 + 64];

	for (unsigned p = 0; p < BR_PREFIXES; p++) {
		char *q = cmd + sprintf(cmd, "*%u\r\n$4\r\nMSET\r\n",
					1 + 2 * BR_BLOCKS);

		for (unsigned j = 0; j < BR_BLOCKS; j++) {
			q = br_bulk(q, &h[p * BR_BLOCKS + j], sizeof(*h));
			q = br_bulk(q, &ids[p * BR_BLOCKS + j], sizeof(*ids));
		}
		if (br_send(r, cmd, (size_t)(q - cmd)) || br_reply(r) < 0)
			return -1;
	}
	return 0;
}

static size_t br_mget_cmd(char *cmd, const struct kv_hash *h)
{
	char *q = cmd + sprintf(cmd, "*%u\r\n$4\r\nMGET\r\n", 1 + BR_BLOCKS);

	for (unsigned j = 0; j < BR_BLOCKS; j++)
		q = br_bulk(q, &h[j], sizeof(*h));
	return (size_t)(q - cmd);
}

static int br_time_redis(struct br_redis *r, const struct kv_hash *h,
			 unsigned iters, struct bench_lat *l)
{
	static char cmd[BR_PREFIXES][BR_BLOCKS * 32 + 32];
	size_t len[BR_PREFIXES];

	for (unsigned p = 0; p < BR_PREFIXES; p++)
		len[p] = br_mget_cmd(cmd[p], h + p * BR_BLOCKS);
	for (unsigned i = 0; i < BR_WARMUP + iters; i++) {
		unsigned p = i % BR_PREFIXES;
		uint64_t t0 = bench_now_ns();

		if (br_send(r, cmd[p], len[p]) ||
		    br_reply(r) != (int)BR_BLOCKS) {
			fprintf(stderr, "kvbench: redis MGET did not find the 32 keys\n");
			return -1;
		}
		if (i >= BR_WARMUP)
			bench_lat_add(l, bench_now_ns() - t0);
	}
	return 0;
}

static int br_time_kvd(struct kv_client *c, const struct kv_hash *h,
		       unsigned iters, struct bench_lat *lat)
{
	kv_block_t ids[BR_BLOCKS];

	for (unsigned i = 0; i < BR_WARMUP + iters; i++) {
		const struct kv_hash *ph = h + (i % BR_PREFIXES) * BR_BLOCKS;
		uint64_t t0 = bench_now_ns(), t1, t2;
		int hits = kv_lookup(c, ph, BR_BLOCKS, ids);

		t1 = bench_now_ns();
		if (hits != (int)BR_BLOCKS) {
			fprintf(stderr, "kvbench: kvd LOOKUP hit %d of 32 blocks\n",
				hits);
			return -1;
		}
		if (kv_release(c, ids, BR_BLOCKS) != (int)BR_BLOCKS)
			return -1;
		t2 = bench_now_ns();
		if (i < BR_WARMUP)
			continue;
		bench_lat_add(&lat[BR_LOOKUP], t1 - t0);
		bench_lat_add(&lat[BR_RELEASE], t2 - t1);
	}
	return 0;
}

static int br_kvd(const struct kvb_opts *o, const struct kv_hash *h,
		  kv_block_t *ids, struct bench_lat *lat)
{
	struct bench_kvd k = { 0 };
	struct kv_client *c;
	int ret;

	if (bench_open(o, "64M", BR_MODEL, &k, &c))
		return -1;
	ret = br_fill_kvd(c, h, ids);
	if (ret)
		fprintf(stderr, "kvbench: cannot commit the prefixes to kvd\n");
	else
		ret = br_time_kvd(c, h, o->iters, lat);
	bench_close(o, &k, c);
	return ret;
}

static const struct kv_emit_col br_cols[] = {
	{ "name", "", -24 }, { "n", "n", 6 }, { "p50_ns", "p50 ns", 10 },
	{ "p99_ns", "p99 ns", 10 },
};

static void br_emit(struct kv_emit *e, const struct bench_lat *lat,
		    const char *skipped)
{
	double mget = bench_lat_pct(&lat[BR_MGET], 50);
	double look = bench_lat_pct(&lat[BR_LOOKUP], 50);
	double rel = bench_lat_pct(&lat[BR_RELEASE], 50);

	kv_emit_obj_begin(e, "redis", "32-block prefix lookup: redis vs kvd");
	if (skipped) {
		kv_emit_str(e, "skipped", "skipped", skipped);
		kv_emit_obj_end(e);
		return;
	}
	kv_emit_u64(e, "prefixes", "prefixes of 32 blocks", BR_PREFIXES);
	kv_emit_table_begin(e, "rows", br_cols, 4);
	for (int k = 0; k < BR_NR; k++) {
		kv_emit_row_begin(e);
		kv_emit_cell_str(e, e->json ? br_key[k] : br_label[k]);
		kv_emit_cell_u64(e, lat[k].n);
		kv_emit_cell_f64(e, bench_lat_pct(&lat[k], 50));
		kv_emit_cell_f64(e, bench_lat_pct(&lat[k], 99));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_f64(e, "ratio", "redis / kvd LOOKUP (p50)",
		    look ? mget / look : 0);
	kv_emit_f64(e, "ratio_with_release",
		    "redis / kvd LOOKUP+RELEASE (p50)",
		    look + rel ? mget / (look + rel) : 0);
	kv_emit_obj_end(e);
}

static int br_report(const struct kvb_opts *o, const struct bench_lat *lat,
		     const char *skipped)
{
	struct kv_emit e;
	FILE *json;
	int ret = 0;

	if (!o->quiet && !skipped) {
		kv_emit_begin(&e, stdout, false);
		br_emit(&e, lat, NULL);
		kv_emit_end(&e);
	}
	if (!o->json_path)
		return 0;
	json = kvb_json_open(o->json_path);
	if (json) {
		kv_emit_begin(&e, json, true);
		br_emit(&e, lat, skipped);
		kv_emit_end(&e);
	}
	if (!json || kvb_json_close(o->json_path, json))
		ret = 1;
	return ret;
}

int kvb_mode_redis(struct kvb_opts *o)
{
	static struct kv_hash h[BR_PREFIXES * BR_BLOCKS];
	static kv_block_t ids[BR_PREFIXES * BR_BLOCKS];
	struct bench_lat lat[BR_NR] = { 0 };
	struct br_redis *r = NULL;
	char bin[4096];
	int ret = 1;

	if (!br_find(bin, sizeof(bin))) {
		printf("redis-server not installed: skipped\n");
		return br_report(o, lat, "redis-server not installed");
	}
	r = calloc(1, sizeof(*r));
	if (!r || br_hashes(h))
		goto out;
	for (int k = 0; k < BR_NR; k++)
		if (bench_lat_init(&lat[k], o->iters))
			goto out;
	/* kvd first: redis stores the block ids kvd gave. */
	if (br_kvd(o, h, ids, lat))
		goto out;
	if (br_start(r, bin))
		goto out;
	if (br_fill_redis(r, h, ids) ||
	    br_time_redis(r, h, o->iters, &lat[BR_MGET])) {
		br_stop(r);
		goto out;
	}
	br_stop(r);
	for (int k = 0; k < BR_NR; k++)
		bench_lat_sort(&lat[k]);
	ret = br_report(o, lat, NULL);
out:
	for (int k = 0; k < BR_NR; k++)
		bench_lat_free(&lat[k]);
	free(r);
	return ret;
}
