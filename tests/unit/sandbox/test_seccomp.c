/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The seccomp filter, checked on the program itself: the filter is compiled
 * exactly as a sandbox compiles it, and every deny-list entry, argument
 * rule and foreign ABI is evaluated on the exported BPF (what the kernel
 * loads). This proves each entry is the filter's doing whatever the host's
 * kernel would answer by itself. A last test loads the program into a child
 * and checks that the kernel answers as the evaluator says, for calls that
 * are harmless should the filter be missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "sandbox/internal.h"

#define ALLOW SECCOMP_RET_ALLOW
#define KILL SECCOMP_RET_KILL_PROCESS
#define EPERM_ (SECCOMP_RET_ERRNO | EPERM)
#define ENOSYS_ (SECCOMP_RET_ERRNO | ENOSYS)
#define EAFNO_ (SECCOMP_RET_ERRNO | EAFNOSUPPORT)

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#define O_TMPFILE_BIT 020000000

static struct sbx_bpf prog;

static int setup(void **state)
{
	struct al_error err = { 0 };
	int r = sbx_seccomp_compile(&prog, &err);
	if (r < 0) {
		print_error("compile: %s\n", al_error_message(&err));
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	sbx_seccomp_free(&prog);
	return 0;
}

static uint32_t run(uint32_t arch, int nr, const uint64_t args[6])
{
	struct seccomp_data d = { .nr = nr, .arch = arch };
	if (args)
		memcpy(d.args, args, sizeof(d.args));
	return sbx_bpf_run(prog.insns, prog.len, &d);
}

static uint32_t native(void)
{
	return seccomp_arch_native();
}

static int nr_of(const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);
	return nr;
}

/* ---- the evaluator itself, on programs whose meaning is known ---- */

static void test_evaluator(void **state)
{
	struct seccomp_data d = { .nr = 5, .arch = 7, .args = { 0x100000002ULL } };
	/* A = nr; if A == 5 return 11 else return 22 */
	struct sock_filter p1[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 5, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 11),
		BPF_STMT(BPF_RET | BPF_K, 22),
	};
	assert_int_equal(sbx_bpf_run(p1, 4, &d), 11);
	d.nr = 6;
	assert_int_equal(sbx_bpf_run(p1, 4, &d), 22);
	/* 64-bit argument halves are native words: low at +0, high at +4 on
	 * little-endian, the reverse on big-endian. */
	uint32_t lo_off = offsetof(struct seccomp_data, args[0]);
	uint32_t hi_off = lo_off + 4;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	lo_off += 4;
	hi_off -= 4;
#endif
	struct sock_filter p2[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, hi_off),
		BPF_STMT(BPF_ST, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, lo_off),
		BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 4),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_MEM, 3),
		BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),
		BPF_STMT(BPF_RET | BPF_A, 0),
	};
	assert_int_equal(sbx_bpf_run(p2, 8, &d), (2u << 4) + 1);
	/* JSET and JGT/JGE with X */
	struct sock_filter p3[] = {
		BPF_STMT(BPF_LDX | BPF_IMM, 4),
		BPF_STMT(BPF_LD | BPF_IMM, 6),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_X, 0, 0, 3),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_X, 0, 0, 2),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 7, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 1),
		BPF_STMT(BPF_RET | BPF_K, 2),
	};
	assert_int_equal(sbx_bpf_run(p3, 7, &d), 1);
	/* Invalid programs answer 0 (kill): a jump past the end, a load out
	 * of the data, a misaligned load, falling off the end. */
	struct sock_filter bad1[] = { BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0),
				      BPF_STMT(BPF_RET | BPF_K, ALLOW) };
	assert_int_equal(sbx_bpf_run(bad1, 2, &d), 0);
	struct sock_filter bad2[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, sizeof(d)),
				      BPF_STMT(BPF_RET | BPF_K, ALLOW) };
	assert_int_equal(sbx_bpf_run(bad2, 2, &d), 0);
	struct sock_filter bad3[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
				      BPF_STMT(BPF_RET | BPF_K, ALLOW) };
	assert_int_equal(sbx_bpf_run(bad3, 2, &d), 0);
	struct sock_filter bad4[] = { BPF_STMT(BPF_LD | BPF_IMM, 1) };
	assert_int_equal(sbx_bpf_run(bad4, 1, &d), 0);
	assert_int_equal(sbx_bpf_run(p1, 0, &d), 0);
}

