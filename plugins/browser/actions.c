/* termd-browser's requests: making sure Chromium runs, the browse and browse_interactive actions
   (navigation, bid → element, DevTools input events, tabs), the observation (page text, AX tree
   flattened BrowserGym-style with bids, tabs, screenshot) and the answer. */
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

static const char PAGE_JS[] =
#include "page_js.inc"
;

#define ERRLEN 1024
#define OBS_GRACE 10.0            /* seconds an observation may take after the action's deadline */

typedef struct {
    request_t *r;
    double deadline;
    char err[ERRLEN];             /* the action error (last_browser_action_error) */
} ctx_t;

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static tab_t *active_tab(void)
{
    return (B.ntabs > 0 && B.active >= 0 && B.active < B.ntabs) ? &B.tabs[B.active] : NULL;
}

static void seterr(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(ctx_t *c, const char *fmt, ...)
{
    if (c->err[0]) return;              /* the first error is the one that stopped the actions */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

/* a CDP call on the active tab */
static cJSON *tcall(const char *method, cJSON *params, double deadline, char *err)
{
    tab_t *t = active_tab();
    if (!t) { cJSON_Delete(params); snprintf(err, ERRLEN, "no open tab"); return NULL; }
    return cdp_call(method, params, t->session, deadline, err, ERRLEN);
}

/* Runtime.evaluate returning the value (returnByValue) or NULL with err */
static cJSON *eval_value(const char *expr, double deadline, char *err)
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
typedef struct { tab_t *t; unsigned stops, navs; } waitarg_t;
static bool cond_stopped(void *a) { waitarg_t *w = a; return !B.alive || (w->t->stops > w->stops && !w->t->loading); }
static bool cond_not_loading(void *a) { waitarg_t *w = a; return !B.alive || !w->t->loading; }
static bool cond_nav(void *a) { waitarg_t *w = a; return !B.alive || w->t->navs != w->navs || w->t->loading; }
static bool cond_loading_or_stopped(void *a) { waitarg_t *w = a; return !B.alive || w->t->loading || w->t->stops > w->stops; }

/* after an input action: if it started a navigation, wait for the new page (bounded) */
static void settle(unsigned navs_before, unsigned stops_before, double deadline)
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

/* ---- elements ---- */
static char *bid_of(const cJSON *v)
{
    char buf[64];
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) {
        snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
        return strdup(buf);
    }
    return NULL;
}

/* the element a bid names → a remote object id (caller frees), or NULL with the error set */
static char *resolve_bid(ctx_t *c, const char *bid)
{
    char err[ERRLEN];
    cJSON *bs = cJSON_CreateString(bid);
    char *bj = cJSON_PrintUnformatted(bs);
    cJSON_Delete(bs);
    sbuf_t e = {0};
    sb_puts(&e, "(function(b){function f(root){var e=root.querySelector('[bid=\"'+CSS.escape(b)+'\"]');if(e)return e;"
                "var all=root.querySelectorAll('*');for(var i=0;i<all.length;i++){var x=all[i];"
                "if(x.shadowRoot){e=f(x.shadowRoot);if(e)return e;}"
                "if(x.tagName==='IFRAME'||x.tagName==='FRAME'){try{if(x.contentDocument){e=f(x.contentDocument);if(e)return e;}}catch(err){}}}"
                "return null;}return f(document);})(");
    sb_puts(&e, bj);
    sb_puts(&e, ")");
    free(bj);
    char *expr = sb_take(&e);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "expression", expr);
    cJSON_AddStringToObject(p, "objectGroup", "termd");
    free(expr);
    cJSON *r = tcall("Runtime.evaluate", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return NULL; }
    cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");
    const char *oid = jstr(res, "objectId");
    char *out = oid ? strdup(oid) : NULL;
    cJSON_Delete(r);
    if (!out) seterr(c, "Could not find element with bid '%s' on the page", bid);
    return out;
}

/* calls fn on the element with optional args; returns the (by value) result or NULL */
static cJSON *call_on(ctx_t *c, const char *oid, const char *fn, cJSON *args)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "objectId", oid);
    cJSON_AddStringToObject(p, "functionDeclaration", fn);
    cJSON_AddBoolToObject(p, "returnByValue", 1);
    if (args) cJSON_AddItemToObject(p, "arguments", args);
    cJSON *r = tcall("Runtime.callFunctionOn", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return NULL; }
    cJSON *ex = cJSON_GetObjectItemCaseSensitive(r, "exceptionDetails");
    if (ex) {
        const char *d = jstr(cJSON_GetObjectItemCaseSensitive(ex, "exception"), "description");
        seterr(c, "script error: %s", d ? d : "?");
        cJSON_Delete(r);
        return NULL;
    }
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "result"), "value");
    cJSON_Delete(r);
    return v ? v : cJSON_CreateNull();
}

