// SPDX-License-Identifier: MIT
/*
 * kvd.conf parser (kvd/config.c): a full valid file, every error with its
 * exact "PATH:LINE:" prefix, a missing file, tenant and quota look-ups,
 * a namespace's context settings, and user and group names. Each test
 * writes its file with mkstemp in /tmp and removes it in teardown.
 *
 * Names used: root (uid 0, gid 0), nobody (uid 65534, primary group
 * 65534) and nogroup (gid 65534), which exist on Debian and Ubuntu; a
 * test that needs one skips when this host lacks it.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "kvd.h"

#define ERRLEN		512
#define GIB		(1ULL << 30)

/* A tenant section that passes every check, for error cases to extend. */
#define TENANT_OK(name, uid)						\
	"[tenant " name "]\n"						\
	"uids = " uid "\n"						\
	"secret = 0123456789abcdef\n"

struct ctx {
	char		path[64];
	struct kvd_conf	conf;
	char		err[ERRLEN];
};

static int ctx_setup(void **state)
{
	struct ctx *t = calloc(1, sizeof(*t));
	int fd;

	if (!t)
		return -1;
	strcpy(t->path, "/tmp/kvd-test-conf-XXXXXX");
	fd = mkstemp(t->path);
	if (fd < 0) {
		free(t);
		return -1;
	}
	close(fd);
	*state = t;
	return 0;
}

static int ctx_teardown(void **state)
{
	struct ctx *t = *state;

	kvd_conf_free(&t->conf);
	unlink(t->path);
	free(t);
	return 0;
}