/* ---- non-native ABIs ---- */

static void test_foreign_abis_killed(void **state)
{
	const uint32_t arches[] = { AUDIT_ARCH_I386,	AUDIT_ARCH_X86_64,
				    AUDIT_ARCH_ARM,	AUDIT_ARCH_AARCH64,
				    AUDIT_ARCH_PPC64LE, AUDIT_ARCH_S390X,
				    AUDIT_ARCH_RISCV64, 0,
				    0xffffffff };
	unsigned checked = 0;
	for (size_t i = 0; i < ARRAY_SIZE(arches); i++) {
		if (arches[i] == native())
			continue;
		/* Every number: i386's getpid (20), socketcall (102), ... */
		for (int nr = 0; nr < 1024; nr++) {
			uint32_t a = run(arches[i], nr, NULL);
			if (a != KILL)
				fail_msg("arch %#x nr %d: action %#x, not kill", arches[i], nr, a);
			checked++;
		}
	}
	assert_true(checked > 1024);
#ifdef __x86_64__
	/* x32: the x86_64 architecture with bit 30 in the number; its own
	 * numbers (512 and up) and the shared ones. */
	for (int nr = 0; nr < 1024; nr++) {
		uint32_t a = run(AUDIT_ARCH_X86_64, nr | 0x40000000, NULL);
		if (a != KILL)
			fail_msg("x32 nr %d: action %#x, not kill", nr, a);
	}
	/* i386 getpid through int 0x80, the live probe's call. */
	assert_int_equal(run(AUDIT_ARCH_I386, 20, NULL), KILL);
#else
	print_message("# not x86_64: no x32 ABI to check\n");
#endif
}

/* ---- the deny list ---- */

/* The test's own copy of docs/sandbox.md's list: a name added to the code
 * without a test here fails test_deny_list_covered. */
/* clang-format off */
static const struct {
	const char *name;
	uint32_t action;
} expected_whole[] = {
	{ "keyctl", EPERM_ },	     { "add_key", EPERM_ },	     { "request_key", EPERM_ },
	{ "bpf", EPERM_ },	     { "perf_event_open", EPERM_ },  { "lookup_dcookie", EPERM_ },
	{ "userfaultfd", EPERM_ },    { "kexec_load", EPERM_ },	     { "kexec_file_load", EPERM_ },
	{ "init_module", EPERM_ },    { "finit_module", EPERM_ },    { "delete_module", EPERM_ },
	{ "create_module", EPERM_ },  { "reboot", EPERM_ },	     { "swapon", EPERM_ },
	{ "swapoff", EPERM_ },	     { "acct", EPERM_ },	     { "syslog", EPERM_ },
	{ "iopl", EPERM_ },	     { "ioperm", EPERM_ },	     { "uselib", EPERM_ },
	{ "nfsservctl", EPERM_ },     { "vhangup", EPERM_ },	     { "quotactl", EPERM_ },
	{ "quotactl_fd", EPERM_ },    { "mount", EPERM_ },	     { "umount", EPERM_ },
	{ "umount2", EPERM_ },	     { "pivot_root", EPERM_ },	     { "move_mount", EPERM_ },
	{ "open_tree", EPERM_ },      { "fsopen", EPERM_ },	     { "fsmount", EPERM_ },
	{ "fsconfig", EPERM_ },	     { "fspick", EPERM_ },	     { "mount_setattr", EPERM_ },
	{ "setns", EPERM_ },	     { "io_uring_setup", EPERM_ },   { "io_uring_enter", EPERM_ },
	{ "io_uring_register", EPERM_ }, { "open_by_handle_at", EPERM_ },
	{ "name_to_handle_at", EPERM_ }, { "settimeofday", EPERM_ },  { "clock_settime", EPERM_ },
	{ "clock_adjtime", EPERM_ },  { "adjtimex", EPERM_ },	     { "stime", EPERM_ },
	{ "move_pages", EPERM_ },     { "migrate_pages", EPERM_ },   { "kcmp", EPERM_ },
	{ "clone3", ENOSYS_ },	     { "openat2", ENOSYS_ },
};
/* clang-format on */