static bool el_point(ctx_t *c, const char *oid, const char *bid, double *x, double *y)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "objectId", oid);
    cJSON_Delete(tcall("DOM.scrollIntoViewIfNeeded", p, c->deadline, err));
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "objectId", oid);
    cJSON *r = tcall("DOM.getContentQuads", p, c->deadline, err);
    cJSON *quads = cJSON_GetObjectItemCaseSensitive(r, "quads"), *q;
    bool ok = false;
    cJSON_ArrayForEach(q, quads) {
        if (cJSON_GetArraySize(q) != 8) continue;
        double v[8], area = 0;
        for (int i = 0; i < 8; i++) v[i] = cJSON_GetArrayItem(q, i)->valuedouble;
        for (int i = 0; i < 4; i++) { int j = (i + 1) % 4; area += v[2 * i] * v[2 * j + 1] - v[2 * j] * v[2 * i + 1]; }
        if (fabs(area) < 1) continue;
        *x = (v[0] + v[2] + v[4] + v[6]) / 4;
        *y = (v[1] + v[3] + v[5] + v[7]) / 4;
        ok = true;
        break;
    }
    cJSON_Delete(r);
    if (!ok) seterr(c, "Element with bid '%s' is not visible (it has no box on the page)", bid);
    return ok;
}

static bool mouse(ctx_t *c, const char *type, double x, double y, const char *button, int clicks, int mods)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddNumberToObject(p, "x", x);
    cJSON_AddNumberToObject(p, "y", y);
    cJSON_AddNumberToObject(p, "modifiers", mods);
    if (button) {
        cJSON_AddStringToObject(p, "button", button);
        cJSON_AddNumberToObject(p, "clickCount", clicks);
        int mask = !strcmp(button, "left") ? 1 : !strcmp(button, "right") ? 2 : 4;
        cJSON_AddNumberToObject(p, "buttons", !strcmp(type, "mousePressed") ? mask : 0);
    }
    cJSON *r = tcall("Input.dispatchMouseEvent", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return false; }
    cJSON_Delete(r);
    B.mouse_x = x; B.mouse_y = y;
    return true;
}

static int parse_modifiers(ctx_t *c, const cJSON *mods)
{
    int m = 0;
    const cJSON *v;
    if (!mods || cJSON_IsNull(mods)) return 0;
    if (!cJSON_IsArray(mods)) { seterr(c, "modifiers must be a list such as ['Shift']"); return -1; }
    cJSON_ArrayForEach(v, mods) {
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        if (!strcmp(s, "Alt")) m |= 1;
        else if (!strcmp(s, "Control") || !strcmp(s, "ControlOrMeta")) m |= 2;
        else if (!strcmp(s, "Meta")) m |= 4;
        else if (!strcmp(s, "Shift")) m |= 8;
        else { seterr(c, "Unknown modifier '%s' (Alt, Control, ControlOrMeta, Meta, Shift)", s); return -1; }
    }
    return m;
}

static void do_click(ctx_t *c, const char *bid, const char *button, const cJSON *mods, int count)
{
    if (strcmp(button, "left") && strcmp(button, "right") && strcmp(button, "middle")) {
        seterr(c, "button must be 'left', 'middle' or 'right', not '%s'", button);
        return;
    }
    int m = parse_modifiers(c, mods);
    if (m < 0) return;
    char *oid = resolve_bid(c, bid);
    double x, y;
    if (!oid || !el_point(c, oid, bid, &x, &y)) { free(oid); return; }
    free(oid);
    if (!mouse(c, "mouseMoved", x, y, NULL, 0, m)) return;
    for (int i = 1; i <= count; i++) {
        if (!mouse(c, "mousePressed", x, y, button, i, m)) return;
        if (!mouse(c, "mouseReleased", x, y, button, i, m)) return;
    }
}

static void do_hover(ctx_t *c, const char *bid)
{
    char *oid = resolve_bid(c, bid);
    double x, y;
    if (oid && el_point(c, oid, bid, &x, &y)) mouse(c, "mouseMoved", x, y, NULL, 0, 0);
    free(oid);
}

static bool focus_el(ctx_t *c, const char *oid, const char *bid)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "objectId", oid);
    cJSON *r = tcall("DOM.focus", p, c->deadline, err);
    if (!r) { seterr(c, "Element with bid '%s' cannot take the focus (%s)", bid, err); return false; }
    cJSON_Delete(r);
    return true;
}

