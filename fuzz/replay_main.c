/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs a fuzz driver over saved inputs without libFuzzer, so the corpora
 * are replayed by every build (and under the sanitizers when the build has
 * them). Arguments are files or directories (not recursive).
 * Exit status: 0 when every input ran, 1 when one could not be read or
 * there was none at all (an empty or misplaced corpus checks nothing).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "fuzz.h"

/* libFuzzer's default -max_len is far below this; it only bounds memory. */
#define REPLAY_MAX_INPUT (16u * 1024 * 1024)

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_file(const char *path, size_t *count)
{
	_cleanup_free_ char *data = NULL;
	size_t len;
	int r = read_file_bounded(AT_FDCWD, path, REPLAY_MAX_INPUT, &data, &len);
	if (r < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, al_strerror(r));
		return r;
	}
	/* An exact-size copy, so that ASan sees reads past the input. */
	_cleanup_free_ uint8_t *exact = malloc(len ? len : 1);
	if (!exact)
		return -ENOMEM;
	if (len > 0)
		memcpy(exact, data, len);
	LLVMFuzzerTestOneInput(exact, len);
	(*count)++;
	return 0;
}

static int run_dir(const char *path, size_t *count)
{
	DIR *d = opendir(path);
	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", path, al_strerror(errno));
		return -errno;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **p = realloc(names, cap * sizeof(*names));
			if (!p) {
				r = -ENOMEM;
				break;
			}
			names = p;
		}
		if (asprintf(&names[n], "%s/%s", path, de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r == 0) {
		/* Sorted, so that a failure is reproducible by name. */
		qsort(names, n, sizeof(*names), cmp_names);
		for (size_t i = 0; i < n && r == 0; i++)
			r = run_file(names[i], count);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], al_strerror(errno));
			return 1;
		}
		int r = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i], &count);
		if (r < 0)
			return 1;
	}
	printf("replay: %zu inputs ran\n", count);
	if (count == 0) {
		fprintf(stderr, "replay: no input: the corpus is empty, nothing was checked\n");
		return 1;
	}
	return 0;
}
