/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox's system call filter. Default allow, with a deny list of
 * calls that widen kernel attack surface or reach beyond the sandbox, and
 * argument filters for the calls that are fine except for one use.
 * docs/sandbox.md lists every entry and why; keep the two in step.
 *
 * Calls from a non-native ABI (i386 via int 0x80, x32) kill the process:
 * a filter written for one syscall table says nothing about another.
 *
 * Integer arguments the kernel truncates to 32 bits (ioctl's request,
 * unshare's flags) are compared under a 32-bit mask, so setting high bits
 * cannot slip past the comparison.
 */
#include "sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>

#include "common/cleanup.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef AF_NETLINK
#define AF_NETLINK 16
#endif

DEFINE_CLEANUP_FUNC(void, seccomp_release)

/* Refused outright with EPERM. */
static const char *const denied[] = {
	/* kernel keyrings: not namespaced, a classic cross-container leak */
	"keyctl", "add_key", "request_key",
	/* in-kernel programs and tracing */
	"bpf", "perf_event_open", "lookup_dcookie",
	/* userfaultfd makes kernel races easy to win */
	"userfaultfd",
	/* the kernel itself */
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm",
	"uselib", "nfsservctl", "vhangup", "quotactl", "quotactl_fd",
	/* the mount table (the sandbox's mounts are fixed at creation) */
	"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsmount", "fsconfig", "fspick", "mount_setattr",
	/* entering other namespaces */
	"setns",
	/* io_uring: a large attack surface that also bypasses this filter */
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	/* file handles can name files outside the sandbox's mounts */
	"open_by_handle_at", "name_to_handle_at",
	/* the clock is shared with the host */
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
	/* memory policy and page moves across processes */
	"move_pages", "migrate_pages", "kcmp",
};

/* Refused with ENOSYS so that libc falls back to a call we can inspect. */
static const char *const enosys[] = {
	"clone3", /* flags live in a struct seccomp cannot read */
	"openat2", /* mode lives in a struct seccomp cannot read */
};

static int add_rule_name(scmp_filter_ctx ctx, uint32_t action, const char *name,
			 unsigned n_args, const struct scmp_arg_cmp *args)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not on this architecture */
	int r = seccomp_rule_add_array(ctx, action, nr, n_args, args);
	/* -EEXIST/-EACCES-style results for pseudo syscalls are not fatal */
	if (r == -EOPNOTSUPP || r == -EDOM)
		return 0;
	return r;
}

#define MASK32 0xffffffffULL

int sbx_seccomp_load(void)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return r;
	/* The filter must hold across exec and for every thread. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	if (r < 0)
		return r;

	for (size_t i = 0; i < ARRAY_SIZE(denied); i++) {
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), denied[i], 0, NULL);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < ARRAY_SIZE(enosys); i++) {
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(ENOSYS), enosys[i], 0, NULL);
		if (r < 0)
			return r;
	}

	/* Terminal input injection and console control. */
	const unsigned long bad_ioctls[] = { TIOCSTI, TIOCLINUX };
	for (size_t i = 0; i < ARRAY_SIZE(bad_ioctls); i++) {
		struct scmp_arg_cmp a = SCMP_A1(SCMP_CMP_MASKED_EQ, MASK32, bad_ioctls[i]);
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &a);
		if (r < 0)
			return r;
	}

	/* No new user namespaces, through unshare or clone. */
	{
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), "unshare", 1, &a);
		if (r < 0)
			return r;
		/* clone's flags are the first argument on x86_64 and most others. */
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &a);
		if (r < 0)
			return r;
	}

	/*
	 * No setuid or setgid bits on files the sandbox creates or changes:
	 * the workspace is shared with the host, where such a file would be a
	 * way up. (Mounts are nosuid too; this keeps the bits off the disk.)
	 */
	const struct {
		const char *name;
		unsigned mode_arg;
		int flags_arg; /* -1: always a creating call */
	} mode_calls[] = {
		{ "chmod", 1, -1 },  { "fchmod", 1, -1 },  { "fchmodat", 2, -1 },
		{ "fchmodat2", 2, -1 }, { "mknod", 1, -1 }, { "mknodat", 2, -1 },
		{ "creat", 1, -1 },  { "open", 2, 1 },     { "openat", 3, 2 },
	};
	const scmp_datum_t bits[] = { S_ISUID, S_ISGID };
	for (size_t i = 0; i < ARRAY_SIZE(mode_calls); i++) {
		for (size_t b = 0; b < ARRAY_SIZE(bits); b++) {
			struct scmp_arg_cmp a[2];
			unsigned n = 0;
			a[n++] = (struct scmp_arg_cmp){ .arg = mode_calls[i].mode_arg,
							.op = SCMP_CMP_MASKED_EQ,
							.datum_a = bits[b],
							.datum_b = bits[b] };
			if (mode_calls[i].flags_arg < 0) {
				r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), mode_calls[i].name, n, a);
				if (r < 0)
					return r;
				continue;
			}
			/* open/openat create with O_CREAT, or with O_TMPFILE
			 * (an unnamed file that linkat can name later). */
			const scmp_datum_t creating[] = { O_CREAT, 020000000 /* the kernel's O_TMPFILE bit */ };
			for (size_t c = 0; c < ARRAY_SIZE(creating); c++) {
				a[1] = (struct scmp_arg_cmp){ .arg = (unsigned)mode_calls[i].flags_arg,
							      .op = SCMP_CMP_MASKED_EQ,
							      .datum_a = creating[c],
							      .datum_b = creating[c] };
				r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), mode_calls[i].name, 2, a);
				if (r < 0)
					return r;
			}
		}
	}

	/*
	 * Socket families: only those that are namespaced and needed. vsock in
	 * particular reaches the host (or hypervisor) whatever the netns.
	 */
	/* (libseccomp takes one comparison per argument and rule, so the
	 * refused families are listed: everything but 1, 2, 10 and 16.) */
	for (scmp_datum_t fam = 0; fam < 17; fam++) {
		if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK)
			continue;
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, MASK32, fam);
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &a);
		if (r < 0)
			return r;
		if (fam != 0)
			continue;
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socketpair", 1, &a);
		if (r < 0)
			return r;
	}
	{
		/* Netlink for routing information only: the kernel's uevent
		 * broadcasts (and the rest) are host-wide. */
		struct scmp_arg_cmp nl[] = {
			SCMP_A0(SCMP_CMP_MASKED_EQ, MASK32, AF_NETLINK),
			SCMP_A2(SCMP_CMP_NE, 0 /* NETLINK_ROUTE */, 0),
		};
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 2, nl);
		if (r < 0)
			return r;
	}
	{
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_GE, 17, 0);
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &a);
		if (r < 0)
			return r;
		struct scmp_arg_cmp u = SCMP_A0(SCMP_CMP_GE, AF_UNIX + 1, 0);
		r = add_rule_name(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socketpair", 1, &u);
		if (r < 0)
			return r;
	}

	return seccomp_load(ctx);
}