/* Argument patterns a whole-call rule must not care about. */
static const uint64_t arg_patterns[][6] = {
	{ 0, 0, 0, 0, 0, 0 },
	{ ~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL },
	{ 1, 2, 3, 4, 5, 6 },
	{ 0x100000000ULL, 0x80000000ULL, 0xdeadbeefcafeULL, 0x7fffffffULL, 17, 0 },
};

static void test_deny_list_covered(void **state)
{
	size_t n;
	const char *const *names = sbx_seccomp_denied(&n);
	assert_true(n >= 40);
	for (int list = 0; list < 2; list++) {
		if (list == 1)
			names = sbx_seccomp_enosys(&n);
		for (size_t i = 0; i < n; i++) {
			bool found = false;
			for (size_t j = 0; j < ARRAY_SIZE(expected_whole); j++)
				found |= strcmp(names[i], expected_whole[j].name) == 0;
			if (!found)
				fail_msg("%s is refused by the filter but not checked here",
					 names[i]);
		}
	}
}

static void test_every_entry_refused(void **state)
{
	unsigned proven = 0, absent = 0;
	for (size_t i = 0; i < ARRAY_SIZE(expected_whole); i++) {
		int nr = nr_of(expected_whole[i].name);
		if (nr < 0) {
			/* libseccomp's negative pseudo number: no such call here. */
			print_message("# %s: no such system call on this architecture\n",
				      expected_whole[i].name);
			absent++;
			continue;
		}
		for (size_t p = 0; p < ARRAY_SIZE(arg_patterns); p++) {
			uint32_t a = run(native(), nr, arg_patterns[p]);
			if (a != expected_whole[i].action)
				fail_msg("%s (nr %d), pattern %zu: action %#x, want %#x",
					 expected_whole[i].name, nr, p, a,
					 expected_whole[i].action);
		}
		proven++;
	}
	print_message("# %u entries refused by the filter, %u absent on this architecture\n",
		      proven, absent);
	assert_true(proven >= 40);
}

struct arg_case {
	const char *what;
	const char *name;
	uint64_t args[6];
	uint32_t action;
};

#define HI 0x100000000ULL

