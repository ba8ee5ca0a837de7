// SPDX-License-Identifier: MIT
/*
 * The soak test (tests/soak/soak.c) for 7 s: 8 clients doing random
 * prefix-cache work with content checks, killed with SIGKILL and started
 * again at random; then kvctl check, no leaked block, no mismatch.
 * `make soak` runs the same for 60 s (SOAK_SECONDS); make test runs this
 * on both event loops and reads no SOAK_SECONDS.
 */
#include <stddef.h>

#include "../soak/soak.h"

int main(int argc, char **argv)
{
	return soak_main(argc, argv, NULL, 7);
}
