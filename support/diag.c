/* The diagnostics engine (chibicc / clang style carets). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amk/diag.h"
#include "amk/progress.h"

struct AmkDiagEngine {
  FILE *out;
  const char *name;
  const char *unlocated_name; /* for messages without a place; NULL: name */
  const char *text;
  size_t len;
  size_t *line_starts; /* built lazily for caret lines */
  size_t n_lines;
  int capture;
  AmkDiagnostic *captured;
  size_t n_captured, cap_captured;
  int errors, warnings;
  bool color;
};

/* ANSI SGR sequences. */
#define SGR_BOLD "\033[1m"
#define SGR_RESET "\033[0m"

static const char *severity_color(AmkSeverity s) {
  switch (s) {
  case AMK_SEVERITY_ERROR:
    return "\033[1;31m";
  case AMK_SEVERITY_WARNING:
    return "\033[1;35m";
  case AMK_SEVERITY_NOTE:
    return "\033[1;36m";
  case AMK_SEVERITY_REMARK:
    return "\033[1;34m";
  }
  return "";
}

void amk_diag_set_color(AmkDiagEngine *d, bool on) { d->color = on; }

bool amk_diag_stream_wants_color(FILE *out) {
  const char *term = getenv("TERM");
  return isatty(fileno(out)) && term && *term && strcmp(term, "dumb") != 0 &&
         !getenv("NO_COLOR");
}

AmkDiagEngine *amk_diag_new(FILE *out) {
  AmkDiagEngine *d = amk_xcalloc(1, sizeof *d);
  d->out = out;
  d->name = "<input>";
  return d;
}

void amk_diag_clear_captured(AmkDiagEngine *d) {
  for (size_t i = 0; i < d->n_captured; i++)
    free(d->captured[i].message);
  d->n_captured = 0;
}

void amk_diag_free(AmkDiagEngine *d) {
  if (!d)
    return;
  amk_diag_clear_captured(d);
  free(d->captured);
  free(d->line_starts);
  free(d);
}

void amk_diag_set_source(AmkDiagEngine *d, const char *name, const char *text,
                         size_t len) {
  d->name = name ? name : "<input>";
  d->text = text;
  d->len = len;
  free(d->line_starts);
  d->line_starts = NULL;
  d->n_lines = 0;
}

void amk_diag_set_unlocated_name(AmkDiagEngine *d, const char *name) {
  d->unlocated_name = name;
}

const char *amk_diag_source_name(const AmkDiagEngine *d) { return d->name; }

void amk_diag_set_capture(AmkDiagEngine *d, int capture) { d->capture = capture; }
size_t amk_diag_captured_count(const AmkDiagEngine *d) { return d->n_captured; }
const AmkDiagnostic *amk_diag_captured(const AmkDiagEngine *d, size_t i) {
  return i < d->n_captured ? &d->captured[i] : NULL;
}
int amk_diag_error_count(const AmkDiagEngine *d) { return d->errors; }
int amk_diag_warning_count(const AmkDiagEngine *d) { return d->warnings; }

const char *amk_severity_name(AmkSeverity s) {
  switch (s) {
  case AMK_SEVERITY_ERROR:
    return "error";
  case AMK_SEVERITY_WARNING:
    return "warning";
  case AMK_SEVERITY_NOTE:
    return "note";
  case AMK_SEVERITY_REMARK:
    return "remark";
  }
  return "error";
}

static void index_lines(AmkDiagEngine *d) {
  size_t cap = 1024;
  d->line_starts = amk_xmalloc(cap * sizeof *d->line_starts);
  d->line_starts[d->n_lines++] = 0;
  for (size_t i = 0; i < d->len; i++) {
    if (d->text[i] != '\n')
      continue;
    if (d->n_lines == cap) {
      cap *= 2;
      d->line_starts = amk_xrealloc(d->line_starts, cap * sizeof *d->line_starts);
    }
    d->line_starts[d->n_lines++] = i + 1;
  }
}

/* The source line and a caret under the column; tabs in the line are kept in
 * the caret's indentation so the caret lines up. */
static void print_caret(AmkDiagEngine *d, AmkLoc loc) {
  if (!d->text || loc.line == 0)
    return;
  if (!d->line_starts)
    index_lines(d);
  if (loc.line > d->n_lines)
    return;
  size_t start = d->line_starts[loc.line - 1];
  size_t end = start;
  while (end < d->len && d->text[end] != '\n' && d->text[end] != '\r')
    end++;
  fprintf(d->out, "%.*s\n", (int)(end - start), d->text + start);
  size_t col = loc.col ? loc.col - 1 : 0;
  if (col > end - start)
    col = end - start;
  for (size_t i = 0; i < col; i++)
    fputc(d->text[start + i] == '\t' ? '\t' : ' ', d->out);
  fputs(d->color ? "\033[1;32m^" SGR_RESET "\n" : "^\n", d->out);
}

void amk_diag_v(AmkDiagEngine *d, AmkSeverity s, AmkLoc loc, const char *fmt,
                va_list ap) {
  if (s == AMK_SEVERITY_ERROR)
    d->errors++;
  else if (s == AMK_SEVERITY_WARNING)
    d->warnings++;
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  char *msg = amk_xmalloc((size_t)(n < 0 ? 0 : n) + 1);
  vsnprintf(msg, (size_t)(n < 0 ? 0 : n) + 1, fmt, ap);
  if (d->capture) {
    if (d->n_captured == d->cap_captured) {
      d->cap_captured = d->cap_captured ? d->cap_captured * 2 : 16;
      d->captured =
          amk_xrealloc(d->captured, d->cap_captured * sizeof *d->captured);
    }
    d->captured[d->n_captured++] = (AmkDiagnostic){s, loc, msg};
    return;
  }
  /* A progress line being drawn on the same stream ends first. */
  amk_progress_break_line(d->out);
  const char *bold = d->color ? SGR_BOLD : "", *reset = d->color ? SGR_RESET : "";
  const char *sev = d->color ? severity_color(s) : "";
  if (loc.line)
    fprintf(d->out, "%s%s:%u:%u: %s%s:%s%s %s%s\n", bold, d->name, loc.line, loc.col, sev,
            amk_severity_name(s), reset, bold, msg, reset);
  else
    fprintf(d->out, "%s%s: %s%s:%s%s %s%s\n", bold,
            d->unlocated_name ? d->unlocated_name : d->name, sev,
            amk_severity_name(s), reset, bold, msg, reset);
  print_caret(d, loc);
  free(msg);
}

void amk_diag(AmkDiagEngine *d, AmkSeverity s, AmkLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  amk_diag_v(d, s, loc, fmt, ap);
  va_end(ap);
}
