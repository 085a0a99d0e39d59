/* The `.amkir` lexer (re2c). Reentrant: every bit of state lives in the
 * AmkTextParser passed in; nothing is global.
 *
 * The input is a private NUL-terminated copy, so the NUL after the last byte
 * is the re2c sentinel; a NUL inside the text is an ordinary bad character
 * because the end is also bounds-checked (re2c:eof).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parser.h"
#include "text_internal.h"

static AmkLoc token_loc(const AmkTextParser *p) {
  AmkLoc loc = {p->line, (uint32_t)(p->token - p->line_start) + 1};
  return loc;
}

static void set_location(const AmkTextParser *p, AMK_YYLTYPE *lloc) {
  lloc->first_line = lloc->last_line = (int)p->line;
  lloc->first_column = (int)(p->token - p->line_start) + 1;
  lloc->last_column = (int)(p->cursor - p->line_start);
}

/* Decimal integer with overflow check; accumulates negatively so INT64_MIN
 * is representable. */
static bool parse_int64(const unsigned char *s, const unsigned char *end,
                        int64_t *out) {
  bool negative = *s == '-';
  if (negative)
    s++;
  int64_t acc = 0;
  for (; s < end; s++) {
    int digit = *s - '0';
    if (acc < (INT64_MIN + digit) / 10)
      return false;
    acc = acc * 10 - digit;
  }
  if (!negative) {
    if (acc == INT64_MIN)
      return false;
    acc = -acc;
  }
  *out = acc;
  return true;
}

static void put_utf8(AmkStrBuf *sb, uint32_t cp) {
  if (cp < 0x80) {
    amk_sb_putc(sb, (char)cp);
  } else if (cp < 0x800) {
    amk_sb_putc(sb, (char)(0xC0 | (cp >> 6)));
    amk_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    amk_sb_putc(sb, (char)(0xE0 | (cp >> 12)));
    amk_sb_putc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
    amk_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
  } else {
    amk_sb_putc(sb, (char)(0xF0 | (cp >> 18)));
    amk_sb_putc(sb, (char)(0x80 | ((cp >> 12) & 0x3F)));
    amk_sb_putc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
    amk_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
  }
}

static int hex4(const unsigned char *s, const unsigned char *limit,
                uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    if (s + i >= limit)
      return 0;
    unsigned char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      return 0;
    v = v * 16 + (uint32_t)d;
  }
  *out = v;
  return 1;
}

/* Reads the body of a string whose opening quote is just before p->cursor,
 * unescaping into the module's arena. Strings end on the same line. */
static bool lex_string_body(AmkTextParser *p, AmkTextSlice *out) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  const unsigned char *s = p->cursor;
  for (;;) {
    if (s >= p->limit || *s == '\n') {
      amk_text_error(p, token_loc(p), "unterminated string");
      goto fail;
    }
    unsigned char c = *s;
    if (c == '"') {
      s++;
      break;
    }
    if (c != '\\') {
      if (c == 0) {
        AmkLoc at = {p->line, (uint32_t)(s - p->line_start) + 1};
        amk_text_error(p, at, "NUL byte in string");
        goto fail;
      }
      amk_sb_putc(&sb, (char)c);
      s++;
      continue;
    }
    AmkLoc escape_at = {p->line, (uint32_t)(s - p->line_start) + 1};
    s++;
    c = s < p->limit ? *s : 0;
    s++;
    switch (c) {
    case '"': amk_sb_putc(&sb, '"'); break;
    case '\\': amk_sb_putc(&sb, '\\'); break;
    case 'n': amk_sb_putc(&sb, '\n'); break;
    case 't': amk_sb_putc(&sb, '\t'); break;
    case 'r': amk_sb_putc(&sb, '\r'); break;
    case 'u': {
      uint32_t cp;
      if (!hex4(s, p->limit, &cp)) {
        amk_text_error(p, escape_at, "'\\u' must be followed by 4 hex digits");
        goto fail;
      }
      s += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* a UTF-16 surrogate pair, as JSON writes characters beyond U+FFFF */
        uint32_t low;
        if (s + 1 < p->limit && s[0] == '\\' && s[1] == 'u' &&
            hex4(s + 2, p->limit, &low) && low >= 0xDC00 && low <= 0xDFFF) {
          s += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else {
          amk_text_error(p, escape_at, "unpaired UTF-16 surrogate '\\u%04X'",
                         (unsigned)cp);
          goto fail;
        }
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        amk_text_error(p, escape_at, "unpaired UTF-16 surrogate '\\u%04X'",
                       (unsigned)cp);
        goto fail;
      } else if (cp == 0) {
        amk_text_error(p, escape_at, "'\\u0000' is not allowed in strings");
        goto fail;
      }
      put_utf8(&sb, cp);
      break;
    }
    default:
      amk_text_error(p, escape_at,
                     "unknown escape sequence in string (use \\\" \\\\ \\n "
                     "\\t \\r or \\uXXXX)");
      goto fail;
    }
  }
  p->cursor = s;
  out->len = sb.len;
  out->ptr = sb.len ? amk_arena_strndup(&p->module->arena, sb.data, sb.len)
                    : "";
  amk_sb_free(&sb);
  return true;
