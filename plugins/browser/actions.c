/* termd-browser's requests: making sure Chromium runs, URLs and navigation, tabs, the
   browse_interactive calls bound to their signatures, and one request served into its answer. */
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

/* ---- URLs ---- */
static bool has_scheme(const char *u)
{
    if (!isalpha((unsigned char)u[0])) return false;
    const char *p = u + 1;
    while (isalnum((unsigned char)*p) || *p == '+' || *p == '-' || *p == '.') p++;
    if (*p != ':') return false;
    /* host:port is not a scheme */
    const char *q = p + 1;
    if (isdigit((unsigned char)*q)) {
        while (isdigit((unsigned char)*q)) q++;
        if (*q == 0 || *q == '/' || *q == '?' || *q == '#') return false;
    }
    return true;
}

static char *file_url(const char *abs)
{
    sbuf_t b = {0};
    sb_puts(&b, "file://");
    for (const unsigned char *p = (const unsigned char *)abs; *p; p++) {
        if (isalnum(*p) || strchr("/-._~!$&'()*+,;=:@", *p)) sb_add(&b, (const char *)p, 1);
        else sb_printf(&b, "%%%02X", *p);
    }
    return sb_take(&b);
}

/* url as given → what Chromium is asked to open: URLs as they are, paths (absolute or relative to
   cwd) as file:// URLs, host[:port]/path without a scheme as http:// */
static char *resolve_url(const char *u, const char *cwd)
{
    while (isspace((unsigned char)*u)) u++;
    size_t n = strlen(u);
    while (n && isspace((unsigned char)u[n - 1])) n--;
    char *s = strndup(u, n);
    if (has_scheme(s)) return s;
    char path[8192];
    if (s[0] == '/') snprintf(path, sizeof path, "%s", s);
    else if (s[0] == '~' && (s[1] == '/' || !s[1]) && getenv("HOME")) snprintf(path, sizeof path, "%s%s", getenv("HOME"), s + 1);
    else {
        snprintf(path, sizeof path, "%s/%s", cwd, s);
        struct stat st;
        if (stat(path, &st) != 0) {
            /* not a local file: does it look like a host? */
            size_t hl = strcspn(s, "/?#");
            bool dot = memchr(s, '.', hl) != NULL && hl > 0;
            bool local = (hl >= 9 && !strncmp(s, "localhost", 9)) || (hl > 0 && isdigit((unsigned char)s[0]) && dot);
            if ((dot && s[0] != '.') || local) {
                char *r = malloc(n + 8);
                sprintf(r, "http://%s", s);
                free(s);
                return r;
            }
        }
    }
    free(s);
    char *real = realpath(path, NULL);
    char *r = file_url(real ? real : path);
    free(real);
    return r;
}

/* ---- navigation ---- */
static void do_goto(ctx_t *c, const char *url_in)
{
    char *url = resolve_url(url_in, c->r->cwd);
    tab_t *t = active_tab();
    char err[ERRLEN];
    if (!t) { seterr(c, "no open tab"); free(url); return; }
    unsigned stops = t->stops;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "url", url);
    cJSON *r = tcall("Page.navigate", p, c->deadline, err);
    if (!r) {
        if (!strcmp(err, "timeout")) {
            cJSON_Delete(tcall("Page.stopLoading", NULL, mono_now() + 5, err));
            seterr(c, "Timeout: %s did not answer within %g seconds", url, c->r->timeout);
        } else seterr(c, "Cannot open %s: %s", url, err);
        free(url);
        return;
    }
    const char *et = jstr(r, "errorText");
    if (et && et[0]) {
        seterr(c, "%s at %s", et, url);
    } else if (jstr(r, "loaderId") && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isDownload"))) {
        t = active_tab();
        waitarg_t w = { t, stops, 0 };
        if (t && !cdp_pump_until(cond_stopped, &w, c->deadline) && B.alive) {
            cJSON_Delete(tcall("Page.stopLoading", NULL, mono_now() + 5, err));
            seterr(c, "Timeout: %s did not finish loading within %g seconds", url, c->r->timeout);
        }
    }
    cJSON_Delete(r);
    free(url);
}