static void t_write(struct ctx *t, const char *text)
{
	FILE *f = fopen(t->path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Writes @text and loads it; a previous load is freed first. */
static int t_load(struct ctx *t, const char *text)
{
	kvd_conf_free(&t->conf);
	t_write(t, text);
	return kvd_conf_load(t->path, &t->conf, t->err, sizeof(t->err));
}

static void t_load_ok(struct ctx *t, const char *text)
{
	int ret = t_load(t, text);

	if (ret)
		print_error("unexpected failure %d: %s\n", ret, t->err);
	assert_int_equal(ret, 0);
	assert_string_equal(t->err, "");
}

static bool t_have_names(void)
{
	return getpwnam("root") && getpwnam("nobody") && getgrnam("nogroup") &&
	       getpwnam("nobody")->pw_uid == 65534 &&
	       getgrnam("nogroup")->gr_gid == 65534;
}

/* ---- a full valid file ------------------------------------------------ */

static const char full_conf[] =
	"# kvd test configuration: every key once\n"
	"\n"
	"pool_size = 64G            # a comment after a value\n"
	"backend=cuda\n"
	"socket = \"/run/kvd/kvd #1.sock\"   # quoted: keeps '#' and the space\n"
	"\tsocket_mode\t=\t0660\n"
	"admin_socket = /run/kvd/kvd-admin.sock\n"
	"admin_socket_mode = 0640\n"
	"admin_group = nogroup\n"
	"user = nobody\n"
	"max_clients = 512\n"
	"max_namespaces = 128\n"
	"hugepages = yes\n"
	"\n"
	"[tenant alice]\n"
	"uids = root, 1000 2001,2002\n"
	"gids = nogroup\n"
	"secret = \"a secret # with \\\"quotes\\\"\"\n"
	"min_pages = 10\n"
	"max_pages = 100\n"
	"\n"
	"[ tenant bob ]   # a comment after a header\n"
	"uids = 3000\n"
	"secret = hex:00112233445566778899aabbccddeeFF\n"
	"max_pages = 0\n"
	"\n"
	"[tenant carol]\n"
	"gids = 100,,  50,\n"
	"secret = \"sixteen bytes!!!\"\n"
	"\n"
	"[namespace alice/meta-llama/Llama-3.1-8B]\n"
	"min_pages = 4\n"
	"max_pages = 40\n"
	"\n"
	"[namespace bob/Qwen/Qwen2.5-7B#v1]  # '#' inside the model id\n"
	"max_pages = 8\n"
	"[namespace carol/m]\n";

static void test_config_full_file(void **state)
{
	static const uint8_t bob_secret[16] = {
		0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
		0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
	};
	static const char alice_secret[] = "a secret # with \"quotes\"";
	struct ctx *t = *state;
	const struct kvd_conf *c = &t->conf;
	const struct kvd_tenant_conf *a, *b, *cr;

	if (!t_have_names())
		skip();
	t_load_ok(t, full_conf);

	assert_true(c->has_pool_bytes);
	assert_int_equal(c->pool_bytes, 64 * GIB);
	assert_true(c->has_backend);
	assert_int_equal(c->backend, KV_BACKEND_CUDA);
	assert_true(c->has_socket);
	assert_string_equal(c->socket, "/run/kvd/kvd #1.sock");
	assert_true(c->has_socket_mode);
	assert_int_equal(c->socket_mode, 0660);
	assert_true(c->has_admin_socket);
	assert_string_equal(c->admin_socket, "/run/kvd/kvd-admin.sock");
	assert_true(c->has_admin_socket_mode);
	assert_int_equal(c->admin_socket_mode, 0640);
	assert_true(c->has_admin_group);
	assert_int_equal(c->admin_gid, 65534);
	assert_true(c->has_user);
	assert_int_equal(c->user.uid, 65534);
	assert_int_equal(c->user.gid, getpwnam("nobody")->pw_gid);
	assert_false(c->user.group);
	assert_string_equal(c->user.name, "nobody");
	assert_true(c->has_max_clients);
	assert_int_equal(c->max_clients, 512);
	assert_true(c->has_max_namespaces);
	assert_int_equal(c->max_namespaces, 128);
	assert_true(c->has_hugepages);
	assert_true(c->hugepages);

	assert_int_equal(c->nr_tenants, 3);
	a = &c->tenants[0];
	assert_string_equal(a->name, "alice");
	assert_int_equal(a->line, 15);
	assert_int_equal(a->nr_uids, 4);
	assert_int_equal(a->uids[0], 0);
	assert_int_equal(a->uids[1], 1000);
	assert_int_equal(a->uids[2], 2001);
	assert_int_equal(a->uids[3], 2002);
	assert_int_equal(a->nr_gids, 1);
	assert_int_equal(a->gids[0], 65534);
	assert_int_equal(a->secret_len, strlen(alice_secret));
	assert_memory_equal(a->secret, alice_secret, strlen(alice_secret));
	assert_int_equal(a->min_pages, 10);
	assert_int_equal(a->max_pages, 100);

	b = &c->tenants[1];
	assert_string_equal(b->name, "bob");
	assert_int_equal(b->line, 22);
	assert_int_equal(b->nr_uids, 1);
	assert_int_equal(b->uids[0], 3000);
	assert_int_equal(b->nr_gids, 0);
	assert_null(b->gids);
	assert_int_equal(b->secret_len, 16);
	assert_memory_equal(b->secret, bob_secret, 16);
	assert_int_equal(b->min_pages, 0);
	assert_int_equal(b->max_pages, 0);

	cr = &c->tenants[2];
	assert_string_equal(cr->name, "carol");
	assert_int_equal(cr->nr_uids, 0);
	assert_int_equal(cr->nr_gids, 2);
	assert_int_equal(cr->gids[0], 100);
	assert_int_equal(cr->gids[1], 50);
	assert_int_equal(cr->secret_len, 16);

	assert_int_equal(c->nr_quotas, 3);
	assert_string_equal(c->quotas[0].tenant, "alice");
	assert_string_equal(c->quotas[0].model_id, "meta-llama/Llama-3.1-8B");
	assert_int_equal(c->quotas[0].min_pages, 4);
	assert_int_equal(c->quotas[0].max_pages, 40);
	assert_int_equal(c->quotas[0].line, 31);
	assert_string_equal(c->quotas[1].tenant, "bob");
	assert_string_equal(c->quotas[1].model_id, "Qwen/Qwen2.5-7B#v1");
	assert_int_equal(c->quotas[1].min_pages, 0);
	assert_int_equal(c->quotas[1].max_pages, 8);
	assert_string_equal(c->quotas[2].tenant, "carol");
	assert_string_equal(c->quotas[2].model_id, "m");
	assert_int_equal(c->quotas[2].max_pages, 0);
}

/* An empty file, or one of comments, sets nothing and is valid. */
static void test_config_empty(void **state)
{
	struct ctx *t = *state;

	t_load_ok(t, "");
	assert_false(t->conf.has_pool_bytes);
	assert_false(t->conf.has_backend);
	assert_false(t->conf.has_socket);
	assert_false(t->conf.has_user);
	assert_false(t->conf.has_hugepages);
	assert_int_equal(t->conf.nr_tenants, 0);
	assert_null(t->conf.tenants);
	assert_int_equal(t->conf.nr_quotas, 0);
	t_load_ok(t, "# only\n\n   # comments\n\t\n");
	assert_false(t->conf.has_max_clients);
	/* No newline at the end, CR LF line ends. */
	t_load_ok(t, "max_clients = 7\r\nhugepages = off");
	assert_int_equal(t->conf.max_clients, 7);
	assert_true(t->conf.has_hugepages);
	assert_false(t->conf.hugepages);
}

static void test_config_values(void **state)
{
	static const struct {
		const char	*text;
		uint64_t	bytes;
	} sizes[] = {
		{ "pool_size = 2M\n", 2ULL << 20 },
		{ "pool_size = 2097152\n", 2ULL << 20 },
		{ "pool_size = 3m\n", 3ULL << 20 },
		{ "pool_size = 1G\n", GIB },
		{ "pool_size = 1GiB\n", GIB },
		{ "pool_size = 1gb\n", GIB },
		{ "pool_size = 2T\n", 2ULL << 40 },
		{ "pool_size = 4096K\n", 4ULL << 20 },
	};
	static const char *const yes[] = { "yes", "true", "on", "1", "YES",
					   "True" };
	static const char *const no[] = { "no", "false", "off", "0", "Off" };
	struct ctx *t = *state;
	char buf[64];

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		t_load_ok(t, sizes[i].text);
		assert_int_equal(t->conf.pool_bytes, sizes[i].bytes);
	}
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		snprintf(buf, sizeof(buf), "hugepages = %s\n", yes[i]);
		t_load_ok(t, buf);
		assert_true(t->conf.hugepages);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		snprintf(buf, sizeof(buf), "hugepages = %s\n", no[i]);
		t_load_ok(t, buf);
		assert_true(t->conf.has_hugepages);
		assert_false(t->conf.hugepages);
	}
	t_load_ok(t, "backend = host\nsocket_mode = 666\n");
	assert_int_equal(t->conf.backend, KV_BACKEND_HOST);
	assert_int_equal(t->conf.socket_mode, 0666);
	t_load_ok(t, "backend = cuda\ndevice = 3\nexport = legacy\n");
	assert_true(t->conf.has_device && t->conf.has_export_kind);
	assert_int_equal(t->conf.device, 3);
	assert_int_equal(t->conf.export_kind, KV_EXPORT_LEGACY);
	t_load_ok(t, "max_ring_entries = 64\nmax_client_blocks = 100000\n");
	assert_int_equal(t->conf.max_ring_entries, 64);
	assert_int_equal(t->conf.max_client_blocks, 100000);
	t_load_ok(t, "export = vmm\n");
	assert_int_equal(t->conf.export_kind, KV_EXPORT_VMM);
	assert_false(t->conf.has_device);
	t_load_ok(t, "backend = auto\nsocket_mode = 0\nadmin_socket_mode = 0770\n");
	assert_true(t->conf.has_backend);
	assert_int_equal(t->conf.backend, KVD_BACKEND_AUTO);
	assert_true(t->conf.has_socket_mode);
	assert_int_equal(t->conf.socket_mode, 0);
	assert_int_equal(t->conf.admin_socket_mode, 0770);
	t_load_ok(t, "max_clients = 1\nmax_namespaces = 1024\n");
	assert_int_equal(t->conf.max_clients, 1);
	assert_int_equal(t->conf.max_namespaces, 1024);
	/* 107 bytes is the longest path sun_path holds. */
	{
		char text[256], path[108];

		memset(path, 'p', 107);
		path[0] = '/';
		path[107] = 0;
		snprintf(text, sizeof(text), "socket = %s\n", path);
		t_load_ok(t, text);
		assert_string_equal(t->conf.socket, path);
	}
	/* A 64-byte string secret and a 64-byte hex one. */
	t_load_ok(t, "[tenant a]\nuids = 1\nsecret = "
		  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
		  "[tenant b]\nuids = 2\nsecret = hex:"
		  "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000\n");
	assert_int_equal(t->conf.tenants[0].secret_len, 64);
	assert_int_equal(t->conf.tenants[1].secret_len, 64);
	/* Backslashes other than before '"' and '\' are kept. */
	t_load_ok(t, "socket = \"/a\\b\\\\c\"\n");
	assert_string_equal(t->conf.socket, "/a\\b\\c");
	/* min = max is fine; max 0 is unlimited, whatever min is. */
	t_load_ok(t, TENANT_OK("a", "1") "min_pages = 5\nmax_pages = 5\n"
		  TENANT_OK("b", "2") "max_pages = 0\nmin_pages = 9\n");
	assert_int_equal(t->conf.tenants[1].min_pages, 9);
	assert_int_equal(t->conf.tenants[1].max_pages, 0);
	t_load_ok(t, TENANT_OK("a", "1") "max_pages = 4294967295\n");
	assert_int_equal(t->conf.tenants[0].max_pages, UINT32_MAX);
}

/* ---- context settings of a namespace ---------------------------------- */

#define NS_OK		TENANT_OK("a", "1") "[namespace a/m]\n"

#define R(k)		(1U << KV_CTX_##k)

/*
 * max_context, context_policy and context_policies with good values, in
 * either order: the policy is checked against max_context at the end of
 * the section, wherever max_context stands in it.
 */
