/* SPDX-License-Identifier: Apache-2.0 */
/* State records, removal of hostile trees, and the status channel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdutil.h"
#include "common/parse.h"
#include "sandbox/proc.h"

static char tmpdir[256];

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/airlock-unit-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int teardown(void **state)
{
	sbx_rm_rf(tmpdir);
	return 0;
}

static void test_ids(void **state)
{
	char id[SBX_ID_LEN + 1];
	assert_int_equal(sbx_new_id(id), 0);
	assert_true(sbx_id_valid(id));
	char other[SBX_ID_LEN + 1];
	assert_int_equal(sbx_new_id(other), 0);
	assert_string_not_equal(id, other);
	assert_false(sbx_id_valid(NULL));
	assert_false(sbx_id_valid(""));
	assert_false(sbx_id_valid("0123456789abcde"));	 /* short */
	assert_false(sbx_id_valid("0123456789abcdef0")); /* long */
	assert_false(sbx_id_valid("0123456789ABCDEF"));	 /* upper case */
	assert_false(sbx_id_valid("../../etc/passwd"));
	assert_false(sbx_id_valid("0123456789abcde/"));
}

/* Where a home may go: /root, or one name below /home, nothing a path
 * could read otherwise. */
static void test_home_paths(void **state)
{
	static const char *const good[] = {
		"/root",       "/home/a",	"/home/_",
		"/home/agent", "/home/dev-1_x", "/home/abcdefghijklmnopqrstuvwxyz012345", /* 32 */
	};
	static const char *const bad[] = {
		"",
		"/",
		"root",
		"/root/",
		"/root/x",
		"//root",
		"/home",
		"/home/",
		"/home//a",
		"/home/a/",
		"/home/a/b",
		"/home/..",
		"/home/../etc",
		"/home/.a",
		"/home/Agent",
		"/home/1a",
		"/home/-a",
		"/home/a b",
		"/home/a\n",
		"/home/a.b",
		"/home/abcdefghijklmnopqrstuvwxyz0123456", /* 33 */
		"/etc",
		"/tmp/x",
		"/workspace",
		"home/a",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(sbx_home_path_valid(good[i]));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sbx_home_path_valid(bad[i]))
			fail_msg("home path '%s' taken", bad[i]);
	assert_false(sbx_home_path_valid(NULL));
}

/* The start time is field 22 of /proc/PID/stat, counted after the
 * parenthesised command name, which may itself hold spaces and ')'. */