static void do_history(ctx_t *c, int delta)
{
    char err[ERRLEN];
    cJSON *h = tcall("Page.getNavigationHistory", NULL, c->deadline, err);
    if (!h) { seterr(c, "%s", err); return; }
    int cur = cJSON_GetObjectItemCaseSensitive(h, "currentIndex") ? cJSON_GetObjectItemCaseSensitive(h, "currentIndex")->valueint : 0;
    cJSON *entries = cJSON_GetObjectItemCaseSensitive(h, "entries");
    cJSON *e = cJSON_GetArrayItem(entries, cur + delta);
    if (!e || cur + delta < 0) { cJSON_Delete(h); return; }        /* nothing to go to: no error */
    cJSON *idv = cJSON_GetObjectItemCaseSensitive(e, "id");
    char want[4096];
    snprintf(want, sizeof want, "%s", jstr(e, "url") ? jstr(e, "url") : "");
    tab_t *t = active_tab();
    unsigned stops = t->stops;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "entryId", idv ? idv->valuedouble : 0);
    cJSON_Delete(h);
    cJSON *r = tcall("Page.navigateToHistoryEntry", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return; }
    cJSON_Delete(r);
    /* a new document stops loading; a same-document entry only changes location.href */
    sbuf_t ex = {0};
    sb_puts(&ex, "location.href===");
    cJSON *ws = cJSON_CreateString(want);
    char *wj = cJSON_PrintUnformatted(ws);
    cJSON_Delete(ws);
    sb_puts(&ex, wj);
    sb_puts(&ex, "&&document.readyState==='complete'");
    free(wj);
    char *expr = sb_take(&ex);
    waitarg_t w = { t, stops, 0 };
    while (B.alive && mono_now() < c->deadline) {
        if (cdp_pump_until(cond_stopped, &w, fmin(mono_now() + 0.2, c->deadline))) break;
        cJSON *v = eval_value(expr, fmin(mono_now() + 1, c->deadline), err);
        bool done = cJSON_IsTrue(v);
        cJSON_Delete(v);
        if (done) break;
    }
    free(expr);
}

/* ---- tabs ---- */
static void activate(int idx)
{
    char err[ERRLEN];
    B.active = idx;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "targetId", B.tabs[idx].target);
    cJSON_Delete(cdp_call("Target.activateTarget", p, NULL, mono_now() + 5, err, sizeof err));
}

static void do_tab_close(ctx_t *c)
{
    char err[ERRLEN];
    tab_t *t = active_tab();
    if (!t) return;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "targetId", t->target);
    cJSON *r = cdp_call("Target.closeTarget", p, NULL, c->deadline, err, sizeof err);
    if (!r) { seterr(c, "tab_close: %s", err); return; }
    cJSON_Delete(r);
    t->gone = true;
    cdp_forget_gone_tabs();
    if (B.ntabs == 0) { if (cdp_new_tab(c->deadline, err, sizeof err) < 0) seterr(c, "tab_close: %s", err); }
    else activate(B.ntabs - 1);
}

/* ---- the action functions and their signatures ---- */
typedef struct { const char *name; const char *params[4]; int required; } fsig_t;
static const fsig_t SIGS[] = {
    {"goto", {"url"}, 1}, {"go_back", {0}, 0}, {"go_forward", {0}, 0},
    {"click", {"bid", "button", "modifiers"}, 1}, {"dblclick", {"bid", "button", "modifiers"}, 1},
    {"hover", {"bid"}, 1}, {"fill", {"bid", "value", "enable_autocomplete_menu"}, 2}, {"clear", {"bid"}, 1},
    {"select_option", {"bid", "options"}, 2}, {"press", {"bid", "key_comb"}, 2}, {"focus", {"bid"}, 1},
    {"scroll", {"delta_x", "delta_y"}, 2}, {"new_tab", {0}, 0}, {"tab_close", {0}, 0}, {"tab_focus", {"index"}, 1},
    {"noop", {"wait_ms"}, 0}, {"send_msg_to_user", {"text"}, 1}, {"report_infeasible", {"reason"}, 1},
    {"drag_and_drop", {"from_bid", "to_bid"}, 2}, {"upload_file", {"bid", "file"}, 2},
    {NULL, {0}, 0}
};
/* other spellings accepted for keyword arguments */
static const char *alias(const char *k)
{
    if (!strcmp(k, "text")) return "value";
    if (!strcmp(k, "dx")) return "delta_x";
    if (!strcmp(k, "dy")) return "delta_y";
    if (!strcmp(k, "option")) return "options";
    if (!strcmp(k, "key")) return "key_comb";
    if (!strcmp(k, "ms")) return "wait_ms";
    return k;
}

