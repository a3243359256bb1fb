/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs inside a sandbox for the integration tests (and, as the control, in
 * the same conditions without the seccomp filter): attempts what the sandbox
 * must refuse and prints one line per attempt: "name syscall result errno".
 * Every call uses arguments that are harmless should the filter be missing.
 */
#ifndef _GNU_SOURCE /* also given on the command line, for src/common */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/wait.h>
#include <string.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/parse.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void report(const char *name, const char *call, long r, int e)
{
	printf("%s %s %ld %s\n", name, call, r, r < 0 ? strerrorname_np(e) : "OK");
	fflush(stdout);
}

static const char *scratch = "/tmp";
static bool try_vsock = true;
static int tty_fd = -1; /* a pipe: ioctls on it answer ENOTTY unless filtered */

/*
 * Each attempt runs in a child of its own, so that one that succeeds where
 * the filter is missing (a new user namespace, say) changes nothing for the
 * next, and one that kills cannot stop the list.
 */
#define TRY(name, call, expr)                                                  \
	do {                                                                   \
		fflush(stdout);                                                \
		pid_t _p = fork();                                             \
		if (_p == 0) {                                                 \
			errno = 0;                                             \
			long _r = (long)(expr);                                \
			report(name, call, _r, errno);                         \
			_exit(0);                                              \
		}                                                              \
		int _st = 0;                                                   \
		waitpid(_p, &_st, 0);                                          \
		if (WIFSIGNALED(_st))                                          \
			printf("%s %s -1 SIG%d\n", name, call, WTERMSIG(_st)); \
	} while (0)

static char path_buf[4][4096];
static const char *spath(int i, const char *name)
{
	snprintf(path_buf[i], sizeof(path_buf[i]), "%s/%s", scratch, name);
	return path_buf[i];
}

static long make_file(const char *name)
{
	int fd = open(spath(3, name), O_CREAT | O_WRONLY | O_CLOEXEC, 0755);
	if (fd >= 0)
		close(fd);
	return fd;
}

static int open_file(const char *name)
{
	make_file(name);
	return open(spath(3, name), O_RDONLY | O_CLOEXEC);
}

/* Arguments are chosen so that the kernel, without the filter, answers with
 * something other than the filter's errno wherever it can (a bad pointer,
 * an invalid flag, a harmless success): the test compares with a control
 * run to tell the filter's refusals from the kernel's. Every call is
 * harmless should the filter be missing. */
/* Host root in the initial user namespace: the calls would be answered
 * with root's powers (a control run belongs in a user namespace). */
static bool initial_root(void)
{
	/* "         0          0 4294967295": the identity map of everything. */
	FILE *f = fopen("/proc/self/uid_map", "r");
	char line[128] = "";
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
	}
	uint64_t v[3] = { 1, 1, 0 };
	const char *p = line;
	for (int i = 0; i < 3; i++) {
		while (*p == ' ')
			p++;
		if (parse_u64_prefix(p, &v[i], &p) < 0)
			return false;
	}
	return geteuid() == 0 && v[0] == 0 && v[1] == 0 && v[2] == 4294967295u;
}

