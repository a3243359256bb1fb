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
 * socket's family) are compared under a 32-bit mask, so setting high bits
 * cannot slip past the comparison.
 *
 * libseccomp compiles the rules once (in the supervisor, before anything
 * of the sandbox exists); the program it exports is checked here with a
 * small classic-BPF evaluator (non-native calls must be killed, a denied
 * call refused, an ordinary one allowed) and then loaded as it is, with
 * seccomp(2), by every command of the sandbox: what was checked is what
 * runs, and no command pays for libseccomp's probing and compiling.
 */
#include "sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef AF_NETLINK
#define AF_NETLINK 16
#endif
#ifndef SECCOMP_SET_MODE_FILTER
#define SECCOMP_SET_MODE_FILTER 1
#endif

DEFINE_CLEANUP_FUNC(void, seccomp_release)

/* Refused outright with EPERM. */
/* clang-format off */
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
/* clang-format on */

/* Refused with ENOSYS so that libc falls back to a call we can inspect. */
/* clang-format off */
static const char *const enosys[] = {
	"clone3", /* flags live in a struct seccomp cannot read */
	"openat2", /* mode lives in a struct seccomp cannot read */
};
/* clang-format on */

const char *const *sbx_seccomp_denied(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(denied);
	return denied;
}

const char *const *sbx_seccomp_enosys(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(enosys);
	return enosys;
}

/*
 * Calls newer than some libseccomp releases know, by the number every
 * architecture but alpha shares for them: a release that cannot name one
 * must not leave it unfiltered.
 */
static const struct {
	const char *name;
	int nr;
} newer_calls[] = {
	{ "fchmodat2", 452 },
};

static int resolve(const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr != __NR_SCMP_ERROR)
		return nr;
#if defined(__x86_64__) || defined(__aarch64__) || defined(__riscv) || defined(__i386__) || \
	defined(__arm__) || defined(__s390x__) || defined(__powerpc64__)
	for (size_t i = 0; i < ARRAY_SIZE(newer_calls); i++)
		if (strcmp(newer_calls[i].name, name) == 0)
			return newer_calls[i].nr;
#endif
	return __NR_SCMP_ERROR;
}

static int add_rule_name(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n_args,
			 const struct scmp_arg_cmp *args)
{
	int nr = resolve(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not on this architecture */
	int r = seccomp_rule_add_array(ctx, action, nr, n_args, args);
	/* A pseudo syscall (a name this architecture does not have) is not
	 * an error: there is nothing to filter. */
	if (r == -EOPNOTSUPP || r == -EDOM)
		return 0;
	return r;
}

#define MASK32 0xffffffffULL

static int add_rules(scmp_filter_ctx ctx)
{
	int r;
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
		{ "chmod", 1, -1 },	{ "fchmod", 1, -1 }, { "fchmodat", 2, -1 },
		{ "fchmodat2", 2, -1 }, { "mknod", 1, -1 },  { "mknodat", 2, -1 },
		{ "creat", 1, -1 },	{ "open", 2, 1 },    { "openat", 3, 2 },
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
				r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), mode_calls[i].name, n,
						  a);
				if (r < 0)
					return r;
				continue;
			}
			/* open/openat create with O_CREAT, or with O_TMPFILE
			 * (an unnamed file that linkat can name later). */
			const scmp_datum_t
				creating[] = { O_CREAT,
					       020000000 /* the kernel's O_TMPFILE bit */ };
			for (size_t c = 0; c < ARRAY_SIZE(creating); c++) {
				a[1] = (struct scmp_arg_cmp){
					.arg = (unsigned)mode_calls[i].flags_arg,
					.op = SCMP_CMP_MASKED_EQ,
					.datum_a = creating[c],
					.datum_b = creating[c]
				};
				r = add_rule_name(ctx, SCMP_ACT_ERRNO(EPERM), mode_calls[i].name, 2,
						  a);
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
	return 0;
}

/* ---- running a classic BPF program on a struct seccomp_data ---- */

/* clang-format off */
uint32_t sbx_bpf_run(const struct sock_filter *insns, size_t len, const struct seccomp_data *d)
{
	/* As the kernel's checker would refuse it: an invalid program is
	 * answered with 0, SECCOMP_RET_KILL_THREAD. */
	const unsigned char *data = (const unsigned char *)d;
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };
	if (len == 0 || len > BPF_MAXINSNS)
		return 0;
	for (size_t pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &insns[pc];
		uint32_t k = f->k;
		uint32_t src = BPF_SRC(f->code) == BPF_X ? x : k;
		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
		case BPF_LDX: {
			uint32_t v;
			switch (BPF_MODE(f->code)) {
			case BPF_ABS:
				/* seccomp_data is loaded in aligned native words */
				if (BPF_CLASS(f->code) != BPF_LD || BPF_SIZE(f->code) != BPF_W ||
				    (k & 3) || k > sizeof(*d) - 4)
					return 0;
				memcpy(&v, data + k, 4);
				break;
			case BPF_LEN:
				if (BPF_SIZE(f->code) != BPF_W)
					return 0;
				v = sizeof(*d);
				break;
			case BPF_IMM:
				v = k;
				break;
			case BPF_MEM:
				if (k >= BPF_MEMWORDS)
					return 0;
				v = mem[k];
				break;
			default:
				return 0;
			}
			if (BPF_CLASS(f->code) == BPF_LD)
				a = v;
			else
				x = v;
			break;
		}
		case BPF_ST:
		case BPF_STX:
			if (k >= BPF_MEMWORDS)
				return 0;
			mem[k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_ADD: a += src; break;
			case BPF_SUB: a -= src; break;
			case BPF_MUL: a *= src; break;
			case BPF_DIV:
				if (src == 0)
					return 0;
				a /= src;
				break;
			case BPF_MOD:
				if (src == 0)
					return 0;
				a %= src;
				break;
			case BPF_AND: a &= src; break;
			case BPF_OR: a |= src; break;
			case BPF_XOR: a ^= src; break;
			case BPF_LSH: a = src < 32 ? a << src : 0; break;
			case BPF_RSH: a = src < 32 ? a >> src : 0; break;
			case BPF_NEG: a = (uint32_t)-a; break;
			default: return 0;
			}
			break;
		case BPF_JMP: {
			size_t skip;
			if (BPF_OP(f->code) == BPF_JA) {
				skip = k;
			} else {
				bool t;
				switch (BPF_OP(f->code)) {
				case BPF_JEQ: t = a == src; break;
				case BPF_JGT: t = a > src; break;
				case BPF_JGE: t = a >= src; break;
				case BPF_JSET: t = (a & src) != 0; break;
				default: return 0;
				}
				skip = t ? f->jt : f->jf;
			}
			/* Jumps go forward only, and stay inside the program. */
			if (skip >= len - pc - 1)
				return 0;
			pc += skip;
			break;
		}
		case BPF_RET:
			if (BPF_RVAL(f->code) == BPF_K)
				return k;
			if (BPF_RVAL(f->code) == BPF_A)
				return a;
			return 0;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else if (BPF_MISCOP(f->code) == BPF_TXA)
				a = x;
			else
				return 0;
			break;
		default:
			return 0;
		}
	}
	return 0; /* fell off the end */
}
/* clang-format on */

