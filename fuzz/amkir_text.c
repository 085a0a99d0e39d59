/* Fuzz driver: the `.amkir` text parser (amk_parse_text), then the module's
 * written forms and the checkers (fuzz_check_module). */
#include "amk/io.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkModule *m = amk_parse_text("input.amkir", (const char *)data, size, diag);
  fuzz_check_verdict("amk_parse_text", m != NULL, diag);
  if (m)
    fuzz_check_module(m);
  amk_module_free(m);
  amk_diag_free(diag);
  return 0;
}
