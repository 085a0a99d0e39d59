/* UTF-8 helpers and GPT-2's byte-level alphabet. */
#include "amk/strutil.h"
#include "tokenizer_internal.h"

/* ---- UTF-8 -------------------------------------------------------------------- */

size_t tok_utf8_valid_prefix(const char *text, size_t len) {
  const unsigned char *p = (const unsigned char *)text, *end = p + len;
  while (p < end) {
    if (*p < 0x80) {
      p++;
      continue;
    }
    uint32_t cp;
    size_t n = amk_utf8_decode(p, end, &cp);
    if (n == 0)
      break;
    p += n;
  }
  return (size_t)(p - (const unsigned char *)text);
}

size_t tok_utf8_char_len(const char *p, size_t len) {
  uint32_t cp;
  size_t n = amk_utf8_decode((const unsigned char *)p,
                             (const unsigned char *)p + len, &cp);
  return n ? n : 1;
}

size_t tok_utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

void tok_utf8_append_code_point(AmkStrBuf *out, uint32_t cp) {
  char bytes[4];
  amk_sb_putn(out, bytes, tok_utf8_encode(cp, bytes));
}

/* How many bytes the sequence led by `lead` has, and the range its second
 * byte must lie in (Unicode's table of well-formed sequences); 0 for a byte
 * that leads none. */
static size_t sequence_shape(unsigned char lead, unsigned char *lo,
                             unsigned char *hi) {
  *lo = 0x80, *hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF)
    return 2;
  if (lead == 0xE0)
    return *lo = 0xA0, 3;
  if (lead == 0xED)
    return *hi = 0x9F, 3;
  if (lead >= 0xE1 && lead <= 0xEF)
    return 3;
  if (lead == 0xF0)
    return *lo = 0x90, 4;
  if (lead == 0xF4)
    return *hi = 0x8F, 4;
  if (lead >= 0xF1 && lead <= 0xF3)
    return 4;
  return 0;
}

void tok_utf8_append_lossy(AmkStrBuf *out, const char *text, size_t len) {
  const unsigned char *p = (const unsigned char *)text, *end = p + len;
  while (p < end) {
    const unsigned char *run = p;
    while (p < end && *p < 0x80)
      p++;
    if (p > run)
      amk_sb_putn(out, (const char *)run, (size_t)(p - run));
    if (p == end)
      break;
    unsigned char lo, hi;
    size_t need = sequence_shape(*p, &lo, &hi);
    size_t have = 1; /* the lead, then each continuation byte that fits */
    while (need && have < need && p + have < end) {
      unsigned char c = p[have];
      bool fits = have == 1 ? c >= lo && c <= hi : c >= 0x80 && c <= 0xBF;
      if (!fits)
        break;
      have++;
    }
    if (need && have == need)
      amk_sb_putn(out, (const char *)p, have);
    else
      amk_sb_puts(out, "\xEF\xBF\xBD"); /* one U+FFFD per maximal subpart */
    p += have;
  }
}

bool tok_is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 ||
         cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/* ---- the byte-level alphabet ----------------------------------------------------- */

/* Bytes that show as themselves: '!'..'~', '¡'..'¬', '®'..'ÿ'. The other 68
 * take U+0100 + their rank among the others: 0x00..0x20, 0x7F..0xA0, 0xAD. */
static bool shows_as_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t tok_byte_level_char(unsigned char b) {
  if (shows_as_itself(b))
    return b;
  if (b <= 0x20)
    return 0x100 + b;
  if (b >= 0x7F && b <= 0xA0)
    return 0x100 + 33 + (b - 0x7F);
  return 0x100 + 67; /* 0xAD */
}

int tok_byte_level_byte(uint32_t cp) {
  if (cp < 0x100)
    return shows_as_itself(cp) ? (int)cp : -1;
  if (cp < 0x100 + 33)
    return (int)(cp - 0x100);
  if (cp < 0x100 + 67)
    return (int)(0x7F + cp - 0x100 - 33);
  if (cp == 0x100 + 67)
    return 0xAD;
  return -1;
}
