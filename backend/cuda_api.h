/* The few Driver API and NVRTC types, enums and entry points the backend
 * uses, declared here so that no CUDA header is needed to build; the
 * libraries are opened with dlopen at run time (backend/cuda_api.c). */
#ifndef AMK_BACKEND_CUDA_API_H
#define AMK_BACKEND_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

enum {
  AMK_CUDA_SUCCESS = 0,
  AMK_CUDA_ERROR_NOT_READY = 600,
  AMK_CUDA_ERROR_LAUNCH_TIMEOUT = 702,
};
/* CUdevice_attribute values used. */
enum {
  AMK_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97,
  AMK_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  AMK_CU_ATTR_CC_MAJOR = 75,
  AMK_CU_ATTR_CC_MINOR = 76,
  AMK_CU_ATTR_COOPERATIVE_LAUNCH = 95,
  AMK_CU_ATTR_L2_CACHE_SIZE = 38,
};
/* CUfunction_attribute values used. */
enum {
  AMK_CU_FUNC_ATTR_STATIC_SHARED = 1,
  AMK_CU_FUNC_ATTR_NUM_REGS = 4,
  AMK_CU_FUNC_ATTR_LOCAL_SIZE = 3,
  AMK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8,
  AMK_CU_FUNC_ATTR_PREFERRED_SHARED_CARVEOUT = 9,
};
#define AMK_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define AMK_CU_EVENT_DEFAULT 0
#define AMK_CU_STREAM_NON_BLOCKING 1

/* CUDA_MEMCPY2D (its CUmemorytype fields as int, the enum's size). */
#define AMK_CU_MEMORYTYPE_DEVICE 2
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} AmkCudaMemcpy2D;

/* The driver entry points, fetched with cuGetProcAddress. */
#define AMK_CUDA_DRIVER_FUNCS(X)                                               \
  X(cuInit, CUresult, (unsigned))                                             \
  X(cuDriverGetVersion, CUresult, (int *))                                    \
  X(cuDeviceGetCount, CUresult, (int *))                                      \
  X(cuDeviceGet, CUresult, (CUdevice *, int))                                 \
  X(cuDeviceGetName, CUresult, (char *, int, CUdevice))                       \
  X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice))                   \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))              \
  X(cuDevicePrimaryCtxRelease, CUresult, (CUdevice))                          \
  X(cuCtxSetCurrent, CUresult, (CUcontext))                                   \
  X(cuCtxSynchronize, CUresult, (void))                                       \
  X(cuModuleLoadData, CUresult, (CUmodule *, const void *))                   \
  X(cuModuleUnload, CUresult, (CUmodule))                                     \
  X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *))    \
  X(cuModuleGetGlobal, CUresult, (CUdeviceptr *, size_t *, CUmodule, const char *)) \
  X(cuDeviceCanAccessPeer, CUresult, (int *, CUdevice, CUdevice))             \
  X(cuFuncSetAttribute, CUresult, (CUfunction, int, int))                     \
  X(cuFuncGetAttribute, CUresult, (int *, int, CUfunction))                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUresult,                    \
    (int *, CUfunction, int, size_t))                                         \
  X(cuMemGetInfo, CUresult, (size_t *, size_t *))                             \
  X(cuMemAlloc, CUresult, (CUdeviceptr *, size_t))                            \
  X(cuMemFree, CUresult, (CUdeviceptr))                                       \
  X(cuMemHostAlloc, CUresult, (void **, size_t, unsigned))                    \
  X(cuMemHostGetDevicePointer, CUresult, (CUdeviceptr *, void *, unsigned))   \
  X(cuMemFreeHost, CUresult, (void *))                                        \
  X(cuMemcpyHtoD, CUresult, (CUdeviceptr, const void *, size_t))              \
  X(cuMemcpyDtoH, CUresult, (void *, CUdeviceptr, size_t))                    \
  X(cuMemcpyHtoDAsync, CUresult, (CUdeviceptr, const void *, size_t, CUstream)) \
  X(cuMemcpyDtoHAsync, CUresult, (void *, CUdeviceptr, size_t, CUstream))     \
  X(cuMemcpy2DAsync, CUresult, (const AmkCudaMemcpy2D *, CUstream))          \
  X(cuMemsetD8, CUresult, (CUdeviceptr, unsigned char, size_t))               \
  X(cuMemsetD32, CUresult, (CUdeviceptr, unsigned, size_t))                   \
  X(cuMemsetD32Async, CUresult, (CUdeviceptr, unsigned, size_t, CUstream))    \
  X(cuStreamCreate, CUresult, (CUstream *, unsigned))                         \
  X(cuStreamDestroy, CUresult, (CUstream))                                    \
  X(cuStreamQuery, CUresult, (CUstream))                                      \
  X(cuStreamSynchronize, CUresult, (CUstream))                                \
  X(cuEventCreate, CUresult, (CUevent *, unsigned))                           \
  X(cuEventDestroy, CUresult, (CUevent))                                      \
  X(cuEventRecord, CUresult, (CUevent, CUstream))                             \
  X(cuEventSynchronize, CUresult, (CUevent))                                  \
  X(cuEventQuery, CUresult, (CUevent))                                        \
  X(cuEventElapsedTime, CUresult, (float *, CUevent, CUevent))                \
  X(cuLaunchKernel, CUresult,                                                 \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
     unsigned, CUstream, void **, void **))                                   \
  X(cuLaunchCooperativeKernel, CUresult,                                      \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
     unsigned, CUstream, void **))                                            \
  X(cuGetErrorName, CUresult, (CUresult, const char **))                      \
  X(cuGetErrorString, CUresult, (CUresult, const char **))

