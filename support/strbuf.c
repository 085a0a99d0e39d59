/* AmkStrBuf: output is built in memory first so that a failure never leaves
 * a partial file behind. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/strbuf.h"

void amk_sb_init(AmkStrBuf *sb) { memset(sb, 0, sizeof *sb); }

void amk_sb_free(AmkStrBuf *sb) {
  free(sb->data);
  memset(sb, 0, sizeof *sb);
}

static void reserve(AmkStrBuf *sb, size_t extra) {
  if (sb->len + extra + 1 <= sb->cap)
    return;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < sb->len + extra + 1)
    cap *= 2;
  sb->data = amk_xrealloc(sb->data, cap);
  sb->cap = cap;
}

void amk_sb_putn(AmkStrBuf *sb, const char *s, size_t n) {
  reserve(sb, n);
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void amk_sb_putc(AmkStrBuf *sb, char c) {
  reserve(sb, 1);
  sb->data[sb->len++] = c;
  sb->data[sb->len] = '\0';
}

void amk_sb_puts(AmkStrBuf *sb, const char *s) { amk_sb_putn(sb, s, strlen(s)); }

void amk_sb_printf(AmkStrBuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof small) {
    amk_sb_putn(sb, small, (size_t)n);
    return;
  }
  reserve(sb, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}