static bool bind(ctx_t *c, const pycall_t *call, const fsig_t *s, const cJSON *vals[4])
{
    int np = 0;
    while (np < 4 && s->params[np]) np++;
    for (int i = 0; i < 4; i++) vals[i] = NULL;
    int na = cJSON_GetArraySize(call->args);
    if (na > np) { seterr(c, "%s() takes %d argument%s but %d were given", s->name, np, np == 1 ? "" : "s", na); return false; }
    for (int i = 0; i < na; i++) vals[i] = cJSON_GetArrayItem(call->args, i);
    const cJSON *kw;
    cJSON_ArrayForEach(kw, call->kwargs) {
        const char *k = alias(kw->string);
        int i;
        for (i = 0; i < np; i++) if (!strcmp(s->params[i], k)) break;
        if (i == np) { seterr(c, "%s() got an unexpected keyword argument '%s'", s->name, kw->string); return false; }
        if (vals[i]) { seterr(c, "%s() got multiple values for argument '%s'", s->name, s->params[i]); return false; }
        vals[i] = kw;
    }
    for (int i = 0; i < s->required; i++)
        if (!vals[i]) { seterr(c, "%s() missing required argument '%s'", s->name, s->params[i]); return false; }
    return true;
}

static const char *str_arg(ctx_t *c, const fsig_t *s, const cJSON *v, int i, char *tmp, size_t tmplen)
{
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsNumber(v)) {
        if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) snprintf(tmp, tmplen, "%.0f", v->valuedouble);
        else snprintf(tmp, tmplen, "%g", v->valuedouble);
        return tmp;
    }
    seterr(c, "%s(): argument '%s' must be a str", s->name, s->params[i]);
    return NULL;
}

static bool num_arg(ctx_t *c, const fsig_t *s, const cJSON *v, int i, double *out)
{
    if (cJSON_IsNumber(v)) { *out = v->valuedouble; return true; }
    seterr(c, "%s(): argument '%s' must be a number", s->name, s->params[i]);
    return false;
}