/* keys: name → key, code, windowsVirtualKeyCode, text */
typedef struct { const char *name, *key, *code; int vk; const char *text; } keydef_t;
static const keydef_t KEYS[] = {
    {"Enter", "Enter", "Enter", 13, "\r"}, {"Tab", "Tab", "Tab", 9, NULL}, {"Backspace", "Backspace", "Backspace", 8, NULL},
    {"Delete", "Delete", "Delete", 46, NULL}, {"Escape", "Escape", "Escape", 27, NULL}, {"Esc", "Escape", "Escape", 27, NULL},
    {"Space", " ", "Space", 32, " "}, {"ArrowLeft", "ArrowLeft", "ArrowLeft", 37, NULL}, {"ArrowUp", "ArrowUp", "ArrowUp", 38, NULL},
    {"ArrowRight", "ArrowRight", "ArrowRight", 39, NULL}, {"ArrowDown", "ArrowDown", "ArrowDown", 40, NULL},
    {"Home", "Home", "Home", 36, NULL}, {"End", "End", "End", 35, NULL}, {"PageUp", "PageUp", "PageUp", 33, NULL},
    {"PageDown", "PageDown", "PageDown", 34, NULL}, {"Insert", "Insert", "Insert", 45, NULL},
    {"Shift", "Shift", "ShiftLeft", 16, NULL}, {"Control", "Control", "ControlLeft", 17, NULL},
    {"ControlOrMeta", "Control", "ControlLeft", 17, NULL}, {"Alt", "Alt", "AltLeft", 18, NULL},
    {"Meta", "Meta", "MetaLeft", 91, NULL}, {"CapsLock", "CapsLock", "CapsLock", 20, NULL},
    {"F1", "F1", "F1", 112, NULL}, {"F2", "F2", "F2", 113, NULL}, {"F3", "F3", "F3", 114, NULL}, {"F4", "F4", "F4", 115, NULL},
    {"F5", "F5", "F5", 116, NULL}, {"F6", "F6", "F6", 117, NULL}, {"F7", "F7", "F7", 118, NULL}, {"F8", "F8", "F8", 119, NULL},
    {"F9", "F9", "F9", 120, NULL}, {"F10", "F10", "F10", 121, NULL}, {"F11", "F11", "F11", 122, NULL}, {"F12", "F12", "F12", 123, NULL},
    {NULL, NULL, NULL, 0, NULL}
};
static const struct { char c; const char *code; int vk; } PUNCT[] = {
    {'-', "Minus", 189}, {'=', "Equal", 187}, {',', "Comma", 188}, {'.', "Period", 190}, {'/', "Slash", 191},
    {';', "Semicolon", 186}, {'\'', "Quote", 222}, {'[', "BracketLeft", 219}, {']', "BracketRight", 221},
    {'\\', "Backslash", 220}, {'`', "Backquote", 192}, {0, NULL, 0}
};

typedef struct { char key[16], code[24], text[16]; int vk; } keyev_t;

static bool key_lookup(const char *name, keyev_t *k, bool shift)
{
    memset(k, 0, sizeof *k);
    for (int i = 0; KEYS[i].name; i++)
        if (!strcmp(KEYS[i].name, name)) {
            snprintf(k->key, sizeof k->key, "%s", KEYS[i].key);
            snprintf(k->code, sizeof k->code, "%s", KEYS[i].code);
            if (KEYS[i].text) snprintf(k->text, sizeof k->text, "%s", KEYS[i].text);
            k->vk = KEYS[i].vk;
            return true;
        }
    size_t n = strlen(name);
    unsigned char c0 = (unsigned char)name[0];
    size_t clen = c0 < 0x80 ? 1 : c0 >= 0xF0 ? 4 : c0 >= 0xE0 ? 3 : c0 >= 0xC0 ? 2 : 0;
    if (n == 0 || clen != n) return false;          /* one character, else unknown */
    if (isalpha(c0)) {
        char up = (char)toupper(c0), ch = shift ? up : (char)tolower(c0);
        if (isupper(c0)) ch = (char)c0;
        snprintf(k->key, sizeof k->key, "%c", ch);
        snprintf(k->code, sizeof k->code, "Key%c", up);
        snprintf(k->text, sizeof k->text, "%c", ch);
        k->vk = up;
        return true;
    }
    if (isdigit(c0)) {
        snprintf(k->key, sizeof k->key, "%c", c0);
        snprintf(k->code, sizeof k->code, "Digit%c", c0);
        snprintf(k->text, sizeof k->text, "%c", c0);
        k->vk = c0;
        return true;
    }
    snprintf(k->key, sizeof k->key, "%s", name);
    snprintf(k->text, sizeof k->text, "%s", name);
    for (int i = 0; PUNCT[i].c; i++)
        if (PUNCT[i].c == (char)c0 && n == 1) { snprintf(k->code, sizeof k->code, "%s", PUNCT[i].code); k->vk = PUNCT[i].vk; }
    return true;
}

