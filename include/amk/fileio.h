/* Whole-file input and atomic output (support layer). */
#ifndef AMK_FILEIO_H
#define AMK_FILEIO_H

#include <stddef.h>

#include "amk/diag.h"

/* Read a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer.
 * On failure prints `path: error: reason` and returns NULL. */
char *amk_read_file(const char *path, size_t *len, AmkDiagEngine *diag);

/* Write `data` to `path` atomically (temp file + rename), "-" = stdout. */
int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag);

#endif
