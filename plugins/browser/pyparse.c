/* termd-browser's action parser: Python-style call statements (one per line or ';'-separated) with
   literal arguments — strings (all quote forms, escapes, raw, concatenation), numbers, True/False/None,
   lists and tuples, keyword arguments — into pycall_t; and Python repr of a str. */
#include "browser.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t i, n;
    int depth;              /* open ( [ : newlines inside do not end a statement */
    char *err; size_t errlen;
    bool failed;
} P;

static void where(const P *p, size_t at, int *line, int *col)
{
    *line = 1; *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') { (*line)++; *col = 1; }
        else if (((unsigned char)p->s[k] & 0xC0) != 0x80) (*col)++;
    }
}

static void fail(P *p, size_t at, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = true;
    int line, col;
    where(p, at, &line, &col);
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d, column %d: %s", line, col, msg);
}

/* skips blanks, comments and line continuations; newlines too when inside brackets or `nl` */
static void skip_ws(P *p, bool nl)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f') p->i++;
        else if (c == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == '\n') p->i += 2;
        else if (c == '\\' && p->i + 2 < p->n && p->s[p->i + 1] == '\r' && p->s[p->i + 2] == '\n') p->i += 3;
        else if (c == '#') { while (p->i < p->n && p->s[p->i] != '\n') p->i++; }
        else if (c == '\n' && (nl || p->depth > 0)) p->i++;
        else break;
    }
}

static void put_utf8(sbuf_t *b, unsigned long cp)
{
    char u[4];
    if (cp < 0x80) { u[0] = (char)cp; sb_add(b, u, 1); }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); sb_add(b, u, 2); }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 4);
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool is_string_start(const P *p)
{
    size_t k = p->i;
    int pre = 0;
    while (k < p->n && pre < 2 && strchr("rRuUbB", p->s[k]) && p->s[k]) { k++; pre++; }
    return k < p->n && (p->s[k] == '\'' || p->s[k] == '"');
}

/* one string literal (prefix, quotes) appended to out */
static void parse_string(P *p, sbuf_t *out)
{
    size_t start = p->i;
    bool raw = false;
    while (p->i < p->n && p->s[p->i] != '\'' && p->s[p->i] != '"') {
        char c = p->s[p->i];
        if (c == 'r' || c == 'R') raw = true;
        if (c == 'b' || c == 'B') { fail(p, start, "bytes literals are not supported; use a str"); return; }
        p->i++;
    }
    char q = p->s[p->i];
    bool triple = p->i + 2 < p->n && p->s[p->i + 1] == q && p->s[p->i + 2] == q;
    p->i += triple ? 3 : 1;
    for (;;) {
        if (p->i >= p->n) { fail(p, start, "unterminated string literal"); return; }
        char c = p->s[p->i];
        if (c == q) {
            if (!triple) { p->i++; return; }
            if (p->i + 2 < p->n && p->s[p->i + 1] == q && p->s[p->i + 2] == q) { p->i += 3; return; }
            sb_add(out, &c, 1); p->i++;
            continue;
        }
        if (c == '\n' && !triple) { fail(p, start, "unterminated string literal (end of line inside quotes)"); return; }
        if (c != '\\') { sb_add(out, &c, 1); p->i++; continue; }
        if (p->i + 1 >= p->n) { fail(p, start, "unterminated string literal"); return; }
        char e = p->s[p->i + 1];
        if (raw) {                                /* a backslash stays, but escapes the quote */
            sb_add(out, p->s + p->i, 2);
            p->i += 2;
            continue;
        }
        p->i += 2;
        switch (e) {
        case '\n': break;
        case '\\': sb_add(out, "\\", 1); break;
        case '\'': sb_add(out, "'", 1); break;
        case '"': sb_add(out, "\"", 1); break;
        case 'n': sb_add(out, "\n", 1); break;
        case 'r': sb_add(out, "\r", 1); break;
        case 't': sb_add(out, "\t", 1); break;
        case 'b': sb_add(out, "\b", 1); break;
        case 'f': sb_add(out, "\f", 1); break;
        case 'v': sb_add(out, "\v", 1); break;
        case 'a': sb_add(out, "\a", 1); break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            unsigned long cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
                if (h < 0) { fail(p, p->i, "truncated \\%c escape", e); return; }
                cp = cp * 16 + (unsigned long)h;
                p->i++;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { fail(p, p->i, "invalid code point in escape"); return; }
            if (cp == 0) { fail(p, p->i, "NUL characters are not supported in strings"); return; }
            put_utf8(out, cp);
            break;
        }
        case 'N': fail(p, p->i, "\\N{...} escapes are not supported"); return;
        default:
            if (e >= '0' && e <= '7') {
                unsigned long cp = (unsigned long)(e - '0');
                for (int k = 0; k < 2 && p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '7'; k++)
                    cp = cp * 8 + (unsigned long)(p->s[p->i++] - '0');
                if (cp == 0) { fail(p, p->i, "NUL characters are not supported in strings"); return; }
                put_utf8(out, cp);
            } else {
                char two[2] = {'\\', e};          /* unknown escape: kept as written, like Python */
                sb_add(out, two, 2);
            }
        }
    }
}

