/* NVRTC: generated source -> cubin, with an on-disk cache. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/backend.h"
#include "amk/path.h"
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

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* mkdir -p; true when the directory exists afterwards. */
static bool make_dirs(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return false;
      *p = '/';
    }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return false;
  return amk_is_directory(tmp);
}

/* A cached cubin, or NULL (a miss). Only a regular file counts: O_NONBLOCK
 * so that a FIFO left at the cache path cannot hold the run forever. */
static void *read_whole(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0)
    return NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return NULL;
  }
  void *data = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n > 4 && fseek(f, 0, SEEK_SET) == 0) {
      data = malloc((size_t)n);
      if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
      }
      *size = (size_t)n;
    }
  }
  fclose(f);
  return data;
}

/* Write to a temporary file in the same folder, then rename over. */
static bool write_atomic(const char *dir, const char *path, const void *data, size_t n) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s/.amk-cubin-XXXXXX", dir);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return false;
  fchmod(fd, 0644);
  const char *p = data;
  size_t left = n;
  bool ok = true;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) {
      ok = false;
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0)
    ok = false;
  if (ok && rename(tmp, path) != 0)
    ok = false;
  if (!ok)
    unlink(tmp);
  return ok;
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
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  char version[32];
  snprintf(version, sizeof version, "nvrtc %d.%d abi %s", major, minor, AMK_ABI_VERSION);
  h1 = fnv1a(h1, source, strlen(source) + 1);
  h2 = fnv1a(h2, version, strlen(version) + 1);
  for (int i = 0; i < n_opts; i++) {
    h1 = fnv1a(h1, opts[i], strlen(opts[i]) + 1);
    h2 = fnv1a(h2, opts[i], strlen(opts[i]) + 1);
  }
  h2 = fnv1a(h2, source, strlen(source) + 1);
  snprintf(path, sizeof path, "%s/%016llx%016llx.cubin", dir, (unsigned long long)h1,
           (unsigned long long)h2);
  if (use_cache) {
    size_t size = 0;
    void *data = read_whole(path, &size);
    if (data && size > 4 && memcmp(data, "\177ELF", 4) == 0) {
      *cubin = data;
      *cubin_size = size;
      amk_nvrtc_close(&n);
      return true;
    }
    free(data);
  }

  nvrtcProgram prog = NULL;
  nvrtcResult r = n.nvrtcCreateProgram(&prog, source, SOURCE_NAME, 0, NULL, NULL);
  if (r != 0) {
    amk_error(diag, no_loc(), "nvrtcCreateProgram failed: %s", n.nvrtcGetErrorString(r));
    amk_nvrtc_close(&n);
    return false;
  }
  r = n.nvrtcCompileProgram(prog, n_opts, opts);
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
        if (use_cache && (!make_dirs(dir) || !write_atomic(dir, path, data, size)))
          fprintf(stderr, "amk: warning: cannot write the cubin cache in '%s'\n", dir);
      }
    }
  }
  free(log);
  n.nvrtcDestroyProgram(&prog);
  amk_nvrtc_close(&n);
  return ok;
}
