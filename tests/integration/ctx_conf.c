// SPDX-License-Identifier: MIT
/*
 * Context policies configured in kvd.conf, through WELCOME to kv_seq: a
 * namespace's max_context, its default policy (what kv_seq_open applies)
 * and the policies its model supports (others refused at open); the
 * lower of the engine's and the file's max_context; an opaque namespace
 * refusing window and sinks; a reload seen by new clients only; and a
 * client of ABI 3.2 still served, with the WELCOME it knows.
 */
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

static struct t_kvd k;
static char conf[64];

static void write_conf(unsigned uid, const char *win_policy)
{
	FILE *f = fopen(conf, "w");

	T_ASSERT(f);
	fprintf(f, "[tenant me]\nuids = %u\nsecret = ctx-conf-secret-0123456789\n"
		"[namespace me/win]\nmax_context = 128\n"
		"context_policy = %s\ncontext_policies = none, window\n"
		"[namespace me/snk]\ncontext_policy = sinks 4 28 bos\n",
		uid, win_policy);
	T_ASSERT(!fclose(f));
}

static struct kv_client *connect_ctx(const char *model, uint32_t max_context,
				     int opaque)
{
	struct kv_connect_params p;
	struct kv_client *c;
	char err[256] = "";

	t_params(&k, model, &p);
	p.max_context = max_context;
	if (opaque)
		p.geom = (struct kv_geometry){ .layers = 2, .kv_heads = 1,
			.run_bytes = 16384, .block_tokens = 16,
			.dtype = KV_DTYPE_OPAQUE };
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	if (kv_connect(&p, &c))
		T_FAIL("kv_connect %s: %s", model, err);
	return c;
}

static void expect_info(struct kv_client *c, uint32_t max, uint32_t refused,
			const char *def)
{
	struct kv_ctx_policy d;
	uint32_t m, r;
	char buf[64];

	T_EQ(kv_ctx_info(c, &m, &r, &d), 0);
	T_EQ(m, max);
	T_EQ(r, refused);
	T_ASSERT(kv_ctx_policy_format(&d, buf, sizeof(buf)) > 0);
	if (strcmp(buf, def))
		T_FAIL("default policy '%s', expected '%s'", buf, def);
}

static void expect_refused(struct kv_client *c, const char *text,
			   const char *why)
{
	uint32_t t[4] = { 1, 2, 3, 4 };
	struct kv_ctx_policy p;
	struct kv_seq *s;

	T_EQ(kv_ctx_policy_parse(text, &p), 0);
	T_EQ(kv_seq_open_policy(c, t, 4, NULL, &p, &s), -EINVAL);
	if (!strstr(kv_last_error(c), why))
		T_FAIL("%s: '%s' lacks '%s'", text, kv_last_error(c), why);
}

/* The default window slides under plain kv_seq_open. */
static void default_applies(struct kv_client *c, uint32_t window)
{
	uint32_t t[300];
	struct kv_seq_range r;
	struct kv_seq *s;

	for (int i = 0; i < 300; i++)
		t[i] = (uint32_t)i * 31 + 7;
	T_EQ(kv_seq_open(c, t, 20, NULL, &s), 0);
	for (int i = 20; i < 300; i++)
		T_EQ(kv_seq_append(s, &t[i], 1), 0);
	T_EQ(kv_seq_range(s, &r), 0);
	T_EQ(r.policy.kind, KV_CTX_WINDOW);
	T_EQ(r.policy.window, window);
	T_EQ(r.kept, window);
	T_ASSERT(r.nr_blocks <= window / 16 + 2);
	T_EQ(kv_seq_close(s), 0);
}

