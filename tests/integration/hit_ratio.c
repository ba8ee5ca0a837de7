// SPDX-License-Identifier: MIT
/*
 * The prefix cache's hit ratio as an operator sees it: kv_stats and
 * kvctl prefix/status count the full blocks looked up next to the hits,
 * with the ratio; and a model's counters outlive its namespace, freed
 * when it goes idle and its slot reused by another model, so that the
 * model coming back goes on counting where it stopped.
 */
#include <string.h>

#include "harness.h"

#define BT	16	/* t_geom()'s block_tokens */

static struct t_kvd k;

static void tokens(uint32_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = 11 + (uint32_t)i * 31;
}

/* The number after "key": in the row of @model in @json; -1 if none. */
static double field(const char *json, const char *model, const char *key)
{
	char pat[96];
	const char *row, *p;

	snprintf(pat, sizeof(pat), "\"model\": \"%s\"", model);
	row = strstr(json, pat);
	if (!row)
		return -1;
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(row, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* kvctl @cmd --json: @key of @model's row. */
static double kvctl_field(const char *cmd, const char *model, const char *key)
{
	char *js = t_kvctl(&k, cmd);
	double v = field(js, model, key);

	free(js);
	return v;
}

/* Open the 70-token prompt (4 full blocks looked up), commit, close. */
static size_t open_commit_close(struct kv_client *c, const uint32_t *p)
{
	struct kv_seq *s;
	size_t hit;

	T_EQ(kv_seq_open(c, p, 70, NULL, &s), 0);
	hit = kv_seq_hit_tokens(s);
	T_EQ(kv_seq_commit(s), 0);
	T_EQ(kv_seq_close(s), 0);
	return hit;
}

/* Two lookups, 0 then 4 of 4 blocks hit: 8 looked up, ratio 0.5. */
static void ratio_counted(struct kv_client *c, const uint32_t *p)
{
	struct kv_stats st;

	T_EQ(open_commit_close(c, p), 0);
	T_EQ(open_commit_close(c, p), 4 * BT);
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.lookups, 2);
	T_EQ(st.lookup_blocks, 8);
	T_EQ(st.hit_blocks, 4);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookups"), 2);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookup_blocks"), 8);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookup_tokens"), 8 * BT);
	T_EQ(kvctl_field("prefix", "ratio-a", "hit_blocks"), 4);
	T_EQ(kvctl_field("prefix", "ratio-a", "hit_ratio") * 1000, 500);
	T_EQ(kvctl_field("status", "ratio-a", "lookup_blocks"), 8);
	T_EQ(kvctl_field("status", "ratio-a", "hit_ratio") * 1000, 500);
}

int main(void)
{
	struct kv_client *a, *b;
	struct kv_stats st;
	uint32_t p[70];
	char *js;

	tokens(p, 70);
	t_kvd_start(&k, "32M", NULL);
	T_EQ(t_connect(&k, "ratio-a", NULL, &a), 0);
	ratio_counted(a, p);

	/* Nothing cached, nothing held: the last client's leaving frees it. */
	free(t_kvctl(&k, "evict"));
	T_EQ(kv_disconnect(a), 0);
	js = t_status_idle(&k);
	T_EQ(t_json_int(js, "nr_namespaces"), 0);
	free(js);

	/* Another model takes the freed slot and counts from zero (its
	 * number is a new one: kvd's numbers are not slots). */
	T_EQ(t_connect(&k, "ratio-b", NULL, &b), 0);
	js = t_kvctl(&k, "prefix");
	T_ASSERT(strstr(js, "\"model\": \"ratio-b\""));
	free(js);
	T_EQ(kvctl_field("prefix", "ratio-b", "lookup_blocks"), 0);

	/* The first model comes back: its counters as it left them. */
	T_EQ(t_connect(&k, "ratio-a", NULL, &a), 0);
	T_EQ(kv_stats(a, &st), 0);
	T_EQ(st.lookups, 2);
	T_EQ(st.lookup_blocks, 8);
	T_EQ(st.hit_blocks, 4);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookup_blocks"), 8);
	T_EQ(kvctl_field("prefix", "ratio-a", "hit_blocks"), 4);
	T_EQ(kvctl_field("status", "ratio-a", "hit_ratio") * 1000, 500);
	/* and goes on: one more lookup of 4 blocks, none cached now */
	T_EQ(open_commit_close(a, p), 0);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookup_blocks"), 12);
	T_EQ(kvctl_field("prefix", "ratio-a", "lookups"), 3);

	T_EQ(kv_disconnect(a), 0);
	T_EQ(kv_disconnect(b), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
