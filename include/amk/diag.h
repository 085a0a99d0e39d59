/* Diagnostics (the support layer: uses nothing of the project): `file:line:col: error: message`, the source line and a caret.
 *
 * Every user-facing error goes through a DiagEngine, so the same message can be
 * printed (to stderr), or captured for -verify-diagnostics. No global state.
 */
#ifndef AMK_DIAG_H
#define AMK_DIAG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include <stddef.h>
#include <stdint.h>

/* A source position for diagnostics; line 0 means "none" (built by a pass). */
typedef struct {
  uint32_t line, col;
} AmkLoc;

typedef enum {
  AMK_SEVERITY_ERROR,
  AMK_SEVERITY_WARNING,
  AMK_SEVERITY_NOTE,
  AMK_SEVERITY_REMARK,
} AmkSeverity;

typedef struct {
  AmkSeverity severity;
  AmkLoc loc; /* line 0: no position */
  char *message;
} AmkDiagnostic;

typedef struct AmkDiagEngine AmkDiagEngine;

/* "error", "warning", "note" or "remark". */
const char *amk_severity_name(AmkSeverity s);

/* Prints to `out` (usually stderr) unless capturing. */
AmkDiagEngine *amk_diag_new(FILE *out);
void amk_diag_free(AmkDiagEngine *d);

/* The file the following locations refer to. `text` may be NULL (no caret
 * line is printed then); it must outlive the engine's use of it. */
void amk_diag_set_source(AmkDiagEngine *d, const char *name, const char *text,
                         size_t len);
/* The name printed before messages that have no place (`name: error: ...`),
 * when it differs from the source's: a tool that reads a file and then
 * reports about runs of it names the file for places in it and itself for
 * the rest. NULL (the default): the source's name. Kept across
 * amk_diag_set_source. */
void amk_diag_set_unlocated_name(AmkDiagEngine *d, const char *name);
const char *amk_diag_source_name(const AmkDiagEngine *d);

/* Colour in printed diagnostics (clang's: bold place and message, red
 * "error:", magenta "warning:", cyan "note:"; the caret green). Off by
 * default. */
void amk_diag_set_color(AmkDiagEngine *d, bool on);
/* What --color=auto decides: `out` is a terminal, $TERM is set and not
 * "dumb", and $NO_COLOR is unset. */
bool amk_diag_stream_wants_color(FILE *out);

/* Capture instead of printing (for -verify-diagnostics). */
void amk_diag_set_capture(AmkDiagEngine *d, int capture);
size_t amk_diag_captured_count(const AmkDiagEngine *d);
const AmkDiagnostic *amk_diag_captured(const AmkDiagEngine *d, size_t i);
void amk_diag_clear_captured(AmkDiagEngine *d);

/* Report at a position (loc.line == 0: `file: error: message`). */
#if defined(__GNUC__)
#define AMK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMK_PRINTF(a, b)
#endif
void amk_diag(AmkDiagEngine *d, AmkSeverity s, AmkLoc loc, const char *fmt,
              ...) AMK_PRINTF(4, 5);
void amk_diag_v(AmkDiagEngine *d, AmkSeverity s, AmkLoc loc, const char *fmt,
                va_list ap);
#define amk_error(d, loc, ...) amk_diag((d), AMK_SEVERITY_ERROR, (loc), __VA_ARGS__)
#define amk_warning(d, loc, ...)                                               \
  amk_diag((d), AMK_SEVERITY_WARNING, (loc), __VA_ARGS__)
#define amk_note(d, loc, ...) amk_diag((d), AMK_SEVERITY_NOTE, (loc), __VA_ARGS__)

/* Errors and warnings reported since creation (captured ones included). */
int amk_diag_error_count(const AmkDiagEngine *d);
int amk_diag_warning_count(const AmkDiagEngine *d);

/* Internal invariant violated: print file and line, abort. Never for bad
 * input. */
_Noreturn void amk_internal_error(const char *file, int line, const char *msg);
#define AMK_ASSERT(cond)                                                       \
  ((cond) ? (void)0 : amk_internal_error(__FILE__, __LINE__, #cond))
#define AMK_UNREACHABLE(msg) amk_internal_error(__FILE__, __LINE__, (msg))

/* malloc/realloc that abort on exhaustion (an internal failure). */
void *amk_xmalloc(size_t n);
void *amk_xcalloc(size_t n, size_t size);
void *amk_xrealloc(void *p, size_t n);
char *amk_xstrdup(const char *s);

#endif
