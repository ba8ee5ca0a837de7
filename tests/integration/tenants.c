// SPDX-License-Identifier: MIT
/*
 * Many engines, many models, one pool: three engine processes of two
 * tenants (uid 0 "alice", uid 65534 "bob") and two models share one
 * kvd configured by kvd.conf. Shows tenant isolation (no shared hits,
 * -EPERM on foreign ids, a uid in no tenant refused), quotas (-EDQUOT at
 * a namespace's max, a tenant's min never reclaimed), pages flowing
 * between namespaces as their load alternates, kv_stats showing a client
 * its own tenant's figures only, reload, and config errors
 * reported as file:line. Needs root (to run a process as uid 65534).
 */
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY	65534
#define BLK	(32 << 10)	/* t_geom(): 64 blocks a page */

static struct t_kvd k;
static char conf[64];

static const char *conf_text =
	"# two tenants, one namespace quota\n"
	"[tenant alice]\n"
	"uids = 0\n"
	"secret = alice-secret-0123456789\n"
	"max_pages = 12\n"
	"[tenant bob]\n"
	"uids = 65534\n"
	"secret = \"bob secret 0123456789\"\n"
	"min_pages = 4\n"
	"[namespace alice/model-b]\n"
	"max_pages = 2\n";

static void write_conf(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	T_ASSERT(f && fputs(text, f) >= 0 && !fclose(f));
}

static long long jint(const char *cmd, const char *key)
{
	char *js = t_kvctl(&k, cmd);
	long long v = t_json_int(js, key);

	free(js);
	return v;
}

/* Pages of tenant @name, from kvctl tenants --json. */
static long long tenant_pages(const char *name)
{
	char *js = t_kvctl(&k, "tenants"), pat[64], *p;
	long long v = -1;

	snprintf(pat, sizeof(pat), "\"name\": \"%s\"", name);
	p = strstr(js, pat);
	if (p)
		v = t_json_int(p, "pages");
	free(js);
	return v;
}

static void tokens(uint32_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = 7 + (uint32_t)i * 13;
}

/* Run fn as @uid in a child; returns its exit status. */
static int as_uid(uid_t uid, int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		if (uid && (setgid(uid) || setuid(uid)))
			_exit(100);
		_exit(fn());
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

/* alice's second model, in its own process: 2 pages at most. */
static int alice_model_b(void)
{
	struct kv_client *c;
	kv_block_t ids[128], x;

	if (t_connect(&k, "model-b", NULL, &c))
		return 1;
	if (kv_alloc(c, 128, ids) != 128 || kv_alloc(c, 1, &x) != -EDQUOT)
		return 2;
	return kv_release(c, ids, 128) == 128 ? 0 : 3;
}

/* bob: the prompt alice committed does not hit; her ids are not his. */
static int bob_isolated(void)
{
	struct kv_client *c;
	struct kv_seq *s;
	uint32_t t[64];
	kv_block_t theirs = 0;

	tokens(t, 64);
	if (t_connect(&k, "model-a", NULL, &c))
		return 1;
	if (kv_seq_open(c, t, 64, NULL, &s) || kv_seq_hit_tokens(s) != 0)
		return 2;
	kv_seq_close(s);
	if (kv_release(c, &theirs, 1) != -EPERM)
		return 3;
	kv_disconnect(c);
	return 0;
}

static int stranger(void)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	char err[160] = "";

	p.socket_path = k.sock;
	p.model_id = "model-a";
	p.geom = t_geom();
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	if (kv_connect(&p, &c) != -EACCES || !strstr(err, "tenant"))
		return 1;
	return 0;
}

static int go[2], ready[2];

/*
 * bob takes 8 pages of blocks, caches them and stays connected. When
 * alice has taken his extents over and written 0xa5 everywhere in her
 * blocks, none of it may show through bob's (old) mappings.
 */
