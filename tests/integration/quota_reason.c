// SPDX-License-Identifier: MIT
/*
 * A kv_seq call refused by a quota says which one: kv_last_error() names
 * the namespace's or the tenant's max_pages, not a bare "Disk quota
 * exceeded", and kvd logs the refusal with the tenant and namespace.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define BT	16	/* t_geom(): 16 tokens a block, 64 blocks a page */

static struct t_kvd k;

static void write_conf(const char *path)
{
	FILE *f = fopen(path, "w");

	T_ASSERT(f);
	T_ASSERT(fprintf(f, "[tenant quotee]\nuids = %u\n"
			 "secret = quota-reason-0123456789\nmax_pages = 3\n"
			 "[namespace quotee/small]\nmax_pages = 1\n",
			 (unsigned)geteuid()) > 0);
	T_ASSERT(!fclose(f));
}

static void tokens(uint32_t *t, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = seed * 7919u + (uint32_t)i;
}

/* kvd's log has a line with every one of @words. */
static int log_has(const char *a, const char *b, const char *c)
{
	char line[512];
	FILE *f = fopen(k.log, "r");
	int found = 0;

	T_ASSERT(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, a) && strstr(line, b) && strstr(line, c);
	fclose(f);
	return found;
}

/* Namespace "small" at its max_pages: one page, 64 blocks. */
static void namespace_quota(void)
{
	static uint32_t t[64 * BT + BT];
	struct kv_client *c;
	struct kv_seq *s, *s2;

	tokens(t, sizeof(t) / sizeof(t[0]), 1);
	T_EQ(t_connect(&k, "small", NULL, &c), 0);
	T_EQ(kv_last_error(c)[0], 0);
	T_EQ(kv_seq_open(c, t, 64 * BT, NULL, &s), 0);	/* the whole page */
	T_EQ(kv_seq_append(s, t + 64 * BT, BT), -EDQUOT);
	fprintf(stderr, "kv_last_error: %s\n", kv_last_error(c));
	T_ASSERT(strstr(kv_last_error(c), "kv_seq_append: namespace quota"));
	T_ASSERT(strstr(kv_last_error(c), "max_pages (1 pages)"));
	T_EQ(kv_seq_open(c, t, BT, NULL, &s2), -EDQUOT);
	T_ASSERT(strstr(kv_last_error(c), "kv_seq_open: namespace quota"));
	T_ASSERT(log_has("refused (EDQUOT)", "tenant quotee, namespace",
			 "(small) at the namespace's max_pages (1)"));
	T_EQ(kv_seq_close(s), 0);
	T_EQ(kv_disconnect(c), 0);
}

/* The tenant's 3 pages: "small" keeps its one (cached), "big" takes 2. */
static void tenant_quota(void)
{
	static uint32_t t[2 * 64 * BT + BT];
	struct kv_client *c;
	struct kv_seq *s;

	tokens(t, sizeof(t) / sizeof(t[0]), 2);
	T_EQ(t_connect(&k, "big", NULL, &c), 0);
	T_EQ(kv_seq_open(c, t, 2 * 64 * BT, NULL, &s), 0);
	T_EQ(kv_seq_append(s, t + 2 * 64 * BT, BT), -EDQUOT);
	fprintf(stderr, "kv_last_error: %s\n", kv_last_error(c));
	T_ASSERT(strstr(kv_last_error(c), "kv_seq_append: tenant quota"));
	T_ASSERT(strstr(kv_last_error(c), "max_pages (3 pages)"));
	T_ASSERT(log_has("refused (EDQUOT)", "tenant quotee, namespace",
			 "(big) at the tenant's max_pages (3)"));
	T_EQ(kv_seq_close(s), 0);
	T_EQ(kv_disconnect(c), 0);
}

int main(void)
{
	char conf[] = "/tmp/kvd-quota-conf.XXXXXX";
	int fd = mkstemp(conf);

	T_ASSERT(fd >= 0);
	close(fd);
	write_conf(conf);
	t_kvd_start(&k, "32M", "--config", conf, NULL);
	namespace_quota();
	tenant_quota();
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	unlink(conf);
	return 0;
}
