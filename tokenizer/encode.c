/* Encoding: tokenizers' pipeline, in its order.
 *
 *   text --cut at added tokens (normalized: false)--> segments
 *        --normalizers--> --cut at added tokens (normalized: true)-->
 *        --pre-tokenizer--> words --BPE--> ids
 *
 * and, with add_special_tokens, the post-processor's template around them. */
#include <string.h>

#include "tokenizer_internal.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* single_word's test of the characters beside a match. */
static bool is_word_char(void *ctx, uint32_t cp) {
  TokRegex *word_char = ctx;
  char bytes[4];
  size_t start, end;
  AmkStrBuf error;
  amk_sb_init(&error);
  bool is_word = tok_regex_find(word_char, bytes, tok_utf8_encode(cp, bytes), 0,
                                &start, &end, &error) == 1;
  amk_sb_free(&error);
  return is_word;
}

/* Pre-tokenizes a normalized piece and runs the model over its words.
 * `at_start`: the piece starts the text. */
static bool encode_normalized(AmkTokenizer *t, TokSpan text, bool at_start,
                              AmkTokenIds *out, AmkStrBuf *error) {
  if (!tok_pre_tokenize(t->steps, t->n_steps, text, at_start, &t->scratch,
                        error))
    return false;
  const TokSpans *words = &t->scratch.pieces;
  for (size_t i = 0; i < words->len; i++)
    tok_bpe_encode_word(t->bpe, words->items[i].text, words->items[i].len, out);
  return true;
}

/* One segment between the added tokens that match the raw text. */
static bool encode_segment(AmkTokenizer *t, TokSpan segment, bool at_start,
                           AmkTokenIds *out, AmkStrBuf *error) {
  TokSpan normalized;
  if (!tok_normalize(t->normalizers, t->n_normalizers, segment, &t->scratch,
                     &normalized, error))
    return false;
  if (!t->normalized_trie)
    return encode_normalized(t, normalized, at_start, out, error);
  TokCuts *cuts = &t->normalized_cuts;
  cuts->len = 0;
  tok_cut_added(t->normalized_trie, t->added, normalized.text, normalized.len,
                is_word_char, t->word_char, cuts);
  for (size_t i = 0; i < cuts->len; i++) {
    TokCut c = cuts->items[i];
    if (c.token >= 0) {
      tok_ids_push(out, t->added[c.token].id);
      continue;
    }
    TokSpan piece = {normalized.text + c.start, c.end - c.start};
    if (!encode_normalized(t, piece, at_start && c.start == 0, out, error))
      return false;
  }
  return true;
}

static bool encode_sequence(AmkTokenizer *t, const char *text, size_t len,
                            AmkTokenIds *out, AmkStrBuf *error) {
  tok_arena_reset(&t->scratch.arena);
  TokCuts *cuts = &t->cuts;
  cuts->len = 0;
  tok_cut_added(t->raw_trie, t->added, text, len, is_word_char, t->word_char,
                cuts);
  for (size_t i = 0; i < cuts->len; i++) {
    TokCut c = cuts->items[i];
    if (c.token >= 0) {
      tok_ids_push(out, t->added[c.token].id);
      continue;
    }
    /* An empty segment is dropped before normalizing, so Prepend adds
     * nothing for it. */
    if (c.end == c.start)
      continue;
    if (!encode_segment(t, (TokSpan){text + c.start, c.end - c.start},
                        c.start == 0, out, error))
      return false;
  }
  return true;
}

bool amk_tokenizer_encode(AmkTokenizer *t, const char *text, size_t len,
                          bool add_special_tokens, AmkTokenIds *out,
                          AmkDiagEngine *diag) {
  size_t valid = tok_utf8_valid_prefix(text, len);
  if (valid < len) {
    amk_error(diag, no_loc(),
              "the text to encode is not valid UTF-8 (byte 0x%02x at offset "
              "%zu)",
              (unsigned char)text[valid], valid);
    return false;
  }
  AmkStrBuf error;
  amk_sb_init(&error);
  bool ok = true;
  size_t first = out->len;
  if (!add_special_tokens || t->n_template_items == 0) {
    ok = encode_sequence(t, text, len, out, &error);
  } else {
    for (size_t i = 0; i < t->n_template_items && ok; i++) {
      const TokTemplateItem *item = &t->template_items[i];
      if (item->is_sequence)
        ok = encode_sequence(t, text, len, out, &error);
      else
        for (size_t k = 0; k < item->n_ids; k++)
          tok_ids_push(out, item->ids[k]);
    }
  }
  if (!ok) {
    out->len = first; /* nothing half-done is left behind */
    amk_error(diag, no_loc(), "%s: while encoding: %s", t->label, error.data);
  }
  amk_sb_free(&error);
  return ok;
}