static void test_starttime_is_field_22(void **state)
{
	char text[4096];
	int fd = open("/proc/self/stat", O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	assert_true(n > 0);
	text[n] = '\0';
	char *p = strrchr(text, ')') + 2; /* field 3 */
	for (int field = 3; field < 22; field++)
		p = strchr(p, ' ') + 1;
	uint64_t want, vsize;
	const char *end;
	assert_int_equal(parse_u64_prefix(p, &want, &end), 0);
	uint64_t got;
	assert_int_equal(sbx_proc_starttime(getpid(), &got), 0);
	assert_int_equal(got, want);
	/* And it is not the neighbouring field (vsize), which differs. */
	assert_int_equal(parse_u64_prefix(end + 1, &vsize, &end), 0);
	assert_int_not_equal(got, vsize);
}

static void settings(struct sbx_settings *set)
{
	sbx_settings_default(set);
	set->state_dir = tmpdir;
}

static void test_state_round_trip_and_damage(void **state)
{
	struct sbx_settings set;
	settings(&set);
	struct sbx_state st = { .init_pid = 4242,
				.init_start = 99,
				.slot = 7,
				.uid = SBX_DEFAULT_UID_BASE + 7 * SBX_RANGE,
				.created = 1700000000,
				.memory_bytes = 1 << 20 };
	assert_int_equal(sbx_new_id(st.id), 0);
	st.cg.present[0] = true;
	snprintf(st.cg.path[0], sizeof(st.cg.path[0]), "/sys/fs/cgroup/memory/airlock/%s", st.id);
	snprintf(st.image, sizeof(st.image), "host");
	struct sbx_paths p;
	assert_int_equal(sbx_paths_init(&set, st.id, &p, NULL), 0);
	assert_int_equal(mkdir(p.dir, 0700), 0);
	assert_int_equal(sbx_state_write(&p, &st), 0);

	struct sbx_state evil = st;
	snprintf(evil.workspace, sizeof(evil.workspace), "/tmp/ws\npid=1");
	assert_int_equal(sbx_state_write(&p, &evil), -EINVAL);
	evil = st;
	snprintf(evil.home, sizeof(evil.home), "/tmp/home\npid=1");
	assert_int_equal(sbx_state_write(&p, &evil), -EINVAL);

	/* A home is recorded when there is one, and only then. */
	char formatted[SBX_STATE_FILE_MAX];
	assert_true(sbx_state_format(&st, formatted, sizeof(formatted)) > 0);
	assert_null(strstr(formatted, "home="));
	struct sbx_state with_home = st;
	snprintf(with_home.home, sizeof(with_home.home), "/srv/sessions/s1/tree/home");
	assert_int_equal(sbx_state_write(&p, &with_home), 0);
	struct sbx_state home_back;
	assert_int_equal(sbx_state_read(&set, st.id, &home_back, NULL), 0);
	assert_string_equal(home_back.home, with_home.home);
	assert_int_equal(sbx_state_write(&p, &st), 0);

	struct sbx_state back;
	struct al_error err = { 0 };
	assert_int_equal(sbx_state_read(&set, st.id, &back, &err), 0);
	assert_int_equal(back.init_pid, 4242);
	assert_int_equal(back.init_start, 99);
	assert_int_equal(back.slot, 7);
	assert_int_equal(back.uid, SBX_DEFAULT_UID_BASE + 7 * SBX_RANGE);
	assert_string_equal(back.cg.path[0], st.cg.path[0]);
	assert_true(back.cg.present[0]);
	assert_false(back.cg.present[1]);

	/* A damaged file is an error that says what to do, never a guess. */
	/* Each damaged file: the text after "id=<id>\n" (or the whole file). */
	static const struct {
		bool with_id;
		const char *text;
	} bad[] = {
		{ true, "pid=0\nuid=5\n" },			   /* pid 0 */
		{ true, "pid=12\nuid=5\nunknown=1\n" },		   /* unknown key */
		{ true, "pid=12x\nuid=5\n" },			   /* junk number */
		{ true, "pid=12\n" },				   /* no uid */
		{ true, "pid=12\nuid=5\nslot=99999\n" },	   /* slot out of range */
		{ false, "id=0000000000000000\npid=12\nuid=5\n" }, /* someone else's id */
		{ false, "garbage" },
		/* injected or tampered lines: */
		{ true, "pid=12\npid=13\nuid=1610612736\nslot=0\n" }, /* key twice */
		{ true, "pid=12\nuid=1610612737\nslot=0\n" },	      /* uid not the slot's */
		{ true,
		  "pid=12\nuid=1610612736\nslot=0\ncgroup1=/tmp/victim\n" }, /* foreign path */
		{ true,
		  "pid=12\nuid=1610612736\nslot=0\ncgroup0=/sys/fs/cgroup/memory/x/../../etc\n" },
		{ true, "pid=12\nuid=1610612736\nslot=0\nephemeral=yes\n" },	/* not 0 or 1 */
		{ true, "pid=12\nuid=1610612736\nslot=0\nhome=\n" },		/* empty home */
		{ true, "pid=12\nuid=1610612736\nslot=0\nhome=/a\nhome=/b\n" }, /* twice */
	};
	char path[SBX_PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/state", p.dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[256];
		snprintf(text, sizeof(text), "%s%s%s%s", bad[i].with_id ? "id=" : "",
			 bad[i].with_id ? st.id : "", bad[i].with_id ? "\n" : "", bad[i].text);
		assert_int_equal(write_file_at(AT_FDCWD, path, text), 0);
		al_error_clear(&err);
		assert_int_equal(sbx_state_read(&set, st.id, &back, &err), -EBADMSG);
		assert_non_null(strstr(err.msg, "gc"));
	}
	/* A NUL would hide the lines after it from a C-string parser. */
	char good[SBX_STATE_FILE_MAX + 1];
	int n = sbx_state_format(&st, good, sizeof(good));
	assert_true(n > 0);
	char copy[SBX_STATE_FILE_MAX + 1];
	memcpy(copy, good, (size_t)n);
	assert_int_equal(sbx_state_parse(&set, st.id, copy, (size_t)n, &back), 0);
	memcpy(copy, good, (size_t)n);
	copy[n - 1] = '\0';
	assert_int_equal(sbx_state_parse(&set, st.id, copy, (size_t)n, &back), -EBADMSG);

	al_error_clear(&err);
	assert_int_equal(sbx_state_read(&set, "0123456789abcdef", &back, &err), -ENOENT);
	assert_int_equal(sbx_state_read(&set, "../../../etc/x", &back, &err), -EINVAL);
}

static void test_slots_are_exclusive(void **state)
{
	struct sbx_settings set;
	settings(&set);
	set.uid_slots = 3;
	uint32_t got[3];
	char ids[4][SBX_ID_LEN + 1];
	for (int i = 0; i < 4; i++)
		assert_int_equal(sbx_new_id(ids[i]), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sbx_claim_slot(&set, ids[i], &got[i], NULL), 0);
	assert_int_not_equal(got[0], got[1]);
	assert_int_not_equal(got[1], got[2]);
	assert_int_not_equal(got[0], got[2]);
	uint32_t none;
	assert_int_equal(sbx_claim_slot(&set, ids[3], &none, NULL), -EUSERS);
	/* Only the owner can release a slot. */
	sbx_release_slot(&set, got[0], ids[3]);
	assert_int_equal(sbx_claim_slot(&set, ids[3], &none, NULL), -EUSERS);
	sbx_release_slot(&set, got[0], ids[0]);
	assert_int_equal(sbx_claim_slot(&set, ids[3], &none, NULL), 0);
	assert_int_equal(none, got[0]);
}

/* A sandbox can leave any tree behind: deep, unreadable, full of links. */
static void test_rm_rf_hostile_tree(void **state)
{
	char root[512];
	snprintf(root, sizeof(root), "%s/tree", tmpdir);
	assert_int_equal(mkdir(root, 0755), 0);
	int fd = open(root, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	/* 3000 levels: far past PATH_MAX and any sane recursion depth. */
	int cur = dup(fd);
	for (int i = 0; i < 3000; i++) {
		assert_int_equal(mkdirat(cur, "d", 0755), 0);
		int next = openat(cur, "d", O_RDONLY | O_DIRECTORY);
		assert_true(next >= 0);
		if (i % 500 == 0) {
			assert_int_equal(symlinkat("/etc", next, "escape"), 0);
			int f = openat(next, "file", O_CREAT | O_WRONLY, 0);
			close(f);
		}
		close(cur);
		cur = next;
	}
	close(cur);
	assert_int_equal(mkdirat(fd, "locked", 0), 0); /* mode 000 */
	int f = openat(fd, "locked/x", O_CREAT | O_WRONLY, 0600);
	(void)f; /* root may do this; otherwise the directory just stays empty */
	if (f >= 0)
		close(f);
	assert_int_equal(symlinkat("/etc", fd, "etc-link"), 0);
	close(fd);

	assert_int_equal(sbx_rm_rf(root), 0);
	struct stat st;
	assert_int_equal(lstat(root, &st), -1);
	/* The links were removed, not followed. */
	assert_int_equal(stat("/etc/passwd", &st), 0);
	assert_int_equal(sbx_rm_rf(root), 0); /* already gone is fine */
}

static void send_raw(int fd, const void *p, size_t n)
{
	assert_int_equal(write(fd, p, n), (ssize_t)n);
}

static void test_status_channel_checks_every_record(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	struct sbx_msg m;
	assert_int_equal(sbx_msg_send(sv[0], SBX_MSG_EXITED, 3, NULL), 0);
	assert_int_equal(sbx_msg_recv(sv[1], &m), 0);
	assert_int_equal(m.kind, SBX_MSG_EXITED);
	assert_int_equal(m.value, 3);

	struct sbx_msg bad = { .magic = SBX_MSG_MAGIC, .kind = SBX_MSG_EXITED, .value = 300 };
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG); /* exit code out of range */
	bad = (struct sbx_msg){ .magic = 0x12345678, .kind = SBX_MSG_EXITED };
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG); /* wrong magic */
	bad = (struct sbx_msg){ .magic = SBX_MSG_MAGIC, .kind = 99 };
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG); /* unknown kind */
	bad = (struct sbx_msg){ .magic = SBX_MSG_MAGIC, .kind = SBX_MSG_SIGNALED, .value = 0 };
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG); /* no such signal */
	bad = (struct sbx_msg){ .magic = SBX_MSG_MAGIC, .kind = SBX_MSG_STARTED, .value = 1 };
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG); /* pid 1 is never ours to kill */
	bad = (struct sbx_msg){ .magic = SBX_MSG_MAGIC, .kind = SBX_MSG_ERROR };
	memset(bad.text, 'A', sizeof(bad.text)); /* unterminated text */
	send_raw(sv[0], &bad, sizeof(bad));
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG);
	/* A short record then end of stream. */
	send_raw(sv[0], &bad, 10);
	close(sv[0]);
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EBADMSG);
	assert_int_equal(sbx_msg_recv(sv[1], &m), -EPIPE);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids),
		cmocka_unit_test(test_home_paths),
		cmocka_unit_test(test_starttime_is_field_22),
		cmocka_unit_test_setup_teardown(test_state_round_trip_and_damage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slots_are_exclusive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rm_rf_hostile_tree, setup, teardown),
		cmocka_unit_test(test_status_channel_checks_every_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
