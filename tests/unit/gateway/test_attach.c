/* SPDX-License-Identifier: Apache-2.0 */
/* The ATTACH frame: a sandbox's descriptors in named slots, over a real
 * socket pair, and frames that do not match refused whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ipc.h"
#include "gateway/internal.h"

static const struct ipc_type types[] = { { GW_IPC_ATTACH, 1 + GW_SANDBOX_ID_MAX, GW_SLOTS } };

static ino_t ino(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

static void test_roundtrip(void **state)
{
	int sp[2];
	assert_int_equal(ipc_socketpair(sp), 0);
	int p1[2], p2[2];
	assert_int_equal(pipe2(p1, O_CLOEXEC), 0);
	assert_int_equal(pipe2(p2, O_CLOEXEC), 0);
	struct gw_attach a = { .id = "sbx-1" };
	for (int i = 0; i < GW_SLOTS; i++)
		a.fd[i] = -1;
	a.fd[GW_SLOT_HTTPS] = p1[0];
	a.fd[GW_SLOT_WATCH] = p2[1];
	uint8_t payload[1 + GW_SANDBOX_ID_MAX];
	int fds[GW_SLOTS];
	size_t len, n;
	assert_int_equal(gw_attach_encode(&a, payload, &len, fds, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(ipc_send(sp[0], GW_IPC_ATTACH, payload, len, fds, n), 0);
	struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(sp[1], types, 1, &m), 0);
	struct gw_attach b;
	assert_int_equal(gw_attach_decode(&m, &b), 0);
	ipc_msg_done(&m);
	assert_string_equal(b.id, "sbx-1");
	for (int i = 0; i < GW_SLOTS; i++) {
		if (i == GW_SLOT_HTTPS || i == GW_SLOT_WATCH)
			assert_true(b.fd[i] >= 0);
		else
			assert_int_equal(b.fd[i], -1);
	}
	/* The same files, each in its own slot. */
	assert_true(ino(b.fd[GW_SLOT_HTTPS]) == ino(p1[0]));
	assert_true(ino(b.fd[GW_SLOT_WATCH]) == ino(p2[1]));
	close(b.fd[GW_SLOT_HTTPS]);
	close(b.fd[GW_SLOT_WATCH]);
	close(p1[0]), close(p1[1]), close(p2[0]), close(p2[1]);
	close(sp[0]), close(sp[1]);
}

/* Sends payload with k descriptors, returns what decode says (and checks
 * that nothing was taken on refusal). */
static int decode_raw(const uint8_t *payload, size_t len, size_t k)
{
	int sp[2];
	assert_int_equal(ipc_socketpair(sp), 0);
	int fds[GW_SLOTS];
	for (size_t i = 0; i < k; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(ipc_send(sp[0], GW_IPC_ATTACH, payload, len, fds, k), 0);
	for (size_t i = 0; i < k; i++)
		close(fds[i]);
	struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(sp[1], types, 1, &m), 0);
	struct gw_attach b;
	int r = gw_attach_decode(&m, &b);
	if (r < 0)
		for (size_t i = 0; i < m.n_fds; i++)
			assert_true(m.fds[i] >= 0); /* nothing taken */
	else
		for (int i = 0; i < GW_SLOTS; i++)
			if (b.fd[i] >= 0)
				close(b.fd[i]);
	ipc_msg_done(&m);
	close(sp[0]), close(sp[1]);
	return r;
}

static void test_mismatches_refused(void **state)
{
	uint8_t p[1 + GW_SANDBOX_ID_MAX + 1];
	memset(p, 'a', sizeof(p));
	p[0] = 1u << GW_SLOT_PROXY;
	assert_int_equal(decode_raw(p, 4, 1), 0);
	/* More, or fewer, descriptors than the mask says. */
	assert_int_equal(decode_raw(p, 4, 2), -EBADMSG);
	assert_int_equal(decode_raw(p, 4, 0), -EBADMSG);
	/* Bits beyond the last slot. */
	p[0] = (uint8_t)(1u << GW_SLOTS);
	assert_int_equal(decode_raw(p, 4, 1), -EBADMSG);
	/* No id, or a NUL inside it. */
	p[0] = 0;
	assert_int_equal(decode_raw(p, 1, 0), -EBADMSG);
	p[2] = '\0';
	assert_int_equal(decode_raw(p, 4, 0), -EBADMSG);
}

static void test_encode_refuses_bad_ids(void **state)
{
	struct gw_attach a = { .id = "" };
	for (int i = 0; i < GW_SLOTS; i++)
		a.fd[i] = -1;
	uint8_t payload[1 + GW_SANDBOX_ID_MAX];
	int fds[GW_SLOTS];
	size_t len, n;
	assert_int_equal(gw_attach_encode(&a, payload, &len, fds, &n), -EINVAL);
	memset(a.id, 'x', GW_SANDBOX_ID_MAX);
	a.id[GW_SANDBOX_ID_MAX] = '\0';
	assert_int_equal(gw_attach_encode(&a, payload, &len, fds, &n), 0);
	assert_int_equal(len, 1 + GW_SANDBOX_ID_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_mismatches_refused),
		cmocka_unit_test(test_encode_refuses_bad_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
