// SPDX-License-Identifier: MIT
/*
 * soak [-t SECONDS] [-s SEED]: the soak test (tests/soak/soak.c) for
 * SOAK_SECONDS, 60 by default; `make soak` runs it.
 */
#include <stdlib.h>

#include "soak.h"

int main(int argc, char **argv)
{
	return soak_main(argc, argv, getenv("SOAK_SECONDS"), 60);
}
