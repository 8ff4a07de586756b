/* termd-browser's page input: a bid → its element, and the DevTools input events the
   browse_interactive calls send (click, hover, keys, fill, select, scroll, drag, upload). */
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

/* ---- elements ---- */
char *bid_of(const cJSON *v)
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

void do_click(ctx_t *c, const char *bid, const char *button, const cJSON *mods, int count)
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

void do_hover(ctx_t *c, const char *bid)
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

void do_press(ctx_t *c, const char *bid, const char *comb)
{
    char *oid = resolve_bid(c, bid);
    if (oid && focus_el(c, oid, bid)) press_keys(c, comb);
    free(oid);
}

void do_focus(ctx_t *c, const char *bid)
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

void do_fill(ctx_t *c, const char *bid, const char *text)
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

void do_select(ctx_t *c, const char *bid, const cJSON *options)
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

void do_scroll(ctx_t *c, double dx, double dy)
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

void do_drag(ctx_t *c, const char *from, const char *to)
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

void do_upload(ctx_t *c, const char *bid, const cJSON *files)
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

