/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Removes the tree at path (a file: the file) as whoever may have written
 * it: no link is followed, and a hostile depth is flattened rather than
 * exhausting descriptors or the stack. 0 when it is gone, or -errno. */
int rm_rf(const char *path);
/* The same for name in the directory dirfd (which may be O_PATH). */
int rm_rf_at(int dirfd, const char *name);
