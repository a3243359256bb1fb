/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scope-bound ownership. A variable declared with one of these attributes
 * is released when it leaves scope; TAKE_PTR / TAKE_FD hand ownership on
 * and leave the variable empty so nothing is released twice.
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void freep(void *p)
{
	free(*(void **)p);
}

static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

/* Frees a NULL-terminated array of strings and the array itself. */
static inline void strv_free(char **v)
{
	if (!v)
		return;
	for (char **s = v; *s; s++)
		free(*s);
	free(v);
}

static inline void strv_freep(char ***v)
{
	strv_free(*v);
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_strv_ _cleanup_(strv_freep)

#define TAKE_PTR(p)                         \
	({                                  \
		__typeof__(p) _taken = (p); \
		(p) = NULL;                 \
		_taken;                     \
	})

#define TAKE_FD(fd)                   \
	({                            \
		int _taken_fd = (fd); \
		(fd) = -1;            \
		_taken_fd;            \
	})

/* Defines name##p(type **) that calls func(*p) when *p is not NULL. */
#define DEFINE_CLEANUP_FUNC(type, func)      \
	static inline void func##p(type **p) \
	{                                    \
		if (*p)                      \
			func(*p);            \
	}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Closes fd and returns -1, for "fd = safe_close(fd);". */
static inline int safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -1;
}
