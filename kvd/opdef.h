/* SPDX-License-Identifier: MIT */
/*
 * The opcode table: one SQE checked and issued (opdef.c).
 */
#ifndef KVD_OPDEF_H
#define KVD_OPDEF_H

#include <stdint.h>

#include <kv/abi.h>

struct kvd;
struct kvd_client;

/* One opcode's SQEs and sampled service times (KV_ADMIN_OPS). */
struct kvd_op_stat {
	uint64_t	requests;
	uint64_t	errors;
	uint64_t	timed;
	uint64_t	timed_ns;
	uint64_t	bucket[KV_ADMIN_OP_BUCKETS];
};

/* 1 SQE in 64 of each opcode is timed: two clock reads are ~40 ns, a
 * NOP round trip ~300 ns, so timing each would show in it. */
#define KVD_OP_SAMPLE_SHIFT	6

/* opdef.c */
int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe);
const char *kvd_op_name(uint32_t opcode);
void kvd_op_stat_time(struct kvd_op_stat *s, uint64_t ns);

#endif /* KVD_OPDEF_H */