static bool key_event(ctx_t *c, const char *type, const keyev_t *k, int mods, bool with_text)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddStringToObject(p, "key", k->key);
    cJSON_AddStringToObject(p, "code", k->code);
    cJSON_AddNumberToObject(p, "windowsVirtualKeyCode", k->vk);
    cJSON_AddNumberToObject(p, "nativeVirtualKeyCode", k->vk);
    cJSON_AddNumberToObject(p, "modifiers", mods);
    if (with_text && k->text[0]) {
        cJSON_AddStringToObject(p, "text", k->text);
        cJSON_AddStringToObject(p, "unmodifiedText", k->text);
    }
    cJSON *r = tcall("Input.dispatchKeyEvent", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return false; }
    cJSON_Delete(r);
    return true;
}

/* key_comb such as "Enter", "Control+a", "Shift+ArrowLeft", "Control++" */
static void press_keys(ctx_t *c, const char *comb)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", comb);
    char *parts[16];
    int np = 0;
    char *s = buf;
    while (np < 16) {
        char *plus = strchr(s, '+');
        if (!plus || plus[1] == 0 || plus == s) {
            if (plus == s && plus[1] == 0) { parts[np++] = s; break; }      /* the '+' key itself */
            if (plus == s) { parts[np++] = "+"; s = plus + 1; if (!*s) break; continue; }
            parts[np++] = s;
            if (plus && plus[1] == 0) { *plus = 0; parts[np++] = "+"; }
            break;
        }
        *plus = 0;
        parts[np++] = s;
        s = plus + 1;
    }
    if (np == 0 || !parts[np - 1][0]) { seterr(c, "Empty key combination"); return; }
    int mods = 0;
    keyev_t mk[16];
    for (int i = 0; i < np - 1; i++) {
        const char *m = parts[i];
        int bit = !strcmp(m, "Alt") ? 1 : (!strcmp(m, "Control") || !strcmp(m, "ControlOrMeta")) ? 2
                : !strcmp(m, "Meta") ? 4 : !strcmp(m, "Shift") ? 8 : 0;
        if (!bit) { seterr(c, "Unknown modifier \"%s\" in \"%s\" (Alt, Control, ControlOrMeta, Meta, Shift)", m, comb); return; }
        key_lookup(m, &mk[i], false);
    }
    for (int i = 0; i < np - 1; i++) {
        const char *m = parts[i];
        mods |= !strcmp(m, "Alt") ? 1 : (!strcmp(m, "Control") || !strcmp(m, "ControlOrMeta")) ? 2 : !strcmp(m, "Meta") ? 4 : 8;
        if (!key_event(c, "rawKeyDown", &mk[i], mods, false)) return;
    }
    keyev_t k;
    if (!key_lookup(parts[np - 1], &k, (mods & 8) != 0)) {
        seterr(c, "Unknown key \"%s\" in \"%s\"", parts[np - 1], comb);
        return;
    }
    bool text = k.text[0] && !(mods & (1 | 2 | 4));
    if (key_event(c, text ? "keyDown" : "rawKeyDown", &k, mods, text) && key_event(c, "keyUp", &k, mods, false)) {
        for (int i = np - 2; i >= 0; i--) {
            mods &= ~(!strcmp(parts[i], "Alt") ? 1 : (!strcmp(parts[i], "Control") || !strcmp(parts[i], "ControlOrMeta")) ? 2 : !strcmp(parts[i], "Meta") ? 4 : 8);
            if (!key_event(c, "keyUp", &mk[i], mods, false)) return;
        }
    }
}

static void do_press(ctx_t *c, const char *bid, const char *comb)
{
    char *oid = resolve_bid(c, bid);
    if (oid && focus_el(c, oid, bid)) press_keys(c, comb);
    free(oid);
}

static void do_focus(ctx_t *c, const char *bid)
{
    char *oid = resolve_bid(c, bid);
    if (oid) focus_el(c, oid, bid);
    free(oid);
}

static const char FILL_JS[] =
    "function(){var e=this,t=(e.tagName||'').toLowerCase();"
    "if(t==='input'){var ty=(e.type||'text').toLowerCase();"
    "if(['checkbox','radio','file','button','submit','reset','image','hidden'].indexOf(ty)>=0)return 'Cannot fill an <input type=\"'+ty+'\">';"
    "if(e.disabled)return 'Element is disabled';if(e.readOnly)return 'Element is read-only';"
    "if(['date','time','datetime-local','month','week','color','range'].indexOf(ty)>=0)return 'set';"
    "e.focus();try{e.select();}catch(x){}return '';}"
    "if(t==='textarea'){if(e.disabled)return 'Element is disabled';if(e.readOnly)return 'Element is read-only';e.focus();e.select();return '';}"
    "if(e.isContentEditable){e.focus();var r=e.ownerDocument.createRange();r.selectNodeContents(e);"
    "var s=e.ownerDocument.defaultView.getSelection();s.removeAllRanges();s.addRange(r);return '';}"
    "return 'Element is not an <input>, <textarea> or [contenteditable] element';}";
