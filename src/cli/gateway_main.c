/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-gateway: the gateway's program. `airlock gateway ...` runs here
 * (airlock execs it), and so does a sandbox's gateway process, which
 * gw_start runs with GW_PROCESS_ARG and its socket (gateway/handover.h).
 */
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "gateway/gateway.h"
#include "gateway/handover.h"

int main(int argc, char **argv)
{
	int r = cli_init();
	if (r)
		return r;
	/* Ends without exit handlers: it serves from an empty root, where
	 * some (a sanitizer's leak check) would want a /proc. */
	if (argc == 2 && strcmp(argv[1], GW_PROCESS_ARG) == 0)
		_exit(gw_process_main(GW_PROCESS_FD));
	/* As `ps` shows airlock's other commands. */
	prctl(PR_SET_NAME, "airlock", 0, 0, 0);
	/* For the manual and the completion, at build time. */
	if (argc == 2 && strcmp(argv[1], CLI_DOC_ARG) == 0)
		return cli_doc_gateway();
	if (argc >= 2 && strcmp(argv[1], "gateway") == 0)
		return cmd_gateway(argc - 1, argv + 1);
	return cli_fail("this is airlock's gateway program: run `airlock gateway`");
}