static void test_config_context(void **state)
{
	static const struct {
		const char	*keys;
		uint32_t	max_context;
		uint32_t	refused;
		struct kv_ctx_policy pol;
	} good[] = {
		{ "", 0, 0, { KV_CTX_NONE, 0, 0, 0 } },
		{ "context_policy = none\n", 0, 0, { KV_CTX_NONE, 0, 0, 0 } },
		{ "max_context = 0\n", 0, 0, { KV_CTX_NONE, 0, 0, 0 } },
		{ "max_context = 2147483647\n", 2147483647, 0,
		  { KV_CTX_NONE, 0, 0, 0 } },
		{ "max_context = 4096\ncontext_policy = sinks 4 4092\n", 4096, 0,
		  { KV_CTX_SINKS, 0, 4, 4092 } },
		{ "context_policy = sinks 4 4092\nmax_context = 4096\n", 4096, 0,
		  { KV_CTX_SINKS, 0, 4, 4092 } },
		{ "context_policy = sinks 4 4091 bos-extra\nmin_pages = 1\n"
		  "max_context = 4096\n", 4096, 0,
		  { KV_CTX_SINKS, KV_CTX_BOS_EXTRA, 4, 4091 } },
		{ "context_policy = \"sinks 1 4095 bos\"  # quoted\n"
		  "max_context=4096\n", 4096, 0,
		  { KV_CTX_SINKS, KV_CTX_BOS, 1, 4095 } },
		{ "context_policy = \tsinks\t0  8\n", 0, 0,
		  { KV_CTX_SINKS, 0, 0, 8 } },
		{ "context_policy = truncate\nmax_context = 8192\n", 8192, 0,
		  { KV_CTX_TRUNCATE, 0, 0, 0 } },
		{ "max_context = 1\ncontext_policy = truncate stop\n", 1, 0,
		  { KV_CTX_TRUNCATE, 0, 0, 0 } },
		{ "context_policy = truncate drop\nmax_context = 8192\n", 8192, 0,
		  { KV_CTX_TRUNCATE, KV_CTX_DROP_OLDEST, 0, 0 } },
		{ "context_policy = window 4096\n", 0, 0,
		  { KV_CTX_WINDOW, 0, 0, 4096 } },
		{ "context_policy = window 4095 bos-extra\nmax_context = 4096\n",
		  4096, 0, { KV_CTX_WINDOW, KV_CTX_BOS_EXTRA, 0, 4095 } },
		{ "context_policy = window 4294967295\n", 0, 0,
		  { KV_CTX_WINDOW, 0, 0, UINT32_MAX } },
		{ "context_policies = none, truncate\ncontext_policy = truncate\n"
		  "max_context = 100\n", 100, R(WINDOW) | R(SINKS),
		  { KV_CTX_TRUNCATE, 0, 0, 0 } },
		{ "context_policy = window 512\ncontext_policies = none window\n",
		  0, R(TRUNCATE) | R(SINKS), { KV_CTX_WINDOW, 0, 0, 512 } },
		{ "context_policies = none\n", 0,
		  R(TRUNCATE) | R(WINDOW) | R(SINKS),
		  { KV_CTX_NONE, 0, 0, 0 } },
		{ "context_policies = sinks,none ,, window\n", 0, R(TRUNCATE),
		  { KV_CTX_NONE, 0, 0, 0 } },
		{ "context_policies = none truncate window sinks\n", 0, 0,
		  { KV_CTX_NONE, 0, 0, 0 } },
	};
	struct ctx *t = *state;
	const struct kvd_quota_conf *q;
	char text[512];

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		snprintf(text, sizeof(text), NS_OK "%s", good[i].keys);
		t_load_ok(t, text);
		q = kvd_conf_quota(&t->conf, "a", "m");
		assert_non_null(q);
		if (q->max_context != good[i].max_context ||
		    q->ctx_refused != good[i].refused ||
		    memcmp(&q->ctx_default, &good[i].pol, sizeof(good[i].pol)))
			print_error("case %zu: max_context %u refused %#x policy %u %#x %u %u\n",
				    i, q->max_context, q->ctx_refused,
				    q->ctx_default.kind, q->ctx_default.flags,
				    q->ctx_default.sinks,
				    q->ctx_default.window);
		assert_int_equal(q->max_context, good[i].max_context);
		assert_int_equal(q->ctx_refused, good[i].refused);
		assert_memory_equal(&q->ctx_default, &good[i].pol,
				    sizeof(good[i].pol));
	}
}

/* Each namespace has its own settings; one never leaks into the next. */
static void test_config_context_sections(void **state)
{
	struct ctx *t = *state;
	const struct kvd_quota_conf *q;

	t_load_ok(t, TENANT_OK("a", "1")
		  "[namespace a/m]\n"
		  "context_policy = sinks 4 1020\n"
		  "max_context = 1024\n"
		  "context_policies = none, sinks\n"
		  "[namespace a/n]\n"
		  "max_context = 10\n"
		  "[namespace a/o]\n");
	q = kvd_conf_quota(&t->conf, "a", "m");
	assert_int_equal(q->max_context, 1024);
	assert_int_equal(q->ctx_refused, R(TRUNCATE) | R(WINDOW));
	assert_int_equal(q->ctx_default.kind, KV_CTX_SINKS);
	q = kvd_conf_quota(&t->conf, "a", "n");
	assert_int_equal(q->max_context, 10);
	assert_int_equal(q->ctx_refused, 0);
	assert_int_equal(q->ctx_default.kind, KV_CTX_NONE);
	q = kvd_conf_quota(&t->conf, "a", "o");
	assert_int_equal(q->max_context, 0);
	assert_int_equal(q->ctx_refused, 0);
	/* The max_context of a later section does not save an earlier one. */
	assert_int_equal(t_load(t, TENANT_OK("a", "1")
				"[namespace a/m]\ncontext_policy = truncate\n"
				"[namespace a/n]\nmax_context = 100\n"), -EINVAL);
	assert_non_null(strstr(t->err, ":5: context_policy: truncate needs a max_context"));
}

/* The whole message of kvd.conf(5)'s example, at the later key's line. */
static void test_config_context_error_exact(void **state)
{
	struct ctx *t = *state;
	char want[ERRLEN];

	assert_int_equal(t_load(t, NS_OK "\n\n\n\n\n\n\n\n"
				"context_policy = sinks 4 4096\n"
				"max_context = 4096\n"
				"[namespace a/n]\n"), -EINVAL);
	snprintf(want, sizeof(want),
		 "%s:14: context_policy: sinks + window above max_context (4 + 4096 > 4096)",
		 t->path);
	assert_string_equal(t->err, want);
}

/* ---- user and group names --------------------------------------------- */