static void run_call(ctx_t *c, const pycall_t *call)
{
    const fsig_t *s = NULL;
    for (int i = 0; SIGS[i].name; i++) if (!strcmp(SIGS[i].name, call->name)) { s = &SIGS[i]; break; }
    if (!s) {
        seterr(c, "Unknown action function '%s' (line %d). Known: goto, go_back, go_forward, click, dblclick, hover, fill, "
               "clear, select_option, press, focus, scroll, new_tab, tab_close, tab_focus, noop, send_msg_to_user, "
               "report_infeasible, drag_and_drop, upload_file", call->name, call->line);
        return;
    }
    const cJSON *v[4];
    if (!bind(c, call, s, v)) return;
    char t0[64];
    const char *bid = NULL;
    char *bidbuf = NULL;
    if (s->params[0] && (!strcmp(s->params[0], "bid") || !strcmp(s->params[0], "from_bid"))) {
        bidbuf = bid_of(v[0]);
        if (!bidbuf) { seterr(c, "%s(): bid must be a str such as '12'", s->name); return; }
        bid = bidbuf;
    }
    tab_t *t = active_tab();
    unsigned navs = t ? t->navs : 0, stops = t ? t->stops : 0;
    bool input = false;
    const char *n = s->name;
    if (!strcmp(n, "goto")) {
        const char *u = str_arg(c, s, v[0], 0, t0, sizeof t0);
        if (u) do_goto(c, u);
    } else if (!strcmp(n, "go_back")) do_history(c, -1);
    else if (!strcmp(n, "go_forward")) do_history(c, +1);
    else if (!strcmp(n, "click") || !strcmp(n, "dblclick")) {
        const char *button = v[1] ? str_arg(c, s, v[1], 1, t0, sizeof t0) : "left";
        if (button) do_click(c, bid, button, v[2], !strcmp(n, "click") ? 1 : 2);
        input = true;
    } else if (!strcmp(n, "hover")) do_hover(c, bid);
    else if (!strcmp(n, "fill")) {
        const char *text = str_arg(c, s, v[1], 1, t0, sizeof t0);
        if (text) do_fill(c, bid, text);
    } else if (!strcmp(n, "clear")) do_fill(c, bid, "");
    else if (!strcmp(n, "select_option")) { do_select(c, bid, v[1]); input = true; }
    else if (!strcmp(n, "press")) {
        const char *k = str_arg(c, s, v[1], 1, t0, sizeof t0);
        if (k) do_press(c, bid, k);
        input = true;
    } else if (!strcmp(n, "focus")) do_focus(c, bid);
    else if (!strcmp(n, "scroll")) {
        double dx, dy;
        if (num_arg(c, s, v[0], 0, &dx) && num_arg(c, s, v[1], 1, &dy)) do_scroll(c, dx, dy);
    } else if (!strcmp(n, "new_tab")) {
        char err[ERRLEN];
        if (cdp_new_tab(c->deadline, err, sizeof err) < 0) seterr(c, "new_tab: %s", err);
        else activate(B.active);
    } else if (!strcmp(n, "tab_close")) do_tab_close(c);
    else if (!strcmp(n, "tab_focus")) {
        double d;
        if (num_arg(c, s, v[0], 0, &d)) {
            int i = (int)d;
            if (d != floor(d)) seterr(c, "tab_focus(): index must be an int");
            else if (i < -B.ntabs || i >= B.ntabs) seterr(c, "tab_focus(%d): no such tab (%d open)", i, B.ntabs);
            else activate(i < 0 ? B.ntabs + i : i);
        }
    } else if (!strcmp(n, "noop")) {
        double ms = 1000;
        if (v[0] && num_arg(c, s, v[0], 0, &ms)) {}
        if (!c->err[0] && ms > 0) cdp_pump_until(NULL, NULL, fmin(mono_now() + ms / 1000, c->deadline));
    } else if (!strcmp(n, "send_msg_to_user") || !strcmp(n, "report_infeasible")) {
        str_arg(c, s, v[0], 0, t0, sizeof t0);
    } else if (!strcmp(n, "drag_and_drop")) {
        char *to = bid_of(v[1]);
        if (!to) seterr(c, "drag_and_drop(): to_bid must be a str");
        else do_drag(c, bid, to);
        free(to);
        input = true;
    } else if (!strcmp(n, "upload_file")) do_upload(c, bid, v[1]);
    free(bidbuf);
    if (input && B.alive) settle(navs, stops, c->deadline);
    if (B.alive) cdp_adopt_pending(c->deadline);
    cdp_forget_gone_tabs();
}

/* ---- the request ---- */
static bool ensure_browser(bool *restarted, char *err)
{
    if (!cdp_check_alive()) {
        if (B.ever_started) *restarted = true;
        if (cdp_start(err, ERRLEN) < 0) return false;
    }
    cdp_forget_gone_tabs();
    double dl = mono_now() + 30;
    tab_t *t = active_tab();
    if (t && t->crashed) {                       /* a crashed renderer: replace the tab */
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "targetId", t->target);
        cJSON_Delete(cdp_call("Target.closeTarget", p, NULL, dl, err, ERRLEN));
        t->gone = true;
        cdp_forget_gone_tabs();
        *restarted = true;
        note("[The tab had crashed; it was replaced by a new one]");
        t = NULL;
    }
    if (!t && cdp_new_tab(dl, err, ERRLEN) < 0) return false;
    err[0] = 0;
    return B.alive;
}

