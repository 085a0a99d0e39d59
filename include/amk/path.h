/* File-system path helpers (support layer). */
#ifndef AMK_PATH_H
#define AMK_PATH_H

#include <stdbool.h>

/* "dir/name" in a malloc'd string; no second slash when dir already ends in
 * one, and just "name" when dir is empty. */
char *amk_path_join(const char *dir, const char *name);

/* Whether `path` names an existing directory / regular file (links are
 * followed) / anything at all. */
bool amk_is_directory(const char *path);
bool amk_is_regular_file(const char *path);
bool amk_path_exists(const char *path);

#endif
