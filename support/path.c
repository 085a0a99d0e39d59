/* File-system path helpers (include/amk/path.h). */
/* realpath is XSI. */
#define _XOPEN_SOURCE 700

#include "amk/path.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amk/diag.h"

char *amk_path_join(const char *dir, const char *name) {
  size_t dir_len = strlen(dir), name_len = strlen(name);
  char *joined = amk_xmalloc(dir_len + name_len + 2);
  memcpy(joined, dir, dir_len);
  size_t at = dir_len;
  if (dir_len && dir[dir_len - 1] != '/')
    joined[at++] = '/';
  memcpy(joined + at, name, name_len + 1);
  return joined;
}

bool amk_is_directory(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool amk_is_regular_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool amk_path_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

AmkPathKind amk_path_kind(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return errno == ENOENT || errno == ENOTDIR ? AMK_PATH_ABSENT : AMK_PATH_OTHER;
  if (S_ISREG(sb.st_mode))
    return AMK_PATH_REGULAR_FILE;
  return S_ISDIR(sb.st_mode) ? AMK_PATH_DIRECTORY : AMK_PATH_OTHER;
}

const char *amk_file_type_name(mode_t mode) {
  if (S_ISREG(mode))
    return "a regular file";
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return "an unknown kind of file";
}

char *amk_path_real(const char *path) { return realpath(path, NULL); }
