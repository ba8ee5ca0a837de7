// SPDX-License-Identifier: MIT
/*
 * What a first user meets: kvctl wait until kvd answers (scripts paste
 * README's "Running it"), kvctl finding the admin socket beside
 * $KVD_SOCKET, a clear message for the wrong socket (a client at the
 * admin socket, kvctl at the client socket), timestamped log lines (none
 * under the journal), JSON booleans, evict of a namespace that does not
 * exist failing, versions, and an absurd host pool refused.
 */
#include <fcntl.h>
#include <regex.h>
#include <stdbool.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Run @cmd by sh, stdout and stderr in @out; its exit status. */
static int t_sh(const char *cmd, char *out, size_t len)
{
	char full[2048];
	size_t n = 0, r;
	FILE *f;
	int st;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	f = popen(full, "r");
	T_ASSERT(f);
	while (n + 1 < len && (r = fread(out + n, 1, len - n - 1, f)) > 0)
		n += r;
	out[n] = 0;
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void t_log(struct t_kvd *k, char *buf, size_t len)
{
	int fd = open(k->log, O_RDONLY);
	ssize_t n;

	T_ASSERT(fd >= 0);
	n = read(fd, buf, len - 1);
	T_ASSERT(n > 0);
	buf[n] = 0;
	close(fd);
}

/* kvctl wait: returns once kvd answers, or fails after its timeout. */
static void test_first_use_wait(struct t_kvd *unused)
{
	char cmd[512], out[4096];
	struct t_kvd k;
	double t0;
	FILE *f;
	int st;

	t_kvd_start(&k, "16M", NULL);
	kill(k.pid, SIGKILL);
	waitpid(k.pid, NULL, 0);
	k.pid = 0;
	unlink(k.sock);
	unlink(k.admin);

	t0 = t_now();
	snprintf(cmd, sizeof(cmd), "'%s' -a '%s' wait --timeout 1",
		 t_bin("kvctl"), k.admin);
	if (t_sh(cmd, out, sizeof(out)) != 1 || !strstr(out, k.admin))
		T_FAIL("kvctl wait with no kvd: %s", out);
	T_ASSERT(t_now() - t0 >= 0.9 && t_now() - t0 < 4);

	/* a file that is not a socket: no kvd will come, no wait */
	{
		FILE *nf = fopen(k.admin, "w");

		T_ASSERT(nf && !fclose(nf));
	}
	t0 = t_now();
	snprintf(cmd, sizeof(cmd), "'%s' -a '%s' wait --timeout 5",
		 t_bin("kvctl"), k.admin);
	if (t_sh(cmd, out, sizeof(out)) != 1 || !strstr(out, k.admin))
		T_FAIL("kvctl wait on a file: %s", out);
	T_ASSERT(t_now() - t0 < 2);
	unlink(k.admin);

	/* started before kvd, it waits for it */
	snprintf(cmd, sizeof(cmd), "'%s' -a '%s' wait --timeout 20 --json",
		 t_bin("kvctl"), k.admin);
	f = popen(cmd, "r");
	T_ASSERT(f);
	usleep(300000);
	t_kvd_restart(&k, "16M", NULL);
	T_ASSERT(fread(out, 1, sizeof(out) - 1, f) > 0);
	st = pclose(f);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	T_ASSERT(strstr(out, "\"ready\": true"));
	T_EQ(t_json_int(out, "pid"), k.pid);
	t_kvd_stop(&k);
}

/* kvctl's default admin socket is kvd-admin.sock beside $KVD_SOCKET. */
static void test_first_use_kvd_socket(struct t_kvd *k)
{
	char cmd[512], out[8192];

	snprintf(cmd, sizeof(cmd),
		 "unset KVD_ADMIN_SOCKET; KVD_SOCKET='%s' '%s' status --json",
		 k->sock, t_bin("kvctl"));
	if (t_sh(cmd, out, sizeof(out)) != 0)
		T_FAIL("kvctl with $KVD_SOCKET: %s", out);
	T_EQ(t_json_int(out, "pid"), k->pid);
}

/* The wrong socket, either way round, says which one it is. */
static void test_first_use_wrong_socket(struct t_kvd *k)
{
	struct kv_connect_params p = { 0 };
	char cmd[512], out[4096], err[256] = "";
	struct kv_client *c;

	p.socket_path = k->admin;
	p.model_id = "m";
	p.geom = t_geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	T_EQ(kv_connect(&p, &c), -EPROTO);
	if (!strstr(err, "admin socket"))
		T_FAIL("kv_connect on the admin socket says '%s'", err);

	snprintf(cmd, sizeof(cmd), "'%s' -a '%s' status", t_bin("kvctl"),
		 k->sock);
	if (t_sh(cmd, out, sizeof(out)) != 1 ||
	    !strstr(out, "client socket, not its admin socket"))
		T_FAIL("kvctl on the client socket: %s", out);
}

static void test_first_use_log_stamps(struct t_kvd *k)
{
	char log[8192];
	regex_t re;

	t_log(k, log, sizeof(log));
	T_EQ(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
		     "[0-9]{2}\\.[0-9]{3}Z kvd\\[[0-9]+\\]: info: kvd ",
		     REG_EXTENDED | REG_NEWLINE), 0);
	if (regexec(&re, log, 0, NULL, 0))
		T_FAIL("no timestamp in kvd's log:\n%s", log);
	regfree(&re);
}

