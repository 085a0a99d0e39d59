/* The drivers' shared checks: see fuzz.h. */
#include "fuzz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/pass.h"
#include "amk/strbuf.h"
#include "amk/validate.h"

AmkDiagEngine *fuzz_diag_new(void) {
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_capture(diag, 1);
  return diag;
}

static void print_kept(const AmkDiagEngine *diag) {
  size_t n = diag ? amk_diag_captured_count(diag) : 0;
  for (size_t i = 0; i < n; i++) {
    const AmkDiagnostic *d = amk_diag_captured(diag, i);
    fprintf(stderr, "  %s: %s\n", amk_severity_name(d->severity), d->message);
  }
}

void fuzz_fail(const AmkDiagEngine *diag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz: property broken: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  print_kept(diag);
  abort();
}

void fuzz_check_verdict(const char *reader, bool accepted,
                        const AmkDiagEngine *diag) {
  int errors = amk_diag_error_count(diag);
  if (!accepted && errors == 0)
    fuzz_fail(diag, "%s refused the input without an error message", reader);
  if (accepted && errors != 0)
    fuzz_fail(diag, "%s accepted the input but reported %d error(s)", reader,
              errors);
}

/* ---- the written forms -------------------------------------------------------- */

typedef struct {
  char *data;
  size_t len;
} Bytes;

static Bytes json_of(const AmkModule *m) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_write_json(m, &sb);
  amk_sb_putc(&sb, '\0');
  return (Bytes){sb.data, sb.len - 1};
}

static Bytes text_of(const AmkModule *m) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_print_text(m, &sb);
  amk_sb_putc(&sb, '\0');
  return (Bytes){sb.data, sb.len - 1};
}

static bool same(Bytes a, Bytes b) {
  return a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
}

static void fail_differs(const char *what, Bytes first, Bytes second) {
  fuzz_fail(NULL, "%s\n--- first\n%s\n--- second\n%s", what, first.data,
            second.data);
}

/* Reads `form` back with `reader`; the result must write `expected` through
 * `writer`. */
static void check_read_back(const char *what, Bytes form,
                            AmkModule *(*reader)(const char *, const char *,
                                                 size_t, AmkDiagEngine *),
                            Bytes (*writer)(const AmkModule *), Bytes expected) {
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkModule *back = reader("written", form.data, form.len, diag);
  if (!back)
    fuzz_fail(diag, "%s: what we wrote does not read back:\n%s", what,
              form.data);
  Bytes again = writer(back);
  if (!same(expected, again))
    fail_differs(what, expected, again);
  free(again.data);
  amk_module_free(back);
  amk_diag_free(diag);
}

void fuzz_check_module(const AmkModule *m) {
  Bytes json = json_of(m), text = text_of(m);
  check_read_back("JSON -> JSON", json, amk_read_json, json_of, json);
  check_read_back("text -> text", text, amk_parse_text, text_of, text);
  check_read_back("text -> JSON", text, amk_parse_text, json_of, json);
  free(json.data);
  free(text.data);

  AmkDiagEngine *diag = fuzz_diag_new();
  amk_verify_module(m, diag);
  amk_validate_module(m, diag, NULL, NULL);
  amk_diag_free(diag);
}
