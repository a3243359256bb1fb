/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock's own helper programs (the gateway, the checkpoint store): found
 * relative to the running binary (/proc/self/exe), never through PATH, and
 * opened before they are run so that what was checked is what runs.
 *
 * Where: the directory the build was configured with (LIBEXEC_DIR:
 * <libexecdir>/airlock, relative to the binary's directory unless
 * absolute), then the binary's own directory (a build tree, where every
 * program sits in src/cli). A helper must be a regular, executable file
 * owned by the binary's owner and writable by nobody else.
 */
#pragma once

#include <stddef.h>

#include "common/error.h"

#define LIBEXEC_PATH_MAX 4096

/*
 * Opens helper name (O_PATH | O_CLOEXEC) for execveat(fd, "", ...,
 * AT_EMPTY_PATH); returns the descriptor, or a negative errno with err
 * saying where it looked. ret_path (LIBEXEC_PATH_MAX bytes, may be NULL):
 * the path it was found at.
 */
int libexec_open(const char *name, char *ret_path, struct al_error *err);

/*
 * The same with the directory of the binary given (for tests): self is
 * the binary's path as /proc/self/exe would give it.
 */
int libexec_open_from(const char *self, const char *name, char *ret_path, struct al_error *err);