/* Under the journal, which stamps lines itself, kvd does not. */
static void test_first_use_journal_no_stamps(struct t_kvd *unused)
{
	struct t_kvd k;
	char log[8192];

	setenv("JOURNAL_STREAM", "8:12345", 1);
	t_kvd_start(&k, "16M", NULL);
	unsetenv("JOURNAL_STREAM");
	t_log(&k, log, sizeof(log));
	if (strncmp(log, "kvd[", 4))
		T_FAIL("a stamp under the journal:\n%s", log);
	t_kvd_stop(&k);
}

/* JSON flags are true/false, not "yes"/"no". */
static void test_first_use_json_bools(struct t_kvd *k)
{
	struct kv_client *c;
	char *js;

	T_EQ(t_connect(k, "m", NULL, &c), 0);
	js = t_kvctl(k, "check");
	if (!strstr(js, "\"ok\": true") || strstr(js, "\"yes\""))
		T_FAIL("kvctl check --json: %s", js);
	free(js);
	js = t_kvctl(k, "tenants");
	if (!strstr(js, "\"configured\": false") ||
	    !strstr(js, "\"admits\": true") || strstr(js, "\"yes\"") ||
	    strstr(js, "\"no\""))
		T_FAIL("kvctl tenants --json: %s", js);
	free(js);
	T_EQ(kv_disconnect(c), 0);
}

static void test_first_use_evict_missing_ns(struct t_kvd *k)
{
	char cmd[512], out[4096];

	snprintf(cmd, sizeof(cmd), "'%s' -a '%s' evict --ns 7",
		 t_bin("kvctl"), k->admin);
	if (t_sh(cmd, out, sizeof(out)) != 1 || !strstr(out, "no namespace 7"))
		T_FAIL("kvctl evict --ns 7: %s", out);
	free(t_kvctl(k, "evict"));	/* all: still fine with none */
}

static void test_first_use_versions(struct t_kvd *k)
{
	char cmd[512], out[4096], want[64];
	char *js;

	snprintf(want, sizeof(want), "%s (ABI %u.%u)", KV_VERSION,
		 KV_ABI_MAJOR, KV_ABI_MINOR);
	snprintf(cmd, sizeof(cmd), "'%s' --version", t_bin("kvctl"));
	if (t_sh(cmd, out, sizeof(out)) || strncmp(out, "kvctl ", 6) ||
	    !strstr(out, want))
		T_FAIL("kvctl --version: %s", out);
	snprintf(cmd, sizeof(cmd), "'%s' --version", t_bin("kvbench"));
	if (t_sh(cmd, out, sizeof(out)) || strncmp(out, "kvbench ", 8) ||
	    !strstr(out, want))
		T_FAIL("kvbench --version: %s", out);
	js = t_kvctl(k, "status");
	snprintf(want, sizeof(want), "\"version\": \"%s\"", KV_VERSION);
	if (!strstr(js, want))
		T_FAIL("kvctl status --json has no %s: %s", want, js);
	snprintf(want, sizeof(want), "\"abi\": \"%u.%u\"", KV_ABI_MAJOR,
		 KV_ABI_MINOR);
	if (!strstr(js, want))
		T_FAIL("kvctl status --json has no %s: %s", want, js);
	free(js);
}

/* A host pool beyond RAM + swap is refused unless --overcommit. */
static void test_first_use_pool_too_big(struct t_kvd *k)
{
	char cmd[1024], out[4096];

	snprintf(cmd, sizeof(cmd),
		 "timeout 10 '%s' --backend host --pool-size 64T --socket '%s/big.sock' --admin-socket '%s/big-admin.sock'",
		 t_bin("kvd"), k->dir, k->dir);
	if (t_sh(cmd, out, sizeof(out)) == 0 || !strstr(out, "--overcommit"))
		T_FAIL("kvd --pool-size 64T: %s", out);
}

static const struct {
	const char	*name;
	void		(*fn)(struct t_kvd *k);
	bool		own;		/* starts its own kvd */
} cases[] = {
	{ "wait", test_first_use_wait, true },
	{ "journal_no_stamps", test_first_use_journal_no_stamps, true },
	{ "kvd_socket", test_first_use_kvd_socket, false },
	{ "wrong_socket", test_first_use_wrong_socket, false },
	{ "log_stamps", test_first_use_log_stamps, false },
	{ "json_bools", test_first_use_json_bools, false },
	{ "evict_missing_ns", test_first_use_evict_missing_ns, false },
	{ "versions", test_first_use_versions, false },
	{ "pool_too_big", test_first_use_pool_too_big, false },
};

/* first_use [CASE]: every case, or the one named. */
int main(int argc, char **argv)
{
	struct t_kvd k;
	bool live = false;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name))
			continue;
		if (cases[i].own) {
			cases[i].fn(NULL);
			continue;
		}
		if (!live)
			t_kvd_start(&k, "64M", NULL);
		live = true;
		cases[i].fn(&k);
	}
	if (live)
		t_kvd_stop(&k);
	return 0;
}