static int syscalls(void)
{
	if (initial_root()) {
		fputs("probe: refusing to run the system call list as the host's root\n", stderr);
		return 2;
	}
	int p[2];
	if (pipe(p) == 0)
		tty_fd = p[0];
	struct timeval bad_tv = { 0, 2000000 };
	struct timespec ts = { 0, 0 };
	struct timex tx = { .modes = 0 };
	struct {
		unsigned int handle_bytes;
		int handle_type;
		unsigned char f_handle[8];
	} fh = { 0 };
	int mnt_id;
	TRY("keyctl", "keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 0, 0, 0));
	TRY("add_key", "add_key",
	    syscall(SYS_add_key, "user", "airlock-probe", "x", 1, 0x7ffffff0));
	TRY("request_key", "request_key",
	    syscall(SYS_request_key, "user", "airlock-probe-none", NULL, 0));
	TRY("bpf", "bpf", syscall(SYS_bpf, 9999, NULL, 0));
	TRY("perf_event_open", "perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	TRY("lookup_dcookie", "lookup_dcookie", syscall(SYS_lookup_dcookie, 0, NULL, 0));
	TRY("userfaultfd", "userfaultfd",
	    syscall(SYS_userfaultfd, 1 /* USER_MODE_ONLY */ | 0x40000000));
	TRY("kexec_load", "kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL));
	TRY("kexec_file_load", "kexec_file_load",
	    syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xdead0000UL));
	TRY("init_module", "init_module", syscall(SYS_init_module, NULL, 0, ""));
	TRY("finit_module", "finit_module", syscall(SYS_finit_module, -1, "", 0));
	TRY("delete_module", "delete_module",
	    syscall(SYS_delete_module, "airlock_no_such_module", O_NONBLOCK));
	TRY("create_module", "create_module", syscall(SYS_create_module, NULL, 0));
	TRY("reboot", "reboot", syscall(SYS_reboot, 0, 0, 0, NULL)); /* wrong magic: harmless */
	TRY("swapon", "swapon", syscall(SYS_swapon, "/nonexistent", 0));
	TRY("swapoff", "swapoff", syscall(SYS_swapoff, "/nonexistent"));
	TRY("acct", "acct", syscall(SYS_acct, NULL));
	TRY("syslog", "syslog", syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0));
	TRY("iopl", "iopl", syscall(SYS_iopl, 4));
	TRY("ioperm", "ioperm", syscall(SYS_ioperm, 0, 65537, 0));
	TRY("uselib", "uselib", syscall(SYS_uselib, NULL));
	TRY("nfsservctl", "nfsservctl", syscall(SYS_nfsservctl, 0, NULL, NULL));
	TRY("vhangup", "vhangup", syscall(SYS_vhangup));
	TRY("quotactl", "quotactl", syscall(SYS_quotactl, 0, NULL, 0, NULL));
	TRY("quotactl_fd", "quotactl_fd", syscall(443 /* quotactl_fd */, -1, 0, 0, NULL));
	TRY("mount", "mount", syscall(SYS_mount, "none", "/nonexistent", (char *)1, 0, NULL));
	TRY("umount2", "umount2", syscall(SYS_umount2, "/workspace", 0x40000000));
	TRY("pivot_root", "pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
	TRY("move_mount", "move_mount", syscall(SYS_move_mount, -1, "", -1, "", 0));
	TRY("open_tree", "open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 0));
	TRY("fsopen", "fsopen", syscall(SYS_fsopen, "tmpfs", 0));
	TRY("fsmount", "fsmount", syscall(SYS_fsmount, -1, 0, 0));
	TRY("fsconfig", "fsconfig", syscall(SYS_fsconfig, -1, 6 /* CMD_CREATE */, NULL, NULL, 0));
	TRY("fspick", "fspick", syscall(SYS_fspick, AT_FDCWD, "/", 0));
	TRY("mount_setattr", "mount_setattr", syscall(442 /* mount_setattr */, -1, "", 0, NULL, 0));
	TRY("setns", "setns", syscall(SYS_setns, -1, 0));
	TRY("io_uring_setup", "io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
	TRY("io_uring_enter", "io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	TRY("io_uring_register", "io_uring_register",
	    syscall(SYS_io_uring_register, -1, 0, NULL, 0));
	TRY("open_by_handle_at", "open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0));
	TRY("name_to_handle_at", "name_to_handle_at",
	    syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh, &mnt_id, 0));
	TRY("settimeofday", "settimeofday", syscall(SYS_settimeofday, &bad_tv, NULL));
	TRY("clock_settime", "clock_settime", syscall(SYS_clock_settime, -1, &ts));
	TRY("clock_adjtime", "clock_adjtime", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
	TRY("adjtimex", "adjtimex", syscall(SYS_adjtimex, &tx));
	TRY("move_pages", "move_pages", syscall(SYS_move_pages, 0, 0, NULL, NULL, NULL, 0));
	TRY("migrate_pages", "migrate_pages", syscall(SYS_migrate_pages, 0, 0, NULL, NULL));
	TRY("kcmp", "kcmp", syscall(SYS_kcmp, getpid(), getpid(), 1 /* KCMP_VM */, 0, 0));
	TRY("clone3", "clone3", syscall(SYS_clone3, NULL, 0));
	TRY("openat2", "openat2", syscall(SYS_openat2, AT_FDCWD, "/", NULL, 0));
	/* argument rules */
	TRY("ioctl_tiocsti", "ioctl", ioctl(tty_fd, TIOCSTI, "x"));
	TRY("ioctl_tiocsti_highbits", "ioctl",
	    syscall(SYS_ioctl, tty_fd, (unsigned long)TIOCSTI | 0x100000000UL, "x"));
	TRY("ioctl_tioclinux", "ioctl", ioctl(tty_fd, 0x541C /* TIOCLINUX */, "\x0b"));
	TRY("unshare_user", "unshare", syscall(SYS_unshare, CLONE_NEWUSER));
	TRY("unshare_user_highbits", "unshare",
	    syscall(SYS_unshare, CLONE_NEWUSER | 0x100000000UL));
	TRY("clone_user", "clone", ({
		    long _c = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
		    if (_c == 0)
			    _exit(0);
		    _c;
	    }));
	if (try_vsock)
		TRY("socket_vsock", "socket", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
	else
		/* Without the filter, trying it could load a kernel module. */
		printf("socket_vsock socket -1 NOTTRIED\n");
	TRY("socket_netlink_uevent", "socket",
	    socket(AF_NETLINK, SOCK_DGRAM, 15 /* KOBJECT_UEVENT */));
	TRY("socketpair_inet", "socketpair", ({
		    int _sv[2];
		    socketpair(AF_INET, SOCK_STREAM, 0, _sv);
	    }));
	make_file("probe-suid");
	TRY("chmod_setuid", "chmod", chmod(spath(0, "probe-suid"), 04755));
	TRY("chmod_setgid", "chmod", chmod(spath(0, "probe-suid"), 02755));
	TRY("fchmod_setuid", "fchmod", fchmod(open_file("probe-suid"), 04755));
	TRY("fchmodat_setgid", "fchmodat", fchmodat(AT_FDCWD, spath(0, "probe-suid"), 02755, 0));
	TRY("fchmodat2_setuid", "fchmodat2",
	    syscall(452 /* fchmodat2 */, AT_FDCWD, spath(0, "probe-suid"), 04755, 0));
	TRY("creat_setuid", "creat", creat(spath(0, "probe-creat"), 04755));
	TRY("open_creat_setuid", "open",
	    syscall(SYS_open, spath(0, "probe-suid2"), O_CREAT | O_WRONLY, 04755));
	TRY("openat_creat_setgid", "openat",
	    openat(AT_FDCWD, spath(0, "probe-sgid2"), O_CREAT | O_WRONLY, 02755));
	TRY("mknod_setuid", "mknod", mknod(spath(0, "probe-suid3"), S_IFREG | 04755, 0));
	TRY("mknodat_setgid", "mknodat",
	    mknodat(AT_FDCWD, spath(0, "probe-sgid3"), S_IFREG | 02755, 0));
	TRY("open_tmpfile_setuid", "open", open(scratch, O_TMPFILE | O_WRONLY, 04755));
	/* Refused by the kernel itself in a sandbox, not by the filter. */
	TRY("kernel_mknod_device", "mknod",
	    mknod(spath(0, "probe-null"), S_IFCHR | 0666, makedev(1, 3)));
	/* Allowed: these must still work. */
	TRY("allowed_socket_inet", "socket", socket(AF_INET, SOCK_STREAM, 0));
	TRY("allowed_socket_unix", "socket", socket(AF_UNIX, SOCK_STREAM, 0));
	TRY("allowed_chmod", "chmod", chmod(spath(0, "probe-suid"), 0700));
	TRY("allowed_socket_netlink_route", "socket",
	    socket(AF_NETLINK, SOCK_DGRAM, 0 /* ROUTE */));
	TRY("allowed_open_tmpfile", "open", open(scratch, O_TMPFILE | O_WRONLY, 0600));
	return 0;
}

/* The i386 system call table through int 0x80: a non-native ABI. */
static int x86_32(void)
{
#if defined(__x86_64__)
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20) /* i386 getpid */ : "memory");
	printf("int80 returned %ld\n", r);
	return 0;
#else
	puts("not x86_64");
	return 2;
#endif
}

/* The x32 ABI: x86_64's table with bit 30 set in the number. */
static int x32(void)
{
#if defined(__x86_64__)
	errno = 0;
	long r = syscall(0x40000000 | SYS_getpid);
	printf("x32 returned %ld %s\n", r, r < 0 ? strerrorname_np(errno) : "OK");
	return 0;
#else
	puts("not x86_64");
	return 2;
#endif
}

static int do_connect(const char *port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int portno = 0;
	if (parse_int_range(port, 1, 65535, &portno) < 0)
		portno = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)portno) };
	a.sin_addr.s_addr = htonl(0x7f000001);
	int r = connect(s, (struct sockaddr *)&a, sizeof(a));
	report("connect", "connect", r, errno);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "syscalls") == 0) {
		if (argc >= 3)
			scratch = argv[2];
		if (argc >= 4)
			try_vsock = strcmp(argv[3], "no-vsock") != 0;
		return syscalls();
	}
	if (strcmp(argv[1], "x86_32") == 0)
		return x86_32();
	if (strcmp(argv[1], "x32") == 0)
		return x32();
	if (strcmp(argv[1], "connect") == 0 && argc == 3)
		return do_connect(argv[2]);
	if (strcmp(argv[1], "ids") == 0) {
		printf("uid %d euid %d gid %d egid %d\n", getuid(), geteuid(), getgid(), getegid());
		return 0;
	}
	return 2;
}
