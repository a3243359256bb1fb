/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock doctor`: which kernel features the sandbox needs are here. */
#include "sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/parse.h"

struct check {
	const char *name;
	bool ok;
	char detail[256];
	const char *advice;
};

static bool file_contains(const char *path, const char *word)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (read_file_bounded(AT_FDCWD, path, 65536, &text, &len) < 0)
		return false;
	return strstr(text, word) != NULL;
}

static bool syscall_exists(long nr, ...)
{
	/* Called with arguments that are invalid on purpose: ENOSYS means
	 * the kernel lacks the call, anything else means it exists. */
	long r = syscall(nr, -1, NULL, 0, NULL, 0);
	return !(r < 0 && errno == ENOSYS);
}

int sbx_doctor(int out_fd)
{
	struct check c[16];
	size_t n = 0;
	struct utsname u;
	uname(&u);

	c[n] = (struct check){
		.name = "running as root",
		.ok = geteuid() == 0,
		.advice = "run airlock's sandbox commands as root (or through `airlock serve`)"
	};
	snprintf(c[n].detail, sizeof(c[n].detail), "euid %u", (unsigned)geteuid());
	n++;

	c[n] = (struct check){ .name = "kernel", .ok = true };
	snprintf(c[n].detail, sizeof(c[n].detail), "%s %s", u.sysname, u.release);
	n++;

	_cleanup_free_ char *max_userns = NULL;
	size_t len;
	uint64_t userns_max = 0;
	if (read_file_bounded(AT_FDCWD, "/proc/sys/user/max_user_namespaces", 64, &max_userns,
			      &len) == 0) {
		max_userns[strcspn(max_userns, "\n")] = '\0';
		if (parse_u64(max_userns, &userns_max) < 0)
			userns_max = 0;
	}
	bool userns = userns_max > 0;
	c[n] = (struct check){ .name = "user namespaces",
			       .ok = userns,
			       .advice = "sysctl -w user.max_user_namespaces=15000" };
	snprintf(c[n].detail, sizeof(c[n].detail), "max_user_namespaces=%s",
		 max_userns ? max_userns : "?");
	n++;

	c[n] = (struct check){ .name = "overlayfs",
			       .ok = file_contains("/proc/filesystems", "overlay"),
			       .advice = "modprobe overlay" };
	n++;

	c[n] = (struct check){ .name = "idmapped mounts (mount_setattr)",
			       .ok = syscall_exists(SYS_mount_setattr),
			       .advice =
				       "Linux 5.19 or newer is needed (idmapped overlay layers)" };
	n++;

	c[n] = (struct check){ .name = "new mount API (open_tree, move_mount)",
			       .ok = syscall_exists(SYS_open_tree) &&
				     syscall_exists(SYS_move_mount),
			       .advice = "Linux 5.2 or newer" };
	n++;

	c[n] = (struct check){ .name = "clone3 and pidfd",
			       .ok = syscall_exists(SYS_clone3) && syscall_exists(SYS_pidfd_open),
			       .advice = "Linux 5.3 or newer" };
	n++;

	c[n] = (struct check){ .name = "seccomp filters",
			       .ok = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 &&
				     file_contains("/proc/sys/kernel/seccomp/actions_avail",
						   "kill_process"),
			       .advice = "a kernel with CONFIG_SECCOMP_FILTER" };
	const struct scmp_version *v = seccomp_version();
	snprintf(c[n].detail, sizeof(c[n].detail), "libseccomp %u.%u.%u", v->major, v->minor,
		 v->micro);
	n++;

	bool v2 = sbx_cgroup_v2_usable();
	bool v1 = access("/sys/fs/cgroup/memory/cgroup.procs", F_OK) == 0 &&
		  access("/sys/fs/cgroup/pids/cgroup.procs", F_OK) == 0 &&
		  access("/sys/fs/cgroup/cpu/cgroup.procs", F_OK) == 0;
	c[n] = (struct check){ .name = "cgroups (memory, pids, cpu)",
			       .ok = v1 || v2,
			       .advice =
				       "mount cgroup2 at /sys/fs/cgroup with the memory, pids and "
				       "cpu controllers (or the v1 hierarchies)" };
	snprintf(c[n].detail, sizeof(c[n].detail), "%s",
		 v2 ? "cgroup v2 (CLONE_INTO_CGROUP)" :
		 v1 ? "cgroup v1 hierarchies" :
		      "none usable");
	n++;

	if (!v2 && v1)
		c[n++] = (struct check){
			.name = "cgroup v1 attach cost",
			.ok = true,
			.advice = NULL,
			.detail =
				"v1 moves each sandbox by pid, which waits for an RCU grace period "
				"(~10 ms when idle); cgroup v2 avoids it",
		};

	int missing = 0;
	for (size_t i = 0; i < n; i++) {
		dprintf(out_fd, "%-40s %s%s%s\n", c[i].name, c[i].ok ? "ok" : "MISSING",
			c[i].detail[0] ? "  " : "", c[i].detail);
		if (!c[i].ok) {
			missing++;
			if (c[i].advice)
				dprintf(out_fd, "%-40s -> %s\n", "", c[i].advice);
		}
	}
	dprintf(out_fd, "%s\n",
		missing ? "some features are missing: see the advice above" :
			  "everything the sandbox needs is present");
	return missing;
}