static cJSON *parse_value(P *p);

static cJSON *parse_seq(P *p, char close)
{
    size_t start = p->i;
    p->i++;
    p->depth++;
    cJSON *arr = cJSON_CreateArray();
    bool tuple_comma = false;
    for (;;) {
        skip_ws(p, true);
        if (p->i >= p->n) { fail(p, start, "'%c' was never closed", close == ']' ? '[' : '('); break; }
        if (p->s[p->i] == close) { p->i++; break; }
        cJSON *v = parse_value(p);
        if (!v) break;
        cJSON_AddItemToArray(arr, v);
        skip_ws(p, true);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; tuple_comma = true; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; break; }
        fail(p, p->i, "expected ',' or '%c'", close);
        break;
    }
    p->depth--;
    if (p->failed) { cJSON_Delete(arr); return NULL; }
    if (close == ')' && !tuple_comma && cJSON_GetArraySize(arr) == 1) {   /* (x) is x */
        cJSON *one = cJSON_DetachItemFromArray(arr, 0);
        cJSON_Delete(arr);
        return one;
    }
    return arr;
}

static cJSON *parse_value(P *p)
{
    skip_ws(p, false);
    if (p->i >= p->n) { fail(p, p->i, "expected a value"); return NULL; }
    char c = p->s[p->i];
    if (is_string_start(p)) {
        sbuf_t b = {0};
        for (;;) {                                /* adjacent literals concatenate */
            parse_string(p, &b);
            if (p->failed) { free(b.s); return NULL; }
            size_t save = p->i;
            skip_ws(p, false);
            if (p->i < p->n && is_string_start(p)) continue;
            p->i = save;
            break;
        }
        char *s = sb_take(&b);
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v;
    }
    if (c == '[') return parse_seq(p, ']');
    if (c == '(') return parse_seq(p, ')');
    if (c == '-' || c == '+' || isdigit((unsigned char)c) || (c == '.' && p->i + 1 < p->n && isdigit((unsigned char)p->s[p->i + 1]))) {
        size_t start = p->i;
        double sign = 1;
        while (p->i < p->n && (p->s[p->i] == '-' || p->s[p->i] == '+')) {
            if (p->s[p->i] == '-') sign = -sign;
            p->i++;
            skip_ws(p, false);
        }
        char num[128];
        size_t k = 0;
        bool hex = p->i + 1 < p->n && p->s[p->i] == '0' && (p->s[p->i + 1] == 'x' || p->s[p->i + 1] == 'X');
        if (hex) p->i += 2;
        while (p->i < p->n && k + 1 < sizeof num) {
            char d = p->s[p->i];
            bool ok = hex ? isxdigit((unsigned char)d) : (isdigit((unsigned char)d) || d == '.' || d == 'e' || d == 'E'
                      || ((d == '-' || d == '+') && k > 0 && (num[k - 1] == 'e' || num[k - 1] == 'E')));
            if (d == '_') { p->i++; continue; }
            if (!ok) break;
            num[k++] = d;
            p->i++;
        }
        num[k] = 0;
        if (k == 0) { fail(p, start, "expected a number"); return NULL; }
        char *end;
        double v = hex ? (double)strtoull(num, &end, 16) : strtod(num, &end);
        if (*end || !isfinite(v)) { fail(p, start, "malformed number"); return NULL; }
        if (p->i < p->n && (isalpha((unsigned char)p->s[p->i]) || p->s[p->i] == '_')) {
            fail(p, p->i, "malformed number");
            return NULL;
        }
        return cJSON_CreateNumber(sign * v);
    }
    if (isalpha((unsigned char)c) || c == '_') {
        size_t start = p->i;
        while (p->i < p->n && (isalnum((unsigned char)p->s[p->i]) || p->s[p->i] == '_')) p->i++;
        size_t len = p->i - start;
        if (len == 4 && !strncmp(p->s + start, "True", 4)) return cJSON_CreateTrue();
        if (len == 5 && !strncmp(p->s + start, "False", 5)) return cJSON_CreateFalse();
        if (len == 4 && !strncmp(p->s + start, "None", 4)) return cJSON_CreateNull();
        fail(p, start, "'%.*s' is not a literal (arguments must be strings, numbers, True, False, None or lists)",
             (int)(len > 60 ? 60 : len), p->s + start);
        return NULL;
    }
    fail(p, p->i, "unexpected character '%c'", c);
    return NULL;
}

static void call_free(pycall_t *c)
{
    free(c->name); free(c->text);
    cJSON_Delete(c->args); cJSON_Delete(c->kwargs);
}

