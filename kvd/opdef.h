/* SPDX-License-Identifier: MIT */
/*
 * The opcode table: one SQE checked and issued (opdef.c).
 */
#ifndef KVD_OPDEF_H
#define KVD_OPDEF_H

#include <kv/abi.h>

struct kvd;
struct kvd_client;

/* opdef.c */
int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe);

#endif /* KVD_OPDEF_H */
