/* The version the library was built as: the project's, from CMake, and
 * `git describe` of the tree it was built from. */
#include "amk/version.h"

#include "amk/tables.h"
#include "amk_git_version.h"
#include "amk_version_info.h"

const char *amk_version_string(void) { return AMK_PROJECT_VERSION; }

const char *amk_version_git(void) { return AMK_GIT_DESCRIBE; }

void amk_version_print(FILE *out, const char *tool) {
  fprintf(out, "%s (AMK toolchain) %s\n", tool, amk_version_string());
  fprintf(out, "AMK IR version %s, ABI version %s\n", AMK_IR_VERSION, AMK_ABI_VERSION);
  if (*amk_version_git())
    fprintf(out, "built from git %s\n", amk_version_git());
}
