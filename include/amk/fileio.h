/* Whole-file input and atomic output (support layer). */
#ifndef AMK_FILEIO_H
#define AMK_FILEIO_H

#include <stddef.h>
#include <sys/stat.h>

#include "amk/diag.h"

/* Read a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer.
 * On failure prints `path: error: reason` and returns NULL.
 *
 * This is for the file a user names as a tool's input: like LLVM's tools it
 * also reads a named pipe or a device (`amk-opt <(cat prog.amkir)`), waiting
 * for the writer as any reader of a pipe does. Files a tool finds by itself
 * inside a model folder go through amk_read_regular_file instead. */
char *amk_read_file(const char *path, size_t *len, AmkDiagEngine *diag);

/* Opens path read-only if it is a regular file, without blocking on a FIFO.
 * Returns the descriptor (*st filled), or -1 after reporting
 * "PATH: not a regular file (a FIFO)" or "cannot open 'PATH': reason". */
int amk_open_regular_file(const char *path, struct stat *st, AmkDiagEngine *diag);

/* Like amk_read_file, but only a regular file; anything else is refused
 * (`path: not a regular file (a FIFO)`) without waiting on it. For files found
 * inside a model folder (config.json, model.safetensors.index.json), where a
 * FIFO or device is a mistake that would otherwise hang the tool. */
char *amk_read_regular_file(const char *path, size_t *len, AmkDiagEngine *diag);

/* Write `data` to `path`, "-" = stdout. Like LLVM's tools:
 * - absent or a regular file: written atomically (temp file in the same
 *   folder, then rename), so a failure leaves no partial output and the old
 *   file intact;
 * - a symbolic link: the link is kept and the file it resolves to is written
 *   by these rules (atomically when that is absent or regular);
 * - a character device, FIFO or other non-regular file: opened and written in
 *   place, never replaced (`-o /dev/null` as root keeps /dev/null a device).
 *   Opening a FIFO waits for its reader. */
int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag);

/* The same for output made of several stretches, written in order (a file
 * too large to assemble in memory first, such as a checkpoint). */
typedef struct {
  const void *data;
  size_t len;
} AmkWritePart;
int amk_write_file_parts_atomic(const char *path, const AmkWritePart *parts, size_t n,
                                AmkDiagEngine *diag);

#endif
