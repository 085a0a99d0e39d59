/* The few NCCL types and entry points the CUDA backend's tensor-parallel
 * group uses, declared here so that no NCCL header is needed to build;
 * libnccl is opened with dlopen at run time (backend/nccl_api.c), like
 * libcuda and libnvrtc. */
#ifndef AMK_BACKEND_NCCL_API_H
#define AMK_BACKEND_NCCL_API_H

#include <stdbool.h>
#include <stddef.h>

typedef int ncclResult_t; /* 0 is ncclSuccess */
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow *ncclWindow_t;
typedef struct {
  char internal[128];
} ncclUniqueId;

/* ncclCommWindowRegister's flags: every rank registers a buffer of the same
 * size, so the window is symmetric (NCCL 2.27+). */
#define AMK_NCCL_WIN_COLL_SYMMETRIC 0x01

/* The NCCL version that brought symmetric memory windows (ncclMemAlloc
 * and ncclCommWindowRegister): 2.27.0 as NCCL_VERSION_CODE. */
#define AMK_NCCL_MIN_VERSION 22700

#define AMK_NCCL_FUNCS(X)                                                      \
  X(ncclGetVersion, ncclResult_t, (int *))                                     \
  X(ncclGetErrorString, const char *, (ncclResult_t))                          \
  X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId *))                           \
  X(ncclCommInitRank, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))   \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                               \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                 \
  X(ncclGroupStart, ncclResult_t, (void))                                      \
  X(ncclGroupEnd, ncclResult_t, (void))                                        \
  X(ncclMemAlloc, ncclResult_t, (void **, size_t))                             \
  X(ncclMemFree, ncclResult_t, (void *))                                       \
  X(ncclCommWindowRegister, ncclResult_t,                                      \
    (ncclComm_t, void *, size_t, ncclWindow_t *, int))                         \
  X(ncclCommWindowDeregister, ncclResult_t, (ncclComm_t, ncclWindow_t))

typedef struct {
  void *handle;
  char path[256];
  int version; /* NCCL_VERSION_CODE: 22803 for 2.28.3 */
#define X(name, ret, args) ret(*name) args;
  AMK_NCCL_FUNCS(X)
#undef X
} AmkNccl;

/* Opens libnccl ($AMK_NCCL_LIBRARY, else libnccl.so.2, libnccl.so) and
 * resolves every entry point above; refuses a library older than
 * AMK_NCCL_MIN_VERSION. False with the reason in *why. */
bool amk_nccl_open(AmkNccl *n, char *why, size_t why_len);
void amk_nccl_close(AmkNccl *n);

/* "NCCL error N: text" into buf. */
const char *amk_nccl_error_text(const AmkNccl *n, ncclResult_t r, char *buf, size_t len);

#endif
