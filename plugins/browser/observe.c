/* termd-browser's observation: the page's bids (page.js), the accessibility tree flattened
   BrowserGym-style with bids, the page as text, the focused element, tabs and the screenshot. */
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


void obs_free(obs_t *o)
{
    free(o->url); free(o->title); free(o->text); free(o->focused); free(o->axtree); free(o->shot);
    cJSON_Delete(o->pages);
}

bool observe(obs_t *o, bool want_shot, double deadline, char *err)
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

