/* termd-browser's page layer: the active tab, CDP calls and script evaluation on it, the action
   error of a request, and waiting for a page to settle after input. The layer input.c, observe.c
   and actions.c stand on. */
#include "browser.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tab_t *active_tab(void)
{
    return (B.ntabs > 0 && B.active >= 0 && B.active < B.ntabs) ? &B.tabs[B.active] : NULL;
}

void seterr(ctx_t *c, const char *fmt, ...)
{
    if (c->err[0]) return;              /* the first error is the one that stopped the actions */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

/* a CDP call on the active tab */
cJSON *tcall(const char *method, cJSON *params, double deadline, char *err)
{
    tab_t *t = active_tab();
    if (!t) { cJSON_Delete(params); snprintf(err, ERRLEN, "no open tab"); return NULL; }
    return cdp_call(method, params, t->session, deadline, err, ERRLEN);
}

/* Runtime.evaluate returning the value (returnByValue) or NULL with err */
cJSON *eval_value(const char *expr, double deadline, char *err)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "expression", expr);
    cJSON_AddBoolToObject(p, "returnByValue", 1);
    cJSON_AddBoolToObject(p, "awaitPromise", 1);
    cJSON *r = tcall("Runtime.evaluate", p, deadline, err);
    if (!r) return NULL;
    cJSON *ex = cJSON_GetObjectItemCaseSensitive(r, "exceptionDetails");
    if (ex) {
        cJSON *exo = cJSON_GetObjectItemCaseSensitive(ex, "exception");
        const char *d = jstr(exo, "description");
        snprintf(err, ERRLEN, "script error: %s", d ? d : jstr(ex, "text") ? jstr(ex, "text") : "?");
        cJSON_Delete(r);
        return NULL;
    }
    cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(res, "value");
    cJSON_Delete(r);
    return v ? v : cJSON_CreateNull();
}

/* ---- waiting for pages ---- */
bool cond_stopped(void *a) { waitarg_t *w = a; return !B.alive || (w->t->stops > w->stops && !w->t->loading); }
bool cond_not_loading(void *a) { waitarg_t *w = a; return !B.alive || !w->t->loading; }
static bool cond_nav(void *a) { waitarg_t *w = a; return !B.alive || w->t->navs != w->navs || w->t->loading; }
static bool cond_loading_or_stopped(void *a) { waitarg_t *w = a; return !B.alive || w->t->loading || w->t->stops > w->stops; }

/* after an input action: if it started a navigation, wait for the new page (bounded) */
void settle(unsigned navs_before, unsigned stops_before, double deadline)
{
    tab_t *t = active_tab();
    if (!t) return;
    char err[ERRLEN];
    double now = mono_now();
    cJSON_Delete(eval_value("0", now + 2 < deadline ? now + 2 : deadline, err));   /* let events arrive */
    waitarg_t w = { t, stops_before, navs_before };
    now = mono_now();
    if (!cdp_pump_until(cond_nav, &w, fmin(now + 0.15, deadline))) return;
    now = mono_now();
    if (!cdp_pump_until(cond_loading_or_stopped, &w, fmin(now + 1.0, deadline))) return;
    cdp_pump_until(cond_stopped, &w, deadline);
}