static const struct arg_case arg_cases[] = {
	{ "TIOCSTI", "ioctl", { 0, TIOCSTI }, EPERM_ },
	{ "TIOCSTI high bits", "ioctl", { 0, TIOCSTI | HI }, EPERM_ },
	{ "TIOCSTI all high bits", "ioctl", { 5, TIOCSTI | 0xffffffff00000000ULL }, EPERM_ },
	{ "TIOCLINUX", "ioctl", { 0, TIOCLINUX }, EPERM_ },
	{ "TCGETS", "ioctl", { 0, TCGETS }, ALLOW },
	{ "FIONREAD", "ioctl", { 3, FIONREAD }, ALLOW },
	{ "unshare user", "unshare", { CLONE_NEWUSER }, EPERM_ },
	{ "unshare user+mnt", "unshare", { CLONE_NEWUSER | CLONE_NEWNS }, EPERM_ },
	{ "unshare user high bits", "unshare", { CLONE_NEWUSER | HI }, EPERM_ },
	{ "unshare mnt", "unshare", { CLONE_NEWNS }, ALLOW },
	{ "clone user", "clone", { CLONE_NEWUSER | SIGCHLD }, EPERM_ },
	{ "clone thread",
	  "clone",
	  { CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM },
	  ALLOW },
	{ "fork-like clone", "clone", { SIGCHLD }, ALLOW },
	{ "chmod setuid", "chmod", { 0, S_ISUID | 0755 }, EPERM_ },
	{ "chmod setgid", "chmod", { 0, S_ISGID | 0755 }, EPERM_ },
	{ "chmod setuid high", "chmod", { 0, S_ISUID | HI }, EPERM_ },
	{ "chmod plain", "chmod", { 0, 0755 }, ALLOW },
	{ "chmod sticky", "chmod", { 0, 01777 }, ALLOW },
	{ "fchmod setuid", "fchmod", { 3, S_ISUID | 0700 }, EPERM_ },
	{ "fchmod setgid", "fchmod", { 3, S_ISGID | 0700 }, EPERM_ },
	{ "fchmod plain", "fchmod", { 3, 0644 }, ALLOW },
	{ "fchmodat setuid", "fchmodat", { AT_FDCWD, 0, S_ISUID | 0755 }, EPERM_ },
	{ "fchmodat setgid", "fchmodat", { AT_FDCWD, 0, S_ISGID }, EPERM_ },
	{ "fchmodat plain", "fchmodat", { AT_FDCWD, 0, 0600 }, ALLOW },
	{ "fchmodat2 setuid", "fchmodat2", { AT_FDCWD, 0, S_ISUID | 0755, 0 }, EPERM_ },
	{ "fchmodat2 setgid", "fchmodat2", { AT_FDCWD, 0, S_ISGID | 0755, 0 }, EPERM_ },
	{ "fchmodat2 plain", "fchmodat2", { AT_FDCWD, 0, 0755, 0 }, ALLOW },
	{ "mknod setuid", "mknod", { 0, S_IFREG | S_ISUID | 0755 }, EPERM_ },
	{ "mknod setgid", "mknod", { 0, S_IFREG | S_ISGID }, EPERM_ },
	{ "mknod fifo", "mknod", { 0, S_IFIFO | 0644 }, ALLOW },
	{ "mknodat setuid", "mknodat", { AT_FDCWD, 0, S_IFREG | S_ISUID }, EPERM_ },
	{ "mknodat setgid", "mknodat", { AT_FDCWD, 0, S_IFREG | S_ISGID }, EPERM_ },
	{ "mknodat fifo", "mknodat", { AT_FDCWD, 0, S_IFIFO | 0600 }, ALLOW },
	{ "creat setuid", "creat", { 0, S_ISUID | 0755 }, EPERM_ },
	{ "creat setgid", "creat", { 0, S_ISGID | 0755 }, EPERM_ },
	{ "creat plain", "creat", { 0, 0644 }, ALLOW },
	{ "open O_CREAT setuid", "open", { 0, O_CREAT | O_WRONLY, S_ISUID | 0755 }, EPERM_ },
	{ "open O_CREAT setgid", "open", { 0, O_CREAT | O_RDWR, S_ISGID | 0755 }, EPERM_ },
	{ "open O_TMPFILE setuid",
	  "open",
	  { 0, O_TMPFILE_BIT | O_DIRECTORY | O_WRONLY, S_ISUID },
	  EPERM_ },
	{ "open O_TMPFILE setgid", "open", { 0, O_TMPFILE_BIT | O_WRONLY, S_ISGID | 0600 }, EPERM_ },
	{ "open O_CREAT plain", "open", { 0, O_CREAT | O_WRONLY, 0644 }, ALLOW },
	{ "open no O_CREAT, mode ignored", "open", { 0, O_RDONLY, S_ISUID | 0755 }, ALLOW },
	{ "openat O_CREAT setuid",
	  "openat",
	  { AT_FDCWD, 0, O_CREAT | O_WRONLY, S_ISUID | 0755 },
	  EPERM_ },
	{ "openat O_CREAT setgid", "openat", { AT_FDCWD, 0, O_CREAT, S_ISGID }, EPERM_ },
	{ "openat O_TMPFILE setuid",
	  "openat",
	  { AT_FDCWD, 0, O_TMPFILE_BIT | O_DIRECTORY | O_RDWR, S_ISUID | 0600 },
	  EPERM_ },
	{ "openat O_CREAT plain", "openat", { AT_FDCWD, 0, O_CREAT | O_WRONLY, 0600 }, ALLOW },
	{ "openat read", "openat", { AT_FDCWD, 0, O_RDONLY, 0 }, ALLOW },
	{ "socket netlink uevent", "socket", { AF_NETLINK, SOCK_DGRAM, 15 }, EAFNO_ },
	{ "socket netlink audit", "socket", { AF_NETLINK, SOCK_RAW, 9 }, EAFNO_ },
	{ "socket netlink route", "socket", { AF_NETLINK, SOCK_DGRAM, 0 }, ALLOW },
	{ "socket vsock high bits", "socket", { 40 | HI, SOCK_STREAM, 0 }, EAFNO_ },
	{ "socket inet high bits", "socket", { AF_INET | HI, SOCK_STREAM, 0 }, EAFNO_ },
	{ "socketpair unix", "socketpair", { AF_UNIX, SOCK_STREAM, 0 }, ALLOW },
	{ "socketpair inet", "socketpair", { AF_INET, SOCK_STREAM, 0 }, EAFNO_ },
	{ "socketpair unspec", "socketpair", { AF_UNSPEC, SOCK_STREAM, 0 }, EAFNO_ },
	/* ordinary calls */
	{ "getpid", "getpid", { 0 }, ALLOW },
	{ "read", "read", { 0, 0, 1 }, ALLOW },
	{ "write", "write", { 1, 0, 1 }, ALLOW },
	{ "execve", "execve", { 0 }, ALLOW },
	{ "mkdir setgid mode", "mkdir", { 0, 02755 }, ALLOW }, /* the kernel drops it */
};

