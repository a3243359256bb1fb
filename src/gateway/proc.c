/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway process's side: start, narrow, serve (the caller's side is
 * launch.c).
 *
 * gw_start runs this program with its socket; it reads its options from
 * the handover (handover.h), then, still root, reads what it needs from the
 * host (policy, vault, trust store, the operator's CA files, resolv.conf
 * and hosts), makes the sandbox's CA, then drops everything before it serves:
 * a private mount namespace whose root is an empty read-only tmpfs, its
 * own uid and gid with no supplementary groups (so no capability is left),
 * no_new_privs, not dumpable (no ptrace, no /proc/PID/mem from another
 * process of the same uid), and a seccomp filter. Only then does it report
 * ready, and only then can a sandbox's bytes reach it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <seccomp.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"
#include "common/parse.h"
#include "gateway/ca.h"
#include "gateway/handover.h"
#include "gateway/internal.h"

#define SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define START_TIMEOUT_MS 10000
#define GW_CA_DAYS 30
#define GW_NOFILE 65536

static int install_seccomp(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	/* Another ABI (x32, ia32) would pass every rule by other numbers. */
	if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0) {
		seccomp_release(ctx);
		return -EINVAL;
	}
	/* clang-format off */
	static const char *const denied[] = {
		"execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "mount",
		"umount2", "pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open",
		"keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
		"finit_module", "delete_module", "userfaultfd", "io_uring_setup", "io_uring_enter",
		"io_uring_register", "open_by_handle_at", "name_to_handle_at", "personality", "acct",
		"swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime",
		"adjtimex", "syslog", "vhangup", "quotactl", "fsopen", "fsconfig", "fsmount",
		"fspick", "move_mount", "open_tree", "mount_setattr", "setuid", "setgid", "setreuid",
		"setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "capset",
		"iopl", "ioperm", "lookup_dcookie", "uselib", "ustat", "sysfs", "_sysctl",
		"nfsservctl", "pidfd_getfd", "kcmp", "memfd_secret", "landlock_create_ruleset",
	};
	/* clang-format on */
	int rc = 0;
	for (size_t i = 0; i < ARRAY_SIZE(denied) && rc == 0; i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* No new namespaces through clone; clone3's flags are out of reach, so
	 * it is refused and libc falls back to clone. */
	const uint64_t ns = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
			    CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
	for (uint64_t bit = 1; rc == 0 && bit; bit <<= 1)
		if (ns & bit) {
			struct scmp_arg_cmp a = {
				.arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = bit, .datum_b = bit
			};
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
						    &a);
		}
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* New sockets: IPv4 and IPv6 only — no netlink, packet, vsock, and no
	 * AF_UNIX (the host's abstract sockets, D-Bus...); socketpair(2) is
	 * separate and reaches nothing. */
	for (int fam = 0; rc == 0 && fam < 64; fam++)
		if (fam != AF_INET && fam != AF_INET6) {
			struct scmp_arg_cmp a = {
				.arg = 0, .op = SCMP_CMP_EQ, .datum_a = (uint64_t)fam, .datum_b = 0
			};
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT),
						    SCMP_SYS(socket), 1, &a);
		}
	if (rc == 0) {
		struct scmp_arg_cmp a = { .arg = 0, .op = SCMP_CMP_GE, .datum_a = 64, .datum_b = 0 };
		rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
					    &a);
	}
	/* Signals to itself only: gateways share a uid, and one must not be
	 * able to stop another's sandboxes. */
	pid_t self = getpid();
	if (rc == 0) {
		struct scmp_arg_cmp a = {
			.arg = 0, .op = SCMP_CMP_NE, .datum_a = (uint64_t)self, .datum_b = 0
		};
		rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1, &a);
		if (rc == 0)
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
						    &a);
		if (rc == 0)
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM),
						    SCMP_SYS(rt_tgsigqueueinfo), 1, &a);
		if (rc == 0)
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM),
						    SCMP_SYS(rt_sigqueueinfo), 1, &a);
	}
	static const char *const no_signals[] = { "tkill", "pidfd_send_signal", "pidfd_open" };
	for (size_t i = 0; i < ARRAY_SIZE(no_signals) && rc == 0; i++) {
		int nr = seccomp_syscall_resolve_name(no_signals[i]);
		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

/* Everything after this runs with nothing of root's. */
static int drop_privileges(uid_t uid, struct al_error *err)
{
	struct rlimit rl = { GW_NOFILE, GW_NOFILE };
	(void)setrlimit(RLIMIT_NOFILE, &rl);
	if (geteuid() == 0) {
		if (unshare(CLONE_NEWNS) < 0)
			return al_error_set_errno(err, -errno,
						  "gateway: cannot make a mount namespace");
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("airlock-gw", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=4k,nr_inodes=4,mode=0555") < 0 ||
		    chdir("/tmp") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
		    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0 ||
		    mount(NULL, "/", NULL,
			  MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			return al_error_set_errno(err, -errno, "gateway: cannot empty its root");
		/* The bounding set too: nothing to regain, whatever runs. */
		for (int cap = 0; cap <= 63; cap++)
			if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
				return al_error_set_errno(err, -errno,
							  "gateway: cannot drop capabilities");
		if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
		    setresuid(uid, uid, uid) < 0)
			return al_error_set_errno(err, -errno, "gateway: cannot become uid %u",
						  (unsigned)uid);
		if (setresuid(0, 0, 0) == 0)
			return al_error_set(err, -EPERM, "gateway: could regain root");
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return al_error_set_errno(err, -errno, "gateway: prctl");
	int rc = install_seccomp();
	if (rc < 0)
		return al_error_set_errno(err, rc, "gateway: cannot install its seccomp filter");
	return 0;
}

/*
 * The trust store: the operator's CA files now (a bad one is an error at
 * start), the system bundle read now but parsed only when the first TLS
 * upstream needs it (some 50 ms for ~140 certificates, which a sandbox that
 * never goes out should not pay).
 */
static int load_store(const struct gw_config *cfg, X509_STORE **ret, char **ret_bundle,
		      size_t *ret_bundle_len, struct al_error *err)
{
	X509_STORE *st = X509_STORE_new();
	if (!st)
		return al_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < cfg->n_ca_files; i++)
		if (X509_STORE_load_file(st, cfg->ca_files[i]) != 1) {
			X509_STORE_free(st);
			return al_error_set(err, -EINVAL,
					    "--upstream-ca %s: no PEM certificate in it",
					    cfg->ca_files[i]);
		}
	*ret_bundle = NULL;
	*ret_bundle_len = 0;
	int r = read_file_bounded(AT_FDCWD, SYSTEM_BUNDLE, 16 << 20, ret_bundle, ret_bundle_len);
	if (r < 0 && r != -ENOENT) {
		X509_STORE_free(st);
		return al_error_set_errno(err, r, "cannot read %s", SYSTEM_BUNDLE);
	}
	*ret = st;
	return 0;
}

/* Vault, store, CA, engine: what the gateway reads while still root. */
static int prepare_engine(const struct gw_config *cfg, bool exit_when_idle, struct gw_engine **ret,
			  char **ret_pem, size_t *ret_pem_len, struct al_error *err)
{
	struct gw_vault *vault = NULL;
	int rc;
	if (cfg->vault_file) {
		rc = gw_vault_load(cfg->vault_file, &vault, err);
		if (rc == 0)
			rc = gw_config_check_vault(cfg, vault, err);
		if (rc == 0)
			rc = gw_config_add_secret_forms(cfg, vault, err);
		if (rc < 0) {
			gw_vault_free(vault);
			return rc;
		}
	}
	X509_STORE *store = NULL;
	char *bundle = NULL;
	size_t bundle_len = 0;
	rc = load_store(cfg, &store, &bundle, &bundle_len, err);
	if (rc < 0) {
		gw_vault_free(vault);
		return rc;
	}
	struct gw_ca *ca = NULL;
	rc = gw_ca_new(cfg->label, GW_CA_DAYS, &ca, err);
	if (rc < 0) {
		gw_vault_free(vault);
		X509_STORE_free(store);
		free(bundle);
		return rc;
	}
	rc = gw_ca_cert_pem(ca, ret_pem, ret_pem_len);
	if (rc < 0) {
		gw_vault_free(vault);
		X509_STORE_free(store);
		free(bundle);
		gw_ca_free(ca);
		return al_error_set_errno(err, rc, "cannot write the CA certificate");
	}
	struct gw_engine_opts o = { .cfg = cfg,
				    .vault = vault,
				    .ca = ca,
				    .upstream_store = store,
				    .system_bundle = bundle,
				    .system_bundle_len = bundle_len,
				    .exit_when_idle = exit_when_idle };
	rc = gw_engine_new(&o, ret, err);
	if (rc < 0) {
		free(*ret_pem);
		return rc;
	}
	rc = gw_engine_dns_init(*ret, err);
	if (rc < 0) {
		gw_engine_free(*ret);
		free(*ret_pem);
		return rc;
	}
	return 0;
}

/* The handover socket: our end of an AF_UNIX stream pair, or nothing we
 * should speak to. */
static int check_socket(int sock, struct al_error *err)
{
	struct stat st;
	int domain = 0, type = 0;
	socklen_t l1 = sizeof(domain), l2 = sizeof(type);
	if (fstat(sock, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &l1) < 0 ||
	    getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &l2) < 0 || domain != AF_UNIX ||
	    type != SOCK_STREAM)
		return al_error_set(
			err, -ENOTSOCK,
			"this is the gateway process that airlock starts itself (it reads "
			"its options from a socket at descriptor %d); use `airlock gateway` "
			"or `airlock sandbox run --allow ...`",
			sock);
	return 0;
}

/* Dies with the caller unless detached; after the credential change too,
 * which clears the setting. */
static int tie_to_parent(const struct gw_handover *h)
{
	if (h->detach)
		return 0;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return -errno;
	return getppid() == (pid_t)h->parent ? 0 : -ESRCH;
}

static int receive_handover(int sock, struct ipc_msg *m, struct gw_handover *h,
			    struct al_error *err)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int n;
	while ((n = poll(&p, 1, START_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (n <= 0)
		return al_error_set(err, -ETIMEDOUT, "gateway: no options from its caller");
	const struct ipc_type types[] = { { GW_IPC_HANDOVER, GW_HANDOVER_MAX, 0 } };
	int r = ipc_recv(sock, types, ARRAY_SIZE(types), m);
	if (r == -EBADMSG)
		return al_error_set(err, r,
				    "gateway: its start-up message was refused (a frame "
				    "of another type, over %u bytes, or with descriptors)",
				    (unsigned)GW_HANDOVER_MAX);
	if (r < 0)
		return al_error_set_errno(err, r, "gateway: cannot read its options");
	if (gw_handover_decode(m->data, m->len, h) < 0)
		return al_error_set(err, -EBADMSG, "gateway: its start-up options are malformed");
	return 0;
}

int gw_process_main(int sock)
{
	struct al_error err = { 0 };
	if (check_socket(sock, &err) < 0) {
		dprintf(2, "airlock: %s\n", al_error_message(&err));
		return 125;
	}
	prctl(PR_SET_NAME, "airlock-gw", 0, 0, 0);
	struct ipc_msg m = IPC_MSG_INIT;
	struct gw_handover *h = calloc(1, sizeof(*h));
	struct gw_config *cfg = NULL;
	char **env = NULL;
	size_t n_env = 0;
	struct gw_engine *e = NULL;
	char *pem = NULL;
	size_t pem_len = 0;
	struct buf ready = BUF_INIT(GW_READY_MAX);
	int rc = h ? 0 : al_error_set(&err, -ENOMEM, "out of memory");
	if (rc == 0)
		rc = receive_handover(sock, &m, h, &err);
	if (rc == 0 && tie_to_parent(h) < 0)
		return 1; /* the caller is gone: nobody to answer */
	if (rc == 0)
		rc = gw_uid_check(h->uid, h->sandbox_uid_first, h->sandbox_uid_end, &err);
	if (rc == 0)
		rc = gw_config_build(&h->opts, &cfg, &err);
	if (rc == 0) {
		rc = gw_sandbox_env(cfg, h->env_bundle, h->env_ca, &env, &n_env);
		if (rc < 0)
			al_error_set_errno(&err, rc, "cannot make the sandbox's environment");
	}
	if (rc == 0)
		rc = prepare_engine(cfg, true, &e, &pem, &pem_len, &err);
	if (rc == 0)
		rc = drop_privileges(h->uid, &err);
	if (rc == 0 && tie_to_parent(h) < 0)
		return 1;
	if (rc == 0) {
		rc = gw_ready_encode(pem, pem_len, env, n_env, &ready);
		if (rc < 0)
			al_error_set_errno(&err, rc, "cannot report the gateway's CA");
	}
	if (rc < 0) {
		const char *msg = al_error_message(&err);
		ipc_send(sock, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
		return 1;
	}
	if (ipc_send(sock, GW_IPC_READY, ready.data, ready.len, NULL, 0) < 0)
		return 1;
	/* Nothing of the start-up is needed any more: the configuration
	 * lives on in the engine, which points at it. */
	buf_free(&ready);
	free(pem);
	gw_env_free(env, n_env);
	ipc_msg_done(&m);
	free(h);
	if (gw_engine_add_control(e, sock) < 0 || gw_engine_handle_signals(e) < 0)
		return 1;
	rc = gw_engine_run(e);
	gw_engine_free(e);
	return rc < 0 ? 1 : 0;
}

int gw_serve_standalone(const struct gw_config *cfg, const char *listen_addr, const char *ca_out,
			int audit_fd, uint32_t uid, struct al_error *err)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (gw_parse_sockaddr(listen_addr, &ss, &sl) < 0)
		return al_error_set(err, -EINVAL, "--listen %s: expected ADDR:PORT", listen_addr);
	int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (lfd < 0)
		return al_error_set_errno(err, -errno, "socket");
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, sl) < 0 || listen(lfd, 1024) < 0) {
		int r = -errno;
		close(lfd);
		return al_error_set_errno(err, r, "cannot listen on %s", listen_addr);
	}
	struct gw_engine *e = NULL;
	char *pem = NULL;
	size_t pem_len = 0;
	int rc = prepare_engine(cfg, false, &e, &pem, &pem_len, err);
	if (rc < 0) {
		close(lfd);
		return rc;
	}
	if (ca_out) {
		int fd = open(ca_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
		rc = fd < 0 ? -errno : write_full(fd, pem, pem_len);
		if (fd >= 0)
			close(fd);
		if (rc < 0) {
			free(pem);
			gw_engine_free(e);
			close(lfd);
			return al_error_set_errno(err, rc, "--ca-out %s", ca_out);
		}
	}
	free(pem);
	int afd = audit_fd >= 0 ? audit_fd : fcntl(1, F_DUPFD_CLOEXEC, 3);
	struct gw_listeners l = { .proxy = lfd, .http = -1, .https = -1, .dns = -1, .control = -1 };
	rc = gw_engine_add_sandbox(e, "standalone", &l, afd, -1, err);
	if (rc == 0)
		rc = drop_privileges(uid, err);
	if (rc == 0 && gw_engine_handle_signals(e) < 0)
		rc = al_error_set(err, -ENOMEM, "cannot handle signals");
	if (rc == 0) {
		signal(SIGPIPE, SIG_IGN);
		/* Ready, and nothing of root's left: a caller waiting for this
		 * line may send requests. */
		/* Where it is bound (a port of 0 was chosen by the kernel). */
		struct sockaddr_storage at = { 0 };
		socklen_t al = sizeof(at);
		char host[INET6_ADDRSTRLEN] = "?", where[INET6_ADDRSTRLEN + 16];
		unsigned port = 0;
		if (getsockname(lfd, (struct sockaddr *)&at, &al) < 0)
			at.ss_family = AF_UNSPEC;
		if (at.ss_family == AF_INET) {
			const struct sockaddr_in *in = (const struct sockaddr_in *)&at;
			inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
			port = ntohs(in->sin_port);
		} else if (at.ss_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&at;
			inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
			port = ntohs(in6->sin6_port);
		}
		snprintf(where, sizeof(where), at.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host,
			 port);
		dprintf(2, "airlock gateway: listening on %s (HTTP proxy; clients trust %s)\n",
			port ? where : listen_addr, ca_out ? ca_out : "the CA it made");
		rc = gw_engine_run(e);
		if (rc < 0)
			al_error_set(err, rc, "the event loop failed");
	}
	gw_engine_free(e);
	return rc;
}
