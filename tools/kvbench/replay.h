/* SPDX-License-Identifier: MIT */
/* The replay of one engine process (replay.c). */
#ifndef KVB_REPLAY_H
#define KVB_REPLAY_H

#include "worker.h"

/* Its sequence ring, hash and token buffers, samples; -ENOMEM. */
int kvb_replay_init(struct worker *w);
/* Replay its share of the stream; 0, or -1 after saying why. */
int kvb_replay_run(struct worker *w);
/* A process failed: every waiting process stops. */
void kvb_turns_stop(struct kvb_shared *sh);

#endif /* KVB_REPLAY_H */
