/* File-system path helpers (support layer). */
#ifndef AMK_PATH_H
#define AMK_PATH_H

#include <stdbool.h>
#include <sys/types.h>

/* "dir/name" in a malloc'd string; no second slash when dir already ends in
 * one, and just "name" when dir is empty. */
char *amk_path_join(const char *dir, const char *name);

/* The absolute path of an existing file or folder, links and '..'
 * resolved (malloc'd), or NULL (errno says why). */
char *amk_path_real(const char *path);

/* Whether `path` names an existing directory / regular file (links are
 * followed) / anything at all. */
bool amk_is_directory(const char *path);
bool amk_is_regular_file(const char *path);
bool amk_path_exists(const char *path);

/* What `path` names, links followed. A model folder's file that is there but
 * not a regular file (a FIFO, a device, a folder, or one stat cannot look at)
 * is AMK_PATH_OTHER, so callers report it instead of treating it as absent;
 * opening it then gives the reason. */
typedef enum {
  AMK_PATH_ABSENT,
  AMK_PATH_REGULAR_FILE,
  AMK_PATH_DIRECTORY,
  AMK_PATH_OTHER,
} AmkPathKind;
AmkPathKind amk_path_kind(const char *path);

/* "a FIFO", "a character device", ... for a stat mode: the reason in a
 * "not a regular file" message. */
const char *amk_file_type_name(mode_t mode);

#endif
