/* dlopen layer for libnccl (backend/nccl_api.h). */
#include "nccl_api.h"

#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool amk_nccl_open(AmkNccl *n, char *why, size_t why_len) {
  memset(n, 0, sizeof *n);
  const char *env = getenv("AMK_NCCL_LIBRARY");
  const char *candidates[] = {env, "libnccl.so.2", "libnccl.so"};
  char last[256];
  /* Kept loaded (NCCL starts threads of its own); a library the user named
   * is the one wanted, with no fallback to another. */
  n->handle = amk_dlopen_first(candidates, sizeof candidates / sizeof candidates[0], true,
                               n->path, sizeof n->path, last, sizeof last);
  if (!n->handle) {
    snprintf(why, why_len,
             "NCCL (libnccl.so.2) cannot be opened (%s); install NCCL %d.%d or later, or set "
             "AMK_NCCL_LIBRARY to its path",
             last, AMK_NCCL_MIN_VERSION / 10000, AMK_NCCL_MIN_VERSION / 100 % 100);
    return false;
  }
  /* ncclGetVersion first: an old library lacks the later entry points, and
   * its version says why better than a missing symbol. */
  void *fn = dlsym(n->handle, "ncclGetVersion");
  if (fn) {
    memcpy(&n->ncclGetVersion, &fn, sizeof n->ncclGetVersion);
    if (n->ncclGetVersion(&n->version) != 0)
      n->version = 0;
  }
  if (n->version < AMK_NCCL_MIN_VERSION) {
    snprintf(why, why_len,
             "%s is NCCL %d.%d.%d; the tensor-parallel group needs %d.%d or later (symmetric "
             "memory windows)",
             n->path, n->version / 10000, n->version / 100 % 100, n->version % 100,
             AMK_NCCL_MIN_VERSION / 10000, AMK_NCCL_MIN_VERSION / 100 % 100);
    amk_nccl_close(n);
    return false;
  }
#define X(name, ret, args)                                                     \
  {                                                                            \
    void *sym = dlsym(n->handle, #name);                                       \
    if (!sym) {                                                                \
      snprintf(why, why_len, "%s has no %s", n->path, #name);                  \
      amk_nccl_close(n);                                                       \
      return false;                                                            \
    }                                                                          \
    memcpy(&n->name, &sym, sizeof n->name);                                    \
  }
  AMK_NCCL_FUNCS(X)
#undef X
  return true;
}

void amk_nccl_close(AmkNccl *n) {
  if (n->handle)
    dlclose(n->handle);
  memset(n, 0, sizeof *n);
}

const char *amk_nccl_error_text(const AmkNccl *n, ncclResult_t r, char *buf, size_t len) {
  const char *text = n && n->ncclGetErrorString ? n->ncclGetErrorString(r) : NULL;
  snprintf(buf, len, "NCCL error %d%s%s", r, text ? ": " : "", text ? text : "");
  return buf;
}