static const char SETVALUE_JS[] =
    "function(v){this.focus();this.value=v;this.dispatchEvent(new Event('input',{bubbles:true}));"
    "this.dispatchEvent(new Event('change',{bubbles:true}));return this.value===v||v===''?'':'Malformed value \"'+v+'\" for <input type='+this.type+'>';}";

static void do_fill(ctx_t *c, const char *bid, const char *text)
{
    char err[ERRLEN];
    char *oid = resolve_bid(c, bid);
    if (!oid) return;
    cJSON *v = call_on(c, oid, FILL_JS, NULL);
    const char *how = cJSON_IsString(v) ? v->valuestring : NULL;
    if (!how) { if (v) seterr(c, "fill failed"); }
    else if (!strcmp(how, "set")) {
        cJSON *args = cJSON_CreateArray(), *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "value", text);
        cJSON_AddItemToArray(args, a);
        cJSON *rv = call_on(c, oid, SETVALUE_JS, args);
        if (cJSON_IsString(rv) && rv->valuestring[0]) seterr(c, "%s", rv->valuestring);
        cJSON_Delete(rv);
    } else if (how[0]) {
        seterr(c, "%s (bid '%s')", how, bid);
    } else if (text[0]) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "text", text);
        cJSON *r = tcall("Input.insertText", p, c->deadline, err);
        if (!r) seterr(c, "%s", err);
        cJSON_Delete(r);
    } else {
        keyev_t k;
        key_lookup("Delete", &k, false);
        if (key_event(c, "rawKeyDown", &k, 0, false)) key_event(c, "keyUp", &k, 0, false);
    }
    cJSON_Delete(v);
    free(oid);
}

static const char SELECT_JS[] =
    "function(w){var e=this;if((e.tagName||'').toLowerCase()!=='select')return 'Element is not a <select> element';"
    "if(e.disabled)return 'Element is disabled';var want=Array.isArray(w)?w:[w];"
    "if(!e.multiple&&want.length!==1)return 'The <select> takes one option, not '+want.length;"
    "var found=[];for(var i=0;i<want.length;i++){var f=null;"
    "for(var j=0;j<e.options.length;j++){var o=e.options[j];"
    "if(o.value===want[i]||o.label===want[i]||o.text.trim()===String(want[i]).trim()){f=o;break;}}"
    "if(!f)return 'No option \"'+want[i]+'\" in the <select> (options: '+Array.prototype.map.call(e.options,function(o){return JSON.stringify(o.text.trim());}).join(', ')+')';"
    "if(f.disabled)return 'Option \"'+want[i]+'\" is disabled';found.push(f);}"
    "for(var k=0;k<e.options.length;k++)e.options[k].selected=found.indexOf(e.options[k])>=0;"
    "e.dispatchEvent(new Event('input',{bubbles:true}));e.dispatchEvent(new Event('change',{bubbles:true}));return '';}";

static void do_select(ctx_t *c, const char *bid, const cJSON *options)
{
    if (!cJSON_IsString(options) && !cJSON_IsArray(options)) { seterr(c, "select_option needs an option (a str or a list of str)"); return; }
    char *oid = resolve_bid(c, bid);
    if (!oid) return;
    cJSON *args = cJSON_CreateArray(), *a = cJSON_CreateObject();
    cJSON_AddItemToObject(a, "value", cJSON_Duplicate(options, 1));
    cJSON_AddItemToArray(args, a);
    cJSON *v = call_on(c, oid, SELECT_JS, args);
    if (cJSON_IsString(v) && v->valuestring[0]) seterr(c, "%s (bid '%s')", v->valuestring, bid);
    cJSON_Delete(v);
    free(oid);
}

static void do_scroll(ctx_t *c, double dx, double dy)
{
    char err[ERRLEN];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "mouseWheel");
    cJSON_AddNumberToObject(p, "x", B.mouse_x);
    cJSON_AddNumberToObject(p, "y", B.mouse_y);
    cJSON_AddNumberToObject(p, "deltaX", dx);
    cJSON_AddNumberToObject(p, "deltaY", dy);
    cJSON *r = tcall("Input.dispatchMouseEvent", p, c->deadline, err);
    if (!r) { seterr(c, "%s", err); return; }
    cJSON_Delete(r);
    /* the wheel scrolls asynchronously: wait (briefly) until the page has had a frame */
    cJSON_Delete(eval_value("new Promise(function(r){requestAnimationFrame(function(){requestAnimationFrame(r);});})",
                            fmin(mono_now() + 2, c->deadline), err));
}

static void do_drag(ctx_t *c, const char *from, const char *to)
{
    double x0, y0, x1, y1;
    char *o1 = resolve_bid(c, from);
    if (!o1 || !el_point(c, o1, from, &x0, &y0)) { free(o1); return; }
    free(o1);
    char *o2 = resolve_bid(c, to);
    if (!o2) return;
    mouse(c, "mouseMoved", x0, y0, NULL, 0, 0);
    mouse(c, "mousePressed", x0, y0, "left", 1, 0);
    if (el_point(c, o2, to, &x1, &y1)) {
        for (int i = 1; i <= 5 && !c->err[0]; i++)
            mouse(c, "mouseMoved", x0 + (x1 - x0) * i / 5, y0 + (y1 - y0) * i / 5, NULL, 0, 0);
        mouse(c, "mouseReleased", x1, y1, "left", 1, 0);
    }
    free(o2);
}

