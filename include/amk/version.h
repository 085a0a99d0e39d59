/* The toolchain's version, as the library was built (support layer). */
#ifndef AMK_VERSION_H
#define AMK_VERSION_H

#include <stdio.h>

/* The project version, "MAJOR.MINOR.PATCH" (CMakeLists.txt's project()). */
const char *amk_version_string(void);

/* `git describe --always --dirty --tags` of the tree the library was built
 * from, taken at build time; "" when that was not a git checkout. */
const char *amk_version_git(void);

/* What `TOOL --version` prints: the tool and project version, then the IR
 * and ABI versions it reads and writes, and the git description when known. */
void amk_version_print(FILE *out, const char *tool);

#endif
