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

int amk_open_regular_file(const char *path, struct stat *st, AmkDiagEngine *diag) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
   * before fstat could tell it is one. Regular files ignore the flag. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    /* A socket cannot be opened at all; name what it is rather than ENXIO. */
    int open_errno = errno;
    if (stat(path, st) == 0 && !S_ISREG(st->st_mode))
      amk_error(diag, no_loc(), "%s: not a regular file (%s)", path,
                amk_file_type_name(st->st_mode));
    else
      amk_error(diag, no_loc(), "cannot open '%s': %s", path, strerror(open_errno));
    return -1;
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    amk_error(diag, no_loc(), "%s: not a regular file (%s)", path,
              amk_file_type_name(st->st_mode));
    close(fd);
    return -1;
  }
  return fd;
}

char *amk_read_regular_file(const char *path, size_t *len, AmkDiagEngine *diag) {
  struct stat st;
  int fd = amk_open_regular_file(path, &st, diag);
  if (fd < 0)
    return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    amk_error(diag, no_loc(), "cannot open '%s': %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  return read_stream(f, path, len, diag);
}

/* Where `path` ends once symbolic links naming its last component are
 * followed (malloc'd; that file may not exist yet): the file to replace or
 * create, so the link itself is kept. Links in the folders above need no following, since
 * rename replaces only the last component. NULL with errno set on a loop or an
 * unreadable link. */
static char *follow_links(const char *path) {
  char *at = amk_xstrdup(path);
  for (int hops = 0; hops < 40; hops++) {
    struct stat st;
    if (lstat(at, &st) != 0 || !S_ISLNK(st.st_mode))
      return at;
    size_t cap = 256;
    char *target = amk_xmalloc(cap);
    ssize_t n;
    while ((n = readlink(at, target, cap)) >= 0 && (size_t)n == cap)
      target = amk_xrealloc(target, cap *= 2);
    if (n < 0) {
      int saved = errno;
      free(target);
      free(at);
      errno = saved;
      return NULL;
    }
    target[n] = '\0';
    char *next;
    if (target[0] == '/') {
      next = target;
    } else {
      /* Relative to the folder holding the link. */
      char *slash = strrchr(at, '/');
      if (slash)
        slash[1] = '\0';
      else
        at[0] = '\0';
      next = amk_path_join(at, target);
      free(target);
    }
    free(at);
    at = next;
  }
  free(at);
  errno = ELOOP;
  return NULL;
}

/* Writes all of `data` to `fd`, retrying short writes. */
static bool write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    data += n;
    len -= (size_t)n;
  }
  return true;
}

static bool write_parts(int fd, const AmkWritePart *parts, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!write_all(fd, parts[i].data, parts[i].len))
      return false;
  return true;
}

/* Writes into an existing non-regular file (device, FIFO): it cannot be
 * replaced, and a temp file renamed over it would destroy it. */
static bool write_in_place(const char *target, const AmkWritePart *parts, size_t n) {
  int fd = open(target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return false;
  bool ok = write_parts(fd, parts, n);
  int write_errno = errno;
  bool closed = close(fd) == 0;
  if (!ok)
    errno = write_errno; /* the first failure is the one to report */
  return ok && closed;
}

/* Temp file beside `target`, then rename: readers never see a partial file
 * and a failure leaves the old one as it was. */
static bool write_replacing(const char *target, const AmkWritePart *parts, size_t n_parts) {
  size_t n = strlen(target);
  char *tmp = amk_xmalloc(n + 16);
  snprintf(tmp, n + 16, "%s.tmpXXXXXX", target);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    free(tmp);
    return false;
  }
  bool ok = write_parts(fd, parts, n_parts);
  int write_errno = errno;
  bool closed = close(fd) == 0;
  if (!ok)
    errno = write_errno;
  ok = ok && closed;
  /* mkstemp creates 0600; output files get the usual permissions. */
  mode_t mask = umask(0);
  umask(mask);
  ok = ok && chmod(tmp, 0666 & ~mask) == 0;
  ok = ok && rename(tmp, target) == 0;
  if (!ok) {
    int saved = errno;
    unlink(tmp);
    errno = saved;
  }
  free(tmp);
  return ok;
}

int amk_write_file_atomic(const char *path, const char *data, size_t len,
                          AmkDiagEngine *diag) {
  AmkWritePart part = {data, len};
  return amk_write_file_parts_atomic(path, &part, 1, diag);
}

int amk_write_file_parts_atomic(const char *path, const AmkWritePart *parts, size_t n,
                                AmkDiagEngine *diag) {
  if (strcmp(path, "-") == 0) {
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
      ok = fwrite(parts[i].data, 1, parts[i].len, stdout) == parts[i].len;
    if (!ok || fflush(stdout) != 0) {
      amk_error(diag, no_loc(), "cannot write to standard output");
      return -1;
    }
    return 0;
  }
  /* stat follows links as open does, so `/dev/stdout` (a link into /proc)
   * is judged by the pipe or terminal it reaches. */
  struct stat st;
  char *target = NULL;
  bool ok;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      errno = EISDIR;
      ok = false;
    } else if (!S_ISREG(st.st_mode)) {
      ok = write_in_place(path, parts, n);
    } else {
      /* A regular file behind a link is replaced where it lies; the link
       * stays. */
      target = follow_links(path);
      ok = target && write_replacing(target, parts, n);
    }
  } else if (errno == ENOENT) {
    /* Absent, or a link to a file not yet there: create that file. */
    target = follow_links(path);
    ok = target && write_replacing(target, parts, n);
  } else {
    ok = false;
  }
  free(target);
  if (!ok) {
    amk_error(diag, no_loc(), "cannot write '%s': %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
