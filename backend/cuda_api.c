/* dlopen layer for libcuda and libnvrtc (backend/cuda_api.h). */
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*GetProcV2Fn)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*GetProcV1Fn)(const char *, void **, int, unsigned long long);

/* The CUDA version whose entry-point ABI we declared (12.0: the _v2 forms
 * of cuMemAlloc, cuStreamDestroy, ...). */
#define AMK_CUDA_API_VERSION 12000

bool amk_cuda_driver_open(AmkCudaDriver *d, char *why, size_t why_len) {
  memset(d, 0, sizeof *d);
  /* Never unloaded: the driver starts threads of its own at cuInit. */
  d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!d->handle) {
    const char *e = dlerror();
    snprintf(why, why_len, "the CUDA driver library libcuda.so.1 cannot be opened (%s)",
             e ? e : "not found");
    return false;
  }
  void *sym = dlsym(d->handle, "cuGetProcAddress_v2");
  GetProcV2Fn v2 = NULL;
  GetProcV1Fn v1 = NULL;
  if (sym)
    memcpy(&v2, &sym, sizeof v2);
  else if ((sym = dlsym(d->handle, "cuGetProcAddress")))
    memcpy(&v1, &sym, sizeof v1);
  if (!v1 && !v2) {
    snprintf(why, why_len, "libcuda.so.1 has no cuGetProcAddress (a driver older than CUDA 11.3)");
    amk_cuda_driver_close(d);
    return false;
  }
#define X(name, ret, args)                                                     \
  {                                                                            \
    void *fn = NULL;                                                           \
    int status = 0;                                                            \
    CUresult r = v2 ? v2(#name, &fn, AMK_CUDA_API_VERSION, 0, &status)         \
                    : v1(#name, &fn, AMK_CUDA_API_VERSION, 0);                 \
    if (r != 0 || !fn) {                                                       \
      if (r == 34)                                                             \
        snprintf(why, why_len, "libcuda.so.1 is the CUDA stub library: no NVIDIA driver is " \
                 "installed");                                                  \
      else                                                                     \
        snprintf(why, why_len, "the CUDA driver has no entry point %s (error %d)", #name, r); \
      amk_cuda_driver_close(d);                                                \
      return false;                                                            \
    }                                                                          \
    memcpy(&d->name, &fn, sizeof d->name);                                     \
  }
  AMK_CUDA_DRIVER_FUNCS(X)
#undef X
  CUresult r = d->cuInit(0);
  if (r == 100) {
    snprintf(why, why_len, "no CUDA device is visible (cuInit: CUDA_ERROR_NO_DEVICE)");
    amk_cuda_driver_close(d);
    return false;
  }
  if (r != 0) {
    char buf[160];
    snprintf(why, why_len, "cuInit failed: %s", amk_cuda_error_text(d, r, buf, sizeof buf));
    amk_cuda_driver_close(d);
    return false;
  }
  int count = 0;
  r = d->cuDeviceGetCount(&count);
  if (r != 0 || count < 1) {
    snprintf(why, why_len, "no CUDA device is visible");
    amk_cuda_driver_close(d);
    return false;
  }
  return true;
}

void amk_cuda_driver_close(AmkCudaDriver *d) {
  if (d->handle)
    dlclose(d->handle);
  memset(d, 0, sizeof *d);
}

const char *amk_cuda_error_text(const AmkCudaDriver *d, CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (d && d->cuGetErrorName)
    d->cuGetErrorName(r, &name);
  if (d && d->cuGetErrorString)
    d->cuGetErrorString(r, &text);
  snprintf(buf, len, "%s (%d)%s%s", name ? name : "CUDA error", r, text ? ": " : "",
           text ? text : "");
  return buf;
}

void *amk_dlopen_first(const char *const *candidates, size_t n, bool only_first, char *path,
                       size_t path_len, char *last_error, size_t last_len) {
  snprintf(last_error, last_len, "not found");
  for (size_t i = 0; i < n; i++) {
    if (!candidates[i] || !*candidates[i])
      continue;
    void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h) {
      snprintf(path, path_len, "%s", candidates[i]);
      return h;
    }
    const char *e = dlerror();
    snprintf(last_error, last_len, "%s", e ? e : "not found");
    if (only_first && i == 0)
      break;
  }
  return NULL;
}

/* ---- NVRTC ------------------------------------------------------------------- */

bool amk_nvrtc_open(AmkNvrtc *n, char *why, size_t why_len) {
  memset(n, 0, sizeof *n);
  const char *env = getenv("AMK_NVRTC");
  const char *cuda_home = getenv("CUDA_HOME");
  char home_path[2][300];
  snprintf(home_path[0], sizeof home_path[0], "%s/lib64/libnvrtc.so",
           cuda_home ? cuda_home : "/usr/local/cuda");
  snprintf(home_path[1], sizeof home_path[1], "%s/lib/libnvrtc.so",
           cuda_home ? cuda_home : "/usr/local/cuda");
  const char *candidates[] = {env,
                              "libnvrtc.so",
                              "libnvrtc.so.13",
                              "libnvrtc.so.12",
                              home_path[0],
                              home_path[1],
                              "/usr/local/cuda/lib64/libnvrtc.so.13",
                              "/usr/local/cuda/lib64/libnvrtc.so.12"};
  char last[256];
  /* Kept loaded: its one-time allocations stay reachable (and LeakSanitizer
   * quiet), and a second compile does not reload it. */
  n->handle = amk_dlopen_first(candidates, sizeof candidates / sizeof candidates[0], false,
                               n->path, sizeof n->path, last, sizeof last);
  if (!n->handle) {
    snprintf(why, why_len, "NVRTC (libnvrtc.so) cannot be opened (%s); set AMK_NVRTC to its path",
             last);
    return false;
  }
#define X(name, ret, args)                                                     \
  {                                                                            \
    void *fn = dlsym(n->handle, #name);                                        \
    if (!fn) {                                                                 \
      snprintf(why, why_len, "%s has no %s", n->path, #name);                  \
      amk_nvrtc_close(n);                                                      \
      return false;                                                            \
    }                                                                          \
    memcpy(&n->name, &fn, sizeof n->name);                                     \
  }
  AMK_NVRTC_FUNCS(X)
#undef X
  return true;
}

void amk_nvrtc_close(AmkNvrtc *n) {
  if (n->handle)
    dlclose(n->handle);
  memset(n, 0, sizeof *n);
}