/* one go at the request: browser up, actions, observation; true when o holds an observation */
static bool run_once(ctx_t *c, obs_t *o, bool *restarted)
{
    request_t *r = c->r;
    char err[ERRLEN] = "";
    bool have_obs = false;
    if (!ensure_browser(restarted, err)) {
        seterr(c, "%s", err);
    } else {
        /* downloads land in <cwd>/.downloads */
        char dl[8192];
        snprintf(dl, sizeof dl, "%s/.downloads", r->cwd);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "behavior", "allow");
        cJSON_AddStringToObject(p, "downloadPath", dl);
        cJSON_AddBoolToObject(p, "eventsEnabled", 1);
        cJSON_Delete(cdp_call("Browser.setDownloadBehavior", p, NULL, c->deadline, err, sizeof err));
        if (r->kind == REQ_BROWSE) {
            do_goto(c, r->url);
            if (B.alive) cdp_adopt_pending(c->deadline);
        } else {
            pycall_t *calls = NULL;
            int n = pyparse(r->actions, &calls, err, sizeof err);
            if (n < 0) seterr(c, "Malformed browser action: %s", err);
            else if (n == 0) seterr(c, "No browser action given (expected calls such as click('12'), one per line)");
            for (int i = 0; i < n && !c->err[0] && B.alive && !stop_requested(); i++) {
                run_call(c, &calls[i]);
                if (c->err[0] && n > 1) {
                    char tmp[ERRLEN];
                    snprintf(tmp, sizeof tmp, "%s", c->err);
                    snprintf(c->err, sizeof c->err, "%.200s (line %d): %.780s", calls[i].text, calls[i].line, tmp);
                }
            }
            pycalls_free(calls, n > 0 ? n : 0);
        }
        if (B.alive) {
            if (active_tab()) {
                cJSON *rp = cJSON_CreateObject();
                cJSON_AddStringToObject(rp, "objectGroup", "termd");
                cdp_send_nowait("Runtime.releaseObjectGroup", rp, active_tab()->session);
            }
            if (B.ntabs == 0) cdp_new_tab(mono_now() + 10, err, sizeof err);
            double od = fmax(c->deadline, mono_now()) + OBS_GRACE;
            have_obs = observe(o, r->screenshot, od, err);
            if (!have_obs) seterr(c, "Could not read the page: %s", err);
        }
    }

    return have_obs;
}

