/* Facts about the host (include/amk/host.h). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "amk/host.h"

bool amk_env_positive_int(const char *name, const char *unit, int64_t *out, bool *given,
                          AmkDiagEngine *diag) {
  const char *text = getenv(name);
  *given = text != NULL;
  if (!text)
    return true;
  /* Digits only: strtoll would also take spaces, signs and "0x". */
  bool digits = text[0] != '\0';
  for (const char *p = text; *p && digits; p++)
    digits = *p >= '0' && *p <= '9';
  char *end = NULL;
  errno = 0;
  long long v = digits ? strtoll(text, &end, 10) : 0;
  if (!digits || errno || *end || v <= 0) {
    AmkLoc nowhere = {0, 0};
    amk_error(diag, nowhere, "%s must be a positive number of %s, not '%s'", name, unit, text);
    return false;
  }
  *out = v;
  return true;
}

bool amk_host_memory_bytes(int64_t *out, bool *from_env, AmkDiagEngine *diag) {
  AmkLoc nowhere = {0, 0};
  if (!amk_env_positive_int(AMK_HOST_MEMORY_ENV, "bytes", out, from_env, diag))
    return false;
  if (*from_env)
    return true;
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) {
    amk_error(diag, nowhere, "cannot tell how much memory this machine has; "
              "set %s", AMK_HOST_MEMORY_ENV);
    return false;
  }
  /* Saturate: no machine has 2^63 bytes, but the product of two longs may
   * not fit. */
  *out = pages > INT64_MAX / page_size ? INT64_MAX : (int64_t)pages * page_size;
  return true;
}
