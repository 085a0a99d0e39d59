/* The version the library was built as: the project's, from CMake. */
#include "amk/version.h"

#include "amk/tables.h"
#include "amk_version_info.h"

const char *amk_version_string(void) { return AMK_PROJECT_VERSION; }

void amk_version_print(FILE *out, const char *tool) {
  fprintf(out, "%s (AMK toolchain) %s\n", tool, amk_version_string());
  fprintf(out, "AMK IR version %s, ABI version %s\n", AMK_IR_VERSION, AMK_ABI_VERSION);
}
