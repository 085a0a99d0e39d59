/* NVRTC: generated source -> cubin, with an on-disk cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/progress.h"
#include "cuda_api.h"

#define SOURCE_NAME "amk_megakernel.cu"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

bool amk_nvrtc_available(char *why, size_t why_len) {
  AmkNvrtc n;
  char buf[512];
  bool ok = amk_nvrtc_open(&n, buf, sizeof buf);
  if (ok)
    amk_nvrtc_close(&n);
  else if (why)
    snprintf(why, why_len, "%s", buf);
  return ok;
}

void amk_nvrtc_cache_dir(char *buf, size_t len) {
  const char *dir = getenv("AMK_CACHE_DIR");
  if (dir && *dir) {
    snprintf(buf, len, "%s", dir);
    return;
  }
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) {
    snprintf(buf, len, "%s/amk", xdg);
    return;
  }
  const char *home = getenv("HOME");
  snprintf(buf, len, "%s/.cache/amk", home && *home ? home : "/tmp");
}

/* The driver's version for the cache key (a cubin is kept per driver, so
 * an upgrade that changes what loads cannot reuse an old one); "none"
 * where no driver loads, as when compiling on a machine without a GPU. */
static void driver_version(char *buf, size_t len) {
  AmkCudaDriver d;
  char why[256];
  int v = 0;
  if (amk_cuda_driver_open(&d, why, sizeof why)) {
    if (d.cuDriverGetVersion(&v) != 0)
      v = 0;
    amk_cuda_driver_close(&d);
  }
  if (v > 0)
    snprintf(buf, len, "driver %d", v);
  else
    snprintf(buf, len, "driver none");
}

/* Prints the NVRTC log, and after each "SOURCE_NAME(line): " the generated
 * source lines around it. */
static void print_log(const char *log, const char *source) {
  fprintf(stderr, "amk: NVRTC failed to compile the generated source:\n");
  const char *p = log;
  int shown = 0;
  while (*p) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    fprintf(stderr, "  %.*s\n", (int)len, p);
    const char *at = strstr(p, SOURCE_NAME "(");
    if (at && at < p + len && shown < 12) {
      long line = strtol(at + strlen(SOURCE_NAME) + 1, NULL, 10);
      long cur = 1;
      const char *s = source;
      while (*s && cur < line - 2) {
        if (*s++ == '\n')
          cur++;
      }
      for (; *s && cur <= line + 2; cur++) {
        const char *e = strchr(s, '\n');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        fprintf(stderr, "    %s%5ld | %.*s\n", cur == line ? ">" : " ", cur, (int)l, s);
        s = e ? e + 1 : s + l;
      }
      shown++;
    }
    p = eol ? eol + 1 : p + len;
  }
}

bool amk_nvrtc_compile(const char *source, const char *arch, bool use_cache, void **cubin,
                       size_t *cubin_size, AmkDiagEngine *diag) {
  *cubin = NULL;
  *cubin_size = 0;
  if (!arch || strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 16) {
    amk_error(diag, no_loc(), "--arch must name a real architecture like sm_90, not '%s'",
              arch ? arch : "");
    return false;
  }
  AmkNvrtc n;
  char why[512];
  if (!amk_nvrtc_open(&n, why, sizeof why)) {
    amk_error(diag, no_loc(), "%s", why);
    return false;
  }
  int major = 0, minor = 0;
  n.nvrtcVersion(&major, &minor);
  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  const char *opts[] = {arch_opt, "--std=c++17", "-lineinfo", "--device-as-default-execution-space"};
  int n_opts = (int)(sizeof opts / sizeof opts[0]);

  char dir[1024], path[1200];
  amk_nvrtc_cache_dir(dir, sizeof dir);
  AmkCubinKey key;
  if (use_cache) {
    char nvrtc_version[64], driver[64];
    snprintf(nvrtc_version, sizeof nvrtc_version, "nvrtc %d.%d abi %s", major, minor,
             AMK_ABI_VERSION);
    driver_version(driver, sizeof driver);
    const char *parts[4 + sizeof opts / sizeof opts[0]] = {"amk cubin cache 2", nvrtc_version,
                                                           driver, source};
    size_t n_parts = 4;
    for (int i = 0; i < n_opts; i++)
      parts[n_parts++] = opts[i];
    amk_cubin_cache_key(parts, n_parts, &key);
    amk_cubin_cache_path(dir, &key, path, sizeof path);
    size_t size = 0;
    void *data = amk_cubin_cache_load(path, &key, &size);
    if (data) {
      *cubin = data;
      *cubin_size = size;
      amk_nvrtc_close(&n);
      return true;
    }
  }

  nvrtcProgram prog = NULL;
  nvrtcResult r = n.nvrtcCreateProgram(&prog, source, SOURCE_NAME, 0, NULL, NULL);
  if (r != 0) {
    amk_error(diag, no_loc(), "nvrtcCreateProgram failed: %s", n.nvrtcGetErrorString(r));
    amk_nvrtc_close(&n);
    return false;
  }
  /* One blocking call of seconds to minutes: the progress line's own
   * thread shows the time going by. */
  char label[128];
  snprintf(label, sizeof label, "amk: compiling the megakernel for %s (NVRTC %d.%d)", arch, major,
           minor);
  AmkProgress *progress = amk_progress_begin(label, AMK_PROGRESS_ITEMS, NULL, 0);
  r = n.nvrtcCompileProgram(prog, n_opts, opts);
  amk_progress_end(progress);
  size_t log_size = 0;
  n.nvrtcGetProgramLogSize(prog, &log_size);
  char *log = amk_xmalloc(log_size + 1);
  log[0] = '\0';
  if (log_size > 1)
    n.nvrtcGetProgramLog(prog, log);
  log[log_size] = '\0';
  bool ok = false;
  if (r != 0) {
    print_log(log, source);
    amk_error(diag, no_loc(), "NVRTC %d.%d could not compile the program for %s: %s", major,
              minor, arch, n.nvrtcGetErrorString(r));
  } else {
    size_t size = 0;
    if (n.nvrtcGetCUBINSize(prog, &size) != 0 || size == 0) {
      amk_error(diag, no_loc(), "NVRTC produced no cubin for %s", arch);
    } else {
      char *data = amk_xmalloc(size);
      if (n.nvrtcGetCUBIN(prog, data) != 0) {
        free(data);
        amk_error(diag, no_loc(), "nvrtcGetCUBIN failed");
      } else {
        *cubin = data;
        *cubin_size = size;
        ok = true;
        if (use_cache && !amk_cubin_cache_store(dir, &key, data, size))
          fprintf(stderr, "amk: warning: cannot write the cubin cache in '%s'\n", dir);
      }
    }
  }
  free(log);
  n.nvrtcDestroyProgram(&prog);
  amk_nvrtc_close(&n);
  return ok;
}
