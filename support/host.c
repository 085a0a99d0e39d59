/* Facts about the host (include/amk/host.h). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "amk/host.h"

bool amk_host_memory_bytes(int64_t *out, bool *from_env, AmkDiagEngine *diag) {
  AmkLoc nowhere = {0, 0};
  const char *given = getenv(AMK_HOST_MEMORY_ENV);
  *from_env = given != NULL;
  if (given) {
    /* Digits only: strtoll would also take spaces, signs and "0x". */
    bool digits = given[0] != '\0';
    for (const char *p = given; *p && digits; p++)
      digits = *p >= '0' && *p <= '9';
    char *end = NULL;
    errno = 0;
    long long v = digits ? strtoll(given, &end, 10) : 0;
    if (!digits || errno || *end || v <= 0) {
      amk_error(diag, nowhere, "%s must be a positive number of bytes, not '%s'",
                AMK_HOST_MEMORY_ENV, given);
      return false;
    }
    *out = v;
    return true;
  }
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