static void test_config_users_groups(void **state)
{
	struct ctx *t = *state;
	uint32_t nobody_gid;

	if (!t_have_names())
		skip();
	nobody_gid = getpwnam("nobody")->pw_gid;

	t_load_ok(t, "user = root\nadmin_group = root\n");
	assert_int_equal(t->conf.user.uid, 0);
	assert_int_equal(t->conf.user.gid, 0);
	assert_int_equal(t->conf.admin_gid, 0);
	t_load_ok(t, "user = 65534\nadmin_group = 4242\n");
	assert_int_equal(t->conf.user.uid, 65534);
	assert_int_equal(t->conf.user.gid, nobody_gid);
	assert_int_equal(t->conf.admin_gid, 4242);
	t_load_ok(t, "user = nobody:root\n");
	assert_int_equal(t->conf.user.uid, 65534);
	assert_int_equal(t->conf.user.gid, 0);
	t_load_ok(t, "user = 4242:4343\n");
	assert_int_equal(t->conf.user.uid, 4242);
	assert_int_equal(t->conf.user.gid, 4343);
	t_load_ok(t, "user = 0:nogroup\n");
	assert_int_equal(t->conf.user.uid, 0);
	assert_int_equal(t->conf.user.gid, 65534);
	t_load_ok(t, "[tenant a]\nuids = nobody root\ngids = root,nogroup\n"
		  "secret = 0123456789abcdef\n");
	assert_int_equal(t->conf.tenants[0].nr_uids, 2);
	assert_int_equal(t->conf.tenants[0].uids[0], 65534);
	assert_int_equal(t->conf.tenants[0].uids[1], 0);
	assert_int_equal(t->conf.tenants[0].gids[0], 0);
	assert_int_equal(t->conf.tenants[0].gids[1], 65534);
}

/* ---- errors ----------------------------------------------------------- */

struct bad_case {
	const char	*text;
	unsigned	line;
	const char	*msg;	/* what the message after "PATH:LINE: " holds */
};

