/* Reading and writing modules: `.amkir` text and the reference's JSON. */
#ifndef AMK_IO_H
#define AMK_IO_H

#include <stdio.h>

#include "amk/diag.h"
#include "amk/ir.h"

/* A growable byte buffer for output that must be complete before any of it
 * is written (no partial output files). */
typedef struct {
  char *data;
  size_t len, cap;
} AmkStrBuf;

void amk_sb_init(AmkStrBuf *sb);
void amk_sb_free(AmkStrBuf *sb);
void amk_sb_putc(AmkStrBuf *sb, char c);
void amk_sb_puts(AmkStrBuf *sb, const char *s);
void amk_sb_putn(AmkStrBuf *sb, const char *s, size_t n);
void amk_sb_printf(AmkStrBuf *sb, const char *fmt, ...) AMK_PRINTF(2, 3);

/* Parse `.amkir` text. Errors go to `diag` (with `name` as the file name and
 * carets into `text`); returns NULL on any error. The module keeps a pointer
 * to `text` for later diagnostics, so `text` must outlive the module.
 * One module per call; -split-input-file splits before calling. */
AmkModule *amk_parse_text(const char *name, const char *text, size_t len,
                          AmkDiagEngine *diag);

/* Parse the reference's JSON. Errors name the JSON path
 * (`tasks[12].waits[0].threshold`) and the line:col. NULL on any error. */
AmkModule *amk_read_json(const char *name, const char *text, size_t len,
                         AmkDiagEngine *diag);

/* Print the module as `.amkir` text. */
void amk_print_text(const AmkModule *m, AmkStrBuf *out);

/* Write the module as the reference's JSON, byte for byte as Python's
 * json.dumps(indent=2) writes it (no trailing newline). */
void amk_write_json(const AmkModule *m, AmkStrBuf *out);

/* Write a JSON value the way json.dumps(indent=2) would at nesting `depth`. */
void amk_write_json_value(const AmkValue *v, int depth, AmkStrBuf *out);
/* A JSON string literal with Python's ensure_ascii escaping. */
void amk_write_json_string(const char *s, AmkStrBuf *out);

/* The task DAG for Graphviz. */
void amk_print_dot(const AmkModule *m, AmkStrBuf *out);

/* Read a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer.
 * On failure prints `path: error: reason` and returns NULL. */
char *amk_read_file(const char *path, size_t *len, AmkDiagEngine *diag);

/* Write `data` to `path` atomically (temp file + rename), "-" = stdout. */
int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag);

#endif
