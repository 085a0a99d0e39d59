/* The text form's lexical rules that the printer needs as much as the
 * parser: which names print bare and which need quotes. The re2c lexer
 * (frontend/lexer.re) spells the same rule as a regular expression; the
 * round-trip tests keep the two in step. */
#include <stdbool.h>
#include <string.h>

#include "amk/ir.h"

static bool is_ident_start(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool amk_text_is_identifier(const char *s, size_t len) {
  if (len == 0 || !is_ident_start((unsigned char)s[0]))
    return false;
  for (size_t i = 1; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!is_ident_start(c) && !(c >= '0' && c <= '9') && c != '.' && c != '-')
      return false;
  }
  return true;
}

static const char *const keywords[] = {
    "amkir", "abi",   "model", "meta",  "target", "config", "buffer",
    "counter", "task", "wait", "signal", "sm",    "cost",   "bytes",
    "flops", "label", "pages", "page",  "live",   "source", "init",
    "null",  "true",  "false", "nan",   "inf",
};

bool amk_text_is_keyword(const char *s, size_t len) {
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    if (strlen(keywords[i]) == len && memcmp(keywords[i], s, len) == 0)
      return true;
  return false;
}