static void do_upload(ctx_t *c, const char *bid, const cJSON *files)
{
    char err[ERRLEN];
    cJSON *list = cJSON_CreateArray();
    const cJSON *f;
    cJSON *one = cJSON_IsString(files) ? cJSON_CreateStringReference(files->valuestring) : NULL;
    cJSON *arr = one ? cJSON_CreateArray() : NULL;
    if (one) cJSON_AddItemToArray(arr, one);
    const cJSON *src = arr ? arr : files;
    if (!cJSON_IsArray(src)) { seterr(c, "upload_file needs a file path (str or list of str)"); goto out; }
    cJSON_ArrayForEach(f, src) {
        if (!cJSON_IsString(f)) { seterr(c, "upload_file: file paths must be strings"); goto out; }
        char path[8192];
        if (f->valuestring[0] == '/') snprintf(path, sizeof path, "%s", f->valuestring);
        else snprintf(path, sizeof path, "%s/%s", c->r->cwd, f->valuestring);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) { seterr(c, "File not found: %s", path); goto out; }
        cJSON_AddItemToArray(list, cJSON_CreateString(path));
    }
    {
        char *oid = resolve_bid(c, bid);
        if (oid) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddItemToObject(p, "files", list);
            list = NULL;
            cJSON_AddStringToObject(p, "objectId", oid);
            cJSON *r = tcall("DOM.setFileInputFiles", p, c->deadline, err);
            if (!r) seterr(c, "Cannot set files on bid '%s': %s", bid, err);
            cJSON_Delete(r);
            free(oid);
        }
    }
out:
    cJSON_Delete(list);
    cJSON_Delete(arr);
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

/* ---- the observation ---- */
typedef struct { int id; char bid[24]; bool clickable; } bidmap_t;
static int bm_cmp(const void *a, const void *b) { return ((const bidmap_t *)a)->id - ((const bidmap_t *)b)->id; }

static bidmap_t *snapshot_bids(double deadline, size_t *count)
{
    char err[ERRLEN];
    *count = 0;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddItemToObject(p, "computedStyles", cJSON_CreateArray());
    cJSON *r = tcall("DOMSnapshot.captureSnapshot", p, deadline, err);
    if (!r) return NULL;
    cJSON *strings = cJSON_GetObjectItemCaseSensitive(r, "strings");
    int ns = cJSON_GetArraySize(strings);
    const char **str = calloc((size_t)ns + 1, sizeof *str);
    int k = 0;
    cJSON *sv;
    cJSON_ArrayForEach(sv, strings) str[k++] = cJSON_IsString(sv) ? sv->valuestring : "";
    int bid_idx = -1;
    for (int i = 0; i < ns; i++) if (!strcmp(str[i], "bid")) { bid_idx = i; break; }
    bidmap_t *out = NULL;
    size_t n = 0, cap = 0;
    cJSON *doc;
    cJSON_ArrayForEach(doc, cJSON_GetObjectItemCaseSensitive(r, "documents")) {
        cJSON *nodes = cJSON_GetObjectItemCaseSensitive(doc, "nodes");
        cJSON *ids = cJSON_GetObjectItemCaseSensitive(nodes, "backendNodeId");
        cJSON *attrs = cJSON_GetObjectItemCaseSensitive(nodes, "attributes");
        cJSON *clk = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(nodes, "isClickable"), "index");
        int nn = cJSON_GetArraySize(ids);
        cJSON **idv = calloc((size_t)nn + 1, sizeof *idv);
        bool *clickable = calloc((size_t)nn + 1, 1);
        int j = 0;
        cJSON *x;
        cJSON_ArrayForEach(x, ids) idv[j++] = x;
        cJSON_ArrayForEach(x, clk) if (x->valueint >= 0 && x->valueint < nn) clickable[x->valueint] = true;
        j = 0;
        cJSON_ArrayForEach(x, attrs) {
            if (j >= nn) break;
            if (bid_idx >= 0) {
                int na = cJSON_GetArraySize(x);
                cJSON *a = x->child;
                for (int q = 0; q + 1 < na && a && a->next; q += 2, a = a->next->next) {
                    if (a->valueint != bid_idx) continue;
                    int vi = a->next->valueint;
                    if (vi < 0 || vi >= ns) break;
                    if (n == cap) { cap = cap ? cap * 2 : 256; out = realloc(out, cap * sizeof *out); }
                    out[n].id = idv[j]->valueint;
                    snprintf(out[n].bid, sizeof out[n].bid, "%s", str[vi]);
                    out[n].clickable = clickable[j];
                    n++;
                    break;
                }
            }
            j++;
        }
        free(idv);
        free(clickable);
    }
    free(str);
    cJSON_Delete(r);
    if (n) qsort(out, n, sizeof *out, bm_cmp);
    *count = n;
    return out;
}

