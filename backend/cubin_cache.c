/* The on-disk cubin cache: a file per SHA-256 key (nettle), holding the key
 * it was stored under and a digest of the cubin, both checked on every read
 * so that a renamed, truncated or corrupted file is a miss, never a wrong
 * program. */
#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/backend.h"
#include "amk/path.h"

/* File layout: MAGIC, the 32-byte key, the 32-byte SHA-256 of the cubin,
 * the cubin's length (8 bytes, little endian), the cubin. */
static const char CACHE_MAGIC[8] = {'A', 'M', 'K', 'C', 'U', 'B', '1', '\n'};
enum { HEADER_BYTES = 8 + 2 * AMK_CUBIN_KEY_BYTES + 8 };

/* Each part enters the hash as its 8-byte length, then its bytes, so no two
 * lists of parts hash the same bytes. */
static void hash_part(struct sha256_ctx *ctx, const void *data, size_t n) {
  uint8_t len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (uint8_t)((uint64_t)n >> (8 * i));
  sha256_update(ctx, sizeof len, len);
  sha256_update(ctx, n, data);
}

void amk_cubin_cache_key(const char *const *parts, size_t n_parts, AmkCubinKey *key) {
  struct sha256_ctx ctx;
  sha256_init(&ctx);
  for (size_t i = 0; i < n_parts; i++)
    hash_part(&ctx, parts[i], strlen(parts[i]));
  sha256_digest(&ctx, AMK_CUBIN_KEY_BYTES, key->bytes);
}

void amk_cubin_key_hex(const AmkCubinKey *key, char hex[2 * AMK_CUBIN_KEY_BYTES + 1]) {
  for (int i = 0; i < AMK_CUBIN_KEY_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", key->bytes[i]);
}

static void sha256_of(const void *data, size_t n, uint8_t out[AMK_CUBIN_KEY_BYTES]) {
  struct sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, n, data);
  sha256_digest(&ctx, AMK_CUBIN_KEY_BYTES, out);
}

void amk_cubin_cache_path(const char *dir, const AmkCubinKey *key, char *buf, size_t len) {
  char hex[2 * AMK_CUBIN_KEY_BYTES + 1];
  amk_cubin_key_hex(key, hex);
  snprintf(buf, len, "%s/%s.cubin", dir, hex);
}

/* The whole of a regular file, or NULL. O_NONBLOCK so that a FIFO left at
 * the cache path cannot hold the run forever. */
static uint8_t *read_regular_file(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < HEADER_BYTES ||
      (uint64_t)st.st_size > (uint64_t)1 << 32) {
    close(fd);
    return NULL;
  }
  size_t n = (size_t)st.st_size, got = 0;
  uint8_t *data = amk_xmalloc(n);
  while (got < n) {
    ssize_t r = read(fd, data + got, n - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    free(data);
    return NULL;
  }
  *size = n;
  return data;
}

void *amk_cubin_cache_load(const char *path, const AmkCubinKey *key, size_t *cubin_size) {
  size_t n = 0;
  uint8_t *file = read_regular_file(path, &n);
  if (!file)
    return NULL;
  const uint8_t *stored_key = file + sizeof CACHE_MAGIC;
  const uint8_t *stored_digest = stored_key + AMK_CUBIN_KEY_BYTES;
  const uint8_t *len_bytes = stored_digest + AMK_CUBIN_KEY_BYTES;
  uint64_t len = 0;
  for (int i = 0; i < 8; i++)
    len |= (uint64_t)len_bytes[i] << (8 * i);
  const uint8_t *cubin = file + HEADER_BYTES;
  uint8_t digest[AMK_CUBIN_KEY_BYTES];
  bool ok = memcmp(file, CACHE_MAGIC, sizeof CACHE_MAGIC) == 0 &&
            memcmp(stored_key, key->bytes, AMK_CUBIN_KEY_BYTES) == 0 &&
            len == n - HEADER_BYTES && len > 4 && memcmp(cubin, "\177ELF", 4) == 0;
  if (ok) {
    sha256_of(cubin, (size_t)len, digest);
    ok = memcmp(digest, stored_digest, AMK_CUBIN_KEY_BYTES) == 0;
  }
  if (!ok) {
    free(file);
    return NULL;
  }
  memmove(file, cubin, (size_t)len);
  *cubin_size = (size_t)len;
  return file;
}

/* mkdir -p; true when the directory exists afterwards. */
static bool make_dirs(const char *path) {
  char tmp[1024];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
    return false;
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

static bool write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

bool amk_cubin_cache_store(const char *dir, const AmkCubinKey *key, const void *cubin,
                           size_t size) {
  if (!make_dirs(dir))
    return false;
  char path[1200], tmp[1200];
  amk_cubin_cache_path(dir, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/.amk-cubin-XXXXXX", dir);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return false;
  fchmod(fd, 0644);
  uint8_t header[HEADER_BYTES];
  memcpy(header, CACHE_MAGIC, sizeof CACHE_MAGIC);
  memcpy(header + sizeof CACHE_MAGIC, key->bytes, AMK_CUBIN_KEY_BYTES);
  sha256_of(cubin, size, header + sizeof CACHE_MAGIC + AMK_CUBIN_KEY_BYTES);
  for (int i = 0; i < 8; i++)
    header[HEADER_BYTES - 8 + i] = (uint8_t)((uint64_t)size >> (8 * i));
  bool ok = write_all(fd, header, sizeof header) && write_all(fd, cubin, size);
  if (close(fd) != 0)
    ok = false;
  /* Write to a temporary file in the same folder, then rename over: a
   * reader never sees half a file. */
  if (ok && rename(tmp, path) != 0)
    ok = false;
  if (!ok)
    unlink(tmp);
  return ok;
}