static const struct bad_case bad_cases[] = {
	/* unknown keys */
	{ "pool_sise = 1G\n", 1, "unknown key 'pool_sise' in global section" },
	{ "# c\n\nPool_size = 1G\n", 3, "unknown key 'Pool_size' in global section" },
	{ "uids = 1\n", 1, "unknown key 'uids' in global section (it belongs in a [tenant NAME] section)" },
	{ TENANT_OK("a", "1") "frob = 1\n", 4, "unknown key 'frob' in [tenant a]" },
	{ TENANT_OK("a", "1") "pool_size = 1G\n", 4,
	  "unknown key 'pool_size' in [tenant a] (global keys go before the first section)" },
	{ TENANT_OK("a", "1") "[namespace a/m]\nsecret = 0123456789abcdef\n", 5,
	  "unknown key 'secret' in [namespace a/m] (it belongs in a [tenant NAME] section)" },
	/* malformed lines and values */
	{ "pool_size 1G\n", 1, "expected '=' after 'pool_size'" },
	{ "= 1G\n", 1, "expected 'key = value' or a [section] header" },
	{ "pool_size =\n", 1, "pool_size: no value" },
	{ "pool_size = # nothing\n", 1, "pool_size: no value" },
	{ "socket = \"/run/x\n", 1, "socket: unterminated quoted value" },
	{ "socket = \"/run/x\" y\n", 1, "socket: unexpected text after the quoted value" },
	{ "socket = /run/\"x\"\n", 1, "socket: stray '\"' in the value" },
	{ "pool_size = 1Q\n", 1, "pool_size: '1Q' is not a size" },
	{ "pool_size = G\n", 1, "pool_size: 'G' is not a size" },
	{ "pool_size = -1G\n", 1, "pool_size: '-1G' is not a size" },
	{ "pool_size = 1.5G\n", 1, "pool_size: '1.5G' is not a size" },
	{ "pool_size = 1M\n", 1, "pool_size: '1M' is less than one 2 MiB page" },
	{ "pool_size = 0\n", 1, "pool_size: '0' is less than one 2 MiB page" },
	{ "pool_size = 9000000T\n", 1, "pool_size: '9000000T' is more than 4294967295 pages" },
	{ "pool_size = 99999999999999999999999\n", 1, "pool_size: '99999999999999999999999' is not a size" },
	{ "backend = gpu\n", 1, "backend: unknown backend 'gpu' (host, cuda or auto)" },
	{ "export = ipc\n", 1, "export: unknown export 'ipc' (vmm or legacy)" },
	{ "max_ring_entries = 8192\n", 1, "max_ring_entries: '8192' is not a number from 1 to 4096" },
	{ "max_client_blocks = 0\n", 1, "max_client_blocks: '0' is not a number from 1 to 1073741824" },
	{ "device = 256\n", 1, "device: '256' is not a device ordinal (a number from 0 to 255)" },
	{ "backend = HOST\n", 1, "backend: unknown backend 'HOST'" },
	{ "socket = run/kvd.sock\n", 1, "socket: 'run/kvd.sock' is not an absolute path" },
	{ "admin_socket = \"\"\n", 1, "admin_socket: '' is not an absolute path" },
	{ "socket = /run/kvd/kvd.sock\nadmin_socket = /run/kvd/kvd.sock\n", 2,
	  "admin_socket must differ from socket" },
	{ "socket = /a\nadmin_socket = /a\n" TENANT_OK("a", "1"), 2,
	  "admin_socket must differ from socket" },
	{ "socket_mode = 0968\n", 1, "socket_mode: '0968' is not an octal mode from 0 to 0777" },
	{ "socket_mode = 01777\n", 1, "socket_mode: '01777' is not an octal mode" },
	{ "socket_mode = 1000\n", 1, "socket_mode: '1000' is not an octal mode" },
	{ "socket_mode = rw\n", 1, "socket_mode: 'rw' is not an octal mode" },
	{ "admin_socket_mode = 0666\n", 1, "admin_socket_mode: 0666 lets other users in" },
	{ "admin_socket_mode = 0661\n", 1, "admin_socket_mode: 0661 lets other users in" },
	{ "admin_group = kvd-no-such-group\n", 1, "admin_group: unknown group 'kvd-no-such-group'" },
	{ "admin_group = 4294967295\n", 1, "admin_group: '4294967295' is not a valid gid" },
	{ "user = kvd-no-such-user\n", 1, "user: unknown user 'kvd-no-such-user'" },
	{ "user = 3999999999\n", 1, "user: uid 3999999999 has no entry in the user database" },
	{ "user = root:kvd-no-such-group\n", 1, "user: unknown group 'kvd-no-such-group'" },
	{ "user = root:\n", 1, "user: 'root:' is not USER or USER:GROUP" },
	{ "user = :root\n", 1, "user: ':root' is not USER or USER:GROUP" },
	{ "max_clients = 0\n", 1, "max_clients: '0' is not a number from 1 to 1024" },
	{ "max_clients = 1025\n", 1, "max_clients: '1025' is not a number from 1 to 1024" },
	{ "max_clients = -1\n", 1, "max_clients: '-1' is not a number from 1 to 1024" },
	{ "max_clients = 12 clients\n", 1, "max_clients: '12 clients' is not a number" },
	{ "max_namespaces = 2000\n", 1, "max_namespaces: '2000' is not a number from 1 to 1024" },
	{ "hugepages = maybe\n", 1, "hugepages: 'maybe' is not yes, no, true, false, on, off, 1 or 0" },
	{ "max_clients = 1\x01\n", 1, "control character 0x01 in the line" },
	/* duplicate keys */
	{ "max_clients = 1\n# x\nmax_clients = 2\n", 3,
	  "duplicate key 'max_clients' in global section (first set on line 1)" },
	{ TENANT_OK("a", "1") "uids = 2\n", 4,
	  "duplicate key 'uids' in [tenant a] (first set on line 2)" },
	{ TENANT_OK("a", "1") "[namespace a/m]\nmax_pages = 1\nmax_pages=2\n", 6,
	  "duplicate key 'max_pages' in [namespace a/m] (first set on line 5)" },
	/* tenants */
	{ TENANT_OK("a", "1") "\n" TENANT_OK("a", "2"), 5,
	  "duplicate tenant 'a' (first defined on line 1)" },
	{ TENANT_OK("a", "1,1000") TENANT_OK("b", "7 1000"), 5,
	  "uids: uid 1000 is already in tenant 'a' (line 1)" },
	{ TENANT_OK("a", "1") "gids = 50\n" TENANT_OK("b", "2") "gids = 60, 50\n", 8,
	  "gids: gid 50 is already in tenant 'a' (line 1)" },
	{ TENANT_OK("a", "5, 6, 5"), 2, "uids: uid 5 is listed twice" },
	{ TENANT_OK("a", "0, 6, root"), 2, "uids: uid 0 (root) is listed twice" },
	{ TENANT_OK("a", "0") TENANT_OK("b", "root"), 5,
	  "uids: uid 0 (root) is already in tenant 'a' (line 1)" },
	{ "[tenant a]\nuids = 1\n[tenant b]\n", 1, "tenant 'a' has no secret" },
	{ "\n[tenant a]\nuids = 1\n", 2, "tenant 'a' has no secret" },
	{ "[tenant a]\nsecret = 0123456789abcdef\n", 1, "tenant 'a' has neither uids nor gids" },
	{ "[tenant a]\nsecret = 0123456789abcdef\n[namespace a/m]\n", 1,
	  "tenant 'a' has neither uids nor gids" },
	{ "[tenant a]\nuids = ,\n", 2, "uids: empty list" },
	{ "[tenant a]\ngids = \" \"\n", 2, "gids: empty list" },
	{ "[tenant a]\nuids = 1 kvd-no-such-user\n", 2, "uids: unknown user 'kvd-no-such-user'" },
	{ "[tenant a]\ngids = kvd-no-such-group\n", 2, "gids: unknown group 'kvd-no-such-group'" },
	{ "[tenant a]\nuids = 4294967295\n", 2, "uids: '4294967295' is not a valid uid" },
	{ "[tenant a]\nuids = 99999999999\n", 2, "uids: '99999999999' is not a valid uid" },
	{ "[tenant a]\nsecret = short secret\n", 2, "secret: 12 bytes; it must be 16 to 64 bytes" },
	{ "[tenant a]\nsecret = 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX\n", 2,
	  "secret: 65 bytes; it must be 16 to 64 bytes" },
	{ "[tenant a]\nsecret = hex:0011223344556677889900112233445\n", 2,
	  "secret: 'hex:' must be followed by an even number of hex digits (31 given)" },
	{ "[tenant a]\nsecret = hex:00112233445566778899001122334g\n", 2,
	  "secret: 'hex:' must be followed by hex digits only" },
	{ "[tenant a]\nsecret = hex:001122334455667788990011223344\n", 2,
	  "secret: 15 bytes of hex; it must give 16 to 64 bytes" },
	{ "[tenant a]\nsecret = hex:\n", 2, "secret: 0 bytes of hex" },
	{ "[tenant a]\nsecret = hex:"
	  "0000000000000000000000000000000000000000000000000000000000000000"
	  "000000000000000000000000000000000000000000000000000000000000000000\n", 2,
	  "secret: 65 bytes of hex" },
	/* pages */
	{ TENANT_OK("a", "1") "min_pages = 11\nmax_pages = 10\n", 5,
	  "min_pages 11 is more than max_pages 10 in [tenant a]" },
	{ TENANT_OK("a", "1") "max_pages = 10\n\nmin_pages = 11\n[tenant b]\n", 6,
	  "min_pages 11 is more than max_pages 10 in [tenant a]" },
	{ TENANT_OK("a", "1") "[namespace a/x/y]\nmax_pages = 1\nmin_pages = 2\n", 6,
	  "min_pages 2 is more than max_pages 1 in [namespace a/x/y]" },
	{ TENANT_OK("a", "1") "min_pages = -1\n", 4,
	  "min_pages: '-1' is not a number from 0 to 4294967295" },
	{ TENANT_OK("a", "1") "max_pages = 4294967296\n", 4,
	  "max_pages: '4294967296' is not a number from 0 to 4294967295" },
	{ TENANT_OK("a", "1") "max_pages = 1G\n", 4, "max_pages: '1G' is not a number" },
	/* context: max_context */
	{ NS_OK "max_context = 2147483648\n", 5,
	  "max_context: '2147483648' is out of range (at most 2147483647 tokens, 2^31 - 1)" },
	{ NS_OK "max_context = 99999999999999999999999\n", 5,
	  "max_context: '99999999999999999999999' is out of range (at most 2147483647" },
	{ NS_OK "max_context = 4k\n", 5,
	  "max_context: '4k' is not a number of tokens (0 to 2147483647; 0: no limit)" },
	{ NS_OK "max_context = -1\n", 5, "max_context: '-1' is not a number of tokens" },
	/* context: context_policy, its grammar */
	{ NS_OK "context_policy = slide 512\n", 5,
	  "context_policy: unknown policy 'slide' (none, truncate [stop|drop], window W or sinks S W" },
	{ NS_OK "context_policy = Window 512\n", 5,
	  "context_policy: unknown policy 'Window'" },
	{ NS_OK "context_policy = sinks 4 4092 bos-first\n", 5,
	  "context_policy: unknown word 'bos-first' in 'sinks 4 4092 bos-first' (sinks S W, S and W decimal numbers of tokens, optionally followed by bos or bos-extra)" },
	{ NS_OK "context_policy = window 4k\n", 5,
	  "context_policy: unknown word '4k' in 'window 4k' (window W," },
	{ NS_OK "context_policy = truncate cut\n", 5,
	  "context_policy: unknown word 'cut' in 'truncate cut' (truncate, truncate stop or truncate drop)" },
	{ NS_OK "context_policy = none 5\n", 5,
	  "context_policy: 'none 5' is not none, with nothing after it" },
	{ NS_OK "context_policy = window\n", 5,
	  "context_policy: 'window' is not window W, W a decimal number of tokens, optionally followed by bos-extra" },
	{ NS_OK "context_policy = sinks 4\n", 5,
	  "context_policy: 'sinks 4' is not sinks S W" },
	{ NS_OK "context_policy = sinks 4 bos 100\n", 5,
	  "context_policy: 'sinks 4 bos 100' is not sinks S W" },
	{ NS_OK "context_policy = window 99999999999\n", 5,
	  "context_policy: '99999999999' is more than 4294967295 tokens" },
	/* context: context_policy, its values (checked at the section's end) */
	{ NS_OK "context_policy = window 0\n", 5, "context_policy: window 0" },
	{ NS_OK "context_policy = sinks 4 0\nmax_context = 100\n", 5,
	  "context_policy: window 0" },
	{ NS_OK "max_context = 4096\ncontext_policy = sinks 4 4096\n", 6,
	  "context_policy: sinks + window above max_context (4 + 4096 > 4096)" },
	{ NS_OK "context_policy = sinks 4 4096\nmax_context = 4096\n" TENANT_OK("b", "2"), 6,
	  "context_policy: sinks + window above max_context (4 + 4096 > 4096)" },
	{ NS_OK "context_policy = sinks 4 4092 bos-extra\nmax_context = 4096\n", 6,
	  "context_policy: sinks + window above max_context (4 + 4092 + 1 > 4096)" },
	{ NS_OK "max_context = 4096\ncontext_policy = window 4097\n", 6,
	  "context_policy: sinks + window above max_context (4097 > 4096)" },
	{ NS_OK "context_policy = window 4096 bos-extra\n\nmax_context = 4096\n", 7,
	  "context_policy: sinks + window above max_context (4096 + 1 > 4096)" },
	{ NS_OK "context_policy = truncate\n", 5,
	  "context_policy: truncate needs a max_context" },
	{ NS_OK "context_policy = truncate drop\nmax_context = 0\n", 5,
	  "context_policy: truncate needs a max_context" },
	{ NS_OK "context_policy = sinks 0 4096 bos\nmax_context = 8192\n", 5,
	  "context_policy: bos counted among 0 sinks" },
	{ NS_OK "max_context = 8192\ncontext_policy = window 512 bos\n", 6,
	  "context_policy: a flag this policy does not take" },
	/* context: context_policies */
	{ NS_OK "context_policies = truncate, window\n", 5,
	  "context_policies: 'truncate, window' lacks none (a sequence must always be able to open without a policy)" },
	{ NS_OK "context_policies = none, stream\n", 5,
	  "context_policies: unknown policy 'stream' (none, truncate, window or sinks)" },
	{ NS_OK "context_policies = none, window 512\n", 5,
	  "context_policies: unknown policy '512'" },
	{ NS_OK "context_policies = none,truncate none\n", 5,
	  "context_policies: 'none' is listed twice" },
	{ NS_OK "context_policies = \",\"\n", 5, "context_policies: empty list" },
	{ NS_OK "context_policies = none truncate\nmax_context = 10\n"
	  "context_policy = window 4\n", 7,
	  "context_policy: window is not in context_policies of [namespace a/m]" },
	{ NS_OK "context_policy = sinks 1 2\ncontext_policies = none\n", 6,
	  "context_policy: sinks is not in context_policies of [namespace a/m]" },
	/* context: keys set twice, or in the wrong section */
	{ NS_OK "context_policy = none\ncontext_policy = window 4\n", 6,
	  "duplicate key 'context_policy' in [namespace a/m] (first set on line 5)" },
	{ NS_OK "max_context = 1\n\nmax_context = 1\n", 7,
	  "duplicate key 'max_context' in [namespace a/m] (first set on line 5)" },
	{ NS_OK "context_policies = none\ncontext_policies = none\n", 6,
	  "duplicate key 'context_policies' in [namespace a/m] (first set on line 5)" },
	{ "max_context = 4096\n", 1,
	  "unknown key 'max_context' in global section (it belongs in a [namespace TENANT/MODEL] section)" },
	{ TENANT_OK("a", "1") "context_policy = none\n", 4,
	  "unknown key 'context_policy' in [tenant a] (it belongs in a [namespace TENANT/MODEL] section)" },
	/* namespaces */
	{ "[namespace bob/m]\nmax_pages = 1\n" TENANT_OK("a", "1"), 1,
	  "namespace 'bob/m' names unknown tenant 'bob'" },
	{ TENANT_OK("a", "1") "[namespace a/meta/x]\n\n[namespace a/meta/x]\n", 6,
	  "duplicate namespace 'a/meta/x' (first defined on line 4)" },
	/* malformed section headers */
	{ "[tenant]\n", 1, "malformed section header '[tenant]'" },
	{ "[tenant a b]\n", 1, "malformed section header '[tenant a b]'" },
	{ "[tenant a\n", 1, "malformed section header (expected [tenant NAME] or [namespace TENANT/MODEL])" },
	{ "[tenant a] x\n", 1, "malformed section header (expected" },
	{ "[]\n", 1, "malformed section header '[]'" },
	{ "[global x]\n", 1, "malformed section header: unknown section 'global'" },
	{ "[tenant a/b]\n", 1, "malformed section header: tenant name 'a/b' is not 1 to 31" },
	{ "[tenant a*]\n", 1, "malformed section header: tenant name 'a*'" },
	{ "[tenant 0123456789abcdef0123456789abcdef]\n", 1,
	  "malformed section header: tenant name '0123456789abcdef0123456789abcdef' is not 1 to 31" },
	{ "[namespace a]\n", 1, "malformed section header: 'a' is not TENANT/MODEL" },
	{ "[namespace a/]\n", 1, "malformed section header: model id of 0 bytes (1 to 63)" },
	{ "[namespace /m]\n", 1, "malformed section header: tenant name '' is not" },
	{ "[namespace a/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef]\n", 1,
	  "malformed section header: model id of 64 bytes (1 to 63)" },
	{ "[namespace a/\x7f]\n", 1, "control character 0x7f in the line" },
};

