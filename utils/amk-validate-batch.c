/* amk-validate-batch: validate many programs in one process.
 *
 *   amk-validate-batch [--no-bounds] [--root DIR] [FILE...]   (no FILE: read
 *   the file names from stdin, one a line)
 *
 * Prints one line per file: `NAME<TAB>ACCEPT`, `NAME<TAB>REJECT: <first
 * error>` or `NAME<TAB>LOAD-ERROR: <first error>`. Exit status 0 unless a
 * file could not be read. utils/validate_conformance.py drives it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/io.h"
#include "amk/strutil.h"
#include "amk/validate.h"

static const char *first_error(const AmkDiagEngine *d) {
  for (size_t i = 0; i < amk_diag_captured_count(d); i++) {
    const AmkDiagnostic *x = amk_diag_captured(d, i);
    if (x->severity == AMK_SEVERITY_ERROR)
      return x->message;
  }
  return "(no message)";
}

/* One line of output; newlines inside a message would break the format. */
static void print_verdict(const char *name, const char *verdict,
                          const char *message) {
  printf("%s\t%s", name, verdict);
  if (message) {
    fputs(": ", stdout);
    for (const char *p = message; *p; p++)
      putchar(*p == '\n' || *p == '\t' ? ' ' : *p);
  }
  putchar('\n');
}

static int run_one(const char *root, const char *name,
                   const AmkValidateOptions *opts, AmkValidatorWorkspace *ws) {
  char path[4096];
  if (root)
    snprintf(path, sizeof path, "%s/%s", root, name);
  else
    snprintf(path, sizeof path, "%s", name);
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_capture(diag, 1);
  size_t len = 0;
  char *text = amk_read_file(path, &len, diag);
  if (!text) {
    print_verdict(name, "LOAD-ERROR", first_error(diag));
    amk_diag_free(diag);
    return 1;
  }
  AmkModule *m = amk_str_ends_with(path, ".amkir")
                     ? amk_parse_text(path, text, len, diag)
                     : amk_read_json(path, text, len, diag);
  if (!m) {
    print_verdict(name, "LOAD-ERROR", first_error(diag));
  } else {
    AmkValidateResult r;
    if (amk_validate_module_ws(ws, m, diag, opts, &r))
      print_verdict(name, "ACCEPT", NULL);
    else
      print_verdict(name, "REJECT", first_error(diag));
    amk_module_free(m);
  }
  free(text);
  amk_diag_free(diag);
  return 0;
}

int main(int argc, char **argv) {
  AmkValidateOptions opts = amk_validate_default_options();
  opts.max_errors = 1; /* only the first error is printed */
  const char *root = NULL;
  int status = 0, i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--no-bounds") == 0)
      opts.semantic_bounds = false;
    else if (strcmp(argv[i], "--root") == 0 && i + 1 < argc)
      root = argv[++i];
    else
      break;
  }
  AmkValidatorWorkspace *ws = amk_validator_workspace_new();
  if (i < argc) {
    for (; i < argc; i++)
      status |= run_one(root, argv[i], &opts, ws);
  } else {
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
      line[strcspn(line, "\r\n")] = '\0';
      if (line[0])
        status |= run_one(root, line, &opts, ws);
    }
  }
  amk_validator_workspace_free(ws);
  return status;
}
