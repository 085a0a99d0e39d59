/* Whole-file input and atomic output. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/fileio.h"
#include "amk/path.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* Reads `f` to its end and closes it unless it is stdin. */
static char *read_stream(FILE *f, const char *path, size_t *len, AmkDiagEngine *diag) {
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
    amk_error(diag, no_loc(), "cannot read '%s'", path);
    free(data);
    return NULL;
  }
  data[n] = '\0';
  *len = n;
  return data;
}

char *amk_read_file(const char *path, size_t *len, AmkDiagEngine *diag) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) {
    amk_error(diag, no_loc(), "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (f != stdin && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    amk_error(diag, no_loc(), "'%s' is a directory", path);
    fclose(f);
    return NULL;
  }
  return read_stream(f, path, len, diag);
}

char *amk_read_regular_file(const char *path, size_t *len, AmkDiagEngine *diag) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
   * before fstat could tell it is one. Regular files ignore the flag. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    /* A socket cannot be opened at all; name what it is rather than ENXIO. */
    int open_errno = errno;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
      amk_error(diag, no_loc(), "%s: not a regular file (%s)", path,
                amk_file_type_name(st.st_mode));
    else
      amk_error(diag, no_loc(), "cannot open '%s': %s", path, strerror(open_errno));
    return NULL;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    amk_error(diag, no_loc(), "%s: not a regular file (%s)", path,
              amk_file_type_name(st.st_mode));
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    amk_error(diag, no_loc(), "cannot open '%s': %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  return read_stream(f, path, len, diag);
}

int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag) {
  if (strcmp(path, "-") == 0) {
    if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) {
      amk_error(diag, no_loc(), "cannot write to standard output");
      return -1;
    }
    return 0;
  }
  size_t n = strlen(path);
  char *tmp = amk_xmalloc(n + 16);
  snprintf(tmp, n + 16, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    amk_error(diag, no_loc(), "cannot create '%s': %s", path, strerror(errno));
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
    amk_error(diag, no_loc(), "cannot write '%s': %s", path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  return 0;
}
