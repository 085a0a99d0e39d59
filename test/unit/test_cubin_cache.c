/* The cubin cache (backend/cubin_cache.c): keys are SHA-256 over the parts
 * with their lengths (expected digests from Python's hashlib), and a cached
 * file is used only under the key it was stored with, whole and intact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amk/backend.h"
#include "unit.h"

static void hex_of(const char *const *parts, size_t n, char hex[65]) {
  AmkCubinKey key;
  amk_cubin_cache_key(parts, n, &key);
  amk_cubin_key_hex(&key, hex);
}

static bool write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  unsigned char *buf = malloc(1 << 16);
  *n = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  UnitCounts c = {0};
  char hex[65];
  /* Digests of the length-framed parts, computed independently with
   * hashlib: sha256(b''.join(struct.pack('<Q', len(p)) + p for p in parts)). */
  hex_of(NULL, 0, hex);
  CHECK_STR(&c, hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *abc[] = {"abc"};
  hex_of(abc, 1, hex);
  CHECK_STR(&c, hex, "ce91dc5eec0139adf091900d225971d6ad246a845bad791b5693a9d0d55dd391");
  const char *compile[] = {"amk cubin cache 2", "nvrtc 12.4 abi 0.2", "driver none",
                           "__global__ void k() {}", "--gpu-architecture=sm_90"};
  hex_of(compile, 5, hex);
  CHECK_STR(&c, hex, "ee09205e3ccda79af5e3f881052ecb9789a0b4cde8402913567a993093960fc3");
  /* Every part counts, and where one ends: "ab"+"c" is not "a"+"bc". */
  const char *split1[] = {"ab", "c"}, *split2[] = {"a", "bc"};
  char h1[65], h2[65];
  hex_of(split1, 2, h1);
  hex_of(split2, 2, h2);
  CHECK(&c, strcmp(h1, h2) != 0);
  const char *other_driver[] = {"amk cubin cache 2", "nvrtc 12.4 abi 0.2", "driver 12040",
                                "__global__ void k() {}", "--gpu-architecture=sm_90"};
  hex_of(other_driver, 5, h1);
  CHECK(&c, strcmp(h1, "ee09205e3ccda79af5e3f881052ecb9789a0b4cde8402913567a993093960fc3") != 0);

  /* Store, then load back under the same key. */
  char dir[] = "/tmp/amk-cubin-cache-XXXXXX";
  CHECK(&c, mkdtemp(dir) != NULL);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/made/by/store", dir); /* created as needed */
  AmkCubinKey key, other;
  amk_cubin_cache_key(compile, 5, &key);
  amk_cubin_cache_key(other_driver, 5, &other);
  const char cubin[] = "\177ELF pretend cubin bytes";
  size_t cubin_n = sizeof cubin;
  CHECK(&c, amk_cubin_cache_store(sub, &key, cubin, cubin_n));
  char path[1200], other_path[1200];
  amk_cubin_cache_path(sub, &key, path, sizeof path);
  amk_cubin_cache_path(sub, &other, other_path, sizeof other_path);
  CHECK(&c, strstr(path, "ee09205e3ccda79a") != NULL);
  size_t n = 0;
  void *got = amk_cubin_cache_load(path, &key, &n);
  CHECK(&c, got && n == cubin_n && memcmp(got, cubin, n) == 0);
  free(got);
  /* The file under another key's name (copied, or a hash collision of the
   * name) is not that key's cubin. */
  size_t file_n = 0;
  unsigned char *file = read_bytes(path, &file_n);
  CHECK(&c, file && write_bytes(other_path, file, file_n));
  CHECK(&c, amk_cubin_cache_load(other_path, &other, &n) == NULL);
  /* A changed byte of the cubin, a truncated file, a bad magic: misses. */
  file[file_n - 3] ^= 1;
  CHECK(&c, write_bytes(path, file, file_n));
  CHECK(&c, amk_cubin_cache_load(path, &key, &n) == NULL);
  file[file_n - 3] ^= 1;
  CHECK(&c, write_bytes(path, file, file_n - 1));
  CHECK(&c, amk_cubin_cache_load(path, &key, &n) == NULL);
  file[0] = 'X';
  CHECK(&c, write_bytes(path, file, file_n));
  CHECK(&c, amk_cubin_cache_load(path, &key, &n) == NULL);
  /* Storing again replaces a bad file; the cache is usable again. */
  CHECK(&c, amk_cubin_cache_store(sub, &key, cubin, cubin_n));
  got = amk_cubin_cache_load(path, &key, &n);
  CHECK(&c, got && n == cubin_n && memcmp(got, cubin, n) == 0);
  free(got);
  /* A missing file and a directory at the path are misses too. */
  CHECK(&c, amk_cubin_cache_load("/nonexistent/amk/x.cubin", &key, &n) == NULL);
  CHECK(&c, amk_cubin_cache_load(dir, &key, &n) == NULL);
  free(file);
  unlink(path);
  unlink(other_path);
  char rmdirs[256];
  snprintf(rmdirs, sizeof rmdirs, "rm -rf '%s'", dir);
  CHECK(&c, system(rmdirs) == 0);
  return unit_finish("test_cubin_cache", &c);
}