fail:
  amk_sb_free(&sb);
  return false;
}

static int lex_ref(AmkTextParser *p, AMK_YYSTYPE *lval, int token,
                   const char *what) {
  /* p->token points at the sigil; the rest of the token follows it */
  AmkTextRef *ref = &lval->ref;
  memset(ref, 0, sizeof *ref);
  const unsigned char *body = p->token + 1;
  if (*body == '"') {
    if (!lex_string_body(p, &ref->name))
      return TOK_AMK_YYerror;
    return token;
  }
  if (*body == '-' || (*body >= '0' && *body <= '9')) {
    ref->by_id = true;
    if (!parse_int64(body, p->cursor, &ref->id) || ref->id < INT32_MIN ||
        ref->id > INT32_MAX) {
      amk_text_error(p, token_loc(p), "%s id '%.*s' is out of range", what,
                     (int)(p->cursor - body), (const char *)body);
      return TOK_AMK_YYerror;
    }
    return token;
  }
  ref->name.ptr = (const char *)body;
  ref->name.len = (size_t)(p->cursor - body);
  return token;
}

/*!re2c
  re2c:api:style = free-form;
  re2c:define:YYCTYPE = "unsigned char";
  re2c:define:YYCURSOR = "p->cursor";
  re2c:define:YYMARKER = "p->marker";
  re2c:define:YYLIMIT = "p->limit";
  re2c:yyfill:enable = 0;
  re2c:eof = 0;

  ident = [A-Za-z_][A-Za-z0-9_.\-]*;
  digits = [0-9]+;
  int = "-"? digits;
  exponent = [eE] [+-]? digits;
  float = "-"? digits ("." digits exponent? | exponent);
  version = digits ("." digits) ("." digits)+;
  badnum = "-"? [0-9] [0-9A-Za-z_]* ("." [0-9A-Za-z_]+)*;
*/

