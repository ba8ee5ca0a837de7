// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char t_build_dir[PATH_MAX + 16];
static struct t_kvd *t_live;	/* the kvd t_atexit() must stop */

const char *t_bin(const char *name)
{
	static char path[PATH_MAX + 96];
	char self[PATH_MAX - 16];
	ssize_t n;

	if (!t_build_dir[0]) {
		const char *o = getenv("KV_BUILD_DIR");

		if (o) {
			snprintf(t_build_dir, sizeof(t_build_dir), "%s", o);
		} else {
			/* tests live in $O/tests/integration */
			n = readlink("/proc/self/exe", self, sizeof(self) - 1);
			if (n < 0)
				T_FAIL("readlink /proc/self/exe");
			self[n] = 0;
			*strrchr(self, '/') = 0;
			snprintf(t_build_dir, sizeof(t_build_dir),
				 "%s/../..", self);
		}
	}
	snprintf(path, sizeof(path), "%s/%s", t_build_dir, name);
	return path;
}

void t_cleanup_dir(struct t_kvd *k)
{
	char cmd[256];

	if (t_live == k && k->pid <= 0)
		t_live = NULL;	/* nothing left for t_atexit() */
	if (!k->dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", k->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", k->dir);
	k->dir[0] = 0;
}

/*
 * kvd @pid answers on its admin socket. A socket file alone proves
 * nothing: a killed kvd's listener can outlive it for a moment (its
 * io_uring is torn down asynchronously), so ask for the pid.
 */
