/* output.h — a command's output store and truncation (output.c): the
 * renderer's lines go in, answers take what is new since the last one. */
#ifndef TERMD_OUTPUT_H
#define TERMD_OUTPUT_H

#include <stddef.h>
#include "util.h"

/* Bytes [0, file_bytes) of the text are in the file, [mem_base,
 * total_bytes) in mem; mem_base > file_bytes only once the file failed
 * (err), and what lies between is lost. */
struct output {
	char *dir;                /* where the spill file goes */
	char name[72];            /* in the file's name (the session's) */
	size_t mem_cap;           /* in memory, then a file */
	buf_t mem;
	char *file_path;
	int file_fd;
	size_t file_bytes;
	size_t mem_base;
	char *err;                /* why the output file failed, or NULL */
	size_t total_bytes;       /* bytes of rendered text produced */
	size_t total_lines;
	size_t delivered;         /* bytes already returned to the agent */
	size_t delivered_lines;
	char *shown_live;         /* live text returned last time */
	/* called once, when the file fails: message and path */
	void (*on_error)(void *user, const char *msg, const char *path);
	void *user;
};

void output_init(struct output *o, const char *dir, const char *name, size_t mem_cap);
void output_free(struct output *o);
/* One finished line (without its newline): the renderer's line callback,
 * user = the struct output. */
void output_line(void *user, const char *line, size_t len);
/* What is new since the last collect, plus `live` (the renderer's lines
 * still on screen, taken over), as content of at most max_output
 * characters: head + a `[... N lines truncated ...]` line + tail when over
 * (*truncated, and the output file then exists: file_path). */
void output_collect(struct output *o, buf_t *live, size_t max_output, buf_t *out,
		    int *truncated);

#endif