static int bob_fills(void)
{
	struct kv_client *c;
	kv_block_t ids[512];
	struct kv_commit e;
	char b;

	if (t_connect(&k, "model-a", NULL, &c) || kv_alloc(c, 512, ids) != 512)
		return 1;
	for (int i = 0; i < 512; i++)
		memset(kv_block_ptr(c, ids[i]), 0xb0, BLK);
	for (int i = 0; i < 512; i++) {
		e = (struct kv_commit){ .id = ids[i] };
		memcpy(e.hash.b, &i, sizeof(i));
		e.hash.b[15] = 0xb0;
		if (kv_commit(c, &e, 1) != 1)
			return 2;
	}
	if (kv_release(c, ids, 512) != 512)
		return 3;
	(void)!write(ready[1], "r", 1);
	if (read(go[0], &b, 1) != 1)
		return 4;
	for (int i = 0; i < 512; i++) {
		const uint8_t *p = kv_block_ptr(c, ids[i]);

		for (int j = 0; p && j < BLK; j++)
			if (p[j] == 0xa5)
				return 5;	/* alice's bytes: isolation broken */
	}
	kv_disconnect(c);
	return 0;
}

static int admin_refused(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' status >/dev/null 2>&1",
		 t_bin("kvctl"), k.admin);
	return system(cmd) == 0;	/* 0 when refused */
}

static void config_errors(void)
{
	char bad[64], cmd[512], out[1024] = "";
	FILE *f;
	int fd;

	snprintf(bad, sizeof(bad), "/tmp/kvd-conf.XXXXXX");
	fd = mkstemp(bad);
	T_ASSERT(fd >= 0);
	close(fd);
	write_conf(bad, "pool_size = 64M\n\n[tenant x]\nuidz = 0\n");
	snprintf(cmd, sizeof(cmd), "'%s' --config '%s' --socket /tmp/none.sock 2>&1",
		 t_bin("kvd"), bad);
	f = popen(cmd, "r");
	T_ASSERT(f);
	T_ASSERT(fread(out, 1, sizeof(out) - 1, f) > 0);
	T_EQ(WEXITSTATUS(pclose(f)), 2);
	snprintf(cmd, sizeof(cmd), "%s:4:", bad);
	T_ASSERT(strstr(out, cmd));
	T_ASSERT(strstr(out, "uidz"));
	unlink(bad);
}

/* Started as root with --user nobody: kvd serves as uid 65534. */
static void privilege_drop(void)
{
	struct t_kvd p;
	struct kv_client *c;
	kv_block_t id;
	char path[64], line[256];
	unsigned uid = 0;
	FILE *f;

	t_kvd_start(&p, "16M", "--user", "nobody", NULL);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)p.pid);
	f = fopen(path, "r");
	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %*u %u", &uid) == 1)
			break;
	fclose(f);
	T_EQ(uid, NOBODY);
	T_EQ(t_connect(&p, "m", NULL, &c), 0);
	T_EQ(kv_alloc(c, 1, &id), 1);
	T_EQ(kv_disconnect(c), 0);
	T_ASSERT(!chown(p.dir, NOBODY, NOBODY));	/* so it can unlink */
	t_kvd_stop(&p);
}

/*
 * 16 pages: bob 8, alice 1 (cached), 7 free. alice takes 12: the 7 free
 * ones, her own cached blocks, then bob's coldest pages, and writes 0xa5
 * over every block she got.
 */
static void flow(struct kv_client *a1)
{
	kv_block_t ids[256], x;

	for (int i = 0; i < 3; i++) {
		T_EQ(kv_alloc(a1, 256, ids), 256);
		for (int j = 0; j < 256; j++)
			memset(kv_block_ptr(a1, ids[j]), 0xa5, BLK);
	}
	T_EQ(tenant_pages("alice"), 12);
	T_EQ(tenant_pages("bob"), 4);		/* reclaimed down to his min */
	T_EQ(kv_alloc(a1, 1, &x), -EDQUOT);	/* alice at her max */
	T_ASSERT(jint("status", "reclaims") > 0);	/* bob's cached blocks */
}