static int lex_token(AMK_YYSTYPE *lval, AmkTextParser *p) {
  for (;;) {
    p->token = p->cursor;
    /*!re2c
      $ { return TOK_END; }
      [ \t\r\f\v]+ { continue; }
      "\n" { p->line++; p->line_start = p->cursor; continue; }
      ";" [^\n]* { continue; }

      "amkir"   { return TOK_KW_AMKIR; }
      "abi"     { return TOK_KW_ABI; }
      "model"   { return TOK_KW_MODEL; }
      "meta"    { return TOK_KW_META; }
      "target"  { return TOK_KW_TARGET; }
      "config"  { return TOK_KW_CONFIG; }
      "buffer"  { return TOK_KW_BUFFER; }
      "counter" { return TOK_KW_COUNTER; }
      "task"    { return TOK_KW_TASK; }
      "wait"    { return TOK_KW_WAIT; }
      "signal"  { return TOK_KW_SIGNAL; }
      "sm"      { return TOK_KW_SM; }
      "cost"    { return TOK_KW_COST; }
      "bytes"   { return TOK_KW_BYTES; }
      "flops"   { return TOK_KW_FLOPS; }
      "label"   { return TOK_KW_LABEL; }
      "pages"   { return TOK_KW_PAGES; }
      "page"    { return TOK_KW_PAGE; }
      "live"    { return TOK_KW_LIVE; }
      "source"  { return TOK_KW_SOURCE; }
      "init"    { return TOK_KW_INIT; }
      "null"    { return TOK_KW_NULL; }
      "true"    { return TOK_KW_TRUE; }
      "false"   { return TOK_KW_FALSE; }

      "nan" {
        lval->num.f = NAN;
        return TOK_FLOAT;
      }
      "inf" | "-inf" {
        lval->num.f = *p->token == '-' ? -INFINITY : INFINITY;
        return TOK_FLOAT;
      }

      ident {
        lval->slice.ptr = (const char *)p->token;
        lval->slice.len = (size_t)(p->cursor - p->token);
        return TOK_IDENT;
      }

      int {
        if (!parse_int64(p->token, p->cursor, &lval->num.i)) {
          amk_text_error(p, token_loc(p),
                         "integer literal '%.*s' does not fit in 64 bits",
                         (int)(p->cursor - p->token), (const char *)p->token);
          return TOK_AMK_YYerror;
        }
        lval->num.f = (double)lval->num.i;
        return TOK_INT;
      }
      float {
        /* strtod stops at the token's end: the next byte cannot continue a
         * number (longest match). */
        errno = 0;
        lval->num.f = strtod((const char *)p->token, NULL);
        if (errno == ERANGE && isinf(lval->num.f)) {
          amk_text_error(p, token_loc(p),
                         "float literal '%.*s' is out of range",
                         (int)(p->cursor - p->token), (const char *)p->token);
          return TOK_AMK_YYerror;
        }
        return TOK_FLOAT;
      }
      version { return TOK_VERSION; }
      badnum {
        amk_text_error(p, token_loc(p), "bad number '%.*s'",
                       (int)(p->cursor - p->token), (const char *)p->token);
        return TOK_AMK_YYerror;
      }

      "\"" {
        if (!lex_string_body(p, &lval->slice))
          return TOK_AMK_YYerror;
        return TOK_STRING;
      }

      "%" (ident | "\"" | "-"? digits) {
        return lex_ref(p, lval, TOK_BUFREF, "buffer");
      }
      "#" (ident | "\"" | "-"? digits) {
        return lex_ref(p, lval, TOK_CNTREF, "counter");
      }
      "%" {
        amk_text_error(p, token_loc(p),
                       "expected a buffer name or id after '%%'");
        return TOK_AMK_YYerror;
      }
      "#" {
        amk_text_error(p, token_loc(p),
                       "expected a counter name or id after '#'");
        return TOK_AMK_YYerror;
      }

      "->" { return TOK_ARROW; }
      ">=" { return TOK_GE; }
      ".." { return TOK_DOTDOT; }
      [()[\]{},:=] { return *p->token; }

      * {
        unsigned char c = *p->token;
        if (c >= 0x20 && c < 0x7f)
          amk_text_error(p, token_loc(p), "unexpected character '%c'", c);
        else
          amk_text_error(p, token_loc(p), "unexpected byte 0x%02X", c);
        return TOK_AMK_YYerror;
      }
    */
  }
}

int amk_yylex(AMK_YYSTYPE *lval, AMK_YYLTYPE *lloc, AmkTextParser *p) {
  int token = lex_token(lval, p);
  set_location(p, lloc);
  if (token == TOK_END) {
    /* point "end of file" errors just past the last byte */
    lloc->first_column = lloc->last_column =
        (int)(p->cursor - p->line_start) + 1;
  }
  if (token == TOK_INT || token == TOK_FLOAT || token == TOK_VERSION) {
    lval->num.text.ptr = (const char *)p->token;
    lval->num.text.len = (size_t)(p->cursor - p->token);
  }
  p->last_token.ptr = (const char *)p->token;
  p->last_token.len = (size_t)(p->cursor - p->token);
  return token;
}