static const bidmap_t *bm_find(const bidmap_t *m, size_t n, int id)
{
    bidmap_t key = { .id = id };
    return n ? bsearch(&key, m, n, sizeof *m, bm_cmp) : NULL;
}

typedef struct { const char *id; cJSON *node; bool seen; } axidx_t;
static int ax_cmp(const void *a, const void *b) { return strcmp(((const axidx_t *)a)->id, ((const axidx_t *)b)->id); }

typedef struct {
    axidx_t *idx; size_t n;
    const bidmap_t *bm; size_t nbm;
    sbuf_t out;
    bool any;
} flat_t;

static void repr_json(sbuf_t *b, const cJSON *v)
{
    if (cJSON_IsString(v)) py_repr(b, v->valuestring);
    else if (cJSON_IsTrue(v)) sb_puts(b, "True");
    else if (cJSON_IsFalse(v)) sb_puts(b, "False");
    else if (cJSON_IsNumber(v)) {
        if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) sb_printf(b, "%.0f", v->valuedouble);
        else sb_printf(b, "%.17g", v->valuedouble);
    } else sb_puts(b, "None");
}

static char *strip_dup(const char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    return strndup(s, n);
}

static void flat_node(flat_t *f, cJSON *node, int depth, const char *parent_name)
{
    if (depth > 400) return;
    const char *role = jstr(cJSON_GetObjectItemCaseSensitive(node, "role"), "value");
    cJSON *namev = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "name"), "value");
    const char *name = cJSON_IsString(namev) ? namev->valuestring : NULL;
    if (!role) role = "";
    bool skip = false;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(node, "ignored"))) skip = true;
    else if (!strcmp(role, "LineBreak") || !strcmp(role, "InlineTextBox")) skip = true;
    else if (!name) skip = true;
    else if (!strcmp(role, "StaticText") && strstr(parent_name, name)) skip = true;
    if (!skip) {
        sbuf_t *b = &f->out;
        if (f->any) sb_puts(b, "\n");
        f->any = true;
        for (int i = 0; i < depth; i++) sb_puts(b, "\t");
        cJSON *bn = cJSON_GetObjectItemCaseSensitive(node, "backendDOMNodeId");
        const bidmap_t *m = (cJSON_IsNumber(bn) && strcmp(role, "StaticText")) ? bm_find(f->bm, f->nbm, bn->valueint) : NULL;
        if (m) sb_printf(b, "[%s] ", m->bid);
        char *nm = strip_dup(name);
        if (!strcmp(role, "generic") && !nm[0]) sb_puts(b, "generic");
        else { sb_puts(b, role); sb_puts(b, " "); py_repr(b, nm); }
        free(nm);
        cJSON *val = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "value"), "value");
        if (val) { sb_puts(b, " value="); repr_json(b, val); }
        if (m && m->clickable) sb_puts(b, ", clickable");
        cJSON *prop;
        cJSON_ArrayForEach(prop, cJSON_GetObjectItemCaseSensitive(node, "properties")) {
            const char *pn = jstr(prop, "name");
            cJSON *pv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(prop, "value"), "value");
            if (!pn || !pv) continue;
            static const char *ignored[] = {"editable", "readonly", "level", "settable", "multiline", "invalid", "focusable", NULL};
            bool ig = false;
            for (int i = 0; ignored[i]; i++) if (!strcmp(pn, ignored[i])) ig = true;
            if (ig) continue;
            if (!strcmp(pn, "required") || !strcmp(pn, "focused") || !strcmp(pn, "atomic")) {
                if (cJSON_IsTrue(pv) || (cJSON_IsString(pv) && pv->valuestring[0] && strcmp(pv->valuestring, "false")))
                    sb_printf(b, ", %s", pn);
                continue;
            }
            sb_printf(b, ", %s=", pn);
            repr_json(b, pv);
        }
    }
    const char *nodeid = jstr(node, "nodeId");
    cJSON *ch;
    cJSON_ArrayForEach(ch, cJSON_GetObjectItemCaseSensitive(node, "childIds")) {
        if (!cJSON_IsString(ch) || (nodeid && !strcmp(ch->valuestring, nodeid))) continue;
        axidx_t key = { .id = ch->valuestring };
        axidx_t *e = bsearch(&key, f->idx, f->n, sizeof *f->idx, ax_cmp);
        if (!e || e->seen) continue;
        e->seen = true;
        flat_node(f, e->node, skip ? depth : depth + 1, name ? name : "");
    }
}

