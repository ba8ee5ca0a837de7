// SPDX-License-Identifier: MIT
/*
 * The numbers a client is told (kv_pool_info: its client id and its
 * namespace's) say nothing of other clients or tenants: they are not
 * counters (client 1, 2, 3) nor slots (namespace 0, 1), yet each is
 * unique and kvctl finds a namespace by the number it shows.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define N	4

int main(void)
{
	struct kv_client *c[N];
	struct kv_pool_info info[N];
	static const char *model[N] = { "m0", "m0", "m1", "m2" };
	struct t_kvd k;
	char cmd[64], *js;

	t_kvd_start(&k, "64M", NULL);
	for (int i = 0; i < N; i++) {
		T_EQ(t_connect(&k, model[i], NULL, &c[i]), 0);
		T_EQ(kv_pool_info(c[i], &info[i]), 0);
	}
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			if (i == j)
				continue;
			T_ASSERT(info[i].client_id != info[j].client_id);
			/* the next connection is not this one's id + 1 */
			T_ASSERT(info[j].client_id != info[i].client_id + 1);
		}
	/* one model, one namespace number; other models, other numbers */
	T_EQ(info[0].ns_id, info[1].ns_id);
	T_ASSERT(info[2].ns_id != info[0].ns_id &&
		 info[3].ns_id != info[2].ns_id);
	T_ASSERT(info[2].ns_id != info[0].ns_id + 1 &&
		 info[3].ns_id != info[2].ns_id + 1);
	T_ASSERT(info[0].ns_id != 0 || info[2].ns_id != 1);
	/* kvctl knows them by those numbers */
	snprintf(cmd, sizeof(cmd), "prefix --tree --ns %u", info[2].ns_id);
	free(t_kvctl(&k, cmd));
	snprintf(cmd, sizeof(cmd), "evict --ns %u", info[3].ns_id);
	js = t_kvctl(&k, cmd);
	T_ASSERT(strstr(js, "\"model\": \"m2\""));
	free(js);
	for (int i = 0; i < N; i++)
		T_EQ(kv_disconnect(c[i]), 0);
	t_kvd_stop(&k);
	return 0;
}