/* A HELLO of ABI 3.2 gets the 3.2 WELCOME, without ctx_default. */
static void old_client(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_hello h = { 0 };
	struct kv_welcome w;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ssize_t n;

	T_ASSERT(fd >= 0);
	T_ASSERT(strlen(k.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, k.sock, strlen(k.sock) + 1);
	T_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	h.magic = KV_MAGIC;
	h.abi_major = KV_ABI_MAJOR;
	h.abi_minor = 2;
	h.type = KV_MSG_HELLO;
	h.size = sizeof(h);
	h.sq_entries = 16;
	h.data_bytes = 4096;
	strcpy(h.model_id, "win");
	h.geom = t_geom();
	T_EQ(send(fd, &h, sizeof(h), 0), sizeof(h));
	memset(&w, 0, sizeof(w));
	n = recv(fd, &w, sizeof(w), 0);	/* fds, if any, are closed */
	T_EQ(n, KV_WELCOME_SIZE_3_2);
	T_EQ(w.size, KV_WELCOME_SIZE_3_2);
	T_EQ(w.status, 0);
	close(fd);
}

int main(void)
{
	struct kv_client *a, *b, *c, *o, *x, *s;
	int fd;

	snprintf(conf, sizeof(conf), "/tmp/kvd-ctx.XXXXXX");
	fd = mkstemp(conf);
	T_ASSERT(fd >= 0);
	close(fd);
	write_conf(getuid(), "window 40");
	t_kvd_start(&k, "32M", "--config", conf, NULL);

	a = connect_ctx("win", 0, 0);
	expect_info(a, 128, 1U << KV_CTX_TRUNCATE | 1U << KV_CTX_SINKS,
		    "window 40");
	default_applies(a, 40);
	expect_refused(a, "sinks 4 20", "does not support");
	expect_refused(a, "truncate", "does not support");
	expect_refused(a, "window 129", "above max_context");
	{
		uint32_t t[130] = { 0 };
		struct kv_ctx_policy none = { 0 };
		struct kv_seq *q;

		T_EQ(kv_seq_open_policy(a, t, 129, NULL, &none, &q), -E2BIG);
		T_EQ(kv_seq_open_policy(a, t, 128, NULL, &none, &q), 0);
		T_EQ(kv_seq_append(q, t, 1), -E2BIG);
		T_EQ(kv_seq_close(q), 0);
	}

	b = connect_ctx("win", 64, 0);		/* the engine's limit is lower */
	expect_info(b, 64, 1U << KV_CTX_TRUNCATE | 1U << KV_CTX_SINKS,
		    "window 40");
	c = connect_ctx("win", 32, 0);		/* the default no longer fits */
	{
		uint32_t t[4] = { 1, 2, 3, 4 };
		struct kv_seq *q;

		T_EQ(kv_seq_open(c, t, 4, NULL, &q), -EINVAL);
		T_ASSERT(strstr(kv_last_error(c), "above max_context"));
	}

	o = connect_ctx("win", 0, 1);		/* opaque: no masks */
	expect_info(o, 128, 1U << KV_CTX_TRUNCATE | 1U << KV_CTX_SINKS |
			    1U << KV_CTX_WINDOW, "none");
	{	/* kvctl quota shows what a client connecting now gets */
		char *js = t_kvctl(&k, "quota");

		if (!strstr(js, "\"context_policy\": \"window 40\"") ||
		    !strstr(js, "\"context_policies\": \"none,window\"") ||
		    !strstr(js, "\"max_context\": 128"))
			T_FAIL("kvctl quota --json: %s", js);
		free(js);
	}
	x = connect_ctx("other", 0, 0);		/* no section: nothing */
	expect_info(x, 0, 0, "none");
	s = connect_ctx("snk", 0, 0);
	expect_info(s, 0, 0, "sinks 4 28 bos");

	/* reload: new clients see it, connected ones keep theirs */
	write_conf(getuid(), "window 20");
	free(t_kvctl(&k, "reload"));
	kv_disconnect(b);
	b = connect_ctx("win", 0, 0);
	expect_info(b, 128, 1U << KV_CTX_TRUNCATE | 1U << KV_CTX_SINKS,
		    "window 20");
	default_applies(b, 20);
	default_applies(a, 40);

	old_client();
	kv_disconnect(s);
	kv_disconnect(x);
	kv_disconnect(o);
	kv_disconnect(c);
	kv_disconnect(b);
	kv_disconnect(a);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	unlink(conf);
	printf("ctx_conf: ok\n");
	return 0;
}
