// SPDX-License-Identifier: MIT
/*
 * A private kvd for a benchmark: started from the kvd binary beside
 * kvbench (or --kvd), on the host backend, with sockets in a temp dir
 * and no configuration file, so that its pool (and the host tier behind
 * it, when one is asked for) holds exactly what the benchmark asks for
 * and nothing else runs on it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kv/abi.h>

#include "../admin.h"
#include "kvd.h"

#define BENCH_KVD_START_MS	10000
#define BENCH_KVD_STOP_MS	5000

struct kv_geometry bench_small_geom(void)
{
	return (struct kv_geometry){
		.layers = 1, .kv_heads = 1, .head_dim = 128,
		.block_tokens = 16, .dtype = KV_DTYPE_FP16,
	};
}

/* kvd beside this executable, else in ../sbin (make install), else PATH. */
static void kvd_path(char *buf, size_t len, const char *given)
{
	char self[PATH_MAX - 16];	/* room for "/../sbin/kvd" */
	ssize_t n;
	char *slash;

	if (given) {
		snprintf(buf, len, "%s", given);
		return;
	}
	snprintf(buf, len, "kvd");
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = 0;
	snprintf(buf, len, "%s/kvd", self);
	if (!access(buf, X_OK))
		return;
	snprintf(buf, len, "%s/../sbin/kvd", self);
	if (!access(buf, X_OK))
		return;
	snprintf(buf, len, "kvd");
}

