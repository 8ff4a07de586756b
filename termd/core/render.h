/* render.h — turns a program's output bytes into text as a person would see
 * it on a terminal of unbounded width: carriage returns, backspaces, tabs and
 * cursor movement applied, colours and other escape sequences removed,
 * trailing spaces trimmed. Used for `run` content and `expect`.
 *
 * Lines live in a window of the last `window_rows` lines, where cursor
 * movement (CSI A/B/H/…) can still change them; a line that leaves the
 * window is final and handed to the line callback. */
#ifndef TERMD_RENDER_H
#define TERMD_RENDER_H

#include <stddef.h>
#include "util.h"

typedef struct render render_t;
/* A finished line: UTF-8, no newline, trailing spaces trimmed. */
typedef void (*render_line_cb)(void *user, const char *line, size_t len);

render_t *render_new(int window_rows, render_line_cb cb, void *user);
void render_free(render_t *r);
/* Feed output bytes; sequences and UTF-8 may be split across calls. */
void render_feed(render_t *r, const char *data, size_t n);
/* Append the live lines to out, joined by '\n' (no final newline), each
 * trimmed of trailing spaces, trailing empty lines left out. */
void render_live(const render_t *r, buf_t *out);
/* Hand every live line above the cursor's line to the callback; the cursor's
 * line becomes the top of the window. */
void render_commit_above_cursor(render_t *r);
/* End of output: hand every live line to the callback, trailing empty lines
 * left out, and start again empty. */
void render_finish(render_t *r);

#endif
