/* SPDX-License-Identifier: MIT */
/*
 * kvd for kvbench: a private one started on sockets in a temp dir,
 * and connecting to it (or to the kvd --socket names) with a model's
 * geometry.
 */
#ifndef KVB_KVD_H
#define KVB_KVD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <kv/kv.h>

#include "opts.h"

/* The tiers behind a private kvd's pool (kvd's units: 64M, 24G). */
struct bench_tiers {
	const char	*host_size;	/* kvd --host-tier-size; NULL: none */
	const char	*disk_size;	/* kvd --disk-tier-size; NULL: none */
	const char	*disk_path;	/* NULL: a file in the temp dir */
};

/* A kvd that kvbench started for itself, on sockets in a temp dir. */
struct bench_kvd {
	pid_t		pid;
	pid_t		owner;		/* only it stops kvd (not a fork) */
	char		dir[64];
	char		sock[108];
	char		admin[108];
	char		log[96];
	/* its disk tier: the file, the directory it is in (fio's too) */
	char		disk_path[KVB_PATH_MAX];
	char		disk_dir[KVB_PATH_MAX];
	bool		disk_ours;	/* made for this run: removed */
};

/*
 * bench_kvd_start - start kvd (@bin, NULL: beside kvbench) with a host
 * pool of @pool_size (kvd's units: 128M, 1G) and the tiers of @t behind
 * it (NULL: none) on sockets in a new temp dir; returns once it answers
 * on its admin socket. The kvd dies with kvbench (PR_SET_PDEATHSIG).
 * A disk tier file that did not exist before (the temp dir's, or a
 * --disk-tier-path not there yet) is unlinked as soon as kvd has it
 * open, so that it goes with kvd however kvbench ends; one that existed
 * is kvd's to take or refuse, and never removed. 0, or -1 after saying
 * why.
 */
int bench_kvd_start(struct bench_kvd *k, const char *bin,
		    const char *pool_size, const struct bench_tiers *t);
/*
 * bench_unlink_on_signal - remove @path (NULL: the last one given, no
 * more) if SIGINT, SIGTERM or SIGHUP ends kvbench before it does; one
 * path at a time (fio's file).
 */
void bench_unlink_on_signal(const char *path);
/* A new directory for sockets: $TMPDIR (if short enough) or /tmp. */
int bench_mkdtemp(char *dir, size_t len, const char *name);
/* SIGTERM, wait (SIGKILL after 5 s), remove the temp dir. */
void bench_kvd_stop(struct bench_kvd *k);
/* Drop every cached block of a running kvd (KV_ADMIN_EVICT). */
int bench_kvd_evict(const char *admin_path);
/* The admin socket beside a client socket, into @buf. */
int bench_admin_beside(const char *sock, char *buf, size_t len);
/* kv_connect with @geom, model @model; 0 or -1 after saying why. */
int bench_connect(const char *sock, const char *model,
		  const struct kv_geometry *geom, struct kv_client **c);
/* 1 layer, 1 KV head, head_dim 128, fp16, 16 tokens: 8 KiB blocks. */
struct kv_geometry bench_small_geom(void);
/*
 * bench_open - connect to o->socket, or to a private kvd with a pool of
 * @pool_size started in @k, with the small geometry as model @model.
 * 0, or -1 after saying why (nothing left running). bench_close undoes it.
 */
int bench_open(const struct kvb_opts *o, const char *pool_size,
	       const char *model, struct bench_kvd *k, struct kv_client **c);
void bench_close(const struct kvb_opts *o, struct bench_kvd *k,
		 struct kv_client *c);
/*
 * kvb_connect - connect as model @model of @o (its id and geometry,
 * o->socket, the ring sizes of the run); says why it cannot, as @who.
 */
int kvb_connect(const struct kvb_opts *o, unsigned model,
		struct kv_client **c, const char *who);

#endif /* KVB_KVD_H */
