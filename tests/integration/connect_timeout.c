// SPDX-License-Identifier: MIT
/*
 * A kvd that does not answer (stopped, wedged) must not hang its
 * clients: kv_connect gives up with -ETIMEDOUT and a reason after
 * connect_timeout_ms, whether the server accepted and stays silent or
 * never accepts (backlog full); a client with call_timeout_ms gets
 * -ETIMEDOUT from a synchronous call to a stopped kvd, and goes on once
 * kvd runs again, the blocks a timed-out ALLOC got late given back.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int listener(const char *path, int backlog)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	T_ASSERT(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	T_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	T_EQ(listen(fd, backlog), 0);
	return fd;
}

/* kv_connect to @path with a 400 ms timeout: -ETIMEDOUT, in time, why. */
static void connect_times_out(const char *path, const char *why)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c = NULL;
	char err[256] = "";
	long long t0, ms;

	p.socket_path = path;
	p.model_id = "silent";
	p.geom = t_geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	p.connect_timeout_ms = 400;
	t0 = now_ms();
	T_EQ(kv_connect(&p, &c), -ETIMEDOUT);
	ms = now_ms() - t0;
	T_ASSERT(!c);
	if (ms < 350 || ms > 3000)
		T_FAIL("kv_connect gave up after %lld ms, timeout 400", ms);
	if (!strstr(err, why))
		T_FAIL("errbuf '%s' does not say '%s'", err, why);
}

/* A server that accepts and then never answers HELLO. */
static void test_connect_timeout_silent_server(const char *dir)
{
	char path[128];
	int lfd, status;
	pid_t srv;

	snprintf(path, sizeof(path), "%s/silent.sock", dir);
	lfd = listener(path, 8);
	srv = fork();
	if (srv == 0) {
		int fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* not past the test */
		fd = accept(lfd, NULL, NULL);

		(void)fd;
		for (;;)
			pause();
	}
	close(lfd);
	connect_times_out(path, "did not answer HELLO");
	kill(srv, SIGKILL);
	T_EQ(waitpid(srv, &status, 0), srv);
	unlink(path);
}

/* A server that never accepts, its backlog full: connect itself waits. */
static void test_connect_timeout_backlog_full(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd, fill[4], n = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/full.sock", dir);
	lfd = listener(sa.sun_path, 0);
	for (int i = 0; i < 4; i++) {
		fill[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
		if (!connect(fill[i], (struct sockaddr *)&sa, sizeof(sa)))
			n++;
	}
	T_ASSERT(n >= 1 && n < 4);	/* the backlog is full */
	connect_times_out(sa.sun_path, "did not accept");
	for (int i = 0; i < 4; i++)
		close(fill[i]);
	close(lfd);
	unlink(sa.sun_path);
}

/* A stopped kvd: a sync call with a call timeout gives up, then works. */
static void test_call_timeout_stopped_kvd(void)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	struct kv_stats st;
	kv_block_t ids[8];
	struct t_kvd k;
	long long t0, ms;
	int ret;

	t_kvd_start(&k, "64M", NULL);
	p.socket_path = k.sock;
	p.model_id = "stopped";
	p.geom = t_geom();
	p.call_timeout_ms = -1;
	T_EQ(kv_connect(&p, &c), -EINVAL);
	p.call_timeout_ms = 300;
	T_EQ(kv_connect(&p, &c), 0);
	T_EQ(kv_nop(c), 0);
	T_EQ(kill(k.pid, SIGSTOP), 0);
	t0 = now_ms();
	T_EQ(kv_nop(c), -ETIMEDOUT);
	ms = now_ms() - t0;
	if (ms < 250 || ms > 3000)
		T_FAIL("kv_nop gave up after %lld ms, timeout 300", ms);
	T_EQ(kill(k.pid, SIGCONT), 0);
	/* The late completion is dropped; -EBUSY until it came. */
	for (int i = 0; i < 300 && (ret = kv_nop(c)) == -EBUSY; i++)
		usleep(10000);
	T_EQ(ret, 0);
	/* A timed-out ALLOC's late blocks are given back, not leaked. */
	T_EQ(kill(k.pid, SIGSTOP), 0);
	T_EQ(kv_alloc(c, 8, ids), -ETIMEDOUT);
	T_EQ(kill(k.pid, SIGCONT), 0);
	for (int i = 0; i < 300 && (ret = kv_stats(c, &st)) == -EBUSY; i++)
		usleep(10000);
	T_EQ(ret, 0);
	T_EQ(st.client_refs, 0);
	T_EQ(kv_disconnect(c), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

int main(void)
{
	char dir[] = "/tmp/kvd-ct-XXXXXX";

	T_ASSERT(mkdtemp(dir));
	test_connect_timeout_silent_server(dir);
	test_connect_timeout_backlog_full(dir);
	rmdir(dir);
	test_call_timeout_stopped_kvd();
	return 0;
}
