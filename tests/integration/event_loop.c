// SPDX-License-Identifier: MIT
/*
 * The event loop. With io_uring blocked by a seccomp filter (EPERM, as
 * container runtimes do, or ENOSYS, as on a kernel without it), kvd falls
 * back to epoll with a warning naming the cause and serves clients, admin
 * requests and signals; --event-loop io_uring then fails at start, and
 * the option wins over $KVD_EVENT_LOOP. In the loop $KVD_EVENT_LOOP picks
 * (runtests.sh runs this in both), kvd out of fds stops accepting without
 * spinning and accepts again once fds are free.
 */
#include <dirent.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* io_uring_setup, _enter and _register (425..427) fail with @err. */
static int block_io_uring(int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __NR_io_uring_setup, 0, 2),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, __NR_io_uring_register, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & 0xffff)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static bool log_has(const char *path, const char *what)
{
	char buf[16384];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return strstr(buf, what) != NULL;
}

/* A client's whole life, and kvctl, on whatever loop kvd runs. */
static void serve_one(struct t_kvd *k)
{
	struct kv_client *c;
	kv_block_t ids[4];
	char *js;

	T_EQ(t_connect(k, "loop-test", NULL, &c), 0);
	T_EQ(kv_alloc(c, 4, ids), 4);
	js = t_kvctl(k, "status");
	T_EQ(t_json_int(js, "nr_clients"), 1);
	free(js);
	T_EQ(kv_release(c, ids, 4), 4);
	T_EQ(kv_disconnect(c), 0);
	js = t_status_idle(k);
	T_EQ(t_json_int(js, "nr_clients"), 0);
	free(js);
}

/* EPERM, auto: epoll with a warning; SIGHUP reloads, SIGTERM stops. */
static void fallback_eperm(void)
{
	struct t_kvd k;

	unsetenv("KVD_EVENT_LOOP");
	if (block_io_uring(EPERM)) {
		fprintf(stderr, "no seccomp: %s\n", strerror(errno));
		exit(77);
	}
	t_kvd_start(&k, "64M", "--config", "/dev/null", NULL);
	T_ASSERT(log_has(k.log, "Operation not permitted"));
	T_ASSERT(log_has(k.log, "falling back to an epoll event loop"));
	serve_one(&k);
	T_EQ(kill(k.pid, SIGHUP), 0);
	for (int i = 0; i < 300 && !log_has(k.log, "reloaded"); i++)
		usleep(10000);
	T_ASSERT(log_has(k.log, "reloaded"));
	serve_one(&k);
	t_kvd_stop(&k);
	exit(0);
}

/* ENOSYS: --event-loop io_uring fails; the option beats the variable. */
static void fallback_enosys(void)
{
	char dir[] = "/tmp/kvd-loop.XXXXXX", cmd[1024], log[64];
	struct t_kvd k;
	int st;

	if (block_io_uring(ENOSYS)) {
		fprintf(stderr, "no seccomp: %s\n", strerror(errno));
		exit(77);
	}
	T_ASSERT(mkdtemp(dir));
	snprintf(log, sizeof(log), "%s/kvd.log", dir);
	snprintf(cmd, sizeof(cmd),
		 "KVD_EVENT_LOOP=epoll '%s' --backend host --pool-size 64M --socket %s/s --admin-socket %s/a --event-loop io_uring 2>%s",
		 t_bin("kvd"), dir, dir, log);
	st = system(cmd);
	T_ASSERT(WIFEXITED(st));
	T_EQ(WEXITSTATUS(st), 1);
	T_ASSERT(log_has(log, "--event-loop io_uring: io_uring: Function not implemented"));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ(system(cmd), 0);

	setenv("KVD_EVENT_LOOP", "io_uring", 1);
	t_kvd_start(&k, "64M", "--event-loop", "auto", NULL);
	T_ASSERT(log_has(k.log, "Function not implemented"));
	T_ASSERT(log_has(k.log, "falling back to an epoll event loop"));
	serve_one(&k);
	t_kvd_stop(&k);
	exit(0);
}

static int run_child(const char *name, void (*fn)(void))
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		T_FAIL("fork");
	if (pid == 0)
		fn();
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		T_FAIL("%s: died (status %d)", name, st);
	if (WEXITSTATUS(st) == 77)
		fprintf(stderr, "%s: skipped\n", name);
	else if (WEXITSTATUS(st))
		T_FAIL("%s failed", name);
	return WEXITSTATUS(st);
}