static void t_expect_error(struct ctx *t, size_t i, const struct bad_case *bc)
{
	char prefix[128];
	int ret = t_load(t, bc->text);

	snprintf(prefix, sizeof(prefix), "%s:%u: ", t->path, bc->line);
	if (ret != -EINVAL || strncmp(t->err, prefix, strlen(prefix)) ||
	    !strstr(t->err + strlen(prefix), bc->msg)) {
		print_error("case %zu: ret %d, err \"%s\"\n  want -EINVAL, \"%s%s...\"\n",
			    i, ret, t->err, prefix, bc->msg);
		fail();
	}
	/* Nothing is left allocated, and conf is zeroed. */
	assert_null(t->conf.tenants);
	assert_null(t->conf.quotas);
	assert_int_equal(t->conf.nr_tenants, 0);
	assert_false(t->conf.has_pool_bytes);
}

static void test_config_errors(void **state)
{
	struct ctx *t = *state;

	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++)
		t_expect_error(t, i, &bad_cases[i]);
}

/* The exact message of the format's own example. */
static void test_config_error_exact(void **state)
{
	struct ctx *t = *state;
	char want[ERRLEN];

	assert_int_equal(t_load(t, "pool_size = 1G\n\n# x\nbackend = host\n"
				"\n\n\n\n\n\n\npool_sise = 2G\n"), -EINVAL);
	snprintf(want, sizeof(want),
		 "%s:12: unknown key 'pool_sise' in global section", t->path);
	assert_string_equal(t->err, want);
}

/* A secret is never echoed in a message. */
static void test_config_error_hides_secret(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(t_load(t, "[tenant a]\nsecret = my-tiny-key\n"),
			 -EINVAL);
	assert_non_null(strstr(t->err, ":2: secret: "));
	assert_null(strstr(t->err, "my-tiny-key"));
	assert_int_equal(t_load(t, "[tenant a]\nsecret = hex:abcdefabcdef\n"),
			 -EINVAL);
	assert_null(strstr(t->err, "abcdefabcdef"));
}

