/* plugins.c — OpenHands' `run_ipython`, `browse` and
 * `browse_interactive` on the jupyter and browser plugins' actions, answers
 * in OpenHands' shapes. */
#include "openhands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================ run_ipython, browse */

static void ipython_answered(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {
		const char *code = oh_ans_code(ans);
		if (code && (strcmp(code, "unknown_action") == 0 || strcmp(code, "bad_request") == 0) &&
		    strstr(oh_ans_content(ans), "plugin"))
			oh_done_error(r, NO_JUPYTER);
		else if (code && strcmp(code, "unknown_action") == 0)
			oh_done_error(r, NO_JUPYTER);
		else
			oh_done_error(r, oh_ans_content(ans));
		return;
	}
	const char *c = oh_ans_content(ans);
	const char *tail = NULL;
	for (const char *p = strstr(c, "\n[Jupyter current working directory: "); p;
	     p = strstr(p + 1, "\n[Jupyter current working directory: "))
		tail = p;
	size_t bl = tail ? (size_t)(tail - c) : strlen(c);
	while (bl && oh_py_space((unsigned char)c[bl - 1]))
		bl--;
	buf_t out = {0};
	buf_append(&out, c, bl);
	if (oh_arg_true(r, "include_extra", 1) && tail)
		buf_puts(&out, tail);
	cJSON *o = oh_obs_new("Code executed in IPython cell.", "run_ipython", out.p ? out.p : "");
	buf_free(&out);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	const char *code = oh_arg_str(r, "code");
	cJSON_AddStringToObject(ex, "code", code ? code : "");
	const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(ans, "extras"), "image_urls");
	if (cJSON_IsArray(imgs) && cJSON_GetArraySize(imgs) > 0)
		cJSON_AddItemToObject(ex, "image_urls", cJSON_Duplicate(imgs, 1));
	else
		cJSON_AddNullToObject(ex, "image_urls");
	cJSON_AddBoolToObject(o, "success", 1);
	oh_done(r, o);
}

void oh_ipython_start(struct ohreq *r)
{
	const char *code = oh_arg_str(r, "code");
	if (!actions_find("run_ipython")) {
		oh_done_error(r, NO_JUPYTER);
		return;
	}
	if (!code) {
		oh_done_error(r, "IPythonRunCellAction needs a string 'code' argument");
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "code", code);
	if (r->has_timeout)
		cJSON_AddNumberToObject(a, "timeout", r->timeout);
	const char *init = oh_arg_str(r, "kernel_init_code");
	if (init && *init)
		cJSON_AddStringToObject(a, "kernel_init_code", init);
	oh_call(r, "run_ipython", a, ipython_answered);
}

static void browse_answered(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {
		const char *code = oh_ans_code(ans);
		if (code && (strcmp(code, "unknown_action") == 0 || strcmp(code, "bad_request") == 0))
			oh_done_error(r, NO_BROWSER);
		else
			oh_done_error(r, oh_ans_content(ans));
		return;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	int interactive = strcmp(r->type, "browse_interactive") == 0;
	const char *url = oh_jstr(ex, "url"), *bid = oh_jstr(ex, "focused_element_bid");
	const char *err = oh_jstr(ex, "last_browser_action_error");
	int error = oh_jtrue(ex, "error");
	url = url ? url : "";
	bid = bid ? bid : "";
	err = err ? err : "";
	buf_t c = {0};
	buf_printf(&c, "[Current URL: %s]\n", url);
	if (interactive) {
		buf_printf(&c, "[Focused element bid: %s]\n\n", bid);
		if (error)
			buf_printf(&c, "================ BEGIN error message ===============\n"
				   "The following error occurred when executing the last action:\n%s\n"
				   "================ END error message ===============\n", err);
		else
			buf_puts(&c, "[Action executed successfully.]\n");
		const char *ax = oh_jstr(ex, "axtree");
		buf_printf(&c, "Accessibility tree of the COMPLETE webpage:\nNote: [bid] is the unique "
			   "alpha-numeric identifier at the beginning of lines for each element in the "
			   "AXTree. Always use bid to refer to elements in your actions.\n"
			   "============== BEGIN accessibility tree ==============\n%s\n"
			   "============== END accessibility tree ==============\n", ax ? ax : "");
	} else {
		if (error)
			buf_printf(&c, "================ BEGIN error message ===============\n"
				   "The following error occurred when trying to visit the URL:\n%s\n"
				   "================ END error message ===============\n", err);
		buf_printf(&c, "============== BEGIN webpage content ==============\n%s\n"
			   "============== END webpage content ==============\n", oh_ans_content(ans));
	}
	cJSON *o = oh_obs_new("Visited URL", "browse", c.p);
	buf_free(&c);
	cJSON *x = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(x, "url", url);
	cJSON_AddStringToObject(x, "trigger_by_action", r->type);
	const char *shot = oh_jstr(ex, "screenshot");
	cJSON_AddStringToObject(x, "screenshot", shot ? shot : "");
	cJSON_AddNullToObject(x, "screenshot_path");
	cJSON_AddStringToObject(x, "set_of_marks", "");
	cJSON_AddBoolToObject(x, "error", error);
	cJSON_AddItemToObject(x, "goal_image_urls", cJSON_CreateArray());
	const cJSON *pages = cJSON_GetObjectItemCaseSensitive(ex, "open_pages_urls");
	cJSON_AddItemToObject(x, "open_pages_urls",
			      cJSON_IsArray(pages) ? cJSON_Duplicate(pages, 1) : cJSON_CreateArray());
	cJSON_AddNumberToObject(x, "active_page_index", oh_jnum(ex, "active_page_index", 0));
	cJSON_AddItemToObject(x, "dom_object", cJSON_CreateObject());
	cJSON_AddItemToObject(x, "axtree_object", cJSON_CreateObject());
	cJSON_AddItemToObject(x, "extra_element_properties", cJSON_CreateObject());
	const char *last = oh_jstr(ex, "last_browser_action");
	cJSON_AddStringToObject(x, "last_browser_action", last ? last : "");
	cJSON_AddStringToObject(x, "last_browser_action_error", err);
	cJSON_AddStringToObject(x, "focused_element_bid", bid);
	cJSON_AddBoolToObject(x, "filter_visible_only", 0);
	oh_done(r, o);
}

void oh_browse_start(struct ohreq *r)
{
	if (!actions_find(r->type)) {
		oh_done_error(r, NO_BROWSER);
		return;
	}
	cJSON *a = cJSON_CreateObject();
	int interactive = strcmp(r->type, "browse_interactive") == 0;
	const char *key = interactive ? "browser_actions" : "url";
	const char *v = oh_arg_str(r, key);
	cJSON_AddStringToObject(a, key, v ? v : "");
	if (r->has_timeout)
		cJSON_AddNumberToObject(a, "timeout", r->timeout);
	oh_call(r, r->type, a, browse_answered);
}
