/* Normalizers: Prepend, Replace and NFC, run in order as a Sequence runs
 * them. Replace is also a decoder (the same operation on each token). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "unicode_nfc.h"

typedef struct {
  const TokNormalizer *replace;
  const char *in;
  size_t copied; /* `in` up to here is in `out` */
  AmkStrBuf *out;
} ReplaceState;

static void replace_match(void *ctx, size_t start, size_t end) {
  ReplaceState *s = ctx;
  amk_sb_putn(s->out, s->in + s->copied, start - s->copied);
  amk_sb_putn(s->out, s->replace->text, s->replace->text_len);
  s->copied = end;
}

bool tok_replace(const TokNormalizer *replace, const char *in, size_t len,
                 AmkStrBuf *out, AmkStrBuf *error) {
  ReplaceState state = {replace, in, 0, out};
  if (!tok_regex_each_match(replace->pattern, in, len, replace_match, &state,
                            error))
    return false;
  amk_sb_putn(out, in + state.copied, len - state.copied);
  return true;
}

bool tok_normalize(const TokNormalizer *norms, size_t n, TokSpan in,
                   TokScratch *scratch, TokSpan *out, AmkStrBuf *error) {
  *out = in;
  if (n == 0)
    return true;
  /* Each step reads the previous result and writes the other buffer. */
  TokSpan current = in;
  int target = 0;
  for (size_t i = 0; i < n; i++) {
    const TokNormalizer *norm = &norms[i];
    AmkStrBuf *buf = &scratch->work[target];
    buf->len = 0;
    switch (norm->kind) {
    case TOK_NORM_PREPEND:
      if (current.len == 0) /* an empty string stays empty */
        continue;
      amk_sb_putn(buf, norm->text, norm->text_len);
      amk_sb_putn(buf, current.text, current.len);
      break;
    case TOK_NORM_REPLACE:
      if (!tok_replace(norm, current.text, current.len, buf, error))
        return false;
      break;
    case TOK_NORM_NFC:
      if (tok_nfc_is_trivial(current.text, current.len))
        continue;
      tok_nfc(current.text, current.len, buf);
      break;
    }
    current = (TokSpan){buf->data ? buf->data : "", buf->len};
    target ^= 1;
  }
  if (current.text == in.text)
    return true;
  /* The pieces made from the result must outlive the work buffers. */
  char *kept = tok_arena_alloc(&scratch->arena, current.len);
  memcpy(kept, current.text, current.len);
  *out = (TokSpan){kept, current.len};
  return true;
}

void tok_normalizer_free(TokNormalizer *n) {
  free(n->text);
  tok_regex_free(n->pattern);
  memset(n, 0, sizeof *n);
}