static bool t_kvd_answers(const char *path, pid_t pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_admin_req req = {
		.magic = KV_MAGIC, .abi_major = KV_ABI_MAJOR,
		.abi_minor = KV_ABI_MINOR, .type = KV_MSG_ADMIN,
		.cmd = KV_ADMIN_STATUS,
	};
	struct kv_admin_status st;
	struct timeval tv = { .tv_sec = 1 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	bool ok = false;

	if (strlen(path) >= sizeof(sa.sun_path))
		T_FAIL("socket path too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    send(fd, &req, sizeof(req), MSG_NOSIGNAL) == sizeof(req) &&
	    recv(fd, &st, sizeof(st), MSG_TRUNC) >= (ssize_t)sizeof(st))
		ok = st.magic == KV_MAGIC && st.pid == (uint32_t)pid;
	close(fd);
	return ok;
}

/*
 * $KVD_TEST_WRAPPER, words separated by spaces, goes before kvd's path
 * (make valgrind: "valgrind --error-exitcode=1 ..."). Returns argc.
 */
static int t_wrapper(const char **argv, int max)
{
	static char buf[1024];
	const char *w = getenv("KVD_TEST_WRAPPER");
	char *save, *tok;
	int argc = 0;

	if (!w || !*w)
		return 0;
	snprintf(buf, sizeof(buf), "%s", w);
	for (tok = strtok_r(buf, " ", &save); tok && argc < max;
	     tok = strtok_r(NULL, " ", &save))
		argv[argc++] = tok;
	return argc;
}

static void t_kvd_spawn(struct t_kvd *k, const char *pool_size, va_list ap)
{
	const char *argv[48];
	char kvd[PATH_MAX + 96];
	int argc = 0, fd;
	pid_t parent;

	snprintf(kvd, sizeof(kvd), "%s", t_bin("kvd"));
	argc = t_wrapper(argv, 16);
	argv[argc++] = kvd;
	argv[argc++] = "--backend";
	argv[argc++] = "host";
	argv[argc++] = "--pool-size";
	argv[argc++] = pool_size;
	argv[argc++] = "--socket";
	argv[argc++] = k->sock;
	argv[argc++] = "--admin-socket";
	argv[argc++] = k->admin;
	while (argc < 47 && (argv[argc] = va_arg(ap, const char *)))
		argc++;
	argv[argc] = NULL;

	parent = getpid();
	k->pid = fork();
	if (k->pid < 0)
		T_FAIL("fork");
	if (k->pid == 0) {
		/* Nothing a test starts outlives it, even a killed test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0 && !getenv("KV_TEST_VERBOSE"))
			dup2(fd, 2);
		execvp(argv[0], (char **)argv);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		int status;

		if (t_kvd_answers(k->admin, k->pid))
			return;
		if (waitpid(k->pid, &status, WNOHANG) == k->pid) {
			k->pid = 0;
			t_cleanup_dir(k);
			T_FAIL("kvd exited at start (status %d)", status);
		}
		usleep(10000);
	}
	T_FAIL("kvd did not create %s", k->admin);
}

/* A failed test exits through T_FAIL: stop its kvd, remove its files. */

static void t_atexit(void)
{
	if (t_live && t_live->pid > 0) {
		kill(t_live->pid, SIGKILL);
		waitpid(t_live->pid, NULL, 0);
		t_live->pid = 0;
	}
	if (t_live && t_live->dir[0])
		t_cleanup_dir(t_live);
}

void t_kvd_start(struct t_kvd *k, const char *pool_size, ...)
{
	va_list ap;

	if (!t_live)
		atexit(t_atexit);
	t_live = k;
	memset(k, 0, sizeof(*k));
	snprintf(k->dir, sizeof(k->dir), "/tmp/kvd-test.XXXXXX");
	if (!mkdtemp(k->dir))
		T_FAIL("mkdtemp: %s", strerror(errno));
	snprintf(k->sock, sizeof(k->sock), "%s/kvd.sock", k->dir);
	snprintf(k->admin, sizeof(k->admin), "%s/kvd-admin.sock", k->dir);
	snprintf(k->log, sizeof(k->log), "%s/kvd.log", k->dir);
	va_start(ap, pool_size);
	t_kvd_spawn(k, pool_size, ap);
	va_end(ap);
}

void t_kvd_restart(struct t_kvd *k, const char *pool_size, ...)
{
	va_list ap;

	va_start(ap, pool_size);
	t_kvd_spawn(k, pool_size, ap);
	va_end(ap);
}

void t_kvd_stop(struct t_kvd *k)
{
	struct stat st;
	int status;

	if (k->pid <= 0)
		return;
	/* After every scenario: the books must hold (kvctl check). */
	free(t_kvctl(k, "check"));
	kill(k->pid, SIGTERM);
	if (waitpid(k->pid, &status, 0) != k->pid)
		T_FAIL("waitpid kvd");
	k->pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "cat '%s' >&2", k->log);
		(void)!system(cmd);
		t_cleanup_dir(k);
		T_FAIL("kvd exit status %d", status);
	}
	if (!stat(k->sock, &st) || !stat(k->admin, &st))
		T_FAIL("kvd left its socket behind");
	t_cleanup_dir(k);
}

struct kv_geometry t_geom(void)
{
	struct kv_geometry g = {
		.layers = 4, .kv_heads = 2, .head_dim = 64,
		.block_tokens = 16, .dtype = KV_DTYPE_FP16,
	};
	return g;	/* 4 * 2 * 2 * 16 * 64 * 2 = 32 KiB */
}

void t_params(struct t_kvd *k, const char *model,
	      struct kv_connect_params *p)
{
	memset(p, 0, sizeof(*p));
	p->socket_path = k->sock;
	p->model_id = model;
	p->geom = t_geom();
}

int t_connect(struct t_kvd *k, const char *model, const struct kv_geometry *g,
	      struct kv_client **c)
{
	struct kv_connect_params p;

	t_params(k, model, &p);
	if (g)
		p.geom = *g;
	return kv_connect(&p, c);
}

char *t_kvctl(struct t_kvd *k, const char *args)
{
	char cmd[1024], *buf;
	size_t len = 0, cap = 1 << 16;
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' %s --json",
		 t_bin("kvctl"), k->admin, args);
	f = popen(cmd, "r");
	if (!f)
		T_FAIL("popen kvctl");
	buf = malloc(cap);
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0)
		len += n;
	buf[len] = 0;
	if (pclose(f))
		T_FAIL("kvctl %s failed", args);
	return buf;
}

long long t_json_int(const char *json, const char *key)
{
	char pat[128];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	return strtoll(p, NULL, 10);
}

char *t_status_idle(struct t_kvd *k)
{
	char *js = NULL;

	/* kvd sees a client's socket close asynchronously */
	for (int i = 0; i < 300; i++) {
		free(js);
		js = t_kvctl(k, "status");
		if (t_json_int(js, "nr_clients") == 0)
			break;
		usleep(10000);
	}
	return js;
}
