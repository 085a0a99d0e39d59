/* An NVRTC compile error prints NVRTC's log with the generated source lines
 * around each error (run by test/cuda/nvrtc-error.test where NVRTC loads). */
#include <stdio.h>
#include <stdlib.h>

#include "amk/backend.h"

int main(void) {
  const char *source = "__global__ void ok_kernel(int *p) { p[0] = 1; }\n"
                       "// line 2\n"
                       "__global__ void broken_kernel(int *p) {\n"
                       "  p[0] = this_name_is_not_declared;\n"
                       "}\n";
  AmkDiagEngine *diag = amk_diag_new(stderr);
  void *cubin = NULL;
  size_t size = 0;
  bool ok = amk_nvrtc_compile(source, "sm_90", false, &cubin, &size, diag);
  free(cubin);
  amk_diag_free(diag);
  printf("test_nvrtc_log: compile %s\n", ok ? "succeeded" : "failed");
  return ok ? 1 : 0;
}