int main(void)
{
	struct kv_client *a1, *a2;
	struct kv_stats before, after;
	struct kv_seq *s;
	uint32_t t[64];
	kv_block_t x;
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "needs root to run a second uid\n");
		return 77;
	}
	config_errors();
	privilege_drop();
	snprintf(conf, sizeof(conf), "/tmp/kvd-conf.XXXXXX");
	fd = mkstemp(conf);
	T_ASSERT(fd >= 0);
	close(fd);
	write_conf(conf, conf_text);
	t_kvd_start(&k, "32M", "--config", conf, NULL);	/* 16 pages */
	chmod(k.dir, 0755);

	/* alice, model-a: commits a prompt. */
	T_EQ(t_connect(&k, "model-a", NULL, &a1), 0);
	tokens(t, 64);
	T_EQ(kv_seq_open(a1, t, 64, NULL, &s), 0);
	T_EQ(kv_seq_commit(s), 0);
	T_EQ(kv_seq_close(s), 0);
	/* bob, same model and prompt: no hit, no access to alice's ids. */
	T_EQ(as_uid(NOBODY, bob_isolated), 0);
	T_EQ(as_uid(65533, stranger), 0);	/* in no tenant */
	T_EQ(as_uid(NOBODY, admin_refused), 0);

	/* alice, model-b: its namespace may take 2 pages (128 blocks). */
	T_EQ(as_uid(0, alice_model_b), 0);	/* a third engine process */
	T_EQ(t_connect(&k, "model-b", NULL, &a2), 0);

	/* Pages flow: bob caches 8 pages, then alice needs them. */
	T_EQ(kv_stats(a1, &before), 0);
	T_ASSERT(!pipe(go) && !pipe(ready));
	{
		pid_t bob = fork();
		long long alice_pages;
		char b;
		int status;

		if (bob == 0) {
			if (setgid(NOBODY) || setuid(NOBODY))
				_exit(100);
			_exit(bob_fills());
		}
		T_EQ(read(ready[0], &b, 1), 1);
		T_EQ(tenant_pages("bob"), 8);
		T_EQ(kv_stats(a1, &after), 0);
		alice_pages = tenant_pages("alice");
		flow(a1);
		T_EQ(write(go[1], "g", 1), 1);
		T_EQ(waitpid(bob, &status, 0), bob);
		T_ASSERT(WIFEXITED(status));
		T_EQ(WEXITSTATUS(status), 0);
		/* bob's 8 pages, client and namespace were not alice's to see */
		T_EQ(after.pages_used, before.pages_used);
		T_EQ(after.pages_free, before.pages_free);
		T_EQ(after.peak_pages_used, before.peak_pages_used);
		T_EQ(after.nr_clients, 2);		/* a1, a2 */
		T_EQ(after.nr_namespaces, 2);		/* model-a, model-b */
		T_EQ(after.pages_used, alice_pages);
	}

	/* Reload: alice's max up, bob's min gone; clients stay. */
	{
		char *text = strdup(conf_text);

		memcpy(strstr(text, "max_pages = 12"), "max_pages = 99", 14);
		memcpy(strstr(text, "min_pages = 4"), "min_pages = 0", 13);
		write_conf(conf, text);
		free(text);
	}
	free(t_kvctl(&k, "reload"));
	T_EQ(kv_alloc(a1, 1, &x), 1);		/* from bob's last cached pages */
	T_EQ(tenant_pages("bob"), 3);
	T_EQ(kv_nop(a1), 0);
	write_conf(conf, "[tenant broken\n");
	{
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' reload 2>&1 | grep -q ':1:'",
			 t_bin("kvctl"), k.admin);
		T_EQ(system(cmd), 0);		/* file:line, old config kept */
	}
	T_EQ(kv_nop(a2), 0);
	kv_disconnect(a2);
	kv_disconnect(a1);
	t_kvd_stop(&k);
	unlink(conf);
	return 0;
}
