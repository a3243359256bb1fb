/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POSIX shell quoting, for showing a command line to a person or handing it
 * to "sh -c". Words made only of safe characters are left as they are
 * (ls -la /tmp); anything else is single-quoted, with each ' written as
 * '\'' (it's -> 'it'\''s'). Shell reserved words are quoted too, so a word
 * can never become syntax. A NUL byte cannot be passed to a program as part
 * of an argument, so it is refused with -EINVAL. On any failure the buffer
 * is left as it was (-ENOBUFS when its maximum would be passed).
 */
#pragma once

#include <stddef.h>

#include "buf.h"

/* Appends one quoted word of len bytes. */
int quote_append(struct buf *out, const char *p, size_t len);

/* Appends one quoted word. */
int quote_append_str(struct buf *out, const char *s);

/* Appends a NULL-terminated argv as quoted words separated by spaces. */
int quote_argv(struct buf *out, const char *const *argv);
