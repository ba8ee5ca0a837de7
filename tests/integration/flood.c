// SPDX-License-Identifier: MIT
/*
 * A flood of connections that never say HELLO must not lock real clients
 * out (kvd(8)): pending connections have their own slots, the oldest
 * silent one is dropped when they are full, and a client that says HELLO
 * at once is served, on either event loop. A client kvd cannot take gets
 * -EAGAIN with a reason, never a bare reset. Messages about refused
 * peers are rate-limited: a burst of admin connections logs its
 * refusals a few times, not once each, then within the second after it
 * one line with how many it did not log, though no refusal follows.
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

#define FLOODERS	6
#define FLOOD_MS	4000
#define KEEP		100	/* connections each flooder holds open */
#define CLIENTS		20

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memcpy(sa.sun_path, path, strnlen(path, sizeof(sa.sun_path) - 1));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Connect in a loop for FLOOD_MS, never sending; then exit. */
static void flooder(const char *path)
{
	int keep[KEEP], n = 0;
	long long end = now_ms() + FLOOD_MS;

	prctl(PR_SET_PDEATHSIG, SIGKILL);	/* not past the test */
	for (int i = 0; i < KEEP; i++)
		keep[i] = -1;
	while (now_ms() < end) {
		int fd = dial(path);

		if (fd < 0) {
			usleep(1000);
			continue;
		}
		if (keep[n] >= 0)
			close(keep[n]);
		keep[n] = fd;
		n = (n + 1) % KEEP;
	}
	_exit(0);
}

/*
 * A real client under the flood: served, or told -EAGAIN with a reason
 * (then it tries again, as told, a few times); never a reset.
 */
static void real_client(struct t_kvd *k, int i)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c = NULL;
	char err[256];
	int ret = -EAGAIN;

	p.socket_path = k->sock;
	p.model_id = "flood";
	p.geom = t_geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	p.connect_timeout_ms = 5000;
	for (int try = 0; try < 3 && ret == -EAGAIN; try++) {
		err[0] = 0;
		ret = kv_connect(&p, &c);
		if (ret == -EAGAIN && !err[0])
			T_FAIL("client %d: -EAGAIN without a reason", i);
		if (ret == -EAGAIN)
			fprintf(stderr, "client %d: %s\n", i, err);
	}
	if (ret)
		T_FAIL("client %d: kv_connect under a HELLO-less flood: %s (%s)",
		       i, strerror(-ret), err);
	T_EQ(kv_nop(c), 0);
	T_EQ(kv_disconnect(c), 0);
}

static void test_flood_does_not_lock_out(void)
{
	struct t_kvd k;
	pid_t pid[FLOODERS];
	int status;

	t_kvd_start(&k, "64M", NULL);
	for (int i = 0; i < FLOODERS; i++) {
		pid[i] = fork();
		T_ASSERT(pid[i] >= 0);
		if (!pid[i])
			flooder(k.sock);
	}
	usleep(500 * 1000);	/* the flood is on */
	for (int i = 0; i < CLIENTS; i++) {
		real_client(&k, i);
		usleep(50 * 1000);
	}
	for (int i = 0; i < FLOODERS; i++)
		T_EQ(waitpid(pid[i], &status, 0), pid[i]);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/* Lines of @log that contain @what. */
static int log_lines(const char *log, const char *what)
{
	char line[512];
	FILE *f = fopen(log, "r");
	int n = 0;

	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		n += !!strstr(line, what);
	fclose(f);
	return n;
}

#define BURST	200
#define KVD_MAX_ADMIN_T	32	/* kvd's admin connections (admin.h) */

/* The count in kvd's "N more messages (...) suppressed" line, or -1. */
static long suppressed_count(const char *log)
{
	char line[512];
	FILE *f = fopen(log, "r");
	long n = -1;

	T_ASSERT(f);
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "warning: ");

		if (p && strstr(line, " suppressed"))
			n = strtol(p + strlen("warning: "), NULL, 10);
	}
	fclose(f);
	return n;
}

static void test_admin_burst_log_ratelimited(void)
{
	struct t_kvd k;
	int fd[BURST], n;
	long missed = -1;

	t_kvd_start(&k, "64M", NULL);
	for (int i = 0; i < BURST; i++)
		fd[i] = dial(k.admin);
	usleep(300 * 1000);	/* kvd has accepted and refused them */
	for (int i = 0; i < BURST; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	n = log_lines(k.log, "too many connections");
	if (n > 30)
		T_FAIL("a burst of %d admin connections logged %d refusals: not rate-limited",
		       BURST, n);
	/* no further refusal: the count must come by itself */
	for (int i = 0; i < 15 && missed < 0; i++) {
		usleep(100 * 1000);
		missed = suppressed_count(k.log);
	}
	if (missed <= 0)
		T_FAIL("%d refusals logged, then no line with how many were suppressed within 1.8 s",
		       n);
	if (n + missed < BURST - KVD_MAX_ADMIN_T)
		T_FAIL("%d refusals logged and %ld suppressed: fewer than the %d refused",
		       n, missed, BURST - KVD_MAX_ADMIN_T);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

int main(void)
{
	test_admin_burst_log_ratelimited();
	test_flood_does_not_lock_out();
	printf("flood: ok\n");
	return 0;
}
