/* v1.c — the OpenHands V1 door's entry (ohv1_register): its route table
 * (openhands listeners only: the files of ohv1/ each serve theirs) and
 * /, /alive, /health, /ready, /server_info. */
#include "ohv1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ============================================================== health */

static void v1_ok(struct http_txn *t)
{
	http_answer(t, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static void v1_ready(struct http_txn *t)
{
	http_answer(t, 200, "application/json", "{\"status\":\"ready\"}", 18);
}

static void v1_server_info(struct http_txn *t)
{
	uint64_t now = mono_us();
	/* V0's fields (resources) too: one /server_info for both */
	cJSON *o = oh_server_info_json();
	cJSON_DeleteItemFromObject(o, "uptime");
	cJSON_DeleteItemFromObject(o, "idle_time");
	cJSON_AddNumberToObject(o, "uptime", (double)(now - srv.start_mono) / 1e6);
	cJSON_AddNumberToObject(o, "idle_time", (double)(now - v1_last_work()) / 1e6);
	cJSON_AddStringToObject(o, "title", "termd (OpenHands agent-server workspace API)");
	cJSON_AddStringToObject(o, "version", TERMD_VERSION);
	cJSON_AddStringToObject(o, "sdk_version", TERMD_VERSION);
	cJSON_AddStringToObject(o, "tools_version", TERMD_VERSION);
	cJSON_AddStringToObject(o, "workspace_version", TERMD_VERSION);
	/* strings in V1's model (a typed client reads them as such) */
	cJSON_AddStringToObject(o, "build_git_sha", "unknown");
	cJSON_AddStringToObject(o, "build_git_ref", "unknown");
	cJSON_AddStringToObject(o, "python_version", "none (termd " TERMD_VERSION ")");
	cJSON *tools = cJSON_AddArrayToObject(o, "usable_tools");
	cJSON_AddItemToArray(tools, cJSON_CreateString("terminal"));
	cJSON_AddItemToArray(tools, cJSON_CreateString("file_editor"));
	cJSON_AddNullToObject(o, "runtime_idle_timeout_seconds");
	cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
	cJSON_AddItemToArray(caps, cJSON_CreateString("bash"));
	cJSON_AddItemToArray(caps, cJSON_CreateString("file"));
	cJSON_AddItemToArray(caps, cJSON_CreateString("git"));
	cJSON_AddNullToObject(o, "max_foreground_terminal_timeout_seconds");
	cJSON_AddStringToObject(o, "docs", "/docs");
	cJSON_AddStringToObject(o, "redoc", "/redoc");
	v1_json(t, 200, o);
}

/* ============================================================ register */

void ohv1_register(void)
{
	/* before V0's: /alive and /server_info are V1's (with V0's fields) */
	static const struct http_route routes[] = {
		{"GET", "/alive", NULL, v1_ok, 0, TD_API_OPENHANDS},
		{"GET", "/ready", NULL, v1_ready, 0, TD_API_OPENHANDS},
		{"GET", "/server_info", NULL, v1_server_info, 0, TD_API_OPENHANDS},
		{"POST", "/api/file/upload", v1_admit, v1_file_upload, 0, TD_API_OPENHANDS},
		{"GET", "/api/file/download", v1_admit, v1_file_download, 0, TD_API_OPENHANDS},
		{"GET", "/api/git/changes", v1_admit, v1_git_changes, 0, TD_API_OPENHANDS},
		{"GET", "/api/git/diff", v1_admit, v1_git_diff, 0, TD_API_OPENHANDS},
	};
	v1_answer_init();
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	v1_bash_routes();
	v1_events_routes();
	v1_socket_register();
}

void ohv1_register_late(void)
{
	/* after envd's and the web page's: a listener serving e2b or termd
	 * too keeps envd's /health and the web page's / */
	static const struct http_route routes[] = {
		{"GET", "/health", NULL, v1_ok, 0, TD_API_OPENHANDS},
		{"GET", "/", NULL, v1_server_info, 0, TD_API_OPENHANDS},   /* (V1 without static files) */
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
}

cJSON *ohv1_handover_save(void)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "commands", v1_bash_save());   /* (its last output first) */
	cJSON_AddItemToObject(o, "events", v1_events_save());
	return o;
}

void ohv1_handover_load(const cJSON *o)
{
	v1_events_load(cJSON_GetObjectItem(o, "events"));
	v1_bash_load(cJSON_GetObjectItem(o, "commands"));
}

void ohv1_handover_done(void)
{
	v1_bash_loaded();
}

void ohv1_shutdown(void)
{
	v1_socket_shutdown();
	v1_bash_shutdown();
	v1_events_shutdown();
}
