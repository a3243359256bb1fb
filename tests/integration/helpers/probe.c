/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs inside a sandbox for the integration tests: attempts what the
 * sandbox must refuse and prints one line per attempt: "name result errno".
 * Every call uses arguments that are harmless should the filter be missing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static void report(const char *name, long r)
{
	printf("%s %ld %s\n", name, r, r < 0 ? strerrorname_np(errno) : "OK");
	fflush(stdout);
}

#define TRY(name, call)                                                                            \
	do {                                                                                       \
		errno = 0;                                                                         \
		long _r = (long)(call);                                                            \
		report(name, _r);                                                                  \
	} while (0)

static int syscalls(void)
{
	TRY("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0, 0, 0));
	TRY("add_key", syscall(SYS_add_key, "user", "airlock-probe", "x", 1, -3));
	TRY("request_key", syscall(SYS_request_key, "user", "airlock-probe", NULL, -3));
	TRY("bpf", syscall(SYS_bpf, 0, NULL, 0));
	TRY("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	TRY("userfaultfd", syscall(SYS_userfaultfd, 0));
	TRY("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL));
	TRY("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xdead0000UL));
	TRY("init_module", syscall(SYS_init_module, NULL, 0, ""));
	TRY("finit_module", syscall(SYS_finit_module, -1, "", 0));
	TRY("delete_module", syscall(SYS_delete_module, "airlock_no_such_module", O_NONBLOCK));
	TRY("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL));
	TRY("umount2", syscall(SYS_umount2, "/workspace", MNT_DETACH));
	TRY("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
	TRY("move_mount", syscall(SYS_move_mount, -1, "", -1, "", 0));
	TRY("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/workspace", 1 /* OPEN_TREE_CLONE */));
	TRY("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
	TRY("fsmount", syscall(SYS_fsmount, -1, 0, 0));
	TRY("unshare_user", syscall(SYS_unshare, CLONE_NEWUSER));
	TRY("unshare_user_highbits", syscall(SYS_unshare, CLONE_NEWUSER | 0x100000000UL));
	TRY("clone_user", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0));
	TRY("clone3", syscall(SYS_clone3, NULL, 0));
	TRY("setns", syscall(SYS_setns, -1, 0));
	TRY("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
	TRY("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
	TRY("acct", syscall(SYS_acct, NULL));
	TRY("swapon", syscall(SYS_swapon, "/nonexistent", 0));
	TRY("swapoff", syscall(SYS_swapoff, "/nonexistent"));
	TRY("reboot", syscall(SYS_reboot, 0, 0, 0, NULL)); /* wrong magic: harmless */
	TRY("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
	TRY("clock_settime", syscall(SYS_clock_settime, -1, NULL));
	TRY("syslog", syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0));
	TRY("ioctl_tiocsti", ioctl(0, TIOCSTI, "x"));
	TRY("ioctl_tiocsti_highbits", syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | 0x100000000UL, "x"));
	TRY("ioctl_tioclinux", ioctl(0, 0x541C /* TIOCLINUX */, "\x0b"));
	TRY("openat2", syscall(SYS_openat2, AT_FDCWD, "/", NULL, 0));
	TRY("socket_vsock", socket(AF_VSOCK, SOCK_STREAM, 0));
	int fd = open("/tmp/probe-suid", O_CREAT | O_WRONLY, 0755);
	if (fd >= 0)
		close(fd);
	TRY("chmod_setuid", chmod("/tmp/probe-suid", 04755));
	TRY("chmod_setgid", chmod("/tmp/probe-suid", 02755));
	TRY("open_creat_setuid", open("/tmp/probe-suid2", O_CREAT | O_WRONLY, 04755));
	TRY("mknod_setuid", mknod("/tmp/probe-suid3", S_IFREG | 04755, 0));
	TRY("mknod_device", mknod("/tmp/probe-null", S_IFCHR | 0666, makedev(1, 3)));
	TRY("open_tmpfile_setuid", open("/tmp", O_TMPFILE | O_WRONLY, 04755));
	TRY("socket_netlink_uevent", socket(AF_NETLINK, SOCK_DGRAM, 15 /* KOBJECT_UEVENT */));
	/* Allowed: these must still work. */
	TRY("allowed_socket_inet", socket(AF_INET, SOCK_STREAM, 0));
	TRY("allowed_socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
	TRY("allowed_chmod", chmod("/tmp/probe-suid", 0700));
	TRY("allowed_socket_netlink_route", socket(AF_NETLINK, SOCK_DGRAM, 0 /* ROUTE */));
	TRY("allowed_open_tmpfile", open("/tmp", O_TMPFILE | O_WRONLY, 0600));
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

static int do_connect(const char *port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)strtol(port, NULL, 10)) };
	a.sin_addr.s_addr = htonl(0x7f000001);
	int r = connect(s, (struct sockaddr *)&a, sizeof(a));
	report("connect", r);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "syscalls") == 0)
		return syscalls();
	if (strcmp(argv[1], "x86_32") == 0)
		return x86_32();
	if (strcmp(argv[1], "connect") == 0 && argc == 3)
		return do_connect(argv[2]);
	if (strcmp(argv[1], "ids") == 0) {
		printf("uid %d euid %d gid %d egid %d\n", getuid(), geteuid(), getgid(), getegid());
		return 0;
	}
	return 2;
}