static void test_argument_rules(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(arg_cases); i++) {
		const struct arg_case *c = &arg_cases[i];
		int nr = nr_of(c->name);
		if (nr < 0) {
			print_message("# %s: no %s on this architecture\n", c->what, c->name);
			continue;
		}
		uint32_t a = run(native(), nr, c->args);
		if (a != c->action)
			fail_msg("%s: action %#x, want %#x", c->what, a, c->action);
	}
}

static void test_socket_families(void **state)
{
	int nr = nr_of("socket");
	for (uint64_t fam = 0; fam < 64; fam++) {
		uint64_t args[6] = { fam, SOCK_STREAM, 0 };
		bool ok = fam == AF_UNIX || fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK;
		uint32_t a = run(native(), nr, args);
		if (a != (ok ? ALLOW : EAFNO_))
			fail_msg("socket family %u: action %#x", (unsigned)fam, a);
		/* High bits never turn a refused family into an allowed one. */
		args[0] = fam | 0xffffffff00000000ULL;
		a = run(native(), nr, args);
		if (!ok && a != EAFNO_)
			fail_msg("socket family %u with high bits: action %#x", (unsigned)fam, a);
	}
}

/* ---- the kernel agrees with the evaluator ---- */

/* In a child: load the program, make the call, report errno (or die). */
static int child_call(long nr, long a0, long a1, long a2, int *ret_errno, int *ret_sig)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(p[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || sbx_seccomp_install(&prog) < 0)
			_exit(99);
		errno = 0;
		long r = syscall(nr, a0, a1, a2, 0, 0, 0);
		int e = r < 0 ? errno : 0;
		(void)!write(p[1], &e, sizeof(e));
		_exit(0);
	}
	close(p[1]);
	int e = -1;
	ssize_t n = read(p[0], &e, sizeof(e));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	*ret_sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
	*ret_errno = n == sizeof(e) ? e : -1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 99)
		return -EPERM;
	return 0;
}

static void test_kernel_agrees(void **state)
{
	int pfd[2];
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	const struct {
		const char *what;
		long nr, a0, a1, a2;
		int want_errno;
	} calls[] = {
		{ "getpid", SYS_getpid, 0, 0, 0, 0 },
		{ "keyctl", SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 0, EPERM },
		{ "clone3", SYS_clone3, 0, 0, 0, ENOSYS },
		{ "socket(AF_VSOCK)", SYS_socket, 40, SOCK_STREAM, 0, EAFNOSUPPORT },
		{ "unshare(CLONE_NEWUSER)", SYS_unshare, CLONE_NEWUSER, 0, 0, EPERM },
		{ "ioctl(TIOCSTI) on a pipe", SYS_ioctl, pfd[0], TIOCSTI, (long)"x", EPERM },
	};
	for (size_t i = 0; i < ARRAY_SIZE(calls); i++) {
		int e, sig;
		assert_int_equal(child_call(calls[i].nr, calls[i].a0, calls[i].a1, calls[i].a2, &e,
					    &sig),
				 0);
		if (sig || e != calls[i].want_errno)
			fail_msg("%s under the filter: errno %d, signal %d (want errno %d)",
				 calls[i].what, e, sig, calls[i].want_errno);
	}
	close(pfd[0]);
	close(pfd[1]);
#ifdef __x86_64__
	/* x32 getpid: killed by the filter (SIGSYS) before the kernel looks. */
	int e, sig;
	assert_int_equal(child_call(0x40000000 | 39, 0, 0, 0, &e, &sig), 0);
	if (sig != SIGSYS)
		fail_msg("an x32 call under the filter: signal %d errno %d, not SIGSYS", sig, e);
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_evaluator),
		cmocka_unit_test(test_foreign_abis_killed),
		cmocka_unit_test(test_deny_list_covered),
		cmocka_unit_test(test_every_entry_refused),
		cmocka_unit_test(test_argument_rules),
		cmocka_unit_test(test_socket_families),
		cmocka_unit_test(test_kernel_agrees),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
