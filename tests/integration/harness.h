/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness: start a real kvd on sockets in a private
 * temporary directory, connect clients to it, stop it and clean up.
 * Exit codes follow automake: 0 pass, 1 fail, 77 skip.
 */
#ifndef KV_TEST_HARNESS_H
#define KV_TEST_HARNESS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <kv/kv.h>

struct t_kvd {
	pid_t	pid;
	char	dir[64];
	char	sock[128];
	char	admin[128];
	char	log[128];
};

#define T_FAIL(...) do {						\
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);		\
	fprintf(stderr, __VA_ARGS__);					\
	fputc('\n', stderr);						\
	exit(1);							\
} while (0)

#define T_ASSERT(cond) do {						\
	if (!(cond))							\
		T_FAIL("%s", #cond);					\
} while (0)

#define T_EQ(a, b) do {							\
	long long __a = (long long)(a), __b = (long long)(b);		\
	if (__a != __b)							\
		T_FAIL("%s == %lld, expected %s == %lld", #a, __a, #b, __b); \
} while (0)

/* Start kvd with extra arguments (NULL-terminated); waits for its socket. */
void t_kvd_start(struct t_kvd *k, const char *pool_size, ...);
/* Start kvd again on k's existing sockets (after a crash, say). */
void t_kvd_restart(struct t_kvd *k, const char *pool_size, ...);
/* Remove k's temporary directory. */
void t_cleanup_dir(struct t_kvd *k);
/* SIGTERM, wait; fails the test unless kvd exits 0 and removed its socket. */
void t_kvd_stop(struct t_kvd *k);
/* Connect with a small default geometry (32 KiB blocks) unless g given. */
/* Connect parameters for @k's socket, @model, t_geom(); the rest 0. */
void t_params(struct t_kvd *k, const char *model,
	      struct kv_connect_params *p);
int t_connect(struct t_kvd *k, const char *model, const struct kv_geometry *g,
	      struct kv_client **c);
struct kv_geometry t_geom(void);
/* Run "kvctl ARGS --json" against k; returns malloc'd stdout. */
char *t_kvctl(struct t_kvd *k, const char *args);
/* kvctl status --json once kvd has seen every client go (up to 3 s). */
char *t_status_idle(struct t_kvd *k);
/* Integer value of "key": in a JSON text (first occurrence), or -1. */
long long t_json_int(const char *json, const char *key);
/* Path of a built binary (kvd, kvctl, kvbench) next to the test. */
const char *t_bin(const char *name);

#endif
