/* Whole-file input and atomic output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/fileio.h"

char *amk_read_file(const char *path, size_t *len, AmkDiagEngine *diag) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  AmkLoc none = {0, 0};
  if (!f) {
    amk_error(diag, none, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (f != stdin && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    amk_error(diag, none, "'%s' is a directory", path);
    fclose(f);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *data = amk_xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) {
      cap *= 2;
      data = amk_xrealloc(data, cap);
    }
    size_t got = fread(data + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0)
      break;
  }
  int failed = ferror(f);
  if (f != stdin)
    fclose(f);
  if (failed) {
    amk_error(diag, none, "cannot read '%s'", path);
    free(data);
    return NULL;
  }
  data[n] = '\0';
  *len = n;
  return data;
}

int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag) {
  AmkLoc none = {0, 0};
  if (strcmp(path, "-") == 0) {
    if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) {
      amk_error(diag, none, "cannot write to standard output");
      return -1;
    }
    return 0;
  }
  size_t n = strlen(path);
  char *tmp = amk_xmalloc(n + 16);
  snprintf(tmp, n + 16, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    amk_error(diag, none, "cannot create '%s': %s", path, strerror(errno));
    free(tmp);
    return -1;
  }
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(data, 1, len, f) == len;
  if (f)
    ok = (fclose(f) == 0) && ok;
  else
    close(fd);
  /* mkstemp creates 0600; output files get the usual permissions. */
  mode_t mask = umask(0);
  umask(mask);
  if (ok)
    ok = chmod(tmp, 0666 & ~mask) == 0;
  if (ok)
    ok = rename(tmp, path) == 0;
  if (!ok) {
    amk_error(diag, none, "cannot write '%s': %s", path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  return 0;
}