static void test_config_line_too_long(void **state)
{
	struct ctx *t = *state;
	char *text = malloc(2200), prefix[128];

	assert_non_null(text);
	/* 1024 bytes is the longest line; a comment of that length is fine. */
	strcpy(text, "max_clients = 3\n\n");
	memset(text + 17, '#', 1024);
	strcpy(text + 17 + 1024, "\n");
	t_load_ok(t, text);
	assert_int_equal(t->conf.max_clients, 3);
	/* One more byte and line 3 is too long. */
	memset(text + 17, '#', 1025);
	strcpy(text + 17 + 1025, "\nmax_clients = 4\n");
	assert_int_equal(t_load(t, text), -EINVAL);
	snprintf(prefix, sizeof(prefix), "%s:3: line too long (more than 1024 bytes)",
		 t->path);
	assert_string_equal(t->err, prefix);
	free(text);
}

/* A line of 1024 bytes may end in CR LF, as any other line (kvd.conf(5)). */
static void test_config_line_max_crlf(void **state)
{
	struct ctx *t = *state;
	char *text = malloc(2200);

	assert_non_null(text);
	strcpy(text, "max_clients = 3\r\n");
	memset(text + 17, '#', 1024);
	strcpy(text + 17 + 1024, "\r\nmax_namespaces = 9\r\n");
	t_load_ok(t, text);
	assert_int_equal(t->conf.max_clients, 3);
	assert_int_equal(t->conf.max_namespaces, 9);
	free(text);
}

/*
 * A FIFO (or a socket) is refused: it blocked kvd's event loop in open()
 * (a reload runs on it) until someone wrote to it. /dev/null is an empty
 * configuration.
 */
static void test_config_not_regular(void **state)
{
	struct ctx *t = *state;
	char want[ERRLEN];

	unlink(t->path);
	assert_int_equal(mkfifo(t->path, 0600), 0);
	alarm(10);		/* the old open() blocked for ever */
	assert_int_equal(kvd_conf_load(t->path, &t->conf, t->err,
				       sizeof(t->err)), -EINVAL);
	alarm(0);
	snprintf(want, sizeof(want), "%s: not a file", t->path);
	assert_string_equal(t->err, want);
	assert_int_equal(kvd_conf_load("/dev/null", &t->conf, t->err,
				       sizeof(t->err)), 0);
}

static void test_config_missing_file(void **state)
{
	struct ctx *t = *state;
	char want[ERRLEN];

	unlink(t->path);
	memset(&t->conf, 0xff, sizeof(t->conf));
	assert_int_equal(kvd_conf_load(t->path, &t->conf, t->err,
				       sizeof(t->err)), -ENOENT);
	snprintf(want, sizeof(want), "%s: %s", t->path, strerror(ENOENT));
	assert_string_equal(t->err, want);
	assert_null(t->conf.tenants);
	assert_false(t->conf.has_socket);
	/* A directory is a bad file, not a missing one. */
	assert_int_equal(kvd_conf_load("/tmp", &t->conf, t->err,
				       sizeof(t->err)), -EISDIR);
	assert_non_null(strstr(t->err, "/tmp: "));
}

/* err may be NULL with errlen 0; a short buffer truncates. */
static void test_config_err_buffer(void **state)
{
	struct ctx *t = *state;
	char small[8];

	t_write(t, "pool_sise = 1G\n");
	assert_int_equal(kvd_conf_load(t->path, &t->conf, NULL, 0), -EINVAL);
	memset(small, 'x', sizeof(small));
	assert_int_equal(kvd_conf_load(t->path, &t->conf, small, sizeof(small)),
			 -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, t->path, sizeof(small) - 1);
	unlink(t->path);
	assert_int_equal(kvd_conf_load(t->path, &t->conf, NULL, 0), -ENOENT);
}

/* ---- look-ups --------------------------------------------------------- */

static const char lookup_conf[] =
	"[tenant alice]\n"
	"uids = 1000, 1001\n"
	"gids = 2000\n"
	"secret = alice-secret-0123\n"
	"[tenant bob]\n"
	"uids = 3000\n"
	"gids = 4000, 4001\n"
	"secret = bob-secret-012345\n"
	"[tenant carol]\n"
	"gids = 5000\n"
	"secret = carol-secret-0123\n"
	"[namespace alice/meta-llama/Llama-3.1-8B]\n"
	"min_pages = 2\n"
	"max_pages = 20\n"
	"[namespace bob/meta-llama/Llama-3.1-8B]\n"
	"max_pages = 30\n"
	"[namespace alice/Qwen/Qwen2.5-7B]\n";

static void test_config_tenant_of(void **state)
{
	static const uint32_t groups_carol[] = { 9, 5000, 4001 };
	static const uint32_t groups_bob[] = { 4001, 5000 };
	static const uint32_t groups_none[] = { 9, 10 };
	struct ctx *t = *state;
	const struct kvd_tenant_conf *tn;
	const struct kvd_conf *c = &t->conf;

	t_load_ok(t, lookup_conf);
	/* By uid. */
	tn = kvd_conf_tenant_of(c, 1001, 7, NULL, 0);
	assert_non_null(tn);
	assert_string_equal(tn->name, "alice");
	/* uid first: 3000 is bob's even with alice's gid. */
	tn = kvd_conf_tenant_of(c, 3000, 2000, groups_carol, 3);
	assert_string_equal(tn->name, "bob");
	/* By primary gid, before supplementary groups. */
	tn = kvd_conf_tenant_of(c, 7, 2000, groups_bob, 2);
	assert_string_equal(tn->name, "alice");
	tn = kvd_conf_tenant_of(c, 7, 4000, NULL, 0);
	assert_string_equal(tn->name, "bob");
	/* By supplementary group: the first tenant in file order wins. */
	tn = kvd_conf_tenant_of(c, 7, 8, groups_carol, 3);
	assert_string_equal(tn->name, "bob");
	tn = kvd_conf_tenant_of(c, 7, 8, groups_carol, 2);
	assert_string_equal(tn->name, "carol");
	/* None. */
	assert_null(kvd_conf_tenant_of(c, 7, 8, groups_none, 2));
	assert_null(kvd_conf_tenant_of(c, 7, 8, NULL, 0));
	/* A gid is not a uid. */
	assert_null(kvd_conf_tenant_of(c, 2000, 8, NULL, 0));
}

static void test_config_quota(void **state)
{
	struct ctx *t = *state;
	const struct kvd_quota_conf *q;
	const struct kvd_conf *c = &t->conf;

	t_load_ok(t, lookup_conf);
	q = kvd_conf_quota(c, "alice", "meta-llama/Llama-3.1-8B");
	assert_non_null(q);
	assert_string_equal(q->tenant, "alice");
	assert_int_equal(q->min_pages, 2);
	assert_int_equal(q->max_pages, 20);
	assert_int_equal(q->line, 12);
	q = kvd_conf_quota(c, "bob", "meta-llama/Llama-3.1-8B");
	assert_non_null(q);
	assert_int_equal(q->max_pages, 30);
	q = kvd_conf_quota(c, "alice", "Qwen/Qwen2.5-7B");
	assert_non_null(q);
	assert_int_equal(q->min_pages, 0);
	assert_int_equal(q->max_pages, 0);
	assert_null(kvd_conf_quota(c, "bob", "Qwen/Qwen2.5-7B"));
	assert_null(kvd_conf_quota(c, "carol", "meta-llama/Llama-3.1-8B"));
	assert_null(kvd_conf_quota(c, "alice", "meta-llama"));
	assert_null(kvd_conf_quota(c, "alice/meta-llama", "Llama-3.1-8B"));
}

