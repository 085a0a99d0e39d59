/* Facts about the machine the tools run on (support layer). */
#ifndef AMK_HOST_H
#define AMK_HOST_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/diag.h"

/* The environment variable that overrides the detected host memory: a
 * positive decimal number of bytes. Tests use it to make the limit small;
 * a user can set it to leave room for other work. */
#define AMK_HOST_MEMORY_ENV "AMK_HOST_MEMORY_BYTES"

/* The host's memory in bytes: AMK_HOST_MEMORY_BYTES when set, else the
 * physical memory (sysconf). *from_env tells which. False after reporting
 * when the variable is set to something else than a positive integer, or
 * when the memory cannot be found out. */
bool amk_host_memory_bytes(int64_t *out, bool *from_env, AmkDiagEngine *diag);

/* The environment variable `name` as a positive decimal integer (digits
 * only). *given tells whether it is set; when set to anything else, false
 * after reporting "NAME must be a positive number of UNIT, not 'TEXT'". */
bool amk_env_positive_int(const char *name, const char *unit, int64_t *out, bool *given,
                          AmkDiagEngine *diag);

#endif
