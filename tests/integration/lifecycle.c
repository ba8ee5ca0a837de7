// SPDX-License-Identifier: MIT
/*
 * kvd's own lifetime: bad options, a second instance refused, kill -9
 * under a connected client (which gets an error, never a hang), restart
 * over the stale socket, reconnect, and a clean stop on SIGINT.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Run kvd with args; returns exit status, stderr in out. */
static int run_kvd(char *out, size_t len, const char *const *args)
{
	const char *argv[16];
	int p[2], status, n = 0, argc = 0;
	pid_t pid;

	argv[argc++] = t_bin("kvd");
	argv[0] = strdup(argv[0]);
	while (*args && argc < 15)
		argv[argc++] = *args++;
	argv[argc] = NULL;
	T_ASSERT(!pipe(p));
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[1]);
	while (n < (int)len - 1) {
		ssize_t r = read(p[0], out + n, len - 1 - n);

		if (r <= 0)
			break;
		n += (int)r;
	}
	out[n] = 0;
	close(p[0]);
	T_EQ(waitpid(pid, &status, 0), pid);
	free((void *)argv[0]);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* On a host without a CUDA driver, --backend cuda says so and stops. */
static void no_cuda(struct t_kvd *k)
{
	char out[4096], sock[160], admin[160];
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	if (h) {
		dlclose(h);
		return;		/* a GPU host: tests/gpu/run.sh covers it */
	}
	snprintf(sock, sizeof(sock), "%s/cuda.sock", k->dir);
	snprintf(admin, sizeof(admin), "%s/cuda-admin.sock", k->dir);
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--backend", "cuda",
		"--pool-size", "4M", "--socket", sock, "--admin-socket", admin,
		NULL }), 1);
	T_ASSERT(strstr(out, "--backend cuda: no CUDA driver"));
}

static void bad_options(struct t_kvd *k)
{
	char out[4096];

	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--pool-size", "lots",
		"--socket", "/tmp/x", NULL }), 2);
	T_ASSERT(strstr(out, "--pool-size"));
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--pool-size", "1M",
		NULL }), 2);
	T_ASSERT(strstr(out, "at least 2M"));
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--backend", "tpu",
		NULL }), 2);
	T_ASSERT(strstr(out, "unknown backend"));
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--export", "ipc",
		NULL }), 2);
	T_ASSERT(strstr(out, "unknown export 'ipc' (vmm or legacy)"));
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--device", "-1",
		NULL }), 2);
	T_ASSERT(strstr(out, "not a device ordinal"));
	no_cuda(k);
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--max-clients", "0",
		NULL }), 2);
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "extra", NULL }), 2);
	/* Same socket as the running kvd: refused, and it keeps running. */
	T_EQ(run_kvd(out, sizeof(out), (const char *[]){ "--pool-size", "4M",
		"--socket", k->sock, "--admin-socket", k->admin, NULL }), 1);
	T_ASSERT(strstr(out, "already running"));
	T_EQ(kill(k->pid, 0), 0);
}

/* With every client slot taken, a new client is told so. */
static void full_refused(struct t_kvd *k)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c2;
	char err[160] = "";

	p.socket_path = k->sock;
	p.model_id = "m";
	p.geom = t_geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	T_EQ(kv_connect(&p, &c2), -EUSERS);
	T_ASSERT(strstr(err, "client slots in use"));
}

/*
 * Connections that never say HELLO neither take client slots nor pile
 * up: with 100 of them open (more than kvd keeps pending), a client
 * still connects once the live one has gone.
 */
static void silent_connections(struct t_kvd *k, struct kv_client *live)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_client *c2;
	int fds[100];

	strcpy(sa.sun_path, k->sock);
	for (int i = 0; i < 100; i++) {
		fds[i] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		T_EQ(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	T_EQ(kv_nop(live), 0);
	T_EQ(kv_disconnect(live), 0);
	/* kvd sees the close asynchronously: retry briefly on EUSERS. */
	for (int i = 0; i < 100; i++) {
		int ret = t_connect(k, "m", NULL, &c2);

		if (ret == 0)
			break;
		T_ASSERT(ret == -EUSERS || ret == -EAGAIN);	/* transient */
		usleep(10000);
		T_ASSERT(i < 99);
	}
	T_EQ(kv_nop(c2), 0);
	T_EQ(kv_disconnect(c2), 0);
	for (int i = 0; i < 100; i++)
		close(fds[i]);
}

int main(void)
{
	struct kv_client *c;
	kv_block_t ids[4];
	struct t_kvd k;
	struct stat st;
	int status;

	t_kvd_start(&k, "16M", NULL);
	bad_options(&k);

	T_EQ(t_connect(&k, "m", NULL, &c), 0);
	T_EQ(kv_alloc(c, 4, ids), 4);
	/* kvd dies under the client: calls fail, they do not hang. */
	T_EQ(kill(k.pid, SIGKILL), 0);
	T_EQ(waitpid(k.pid, &status, 0), k.pid);
	k.pid = 0;
	T_EQ(kv_alloc(c, 1, ids), -ECONNRESET);
	T_EQ(kv_nop(c), -ECONNRESET);
	/* every call says so, even those that check for requests in flight */
	T_EQ(kv_release(c, ids, 1), -ECONNRESET);
	T_EQ(kv_cow(c, ids, 1), -ECONNRESET);
	T_EQ(kv_ref(c, ids, 1), -ECONNRESET);
	T_EQ(kv_alloc(c, 1, ids), -ECONNRESET);
	/* never a mapping of the dead kvd's pool */
	T_ASSERT(kv_block_ptr(c, ids[0]) == NULL);
	T_EQ(kv_disconnect(c), 0);
	T_EQ(stat(k.sock, &st), 0);		/* stale socket left behind */

	/* A new kvd takes over the stale socket; clients reconnect. */
	t_kvd_restart(&k, "16M", "--max-clients", "1", NULL);
	T_EQ(t_connect(&k, "m", NULL, &c), 0);
	T_EQ(kv_alloc(c, 4, ids), 4);
	full_refused(&k);
	silent_connections(&k, c);

	/* SIGINT stops it cleanly and removes both sockets. */
	T_EQ(kill(k.pid, SIGINT), 0);
	T_EQ(waitpid(k.pid, &status, 0), k.pid);
	k.pid = 0;
	T_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	T_ASSERT(stat(k.sock, &st) && stat(k.admin, &st));
	t_cleanup_dir(&k);
	return 0;
}