int pyparse(const char *src, pycall_t **calls_out, char *err, size_t errlen)
{
    P p = { .s = src, .n = strlen(src), .err = err, .errlen = errlen };
    err[0] = 0;
    pycall_t *calls = NULL;
    int n = 0, cap = 0;
    for (;;) {
        skip_ws(&p, true);
        while (p.i < p.n && p.s[p.i] == ';') { p.i++; skip_ws(&p, true); }
        if (p.i >= p.n) break;
        size_t start = p.i;
        char c = p.s[p.i];
        if (!(isalpha((unsigned char)c) || c == '_')) { fail(&p, p.i, "expected a function call such as click('12')"); break; }
        while (p.i < p.n && (isalnum((unsigned char)p.s[p.i]) || p.s[p.i] == '_' || p.s[p.i] == '.')) p.i++;
        size_t nlen = p.i - start;
        skip_ws(&p, false);
        if (p.i >= p.n || p.s[p.i] != '(') {
            fail(&p, p.i, "expected '(' after '%.*s'", (int)(nlen > 60 ? 60 : nlen), p.s + start);
            break;
        }
        size_t open = p.i++;
        p.depth++;
        pycall_t call = {0};
        call.name = strndup(p.s + start, nlen);
        call.args = cJSON_CreateArray();
        call.kwargs = cJSON_CreateObject();
        int line, col;
        where(&p, start, &line, &col);
        call.line = line;
        for (;;) {
            skip_ws(&p, true);
            if (p.i >= p.n) { fail(&p, open, "'(' was never closed"); break; }
            if (p.s[p.i] == ')') { p.i++; break; }
            /* keyword? */
            size_t save = p.i;
            if (isalpha((unsigned char)p.s[p.i]) || p.s[p.i] == '_') {
                size_t k0 = p.i;
                while (p.i < p.n && (isalnum((unsigned char)p.s[p.i]) || p.s[p.i] == '_')) p.i++;
                size_t k1 = p.i;
                skip_ws(&p, true);
                if (p.i < p.n && p.s[p.i] == '=' && !(p.i + 1 < p.n && p.s[p.i + 1] == '=')) {
                    p.i++;
                    char *key = strndup(p.s + k0, k1 - k0);
                    cJSON *v = parse_value(&p);
                    if (!v) { free(key); break; }
                    if (cJSON_GetObjectItemCaseSensitive(call.kwargs, key)) {
                        fail(&p, k0, "keyword argument '%s' repeated", key);
                        cJSON_Delete(v); free(key);
                        break;
                    }
                    cJSON_AddItemToObject(call.kwargs, key, v);
                    free(key);
                    goto next;
                }
                p.i = save;
            }
            if (cJSON_GetArraySize(call.kwargs) > 0) { fail(&p, p.i, "positional argument follows keyword argument"); break; }
            {
                cJSON *v = parse_value(&p);
                if (!v) break;
                cJSON_AddItemToArray(call.args, v);
            }
        next:
            skip_ws(&p, true);
            if (p.i < p.n && p.s[p.i] == ',') { p.i++; continue; }
            if (p.i < p.n && p.s[p.i] == ')') { p.i++; break; }
            if (p.i >= p.n) { fail(&p, open, "'(' was never closed"); break; }
            fail(&p, p.i, "expected ',' or ')' in the arguments of %s", call.name);
            break;
        }
        p.depth--;
        if (p.failed) { call_free(&call); break; }
        call.text = strndup(p.s + start, p.i - start);
        /* the statement must end here */
        skip_ws(&p, false);
        if (p.i < p.n && p.s[p.i] != '\n' && p.s[p.i] != ';') {
            fail(&p, p.i, "unexpected text after %s(...); put one call per line", call.name);
            call_free(&call);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            pycall_t *nc = realloc(calls, sizeof *calls * (size_t)cap);
            if (!nc) abort();
            calls = nc;
        }
        calls[n++] = call;
    }
    if (p.failed) { pycalls_free(calls, n); *calls_out = NULL; return -1; }
    *calls_out = calls;
    return n;
}

void pycalls_free(pycall_t *calls, int n)
{
    for (int i = 0; i < n; i++) call_free(&calls[i]);
    free(calls);
}

/* Python 3 repr() of a str: quote choice, escapes for \\ quote \n \r \t and control characters */
void py_repr(sbuf_t *b, const char *s)
{
    bool sq = strchr(s, '\'') != NULL, dq = strchr(s, '"') != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    sb_add(b, &q, 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '\\') sb_add(b, "\\\\", 2);
        else if (*c == (unsigned char)q) { char e[2] = {'\\', (char)q}; sb_add(b, e, 2); }
        else if (*c == '\n') sb_add(b, "\\n", 2);
        else if (*c == '\r') sb_add(b, "\\r", 2);
        else if (*c == '\t') sb_add(b, "\\t", 2);
        else if (*c < 0x20 || *c == 0x7f) sb_printf(b, "\\x%02x", *c);
        else sb_add(b, (const char *)c, 1);
    }
    sb_add(b, &q, 1);
}
