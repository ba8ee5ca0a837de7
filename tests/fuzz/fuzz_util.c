// SPDX-License-Identifier: MIT
/* Helpers for every fuzz target (fuzz.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

const char *fuzz_memfd_path(unsigned slot, const void *data, size_t len)
{
	static char path[FUZZ_MEMFDS][64];
	static int fd[FUZZ_MEMFDS] = { -1, -1 };

	if (slot >= FUZZ_MEMFDS)
		return NULL;
	if (fd[slot] < 0) {
		fd[slot] = memfd_create("kvd-fuzz", MFD_CLOEXEC);
		if (fd[slot] < 0)
			return NULL;
		snprintf(path[slot], sizeof(path[slot]), "/proc/self/fd/%d",
			 fd[slot]);
	}
	/* Shrink first: a shorter input must not keep the last one's tail. */
	if (ftruncate(fd[slot], 0) ||
	    (len && pwrite(fd[slot], data, len, 0) != (ssize_t)len))
		return NULL;
	return path[slot];
}

void fuzz_bug(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FUZZ BUG at %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
