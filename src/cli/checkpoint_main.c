/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-checkpoint: `airlock checkpoint ...` runs here (airlock execs it). */
#include <string.h>
#include <sys/prctl.h>

#include "cli/cli.h"
#include "cli/doc.h"

int main(int argc, char **argv)
{
	int r = cli_init();
	if (r)
		return r;
	/* As `ps` shows airlock's other commands. */
	prctl(PR_SET_NAME, "airlock", 0, 0, 0);
	/* For the manual and the completion, at build time. */
	if (argc == 2 && strcmp(argv[1], CLI_DOC_ARG) == 0)
		return cli_doc_checkpoint();
	if (argc >= 2 && strcmp(argv[1], "checkpoint") == 0)
		return cmd_checkpoint(argc - 1, argv + 1);
	return cli_fail("this is airlock's checkpoint program: run `airlock checkpoint`");
}
