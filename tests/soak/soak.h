/* SPDX-License-Identifier: MIT */
/*
 * The soak test (tests/soak/soak.c) as two calls, for the programs that
 * run it: soak (tests/soak/main.c) and the integration test soak_short.
 */
#ifndef KV_TEST_SOAK_H
#define KV_TEST_SOAK_H

#include <stdint.h>

/*
 * kvd and 8 clients for @seconds from @seed, then the books checked:
 * 0 when they balance, 1 otherwise (a broken harness step exits 1).
 */
int soak_run(unsigned seconds, uint64_t seed);
/*
 * Parse [-t SECONDS] [-s SEED] and soak_run(): @env (a SOAK_SECONDS
 * value, or NULL) is read before -t; 0 or nothing is @default_s.
 */
int soak_main(int argc, char **argv, const char *env, unsigned default_s);

#endif