static char *axtree_text(const bidmap_t *bm, size_t nbm, double deadline, char *err)
{
    cJSON *r = tcall("Accessibility.getFullAXTree", NULL, deadline, err);
    if (!r) return NULL;
    cJSON *nodes = cJSON_GetObjectItemCaseSensitive(r, "nodes");
    int n = cJSON_GetArraySize(nodes);
    flat_t f = { .bm = bm, .nbm = nbm };
    f.idx = calloc((size_t)n + 1, sizeof *f.idx);
    cJSON *node;
    cJSON_ArrayForEach(node, nodes) {
        const char *id = jstr(node, "nodeId");
        if (id) { f.idx[f.n].id = id; f.idx[f.n].node = node; f.n++; }
    }
    qsort(f.idx, f.n, sizeof *f.idx, ax_cmp);
    if (n > 0) {
        cJSON *root = cJSON_GetArrayItem(nodes, 0);
        axidx_t key = { .id = jstr(root, "nodeId") ? jstr(root, "nodeId") : "" };
        axidx_t *e = bsearch(&key, f.idx, f.n, sizeof *f.idx, ax_cmp);
        if (e) e->seen = true;
        flat_node(&f, root, 0, "");
    }
    free(f.idx);
    cJSON_Delete(r);
    return sb_take(&f.out);
}

typedef struct {
    char *url, *title, *text, *focused, *axtree, *shot;
    cJSON *pages;
} obs_t;

static void obs_free(obs_t *o)
{
    free(o->url); free(o->title); free(o->text); free(o->focused); free(o->axtree); free(o->shot);
    cJSON_Delete(o->pages);
}

static bool observe(obs_t *o, bool want_shot, double deadline, char *err)
{
    memset(o, 0, sizeof *o);
    tab_t *t = active_tab();
    if (!t) { snprintf(err, ERRLEN, "no open tab"); return false; }
    waitarg_t w = { t, 0, 0 };
    if (t->loading && !cdp_pump_until(cond_not_loading, &w, fmin(deadline - OBS_GRACE / 2, mono_now() + 5)) && B.alive)
        cJSON_Delete(tcall("Page.stopLoading", NULL, deadline, err));
    cJSON *v = NULL;
    for (int tries = 0; tries < 50; tries++) {
        v = eval_value(PAGE_JS, deadline, err);
        if (!v) {
            /* the document was replaced under us (navigation): try again on the new one */
            if (B.alive && mono_now() < deadline - 1 && strstr(err, "context")) { cdp_pump_until(NULL, NULL, mono_now() + 0.1); continue; }
            return false;
        }
        const char *ready = jstr(v, "ready");
        if (!ready || !strcmp(ready, "complete") || mono_now() > fmin(deadline - OBS_GRACE / 2, deadline)) break;
        cJSON_Delete(v);
        v = NULL;
        cdp_pump_until(NULL, NULL, mono_now() + 0.1);
    }
    if (!v) { if (!err[0]) snprintf(err, ERRLEN, "the page did not answer"); return false; }
    o->url = strdup(jstr(v, "url") ? jstr(v, "url") : "");
    o->title = strdup(jstr(v, "title") ? jstr(v, "title") : "");
    o->text = strdup(jstr(v, "text") ? jstr(v, "text") : "");
    o->focused = strdup(jstr(v, "focused") ? jstr(v, "focused") : "");
    cJSON_Delete(v);
    size_t nbm = 0;
    bidmap_t *bm = snapshot_bids(deadline, &nbm);
    o->axtree = axtree_text(bm, nbm, deadline, err);
    free(bm);
    if (!o->axtree) { o->axtree = strdup(""); if (!B.alive) return false; err[0] = 0; }
    o->pages = cJSON_CreateArray();
    cJSON *r = cdp_call("Target.getTargets", NULL, NULL, deadline, err, ERRLEN);
    for (int i = 0; i < B.ntabs; i++) {
        const char *u = NULL;
        cJSON *ti;
        cJSON_ArrayForEach(ti, cJSON_GetObjectItemCaseSensitive(r, "targetInfos"))
            if (jstr(ti, "targetId") && !strcmp(jstr(ti, "targetId"), B.tabs[i].target)) u = jstr(ti, "url");
        if (i == B.active) u = o->url;
        cJSON_AddItemToArray(o->pages, cJSON_CreateString(u ? u : ""));
    }
    cJSON_Delete(r);
    err[0] = 0;
    if (want_shot) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "format", "png");
        cJSON *s = tcall("Page.captureScreenshot", p, deadline, err);
        const char *data = jstr(s, "data");
        if (data) {
            size_t n = strlen(data);
            o->shot = malloc(n + 32);
            sprintf(o->shot, "data:image/png;base64,%s", data);
        }
        cJSON_Delete(s);
        if (!o->shot) return false;
    }
    return true;
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
