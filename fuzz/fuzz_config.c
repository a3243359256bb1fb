/* SPDX-License-Identifier: Apache-2.0 */
/* Loads the input as a config file and walks every node through every
 * accessor, so the error paths run on whatever the parser built. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "fuzz.h"

static void visit(const struct config_node *n, unsigned depth)
{
	static const char *const choices[] = { "none", "restricted", "open", NULL };
	static const char *const keys[] = { "a", "b", "network", NULL };
	struct al_error err = { 0 };
	char path[256];
	const char *s;
	bool b;
	uint64_t u;
	int e;

	if (depth > CONFIG_MAX_DEPTH + 1)
		abort(); /* the loader's limit did not hold */
	if (config_node_line(n) == 0 || config_node_column(n) == 0)
		abort();
	config_node_path(n, path, sizeof(path));
	if (strlen(path) >= sizeof(path))
		abort();

	(void)config_get_str(n, NULL, &s, &err);
	al_error_clear(&err);
	(void)config_get_bool(n, "x", &b, &err);
	al_error_clear(&err);
	(void)config_get_u64(n, NULL, &u, &err);
	al_error_clear(&err);
	(void)config_get_size(n, NULL, &u, &err);
	al_error_clear(&err);
	(void)config_get_duration(n, NULL, &u, &err);
	al_error_clear(&err);
	(void)config_get_enum(n, NULL, choices, &e, &err);
	al_error_clear(&err);
	(void)config_map_check_keys(n, NULL, keys, &err);
	al_error_clear(&err);

	size_t count = config_node_count(n);
	for (size_t i = 0; i < count; i++) {
		if (config_node_kind(n) == CONFIG_MAP) {
			const char *k = config_map_key(n, i);
			const struct config_node *v = config_map_value(n, i);
			if (!k || !v || config_map_get(n, k) != v)
				abort(); /* keys are unique, so lookup finds this value */
			visit(config_map_key_node(n, i), depth + 1);
			visit(v, depth + 1);
		} else {
			const struct config_node *v = config_seq_item(n, i);
			if (!v)
				abort();
			visit(v, depth + 1);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config_doc *doc = NULL;
	struct al_error err = { 0 };
	int r = config_load_string("fuzz.yaml", (const char *)data, size, &doc, &err);
	if (r < 0) {
		if (doc || err.code != r || !err.msg[0])
			abort(); /* every refusal says why */
		return 0;
	}
	visit(config_root(doc), 0);
	config_doc_free(doc);
	return 0;
}
