/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway process: start, narrow, attach sandboxes, stop.
 *
 * The parent forks; the child, still root, reads what it needs from the
 * host (vault, trust store, the operator's CA files, resolv.conf and
 * hosts), makes the sandbox's CA, then drops everything before it serves:
 * a private mount namespace whose root is an empty read-only tmpfs, its
 * own uid and gid with no supplementary groups (so no capability is left),
 * no_new_privs, not dumpable (no ptrace, no /proc/PID/mem from another
 * process of the same uid), and a seccomp filter. Only then does it report
 * ready, and only then can a sandbox's bytes reach it.
 */
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
#include "gateway/internal.h"

#define SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define START_TIMEOUT_MS 10000
#define GW_CA_DAYS 30
#define GW_NOFILE 65536

static uid_t gateway_uid(uid_t wanted)
{
	if (wanted)
		return wanted;
	const char *s = getenv("AIRLOCK_GATEWAY_UID");
	uint64_t v;
	if (s && parse_u64(s, &v) == 0 && v > 0 && v < 0xffffffffu)
		return (uid_t)v;
	return GW_DEFAULT_UID;
}

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
			struct scmp_arg_cmp a = { .arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = bit,
						  .datum_b = bit };
			rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &a);
		}
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* New sockets: IPv4 and IPv6 only — no netlink, packet, vsock, and no
	 * AF_UNIX (the host's abstract sockets, D-Bus...); socketpair(2) is
	 * separate and reaches nothing. */
	for (int fam = 0; rc == 0 && fam < 64; fam++)
		if (fam != AF_INET && fam != AF_INET6) {
			struct scmp_arg_cmp a = { .arg = 0, .op = SCMP_CMP_EQ,
						  .datum_a = (uint64_t)fam, .datum_b = 0 };
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
		struct scmp_arg_cmp a = { .arg = 0, .op = SCMP_CMP_NE, .datum_a = (uint64_t)self,
					  .datum_b = 0 };
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
			return al_error_set_errno(err, -errno, "gateway: cannot make a mount namespace");
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("airlock-gw", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=4k,nr_inodes=4,mode=0555") < 0 ||
		    chdir("/tmp") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
		    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0 ||
		    mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  NULL) < 0)
			return al_error_set_errno(err, -errno, "gateway: cannot empty its root");
		/* The bounding set too: nothing to regain, whatever runs. */
		for (int cap = 0; cap <= 63; cap++)
			if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
				return al_error_set_errno(err, -errno, "gateway: cannot drop capabilities");
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
			return al_error_set(err, -EINVAL, "--upstream-ca %s: no PEM certificate in it",
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
static int prepare_engine(const struct gw_config *cfg, bool exit_when_idle,
			  struct gw_engine **ret, char **ret_pem, size_t *ret_pem_len,
			  struct al_error *err)
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
	struct gw_engine_opts o = { .cfg = cfg, .vault = vault, .ca = ca, .upstream_store = store,
				    .system_bundle = bundle, .system_bundle_len = bundle_len,
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

static void __attribute__((noreturn)) child_main(const struct gw_config *cfg,
						 const struct gw_start_opts *so, int sock,
						 pid_t parent)
{
	struct al_error err = { 0 };
	struct gw_engine *e = NULL;
	char *pem = NULL;
	size_t pem_len = 0;
	int rc = prepare_engine(cfg, true, &e, &pem, &pem_len, &err);
	if (rc == 0)
		rc = drop_privileges(gateway_uid(so->uid), &err);
	if (rc < 0) {
		const char *msg = al_error_message(&err);
		ipc_send(sock, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
		_exit(1);
	}
	if (!so->detach) {
		/* The credential change cleared it: die with the caller. */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != parent)
			_exit(1);
	}
	if (ipc_send(sock, GW_IPC_READY, pem, pem_len, NULL, 0) < 0)
		_exit(1);
	free(pem);
	if (gw_engine_add_control(e, sock) < 0 || gw_engine_handle_signals(e) < 0)
		_exit(1);
	rc = gw_engine_run(e);
	gw_engine_free(e);
	_exit(rc < 0 ? 1 : 0);
}

static int recv_reply(int sock, uint32_t want, struct ipc_msg *m, size_t max_len,
		      struct al_error *err, const char *what)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int n;
	while ((n = poll(&p, 1, START_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (n == 0)
		return al_error_set(err, -ETIMEDOUT, "the gateway did not answer (%s)", what);
	const struct ipc_type types[] = { { want, (uint32_t)max_len, 0 },
					  { GW_IPC_ERROR, 4096, 0 } };
	int r = ipc_recv(sock, types, ARRAY_SIZE(types), m);
	if (r < 0)
		return al_error_set(err, -EIO, "the gateway died (%s)", what);
	if (m->type == GW_IPC_ERROR) {
		char msg[4097];
		size_t len = m->len < 4096 ? m->len : 4096;
		memcpy(msg, m->data ? (const char *)m->data : "", len);
		msg[len] = '\0';
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)msg[i] < 0x20)
				msg[i] = ' ';
		ipc_msg_done(m);
		return al_error_set(err, -EIO, "%s", msg);
	}
	return 0;
}

int gw_start(const struct gw_config *cfg, const struct gw_start_opts *so, struct gw_proc *ret,
	     struct al_error *err)
{
	int sp[2];
	if (ipc_socketpair(sp) < 0)
		return al_error_set_errno(err, -errno, "socketpair");
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(sp[0]);
		close(sp[1]);
		return al_error_set_errno(err, r, "cannot start the gateway");
	}
	if (pid == 0) {
		close(sp[0]);
		if (!so->detach)
			prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		else
			setsid();
		prctl(PR_SET_NAME, "airlock-gw", 0, 0, 0);
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		int logfd = so->log_fd >= 0 ? so->log_fd : devnull;
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(logfd, 2) < 0)
			_exit(1);
		int keep[] = { 0, 1, 2, sp[1] };
		if (close_all_fds_except(keep, ARRAY_SIZE(keep)) < 0)
			_exit(1);
		/* Nothing the caller had blocked or ignored carries over. */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_IGN);
		child_main(cfg, so, sp[1], parent);
	}
	close(sp[1]);
	memset(ret, 0, sizeof(*ret));
	ret->pid = pid;
	ret->ctl = sp[0];
	ret->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct ipc_msg m = IPC_MSG_INIT;
	int r = recv_reply(sp[0], GW_IPC_READY, &m, 64 * 1024, err, "starting");
	if (r < 0) {
		gw_stop(ret);
		return r;
	}
	ret->ca_pem = malloc(m.len + 1);
	if (!ret->ca_pem) {
		ipc_msg_done(&m);
		gw_stop(ret);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	memcpy(ret->ca_pem, m.data, m.len);
	ret->ca_pem[m.len] = '\0';
	ret->ca_pem_len = m.len;
	ipc_msg_done(&m);
	return 0;
}

int gw_attach_encode(const struct gw_attach *a, uint8_t *payload, size_t *ret_len, int *fds,
		     size_t *ret_n_fds)
{
	size_t idlen = strnlen(a->id, sizeof(a->id));
	if (idlen == 0 || idlen > GW_SANDBOX_ID_MAX)
		return -EINVAL;
	size_t n = 0;
	payload[0] = 0;
	for (int i = 0; i < GW_SLOTS; i++)
		if (a->fd[i] >= 0) {
			payload[0] |= (uint8_t)(1u << i);
			fds[n++] = a->fd[i];
		}
	memcpy(payload + 1, a->id, idlen);
	*ret_len = 1 + idlen;
	*ret_n_fds = n;
	return 0;
}

int gw_attach_decode(struct ipc_msg *m, struct gw_attach *ret)
{
	if (m->len < 2 || m->len > 1 + GW_SANDBOX_ID_MAX)
		return -EBADMSG;
	uint8_t mask = m->data[0];
	if (mask >> GW_SLOTS)
		return -EBADMSG;
	size_t want = (size_t)__builtin_popcount(mask);
	if (want != m->n_fds)
		return -EBADMSG;
	if (memchr(m->data + 1, '\0', m->len - 1))
		return -EBADMSG;
	struct gw_attach a;
	memcpy(a.id, m->data + 1, m->len - 1);
	a.id[m->len - 1] = '\0';
	size_t k = 0;
	for (int i = 0; i < GW_SLOTS; i++)
		a.fd[i] = (mask & (1u << i)) ? ipc_msg_take_fd(m, k++) : -1;
	*ret = a;
	return 0;
}

int gw_attach(struct gw_proc *gp, const char *sandbox_id, const struct gw_listeners *l,
	      int audit_fd, int watch_pidfd, struct al_error *err)
{
	struct gw_attach a = { .fd = {
		[GW_SLOT_PROXY] = l->proxy, [GW_SLOT_HTTP] = l->http, [GW_SLOT_HTTPS] = l->https,
		[GW_SLOT_DNS] = l->dns, [GW_SLOT_AUDIT] = audit_fd, [GW_SLOT_WATCH] = watch_pidfd,
		[GW_SLOT_CONTROL] = l->control,
	} };
	if (strlen(sandbox_id) > GW_SANDBOX_ID_MAX)
		return al_error_set(err, -EINVAL, "sandbox id too long");
	snprintf(a.id, sizeof(a.id), "%s", sandbox_id);
	uint8_t payload[1 + GW_SANDBOX_ID_MAX];
	int fds[GW_SLOTS];
	size_t len, n;
	if (gw_attach_encode(&a, payload, &len, fds, &n) < 0)
		return al_error_set(err, -EINVAL, "bad sandbox id");
	int r = ipc_send(gp->ctl, GW_IPC_ATTACH, payload, len, fds, n);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot reach the gateway");
	struct ipc_msg m = IPC_MSG_INIT;
	r = recv_reply(gp->ctl, GW_IPC_ATTACHED, &m, 0, err, "attaching the sandbox");
	if (r < 0)
		return r;
	ipc_msg_done(&m);
	return 0;
}

static void proc_free(struct gw_proc *gp)
{
	if (gp->ctl >= 0)
		close(gp->ctl);
	if (gp->pidfd >= 0)
		close(gp->pidfd);
	free(gp->ca_pem);
	memset(gp, 0, sizeof(*gp));
	gp->ctl = gp->pidfd = -1;
}

void gw_stop(struct gw_proc *gp)
{
	if (gp->pid > 0) {
		kill(gp->pid, SIGTERM);
		bool gone = false;
		if (gp->pidfd >= 0) {
			struct pollfd p = { .fd = gp->pidfd, .events = POLLIN };
			int n;
			while ((n = poll(&p, 1, 1000)) < 0 && errno == EINTR)
				;
			gone = n > 0;
		}
		if (!gone)
			kill(gp->pid, SIGKILL);
		while (waitpid(gp->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	proc_free(gp);
}

void gw_release(struct gw_proc *gp)
{
	proc_free(gp);
}

int gw_serve_standalone(const struct gw_config *cfg, const char *listen_addr, const char *ca_out,
			int audit_fd, struct al_error *err)
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
		rc = drop_privileges(gateway_uid(0), err);
	if (rc == 0 && gw_engine_handle_signals(e) < 0)
		rc = al_error_set(err, -ENOMEM, "cannot handle signals");
	if (rc == 0) {
		signal(SIGPIPE, SIG_IGN);
		/* Ready, and nothing of root's left: a caller waiting for this
		 * line may send requests. */
		dprintf(2, "airlock gateway: listening on %s (HTTP proxy; clients trust %s)\n",
			listen_addr, ca_out ? ca_out : "the CA it made");
		rc = gw_engine_run(e);
		if (rc < 0)
			al_error_set(err, rc, "the event loop failed");
	}
	gw_engine_free(e);
	return rc;
}

int gw_set_policy(const char *control_path, const char *text, size_t len,
		  uint64_t *ret_generation, struct al_error *err)
{
	if (len > GW_POLICY_TEXT_MAX)
		return al_error_set(err, -E2BIG, "the policy is larger than %u bytes",
				    GW_POLICY_TEXT_MAX);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(control_path) >= sizeof(sa.sun_path))
		return al_error_set(err, -ENAMETOOLONG, "%s: path too long", control_path);
	memcpy(sa.sun_path, control_path, strlen(control_path) + 1);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return al_error_set_errno(err, -errno, "the sandbox's gateway is not reachable at %s",
					  control_path);
	int r = ipc_send(fd, GW_IPC_POLICY, text, len, NULL, 0);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot reach the gateway");
	struct ipc_msg m = IPC_MSG_INIT;
	r = recv_reply(fd, GW_IPC_POLICY_SET, &m, 32, err, "changing the policy");
	if (r < 0)
		return r;
	char g[33];
	memcpy(g, m.data ? (const char *)m.data : "", m.len);
	g[m.len] = '\0';
	ipc_msg_done(&m);
	uint64_t gen;
	if (parse_u64(g, &gen) < 0)
		return al_error_set(err, -EBADMSG, "unexpected answer from the gateway");
	*ret_generation = gen;
	return 0;
}
