/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"

/* ---- error.c ---- */

static void test_error_set(void **state)
{
	struct al_error err = { 0 };
	assert_int_equal(al_error_set(&err, -ENOENT, "image %s does not exist", "x"), -ENOENT);
	assert_int_equal(err.code, -ENOENT);
	assert_string_equal(err.msg, "image x does not exist");
	assert_string_equal(al_error_message(&err), "image x does not exist");

	/* The first, more specific reason is kept. */
	assert_int_equal(al_error_set(&err, -EIO, "generic"), -EIO);
	assert_int_equal(err.code, -ENOENT);
	assert_string_equal(err.msg, "image x does not exist");

	al_error_clear(&err);
	assert_int_equal(err.code, 0);
	assert_string_equal(err.msg, "");
	/* Positive codes are made negative, 0 becomes -EIO. */
	assert_int_equal(al_error_set(&err, EPERM, "p"), -EPERM);
	assert_int_equal(err.code, -EPERM);
	al_error_clear(&err);
	assert_int_equal(al_error_set(&err, 0, "z"), -EIO);
	assert_int_equal(err.code, -EIO);

	/* No err: just the code. */
	assert_int_equal(al_error_set(NULL, -EINVAL, "ignored"), -EINVAL);
	al_error_clear(NULL);
	assert_string_equal(al_error_message(NULL), "unknown error");
}

static void test_error_errno(void **state)
{
	struct al_error err = { 0 };
	assert_int_equal(al_error_set_errno(&err, -ENOENT, "open %s", "/x"), -ENOENT);
	assert_string_equal(err.msg, "open /x: No such file or directory");

	/* A code without a message falls back to strerror. */
	struct al_error bare = { .code = -EACCES };
	assert_string_equal(al_error_message(&bare), "Permission denied");
}

static void test_error_truncates(void **state)
{
	struct al_error err = { 0 };
	char big[AL_ERROR_MSG_MAX * 2];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(al_error_set_errno(&err, -EIO, "%s", big), -EIO);
	assert_int_equal(strlen(err.msg), AL_ERROR_MSG_MAX - 1);
}

/* ---- log.c ---- */

static int log_fd = -1;

static int setup_log(void **state)
{
	log_fd = memfd_create("log", MFD_CLOEXEC);
	if (log_fd < 0)
		return -1;
	log_set_fd(log_fd);
	return 0;
}

static int teardown_log(void **state)
{
	log_set_fd(2);
	log_setup("airlock", LOG_LEVEL_INFO, LOG_FORMAT_HUMAN);
	close(log_fd);
	return 0;
}

/* What was logged since the last call, as a string the caller frees. */
static char *take_log(void)
{
	off_t end = lseek(log_fd, 0, SEEK_CUR);
	char *s = calloc(1, (size_t)end + 1);
	assert_non_null(s);
	assert_int_equal(pread(log_fd, s, (size_t)end, 0), end);
	assert_int_equal(ftruncate(log_fd, 0), 0);
	assert_int_equal(lseek(log_fd, 0, SEEK_SET), 0);
	return s;
}

static void test_log_human(void **state)
{
	log_setup("airlock", LOG_LEVEL_INFO, LOG_FORMAT_HUMAN);
	errno = ENOTTY;
	assert_int_equal(log_info("hello %d", 42), -EIO);
	assert_int_equal(errno, ENOTTY); /* logging keeps errno */
	assert_int_equal(log_warning("careful"), -EIO);
	assert_int_equal(log_error_errno(EACCES, "open %s", "x"), -EACCES);
	assert_int_equal(log_error_errno(-ENOENT, "stat"), -ENOENT);
	assert_int_equal(log_debug("hidden"), -EIO);
	char *s = take_log();
	assert_string_equal(s, "airlock: hello 42\n"
			       "airlock: warning: careful\n"
			       "airlock: open x: Permission denied\n"
			       "airlock: stat: No such file or directory\n");
	free(s);

	log_setup("sandboxd", LOG_LEVEL_DEBUG, LOG_FORMAT_HUMAN);
	assert_int_equal(log_get_level(), LOG_LEVEL_DEBUG);
	log_debug("now %s", "shown");
	s = take_log();
	assert_string_equal(s, "sandboxd: now shown\n");
	free(s);

	log_setup(NULL, LOG_LEVEL_ERROR, LOG_FORMAT_HUMAN);
	log_warning("filtered");
	log_error("kept");
	s = take_log();
	assert_string_equal(s, "sandboxd: kept\n");
	free(s);
}

static void test_log_json(void **state)
{
	log_setup("airlock", LOG_LEVEL_INFO, LOG_FORMAT_JSON);
	log_info("say \"hi\"\\\n\x01");
	log_error_errno(ENOENT, "gone");
	char *s = take_log();
	char *second = strchr(s, '\n');
	assert_non_null(second);
	*second++ = '\0';
	assert_true(strncmp(s, "{\"time\":\"", 9) == 0);
	assert_non_null(strstr(s, "\"level\":\"info\",\"program\":\"airlock\","
				  "\"msg\":\"say \\\"hi\\\"\\\\\\n\\u0001\"}"));
	assert_non_null(strstr(second, "\"level\":\"error\""));
	assert_non_null(strstr(second, "\"msg\":\"gone: No such file or directory\","
				       "\"errno\":2}\n"));
	free(s);
}

/* Every JSON line must stay one complete object, however much escaping
 * the message needs: a cut line would glue itself to the next one. */
static void test_log_json_long_lines_stay_whole(void **state)
{
	log_setup("airlock", LOG_LEVEL_INFO, LOG_FORMAT_JSON);
	char msg[5000];
	const char fills[] = { '"', '\x02', 'a', '\\' };
	for (size_t f = 0; f < sizeof(fills); f++) {
		memset(msg, fills[f], sizeof(msg) - 1);
		msg[sizeof(msg) - 1] = '\0';
		log_info("%s", msg);
		log_error_errno(EIO, "%s", msg);
		char *s = take_log();
		size_t len = strlen(s);
		/* Two lines, each ending the object properly. */
		char *nl = strchr(s, '\n');
		assert_non_null(nl);
		assert_true(nl > s + 2 && nl[-1] == '}' && nl[-2] == '"');
		assert_true(len > 2 && s[len - 1] == '\n' && s[len - 2] == '}');
		assert_null(strchr(nl + 1, '\n') == s + len - 1 ? NULL : "third line");
		assert_non_null(strstr(nl + 1, "\"errno\":5}"));
		free(s);
	}
}

static void test_level_names(void **state)
{
	enum log_level l = LOG_LEVEL_ERROR;
	assert_int_equal(log_level_from_string("debug", &l), 0);
	assert_int_equal(l, LOG_LEVEL_DEBUG);
	assert_int_equal(log_level_from_string("warning", &l), 0);
	assert_int_equal(l, LOG_LEVEL_WARNING);
	assert_int_equal(log_level_from_string("verbose", &l), -EINVAL);
	assert_int_equal(log_level_from_string("", &l), -EINVAL);
	assert_int_equal(log_level_from_string("DEBUG", &l), -EINVAL);
	assert_int_equal(l, LOG_LEVEL_WARNING);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_set),
		cmocka_unit_test(test_error_errno),
		cmocka_unit_test(test_error_truncates),
		cmocka_unit_test_setup_teardown(test_log_human, setup_log, teardown_log),
		cmocka_unit_test_setup_teardown(test_log_json, setup_log, teardown_log),
		cmocka_unit_test_setup_teardown(test_log_json_long_lines_stay_whole, setup_log,
						teardown_log),
		cmocka_unit_test(test_level_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
