/* register.c — the OpenHands door's entry (openhands_register): its HTTP
 * routes and the action types /execute_action runs, each named with the
 * file that implements it. The table lives here, above the files it names,
 * so that openhands.c (the queue they all call) calls none of them. */
#include "openhands.h"

void openhands_register(void)
{
	static const struct http_route routes[] = {
		{"GET", "/alive", NULL, oh_alive, 0, TD_API_OPENHANDS},
		{"GET", "/server_info", NULL, oh_server_info, 0, TD_API_OPENHANDS},
		{"POST", "/execute_action", oh_admit_key, oh_execute_action, 0, TD_API_OPENHANDS},
		{"POST", "/list_files", oh_admit_key, oh_list_files, 0, TD_API_OPENHANDS},            /* transfer.c */
		{"POST", "/upload_file", oh_admit_key, oh_upload_file, 0, TD_API_OPENHANDS},          /* transfer.c */
		{"GET", "/download_files", oh_admit_key, oh_download_files, 0, TD_API_OPENHANDS},     /* transfer.c */
		{"GET", "/vscode/connection_token", oh_admit_key, oh_vscode_token, 0, TD_API_OPENHANDS},
	};
	static const struct oh_action acts[] = {
		{"run", oh_run_start},                   /* run.c */
		{"read", oh_read_start},                 /* files.c */
		{"write", oh_write_start},               /* files.c */
		{"edit", oh_edit_start},                 /* files.c */
		{"run_ipython", oh_ipython_start},       /* plugins.c */
		{"browse", oh_browse_start},             /* plugins.c */
		{"browse_interactive", oh_browse_start}, /* plugins.c */
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	oh_init(acts, sizeof acts / sizeof acts[0]);
}
