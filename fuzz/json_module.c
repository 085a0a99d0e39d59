/* Fuzz driver: the reader of the reference's JSON programs (`.amk.json`,
 * amk_read_json), then the module's written forms and the checkers
 * (fuzz_check_module). */
#include "amk/io.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkModule *m = amk_read_json("input.amk.json", (const char *)data, size, diag);
  fuzz_check_verdict("amk_read_json", m != NULL, diag);
  if (m)
    fuzz_check_module(m);
  amk_module_free(m);
  amk_diag_free(diag);
  return 0;
}
