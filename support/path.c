/* File-system path helpers (include/amk/path.h). */
#include "amk/path.h"

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
