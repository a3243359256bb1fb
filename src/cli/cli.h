/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Exit statuses of airlock itself; a command's own status passes through. */
#define EXIT_AIRLOCK_ERROR 125 /* bad option, missing image, setup failure */
#define EXIT_TIMED_OUT 124
#define EXIT_OOM 137

int cmd_sandbox(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