/* How many of fds 0..63 @pid has open: 64 fills an RLIMIT_NOFILE of 64. */
static int fds_below_64(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		T_FAIL("opendir %s", path);
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.' && atoi(e->d_name) < 64;
	closedir(dir);
	return n;
}

/* utime + stime of @pid, in clock ticks. */
static long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		T_FAIL("fopen %s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	/* after ")": state ppid pgrp session tty tpgid flags minflt
	 * cminflt majflt cmajflt utime stime */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		T_FAIL("cannot parse %s", path);
	return (long long)(ut + st);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Open connections that never say HELLO, as many as told each time,
 * and hold them until told 0. */
static void silent_conns(struct t_kvd *k, int cmd, int ready)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n, fd;

	alarm(20);
	memcpy(sa.sun_path, k->sock, strlen(k->sock) + 1);
	while (read(cmd, &n, sizeof(n)) == sizeof(n) && n > 0) {
		for (int i = 0; i < n; i++) {
			fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
			if (fd < 0 ||
			    connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
				_exit(1);
		}
		(void)!write(ready, "r", 1);
	}
	_exit(0);
}

static pid_t fork_or_fail(void)
{
	pid_t pid = fork();

	if (pid < 0)
		T_FAIL("fork");
	return pid;
}

/*
 * Out of fds: the next client waits in the backlog and kvd sleeps; once
 * fds are free, the tick accepts it. kvd's limit is set before it starts
 * (io_uring's accept reads it when armed) and filled up exactly with
 * connections that say nothing, one fd each.
 */
static void accept_backoff(void)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	int cmd[2], ready[2], go[2], st, n;
	struct kv_client *late;
	pid_t helper, pid;
	struct t_kvd k;
	long long cpu;
	double t;
	char b;

	/* valgrind (make valgrind) keeps fds of its own in kvd's table */
	if (getenv("KVD_TEST_WRAPPER") && *getenv("KVD_TEST_WRAPPER"))
		exit(77);
	if (setrlimit(RLIMIT_NOFILE, &rl))
		T_FAIL("setrlimit: %s", strerror(errno));
	t_kvd_start(&k, "64M", "--extent-size", "64M", NULL);
	T_ASSERT(!pipe(cmd) && !pipe(ready) && !pipe(go));
	helper = fork_or_fail();
	if (helper == 0)
		silent_conns(&k, cmd[0], ready[1]);
	pid = fork_or_fail();
	if (pid == 0) {
		alarm(20);
		if (read(go[0], &b, 1) != 1)
			_exit(2);
		_exit(t_connect(&k, "late", NULL, &late) ? 1 : 0);
	}
	/* Fill kvd's table; an fd it has open for a moment (the start's
	 * admin reply) leaves it short: top up. */
	for (int i = 0; i < 10 && (n = 64 - fds_below_64(k.pid)) > 0; i++) {
		T_EQ(write(cmd[1], &n, sizeof(n)), sizeof(n));
		T_EQ(read(ready[0], &b, 1), 1);
		/* until full, or 100 ms without a new accept */
		for (int j = 0, last = -1, same = 0; j < 300 && same < 10; j++) {
			int now = fds_below_64(k.pid);

			if (now == 64)
				break;
			same = now == last ? same + 1 : 0;
			last = now;
			usleep(10000);
		}
	}
	T_EQ(fds_below_64(k.pid), 64);

	cpu = cpu_ticks(k.pid);
	T_EQ(write(go[1], "g", 1), 1);
	sleep(1);
	if (waitpid(pid, &st, WNOHANG))
		T_FAIL("the late client did not wait (status %d)", st);
	cpu = cpu_ticks(k.pid) - cpu;
	T_ASSERT(log_has(k.log, "accept: Too many open files"));
	/* A spinning loop would take most of the second. */
	if (cpu > sysconf(_SC_CLK_TCK) / 4)
		T_FAIL("kvd used %lld ticks while it could not accept", cpu);

	t = now_s();
	n = 0;
	T_EQ(write(cmd[1], &n, sizeof(n)), sizeof(n));	/* their fds free */
	T_EQ(waitpid(helper, &st, 0), helper);
	T_EQ(waitpid(pid, &st, 0), pid);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	T_ASSERT(now_s() - t < 3);	/* the tick retries every 250 ms */
	free(t_status_idle(&k));
	t_kvd_stop(&k);
	exit(0);
}

int main(void)
{
	run_child("fallback on EPERM", fallback_eperm);
	run_child("fallback on ENOSYS", fallback_enosys);
	run_child("accept back-off", accept_backoff);
	return 0;
}