/* A conf freed twice, or never loaded, is fine. */
static void test_config_free(void **state)
{
	struct ctx *t = *state;
	struct kvd_conf zero = { 0 };

	t_load_ok(t, lookup_conf);
	kvd_conf_free(&t->conf);
	assert_memory_equal(&t->conf, &zero, sizeof(zero));
	kvd_conf_free(&t->conf);
	kvd_conf_free(NULL);
}

/* Many tenants and namespaces: the arrays grow. */
static void test_config_many(void **state)
{
	struct ctx *t = *state;
	size_t cap = 200 * 200, len = 0;
	char *text = malloc(cap);

	assert_non_null(text);
	for (unsigned i = 0; i < 100; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"[tenant t%u]\nuids = %u\nsecret = 0123456789abcdef\n"
					"[namespace t%u/org/model-%u]\nmax_pages = %u\n",
					i, 10000 + i, i, i, i + 1);
	t_load_ok(t, text);
	assert_int_equal(t->conf.nr_tenants, 100);
	assert_int_equal(t->conf.nr_quotas, 100);
	assert_string_equal(kvd_conf_tenant_of(&t->conf, 10077, 1, NULL, 0)->name,
			    "t77");
	assert_int_equal(kvd_conf_quota(&t->conf, "t99", "org/model-99")->max_pages,
			 100);
	free(text);
}

/* At most KVD_CONF_TENANTS_MAX tenants: the daemon has that many slots. */
static void test_config_too_many_tenants(void **state)
{
	struct ctx *t = *state;
	size_t cap = 80 * (KVD_CONF_TENANTS_MAX + 1), len = 0;
	char *text = malloc(cap), want[ERRLEN];

	assert_non_null(text);
	for (unsigned i = 0; i < KVD_CONF_TENANTS_MAX; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"[tenant t%u]\nuids = %u\nsecret = 0123456789abcdef\n",
					i, 10000 + i);
	t_load_ok(t, text);
	assert_int_equal(t->conf.nr_tenants, KVD_CONF_TENANTS_MAX);
	snprintf(text + len, cap - len, "[tenant one-more]\n");
	assert_int_equal(t_load(t, text), -EINVAL);
	snprintf(want, sizeof(want), "%s:%u: too many tenants (at most %d)",
		 t->path, 3 * KVD_CONF_TENANTS_MAX + 1, KVD_CONF_TENANTS_MAX);
	assert_string_equal(t->err, want);
	free(text);
}

/*
 * etc/kvd.conf, the example shipped with kvd, sets nothing as it is; with
 * every "#key = value" and "#[section]" line uncommented, it sets every
 * key and still parses (its user and group names replaced by this
 * host's). Skipped when not run from the top of the tree.
 */
#define EXAMPLE_CONF	"etc/kvd.conf"

static void test_config_example(void **state)
{
	struct ctx *t = *state;
	const struct kvd_conf *c = &t->conf;
	FILE *in = fopen(EXAMPLE_CONF, "r"), *out;
	char line[KVD_CONF_LINE_MAX + 2];

	if (!in)
		skip();
	assert_int_equal(kvd_conf_load(EXAMPLE_CONF, &t->conf, t->err,
				       sizeof(t->err)), 0);
	assert_false(c->has_pool_bytes || c->has_backend || c->has_socket ||
		     c->has_socket_mode || c->has_admin_socket ||
		     c->has_admin_socket_mode || c->has_admin_group ||
		     c->has_user || c->has_max_clients ||
		     c->has_max_namespaces || c->has_hugepages);
	assert_int_equal(c->nr_tenants, 0);
	assert_int_equal(c->nr_quotas, 0);

	out = fopen(t->path, "w");
	assert_non_null(out);
	while (fgets(line, sizeof(line), in)) {
		const char *s = line;

		if (s[0] == '#' && ((s[1] >= 'a' && s[1] <= 'z') || s[1] == '['))
			s++;
		if (!strncmp(s, "user ", 5))
			s = "user = root\n";
		else if (!strncmp(s, "admin_group ", 12))
			s = "admin_group = root\n";
		else if (!strncmp(s, "uids ", 5))
			s = "uids = root, 1001\n";
		else if (!strncmp(s, "gids ", 5))
			s = "gids = 4242\n";
		fputs(s, out);
	}
	fclose(in);
	assert_int_equal(fclose(out), 0);
	kvd_conf_free(&t->conf);
	if (kvd_conf_load(t->path, &t->conf, t->err, sizeof(t->err)))
		print_error("%s uncommented: %s\n", EXAMPLE_CONF, t->err);
	assert_string_equal(t->err, "");
	assert_true(c->has_pool_bytes && c->has_backend && c->has_socket &&
		    c->has_socket_mode && c->has_admin_socket &&
		    c->has_admin_socket_mode && c->has_admin_group &&
		    c->has_user && c->has_max_clients &&
		    c->has_max_namespaces && c->has_hugepages);
	/* The commented values are the defaults of the key table (config.c). */
	assert_int_equal(c->pool_bytes, GIB);
	assert_int_equal(c->backend, KVD_BACKEND_AUTO);
	assert_int_equal(c->socket_mode, 0666);
	assert_int_equal(c->admin_socket_mode, 0660);
	assert_int_equal(c->max_clients, 256);
	assert_int_equal(c->max_namespaces, 64);
	assert_false(c->hugepages);
	assert_int_equal(c->nr_tenants, 1);
	assert_int_equal(c->tenants[0].secret_len, 32);
	assert_int_equal(c->nr_quotas, 1);
	assert_string_equal(c->quotas[0].tenant, "research");
	assert_string_equal(c->quotas[0].model_id, "meta-llama/Llama-3.1-8B");
	assert_int_equal(c->quotas[0].max_context, 0);
	assert_int_equal(c->quotas[0].ctx_refused, 0);
	assert_int_equal(c->quotas[0].ctx_default.kind, KV_CTX_NONE);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, ctx_setup, ctx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_config_full_file),
		T(test_config_empty),
		T(test_config_values),
		T(test_config_context),
		T(test_config_context_sections),
		T(test_config_context_error_exact),
		T(test_config_users_groups),
		T(test_config_errors),
		T(test_config_error_exact),
		T(test_config_error_hides_secret),
		T(test_config_line_too_long),
		T(test_config_line_max_crlf),
		T(test_config_not_regular),
		T(test_config_missing_file),
		T(test_config_err_buffer),
		T(test_config_tenant_of),
		T(test_config_quota),
		T(test_config_free),
		T(test_config_many),
		T(test_config_too_many_tenants),
		T(test_config_example),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