void serve_request(request_t *r)
{
    ctx_t c = { .r = r };
    B.notes[0] = 0;
    double now = mono_now();
    c.deadline = r->received + r->timeout;
    if (c.deadline < now + 2) c.deadline = now + 2;   /* it waited behind others: still a short try */
    bool restarted = false;
    char *last_action;
    if (r->kind == REQ_BROWSE) {
        sbuf_t b = {0};
        char *u = resolve_url(r->url, r->cwd);
        sb_puts(&b, "goto(");
        py_repr(&b, u);
        sb_puts(&b, ")");
        free(u);
        last_action = sb_take(&b);
    } else last_action = strdup(r->actions);

    obs_t o;
    memset(&o, 0, sizeof o);
    bool have_obs = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        have_obs = run_once(&c, &o, &restarted);
        /* Chromium died under this request: start it again and do the request once more */
        if (B.alive || attempt == 1 || stop_requested() || !B.ever_started) break;
        obs_free(&o);
        memset(&o, 0, sizeof o);
        c.err[0] = 0;
        B.notes[0] = 0;
        restarted = true;
        c.deadline = fmax(c.deadline, mono_now() + 5);
    }
    if (!B.alive && !c.err[0])
        seterr(&c, "The browser stopped (%s); it will be started again on the next action",
               B.died_reason[0] ? B.died_reason : "crashed");

    bool error = c.err[0] != 0;
    const char *url = have_obs ? o.url : "";
    char *asked = r->kind == REQ_BROWSE ? resolve_url(r->url, r->cwd) : NULL;
    if (!have_obs && asked) url = asked;
    sbuf_t content = {0};
    sb_printf(&content, "[Current URL: %s]\n", url);
    if (r->kind == REQ_INTERACTIVE) {
        sb_printf(&content, "[Focused element bid: %s]\n", have_obs ? o.focused : "");
        sb_puts(&content, "\n");
    }
    if (B.notes[0]) sb_puts(&content, B.notes);
    if (error) {
        sb_puts(&content, "================ BEGIN error message ===============\n");
        sb_puts(&content, r->kind == REQ_BROWSE ? "The following error occurred when trying to visit the URL:\n"
                                                : "The following error occurred when executing the last action:\n");
        sb_printf(&content, "%s\n", c.err);
        sb_puts(&content, "================ END error message ===============\n");
    } else if (r->kind == REQ_INTERACTIVE) sb_puts(&content, "[Action executed successfully.]\n");
    if (r->kind == REQ_BROWSE) {
        sb_puts(&content, "============== BEGIN webpage content ==============\n");
        sb_puts(&content, have_obs ? o.text : "");
        sb_puts(&content, "\n============== END webpage content ==============\n");
    } else {
        sb_puts(&content, "Accessibility tree of the COMPLETE webpage:\nNote: [bid] is the unique alpha-numeric identifier "
                          "at the beginning of lines for each element in the AXTree. Always use bid to refer to elements "
                          "in your actions.\n============== BEGIN accessibility tree ==============\n");
        sb_puts(&content, have_obs ? o.axtree : "");
        sb_puts(&content, "\n============== END accessibility tree ==============\n");
    }
    char *ctext = sb_take(&content);

    cJSON *a = cJSON_CreateObject();
    cJSON_AddItemToObject(a, "id", cJSON_Duplicate(r->id, 1));
    cJSON_AddStringToObject(a, "observation", "browse");
    cJSON_AddStringToObject(a, "content", ctext);
    cJSON *ex = cJSON_AddObjectToObject(a, "extras");
    cJSON_AddStringToObject(ex, "url", url);
    cJSON_AddStringToObject(ex, "title", have_obs ? o.title : "");
    cJSON_AddStringToObject(ex, "axtree", have_obs ? o.axtree : "");
    cJSON_AddStringToObject(ex, "focused_element_bid", have_obs ? o.focused : "");
    cJSON_AddItemToObject(ex, "open_pages_urls", have_obs && o.pages ? cJSON_Duplicate(o.pages, 1) : cJSON_CreateArray());
    cJSON_AddNumberToObject(ex, "active_page_index", have_obs ? B.active : -1);
    cJSON_AddStringToObject(ex, "screenshot", have_obs && o.shot ? o.shot : "");
    cJSON_AddStringToObject(ex, "last_browser_action", last_action);
    cJSON_AddStringToObject(ex, "last_browser_action_error", c.err);
    cJSON_AddBoolToObject(ex, "error", error);
    cJSON_AddStringToObject(ex, "trigger_by_action", r->kind == REQ_BROWSE ? "browse" : "browse_interactive");
    cJSON_AddBoolToObject(ex, "restarted", restarted);
    answer(a);
    free(ctext);
    free(asked);
    free(last_action);
    obs_free(&o);
}

/* between requests: keep handling Chromium's events (dialogs must not wait for the next action) */
void worker_idle(void)
{
    struct pollfd pf[2] = {{wake_fd(), POLLIN, 0}, {B.alive ? B.rfd : -1, POLLIN, 0}};
    int rc = poll(pf, 2, 1000);
    if (rc <= 0) {
        if (B.alive) cdp_check_alive();          /* notice a dead Chromium before the next request */
        return;
    }
    if (pf[0].revents) {
        char buf[64];
        while (read(wake_fd(), buf, sizeof buf) > 0) {}
    }
    if (pf[1].revents && B.alive) cdp_pump_until(NULL, NULL, mono_now() + 0.01);
}
