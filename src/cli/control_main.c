/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-control: `airlock run`, `session`, `turn` ... run here (airlock
 * execs it), with the control plane's libraries. */
#include <string.h>
#include <sys/prctl.h>

#include "cli/cli.h"
#include "cli/doc.h"

int main(int argc, char **argv)
{
	int r = cli_init();
	if (r)
		return r;
	prctl(PR_SET_NAME, "airlock", 0, 0, 0);
	/* For the manual and the completion, at build time. */
	if (argc == 2 && strcmp(argv[1], CLI_DOC_ARG) == 0)
		return cli_doc_control();
	if (argc < 2)
		return cli_fail("this is airlock's control program: run `airlock run`");
	return cmd_control(argc - 1, argv + 1);
}
