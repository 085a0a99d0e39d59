/* Reading and writing modules: `.amkir` text and the reference's JSON. */
#ifndef AMK_IO_H
#define AMK_IO_H

#include <stdio.h>

#include "amk/diag.h"
#include "amk/fileio.h"
#include "amk/ir.h"
#include "amk/strbuf.h"

/* Parse `.amkir` text. Errors go to `diag` (with `name` as the file name and
 * carets into `text`); returns NULL on any error. The module keeps a pointer
 * to `text` for later diagnostics, so `text` must outlive the module.
 * One module per call; -split-input-file splits before calling. */
AmkModule *amk_parse_text(const char *name, const char *text, size_t len,
                          AmkDiagEngine *diag);

/* The meta member that carries a module's model folder in JSON (the text
 * form's `model` line; the reference's JSON has no place for it). */
#define AMK_JSON_MODEL_DIR_KEY "model_dir"

/* Parse the reference's JSON. Errors name the JSON path
 * (`tasks[12].waits[0].threshold`) and the line:col. NULL on any error.
 * A string meta.model_dir becomes the module's model_dir (and stays in
 * meta, so that the module writes back the JSON it was read from). */
AmkModule *amk_read_json(const char *name, const char *text, size_t len,
                         AmkDiagEngine *diag);

/* Print the module as `.amkir` text. */
void amk_print_text(const AmkModule *m, AmkStrBuf *out);

/* Write the module as the reference's JSON, byte for byte as Python's
 * json.dumps(indent=2) writes it (no trailing newline). A module with a
 * model folder writes it as meta.model_dir: in place of the meta's own
 * model_dir, else last. */
void amk_write_json(const AmkModule *m, AmkStrBuf *out);

/* Write a JSON value the way json.dumps(indent=2) would at nesting `depth`. */
void amk_write_json_value(const AmkValue *v, int depth, AmkStrBuf *out);
/* A JSON string literal with Python's ensure_ascii escaping. */
void amk_write_json_string(const char *s, AmkStrBuf *out);
/* The same for `len` bytes, which may hold U+0000 (written \u0000). */
void amk_write_json_string_n(const char *s, size_t len, AmkStrBuf *out);

/* The task DAG for Graphviz. */
void amk_print_dot(const AmkModule *m, AmkStrBuf *out);

#endif
