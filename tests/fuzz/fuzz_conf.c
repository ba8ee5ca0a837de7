// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the kvd.conf parser, kvd_conf_load() (kvd/config.c).
 * The input is the file, read through a memfd's /proc/self/fd path; the
 * size of the error buffer comes from the input's length, so truncated
 * messages are tried too. Checked: one message on failure and none on
 * success; nothing left in the struct on failure; on success every value
 * within the ranges kvd.conf(5) gives, and the look-ups and
 * kvd_conf_free() sound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"

static bool all_zero(const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i])
			return false;
	return true;
}

static bool name_ok(const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	if (!n || n == size)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

static void check_tenant(const struct kvd_conf *conf, uint32_t t)
{
	const struct kvd_tenant_conf *tc = &conf->tenants[t];

	if (!name_ok(tc->name, sizeof(tc->name)))
		FUZZ_BUG("tenant %u: bad name", t);
	if (tc->secret_len < KVD_CONF_SECRET_MIN ||
	    tc->secret_len > KVD_CONF_SECRET_MAX)
		FUZZ_BUG("tenant %s: %u-byte secret", tc->name, tc->secret_len);
	if (!tc->nr_uids && !tc->nr_gids)
		FUZZ_BUG("tenant %s: no uids and no gids", tc->name);
	if (tc->max_pages && tc->min_pages > tc->max_pages)
		FUZZ_BUG("tenant %s: min_pages %u > max_pages %u", tc->name,
			 tc->min_pages, tc->max_pages);
	for (uint32_t u = 0; u < tc->nr_uids; u++) {
		const struct kvd_tenant_conf *o =
			kvd_conf_tenant_of(conf, tc->uids[u], UINT32_MAX - 1,
					   NULL, 0);

		/* a uid is in one tenant only */
		if (o != tc)
			FUZZ_BUG("uid %u of tenant %s maps to %s", tc->uids[u],
				 tc->name, o ? o->name : "none");
	}
	for (uint32_t j = 0; j < t; j++)
		if (!strcmp(conf->tenants[j].name, tc->name))
			FUZZ_BUG("tenant %s twice", tc->name);
}

static void check_conf(const struct kvd_conf *conf)
{
	if (conf->nr_tenants > KVD_CONF_TENANTS_MAX)
		FUZZ_BUG("%u tenants", conf->nr_tenants);
	if (conf->has_pool_bytes && conf->pool_bytes < (2U << 20))
		FUZZ_BUG("pool_size %llu",
			 (unsigned long long)conf->pool_bytes);
	if (conf->has_max_clients &&
	    (conf->max_clients < 1 || conf->max_clients > 1024))
		FUZZ_BUG("max_clients %u", conf->max_clients);
	if (conf->has_max_namespaces &&
	    (conf->max_namespaces < 1 || conf->max_namespaces > 1024))
		FUZZ_BUG("max_namespaces %u", conf->max_namespaces);
	if (conf->has_device && conf->device > 255)
		FUZZ_BUG("device %u", conf->device);
	if (conf->has_socket_mode && conf->socket_mode > 0777)
		FUZZ_BUG("socket_mode %o", conf->socket_mode);
	if (conf->has_admin_socket_mode && conf->admin_socket_mode & 0007)
		FUZZ_BUG("admin_socket_mode %o", conf->admin_socket_mode);
	if (conf->has_socket && (conf->socket[0] != '/' ||
	    !memchr(conf->socket, 0, sizeof(conf->socket))))
		FUZZ_BUG("socket path");
	if (conf->has_admin_socket && (conf->admin_socket[0] != '/' ||
	    !memchr(conf->admin_socket, 0, sizeof(conf->admin_socket))))
		FUZZ_BUG("admin_socket path");
	if (conf->has_socket && conf->has_admin_socket &&
	    !strcmp(conf->socket, conf->admin_socket))
		FUZZ_BUG("socket and admin_socket are one path");
	for (uint32_t t = 0; t < conf->nr_tenants; t++)
		check_tenant(conf, t);
	for (uint32_t i = 0; i < conf->nr_quotas; i++) {
		const struct kvd_quota_conf *q = &conf->quotas[i];
		const struct kvd_quota_conf *f;

		if (!memchr(q->model_id, 0, sizeof(q->model_id)) ||
		    !q->model_id[0])
			FUZZ_BUG("namespace %u: bad model id", i);
		if (q->max_pages && q->min_pages > q->max_pages)
			FUZZ_BUG("namespace %s/%s: min > max", q->tenant,
				 q->model_id);
		f = kvd_conf_quota(conf, q->tenant, q->model_id);
		if (f != q)
			FUZZ_BUG("namespace %s/%s twice, or not found",
				 q->tenant, q->model_id);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t errlens[] = { 256, 1, 24, 0 };
	size_t errlen = errlens[size % 4];
	struct kvd_conf conf;
	const char *path;
	char *err;
	int ret;

	path = fuzz_memfd_path(0, data, size);
	if (!path)
		abort();
	/* exactly errlen bytes: ASan sees a write past the message */
	err = errlen ? malloc(errlen) : NULL;
	if (errlen && !err)
		abort();
	memset(&conf, 0xa5, sizeof(conf));
	ret = kvd_conf_load(path, &conf, err, errlen);
	if (getenv("KVD_FUZZ_TRACE"))
		fprintf(stderr, "kvd_conf_load: %d %s\n", ret,
			errlen ? err : "");
	if (errlen && !memchr(err, 0, errlen))
		FUZZ_BUG("error message not NUL-terminated");
	if (ret) {
		if (ret != -EINVAL && ret != -ENOMEM)
			FUZZ_BUG("kvd_conf_load: %d", ret);
		if (errlen > 1 && !err[0])
			FUZZ_BUG("kvd_conf_load failed (%d) without a message",
				 ret);
		if (errlen && strchr(err, '\n'))
			FUZZ_BUG("error message holds a newline");
		if (!all_zero(&conf, sizeof(conf)))
			FUZZ_BUG("kvd_conf_load failed but left the struct set");
	} else {
		if (errlen && err[0])
			FUZZ_BUG("success with a message: %s", err);
		check_conf(&conf);
	}
	kvd_conf_free(&conf);
	if (!all_zero(&conf, sizeof(conf)))
		FUZZ_BUG("kvd_conf_free left the struct set");
	free(err);
	return 0;
}
