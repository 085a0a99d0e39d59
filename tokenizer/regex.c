/* Regular expressions for Split, Replace and the added tokens' word test:
 * PCRE2 in UTF + UCP mode, JIT-compiled when the platform has a JIT.
 *
 * tokenizers compiles these patterns with Oniguruma; for the classes the
 * HuggingFace files use (\s, \p{L}, \p{N}, (?i:...), lookahead) PCRE2 with
 * UCP reads them the same way. A String pattern is a literal: searched with
 * memchr/memcmp when it is not empty, by PCRE2_LITERAL when it is (the empty
 * string matches everywhere, as the escaped regex does in tokenizers). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Limits that turn catastrophic backtracking in a hostile pattern into an
 * error instead of a hang. */
enum {
  MATCH_LIMIT = 10 * 1000 * 1000,
  JIT_STACK_START = 32 * 1024,
  JIT_STACK_MAX = 4 * 1024 * 1024,
};

struct TokRegex {
  char *literal; /* a non-empty literal: no PCRE2 code */
  size_t literal_len;
  pcre2_code *code;
  pcre2_match_data *match;
  pcre2_match_context *context;
  pcre2_jit_stack *jit_stack;
  bool jit;
};

TokRegex *tok_regex_compile(const char *pattern, size_t len, bool literal,
                            AmkStrBuf *error) {
  TokRegex *re = amk_xcalloc(1, sizeof *re);
  if (literal && len > 0) {
    re->literal = amk_xmalloc(len);
    memcpy(re->literal, pattern, len);
    re->literal_len = len;
    return re;
  }
  int code;
  PCRE2_SIZE offset;
  /* UCP only changes what classes mean, and PCRE2 refuses it with LITERAL. */
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  re->code = pcre2_compile((PCRE2_SPTR)pattern, len, options, &code, &offset,
                           NULL);
  if (!re->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(code, message, sizeof message);
    amk_sb_printf(error, "%s (at offset %zu of the pattern)",
                  (const char *)message, (size_t)offset);
    free(re);
    return NULL;
  }
  re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
  re->match = pcre2_match_data_create_from_pattern(re->code, NULL);
  re->context = pcre2_match_context_create(NULL);
  if (!re->match || !re->context)
    AMK_UNREACHABLE("out of memory");
  pcre2_set_match_limit(re->context, MATCH_LIMIT);
  if (re->jit) {
    re->jit_stack = pcre2_jit_stack_create(JIT_STACK_START, JIT_STACK_MAX, NULL);
    if (!re->jit_stack)
      AMK_UNREACHABLE("out of memory");
    pcre2_jit_stack_assign(re->context, NULL, re->jit_stack);
  }
  return re;
}

void tok_regex_free(TokRegex *re) {
  if (!re)
    return;
  free(re->literal);
  pcre2_jit_stack_free(re->jit_stack);
  pcre2_match_context_free(re->context);
  pcre2_match_data_free(re->match);
  pcre2_code_free(re->code);
  free(re);
}

static int find_literal(const TokRegex *re, const char *text, size_t len,
                        size_t from, size_t *start, size_t *end) {
  const char *p = text + from, *stop = text + len;
  char first = re->literal[0];
  while ((size_t)(stop - p) >= re->literal_len) {
    p = memchr(p, first, (size_t)(stop - p) - re->literal_len + 1);
    if (!p)
      return 0;
    if (memcmp(p, re->literal, re->literal_len) == 0) {
      *start = (size_t)(p - text);
      *end = *start + re->literal_len;
      return 1;
    }
    p++;
  }
  return 0;
}

int tok_regex_find(TokRegex *re, const char *text, size_t len, size_t from,
                   size_t *start, size_t *end, AmkStrBuf *error) {
  if (re->literal)
    return find_literal(re, text, len, from, start, end);
  /* The text was checked to be UTF-8 when it came in. */
  int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)text, len, from,
                                     PCRE2_NO_UTF_CHECK, re->match, re->context)
                   : pcre2_match(re->code, (PCRE2_SPTR)text, len, from,
                                 PCRE2_NO_UTF_CHECK, re->match, re->context);
  if (rc == PCRE2_ERROR_NOMATCH)
    return 0;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    amk_sb_printf(error, "the regex engine gave up: %s", (const char *)message);
    return -1;
  }
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(re->match);
  *start = ovector[0];
  *end = ovector[1];
  return 1;
}

bool tok_regex_each_match(TokRegex *re, const char *text, size_t len,
                          TokMatchFn on_match, void *ctx, AmkStrBuf *error) {
  /* Oniguruma's find_iter: search from the end of the last match; after an
   * empty match step over one character; an empty match is dropped when no
   * empty match has been dropped since the last non-empty one. */
  size_t last_end = 0;
  bool skip_next_empty = false;
  while (last_end <= len) {
    size_t start, end;
    int found = tok_regex_find(re, text, len, last_end, &start, &end, error);
    if (found < 0)
      return false;
    if (found == 0)
      break;
    last_end = end;
    if (start == end) {
      last_end += end < len ? tok_utf8_char_len(text + end, len - end) : 1;
      if (skip_next_empty) {
        skip_next_empty = false;
        continue;
      }
    } else {
      skip_next_empty = true;
    }
    on_match(ctx, start, end);
  }
  return true;
}