typedef struct {
  void *handle;
#define X(name, ret, args) ret(*name) args;
  AMK_CUDA_DRIVER_FUNCS(X)
#undef X
} AmkCudaDriver;

/* Opens libcuda.so.1, resolves every entry point and calls cuInit(0).
 * False with a reason in why. */
/* dlopen of the first of n candidate names (NULL or empty ones skipped)
 * that loads, kept loaded for the process (the CUDA libraries start
 * threads); its name into path. With `only_first`, a first candidate that
 * is set (a user's environment variable) is the only one tried. NULL with
 * the last loader error in last_error otherwise. */
void *amk_dlopen_first(const char *const *candidates, size_t n, bool only_first, char *path,
                       size_t path_len, char *last_error, size_t last_len);

bool amk_cuda_driver_open(AmkCudaDriver *d, char *why, size_t why_len);
void amk_cuda_driver_close(AmkCudaDriver *d);
/* "CUDA_ERROR_X: text" for a result code. */
const char *amk_cuda_error_text(const AmkCudaDriver *d, CUresult r, char *buf,
                                size_t len);

/* ---- NVRTC ----------------------------------------------------------------- */

typedef int nvrtcResult; /* 0 is NVRTC_SUCCESS */
typedef struct _nvrtcProgram *nvrtcProgram;

#define AMK_NVRTC_FUNCS(X)                                                     \
  X(nvrtcVersion, nvrtcResult, (int *, int *))                                \
  X(nvrtcGetErrorString, const char *, (nvrtcResult))                         \
  X(nvrtcCreateProgram, nvrtcResult,                                          \
    (nvrtcProgram *, const char *, const char *, int, const char *const *,    \
     const char *const *))                                                    \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *))                       \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *)) \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *))            \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *))                  \
  X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t *))                 \
  X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char *))

typedef struct {
  void *handle;
  char path[512];
#define X(name, ret, args) ret(*name) args;
  AMK_NVRTC_FUNCS(X)
#undef X
} AmkNvrtc;

bool amk_nvrtc_open(AmkNvrtc *n, char *why, size_t why_len);
void amk_nvrtc_close(AmkNvrtc *n);

#endif
