/* A growable byte buffer (support layer): output is built in memory first, so
 * a failure never leaves a partial file behind. */
#ifndef AMK_STRBUF_H
#define AMK_STRBUF_H

#include <stddef.h>

#include "amk/diag.h"

typedef struct {
  char *data;
  size_t len, cap;
} AmkStrBuf;

void amk_sb_init(AmkStrBuf *sb);
void amk_sb_free(AmkStrBuf *sb);
void amk_sb_putc(AmkStrBuf *sb, char c);
void amk_sb_puts(AmkStrBuf *sb, const char *s);
void amk_sb_putn(AmkStrBuf *sb, const char *s, size_t n);
void amk_sb_printf(AmkStrBuf *sb, const char *fmt, ...) AMK_PRINTF(2, 3);

#endif