/* ---- compile once, check, load ---- */

void sbx_seccomp_free(struct sbx_bpf *p)
{
	free(p->insns);
	p->insns = NULL;
	p->len = 0;
}

static uint32_t eval(const struct sbx_bpf *p, uint32_t arch, int nr)
{
	struct seccomp_data d = { .nr = nr, .arch = arch };
	return sbx_bpf_run(p->insns, p->len, &d);
}

/*
 * What the filter must do whatever libseccomp release made it: kill calls
 * of any other ABI, refuse a denied call, let an ordinary one through.
 */
static int check_program(const struct sbx_bpf *p, struct al_error *err)
{
	uint32_t native = seccomp_arch_native();
	int getpid_nr = (int)SYS_getpid, keyctl_nr = (int)SYS_keyctl;
	if (eval(p, native, getpid_nr) != SECCOMP_RET_ALLOW)
		return al_error_set(err, -EPROTO, "the seccomp filter refuses getpid()");
	if (eval(p, native, keyctl_nr) != (SECCOMP_RET_ERRNO | EPERM))
		return al_error_set(err, -EPROTO, "the seccomp filter lets keyctl() through");
	static const uint32_t foreign[] = { AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, AUDIT_ARCH_ARM,
					    AUDIT_ARCH_AARCH64, 0 };
	for (size_t i = 0; i < ARRAY_SIZE(foreign); i++) {
		if (foreign[i] == native)
			continue;
		for (int nr = 0; nr < 512; nr += 37)
			if (eval(p, foreign[i], nr) != SECCOMP_RET_KILL_PROCESS)
				return al_error_set(err, -EPROTO,
						    "the seccomp filter does not kill "
						    "system calls of architecture %#x",
						    foreign[i]);
	}
#ifdef __x86_64__
	/* x32: the x86_64 architecture value with bit 30 set in the number. */
	for (int nr = 0; nr < 1024; nr += 31)
		if (eval(p, native, nr | 0x40000000) != SECCOMP_RET_KILL_PROCESS)
			return al_error_set(err, -EPROTO,
					    "the seccomp filter does not kill x32 system calls");
#endif
	return 0;
}

int sbx_seccomp_compile(struct sbx_bpf *ret, struct al_error *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return al_error_set(err, -ENOMEM, "cannot build the seccomp filter");
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return al_error_set_errno(err, r,
					  "cannot build the seccomp filter (does this "
					  "kernel have SECCOMP_RET_KILL_PROCESS?)");
	r = add_rules(ctx);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot build the seccomp filter");
	_cleanup_close_ int fd = memfd_create("airlock-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "memfd_create");
	r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot export the seccomp filter");
	off_t size = lseek(fd, 0, SEEK_END);
	if (size < 0)
		return al_error_set_errno(err, -errno, "cannot export the seccomp filter");
	if (size == 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
	    size > (off_t)(BPF_MAXINSNS * sizeof(struct sock_filter)))
		return al_error_set(err, -EPROTO, "libseccomp exported a filter of %lld bytes",
				    (long long)size);
	_cleanup_free_ struct sock_filter *insns = malloc((size_t)size);
	if (!insns)
		return al_error_set(err, -ENOMEM, "out of memory");
	ssize_t n = pread(fd, insns, (size_t)size, 0);
	if (n != (ssize_t)size)
		return al_error_set_errno(err, n < 0 ? -errno : -EIO,
					  "cannot read the exported seccomp filter");
	struct sbx_bpf prog = { .insns = insns, .len = (unsigned short)(size / sizeof(*insns)) };
	r = check_program(&prog, err);
	if (r < 0)
		return r;
	prog.insns = TAKE_PTR(insns);
	*ret = prog;
	return 0;
}

int sbx_seccomp_install(const struct sbx_bpf *p)
{
	if (!p || !p->insns || p->len == 0)
		return -EINVAL;
	struct sock_fprog prog = { .len = p->len, .filter = p->insns };
	/* no_new_privs is already set by the caller. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return -errno;
	return 0;
}
