/* String helpers: edit distance, "did you mean" suggestions, suffixes, UTF-8
 * (include/amk/strutil.h). */
#include <string.h>

#include "amk/strutil.h"

size_t amk_edit_distance(const char *a, size_t la, const char *b,
                            size_t lb) {
  enum { MAX = 64 };
  if (la >= MAX || lb >= MAX)
    return MAX;
  size_t row[MAX + 1];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t above = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = diagonal + cost;
      if (above + 1 < best)
        best = above + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  return row[lb];
}

const char *amk_suggest(const char *word, size_t len,
                             const char *const *candidates, size_t n) {
  const char *best = NULL;
  size_t best_distance = len / 3 + 1; /* close enough to be a typo */
  if (best_distance > 3)
    best_distance = 3;
  best_distance++;
  for (size_t i = 0; i < n; i++) {
    size_t d = amk_edit_distance(word, len, candidates[i], strlen(candidates[i]));
    if (d < best_distance) {
      best = candidates[i];
      best_distance = d;
    }
  }
  return best;
}

bool amk_str_ends_with(const char *s, const char *suffix) {
  size_t len = strlen(s), suffix_len = strlen(suffix);
  return len >= suffix_len && strcmp(s + len - suffix_len, suffix) == 0;
}

int amk_hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

size_t amk_utf8_decode(const unsigned char *p, const unsigned char *end,
                       uint32_t *code_point) {
  if (p >= end)
    return 0;
  unsigned char lead = *p;
  size_t len;
  uint32_t cp, min;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  if ((lead & 0xE0) == 0xC0)
    len = 2, cp = lead & 0x1F, min = 0x80;
  else if ((lead & 0xF0) == 0xE0)
    len = 3, cp = lead & 0x0F, min = 0x800;
  else if ((lead & 0xF8) == 0xF0)
    len = 4, cp = lead & 0x07, min = 0x10000;
  else
    return 0;
  if ((size_t)(end - p) < len)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  *code_point = cp;
  return len;
}