static void kvd_exec(const struct bench_kvd *k, const char *bin,
		     const char *pool_size, const char *tier_size,
		     pid_t parent)
{
	const char *argv[] = {
		bin, "--backend", "host", "--pool-size", pool_size,
		"--socket", k->sock, "--admin-socket", k->admin,
		"--config", "/dev/null", "--quiet",
		tier_size ? "--host-tier-size" : NULL, tier_size, NULL,
	};
	int fd;

	/* Nothing kvbench starts outlives it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0)
		dup2(fd, 2);
	execvp(bin, (char **)argv);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

/* It answers STATUS with its own pid: a stale socket proves nothing. */
static bool kvd_answers(const struct bench_kvd *k, void *reply)
{
	const struct kv_admin_status *st = reply;

	if (kv_admin_call(k->admin, KV_ADMIN_STATUS, 0, 0, reply) <
	    (ssize_t)sizeof(*st))
		return false;
	return st->magic == KV_MAGIC && st->pid == (uint32_t)k->pid;
}

static void kvd_log_tail(const struct bench_kvd *k)
{
	char line[512];
	FILE *f = fopen(k->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  kvd: %s", line);
	fclose(f);
}

/* The temp dir holds only kvd's files: sockets, their locks, the log. */
static void kvd_rmdir(struct bench_kvd *k)
{
	DIR *d;
	struct dirent *e;

	if (!k->dir[0])
		return;
	d = opendir(k->dir);
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(k->dir);
	k->dir[0] = 0;
}

static int kvd_wait_up(struct bench_kvd *k, const char *bin)
{
	void *reply = malloc(KV_ADMIN_REPLY_MAX);
	int status, ret = -1;

	if (!reply) {
		fprintf(stderr, "kvbench: out of memory\n");
		return -1;
	}
	for (int ms = 0; ms < BENCH_KVD_START_MS; ms += 5) {
		if (kvd_answers(k, reply)) {
			ret = 0;
			break;
		}
		if (waitpid(k->pid, &status, WNOHANG) == k->pid) {
			k->pid = 0;
			fprintf(stderr, "kvbench: private kvd %s exited at start (status %d):\n",
				bin, WIFEXITED(status) ? WEXITSTATUS(status) :
				128 + WTERMSIG(status));
			kvd_log_tail(k);
			break;
		}
		usleep(5000);
	}
	if (ret && k->pid)
		fprintf(stderr, "kvbench: private kvd %s did not answer in %d s\n",
			bin, BENCH_KVD_START_MS / 1000);
	free(reply);
	return ret;
}

int bench_mkdtemp(char *dir, size_t len, const char *name)
{
	const char *tmp = getenv("TMPDIR");

	/* Socket paths must fit sun_path: a long $TMPDIR falls back. */
	if (!tmp || !*tmp || strlen(tmp) > 40)
		tmp = "/tmp";
	snprintf(dir, len, "%s/%s.XXXXXX", tmp, name);
	if (mkdtemp(dir))
		return 0;
	fprintf(stderr, "kvbench: mkdtemp %s: %s\n", dir, strerror(errno));
	dir[0] = 0;
	return -1;
}

int bench_kvd_start(struct bench_kvd *k, const char *bin,
		    const char *pool_size, const char *tier_size)
{
	char path[PATH_MAX];
	pid_t parent = getpid();

	memset(k, 0, sizeof(*k));
	k->owner = parent;
	if (bench_mkdtemp(k->dir, sizeof(k->dir), "kvbench"))
		return -1;
	snprintf(k->sock, sizeof(k->sock), "%s/kvd.sock", k->dir);
	snprintf(k->admin, sizeof(k->admin), "%s/kvd-admin.sock", k->dir);
	snprintf(k->log, sizeof(k->log), "%s/kvd.log", k->dir);
	kvd_path(path, sizeof(path), bin);
	fflush(NULL);
	k->pid = fork();
	if (k->pid < 0) {
		fprintf(stderr, "kvbench: fork: %s\n", strerror(errno));
		goto err_rmdir;
	}
	if (!k->pid)
		kvd_exec(k, path, pool_size, tier_size, parent);
	if (kvd_wait_up(k, path))
		goto err_stop;
	return 0;

err_stop:
	bench_kvd_stop(k);
	return -1;
err_rmdir:
	kvd_rmdir(k);
	return -1;
}

void bench_kvd_stop(struct bench_kvd *k)
{
	int status;

	if (k->owner != getpid())
		return;
	if (k->pid > 0) {
		kill(k->pid, SIGTERM);
		for (int ms = 0; ms < BENCH_KVD_STOP_MS; ms += 5) {
			if (waitpid(k->pid, &status, WNOHANG) == k->pid)
				goto reaped;
			usleep(5000);
		}
		kill(k->pid, SIGKILL);
		waitpid(k->pid, &status, 0);
reaped:
		k->pid = 0;
	}
	kvd_rmdir(k);
}

int bench_admin_beside(const char *sock, char *buf, size_t len)
{
	const char *slash = strrchr(sock, '/');
	int dir = slash ? (int)(slash - sock + 1) : 0;
	int n = snprintf(buf, len, "%.*skvd-admin.sock", dir, sock);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bench_kvd_evict(const char *admin_path)
{
	void *reply = malloc(KV_ADMIN_REPLY_MAX);
	const struct kv_admin_status *st = reply;
	ssize_t n;

	if (!reply)
		return -ENOMEM;
	n = kv_admin_call(admin_path, KV_ADMIN_EVICT, ~0U, 0, reply);
	if (n >= (ssize_t)sizeof(*st) && st->status < 0)
		n = st->status;
	free(reply);
	if (n < 0) {
		fprintf(stderr, "kvbench: evict through %s: %s (see --admin-socket)\n",
			admin_path, strerror((int)-n));
		return -1;
	}
	return 0;
}

int bench_connect(const char *sock, const char *model,
		  const struct kv_geometry *geom, struct kv_client **c)
{
	char err[256] = "";
	struct kv_connect_params p = {
		.socket_path = sock,
		.model_id = model,
		.geom = *geom,
		.errbuf = err,
		.errbuf_len = sizeof(err),
	};
	int ret = kv_connect(&p, c);

	if (ret) {
		fprintf(stderr, "kvbench: connect to %s: %s%s%s\n",
			sock ? sock : "kvd", strerror(-ret), err[0] ? ": " : "",
			err);
		return -1;
	}
	return 0;
}

int bench_open(const struct kvb_opts *o, const char *pool_size,
	       const char *model, struct bench_kvd *k, struct kv_client **c)
{
	struct kv_geometry g = bench_small_geom();
	const char *sock = o->socket;

	if (!sock) {
		if (bench_kvd_start(k, o->kvd_bin, pool_size, NULL))
			return -1;
		sock = k->sock;
	}
	if (!bench_connect(sock, model, &g, c))
		return 0;
	if (!o->socket)
		bench_kvd_stop(k);
	return -1;
}

void bench_close(const struct kvb_opts *o, struct bench_kvd *k,
		 struct kv_client *c)
{
	kv_disconnect(c);
	if (!o->socket)
		bench_kvd_stop(k);
}

int kvb_connect(const struct kvb_opts *o, unsigned model,
		struct kv_client **c, const char *who)
{
	struct kv_connect_params p = {
		.socket_path = o->socket,
		.model_id = o->mdl[model].id,
		.geom = o->mdl[model].geom,
		.sq_entries = o->sq_entries,
		.data_bytes = o->data_bytes,
		.max_context = o->max_context,
	};
	char err[256] = "";
	int ret;

	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	ret = kv_connect(&p, c);
	if (ret)
		fprintf(stderr, "kvbench: %s: %s%s%s\n", who, err,
			err[0] ? ": " : "", strerror(-ret));
	return ret;
}
