/* Allocation that never returns NULL, and the internal-error exit: running
 * out of memory is an internal failure, never a user error to recover from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"

_Noreturn void amk_internal_error(const char *file, int line, const char *msg) {
  fprintf(stderr, "%s:%d: internal error: %s\n", file, line, msg);
  fflush(stderr);
  abort();
}

void *amk_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p)
    amk_internal_error(__FILE__, __LINE__, "out of memory");
  return p;
}

void *amk_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    amk_internal_error(__FILE__, __LINE__, "out of memory");
  return p;
}

void *amk_xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p)
    amk_internal_error(__FILE__, __LINE__, "out of memory");
  return p;
}

char *amk_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(amk_xmalloc(n), s, n);
}
