/* Decoding: ids become token strings (an added token's content first, else
 * the model's), the decoders rewrite that list in order, and the result is
 * the list joined. Without a decoder, tokens are joined with spaces, as
 * tokenizers does.
 *
 * The streaming decoder is tokenizers' DecodeStream: it decodes the new ids
 * after the ids of the last printed step, which stay as context (decoders
 * such as Strip treat the start of the text specially), and prints what
 * follows that context's text once it does not end in U+FFFD, the mark of
 * a character still incomplete. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* A list of strings: token i is text.data[start[i] .. start[i] + len[i]). */
typedef struct {
  AmkStrBuf text;
  size_t *start, *len;
  size_t n, cap;
} TokenList;

static void list_push(TokenList *l, const char *s, size_t len) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->start = amk_xrealloc(l->start, l->cap * sizeof *l->start);
    l->len = amk_xrealloc(l->len, l->cap * sizeof *l->len);
  }
  l->start[l->n] = l->text.len;
  l->len[l->n] = len;
  l->n++;
  amk_sb_putn(&l->text, s, len);
}

/* Ends the token being built at the end of the text (its bytes were put
 * there already). */
static void list_close(TokenList *l, size_t started_at) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->start = amk_xrealloc(l->start, l->cap * sizeof *l->start);
    l->len = amk_xrealloc(l->len, l->cap * sizeof *l->len);
  }
  l->start[l->n] = started_at;
  l->len[l->n] = l->text.len - started_at;
  l->n++;
}

static void list_free(TokenList *l) {
  amk_sb_free(&l->text);
  free(l->start);
  free(l->len);
  memset(l, 0, sizeof *l);
}

static const char *item(const TokenList *l, size_t i) {
  return l->text.data ? l->text.data + l->start[i] : "";
}

/* ---- the decoders --------------------------------------------------------------- */

/* Every character of the token back to its byte, or the token's own bytes
 * when one is not of the byte-level alphabet; then all of it as UTF-8. */
static void decode_byte_level(const TokenList *in, TokenList *out) {
  AmkStrBuf bytes;
  amk_sb_init(&bytes);
  for (size_t i = 0; i < in->n; i++) {
    const char *s = item(in, i);
    size_t len = in->len[i], at = bytes.len;
    bool all_mapped = true;
    for (size_t k = 0; k < len && all_mapped;) {
      uint32_t cp;
      size_t n = amk_utf8_decode((const unsigned char *)s + k,
                                 (const unsigned char *)s + len, &cp);
      int byte = n ? tok_byte_level_byte(cp) : -1;
      if (byte < 0)
        all_mapped = false;
      else
        amk_sb_putc(&bytes, (char)byte);
      k += n ? n : 1;
    }
    if (!all_mapped) {
      bytes.len = at;
      amk_sb_putn(&bytes, s, len);
    }
  }
  size_t at = out->text.len;
  tok_utf8_append_lossy(&out->text, bytes.data ? bytes.data : "", bytes.len);
  list_close(out, at);
  amk_sb_free(&bytes);
}

/* The byte of a `<0xNN>` token, or -1. Rust's u8::from_str_radix reads the
 * two characters, so "+F" is 15 too. */
static int byte_token(const char *s, size_t len) {
  if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
    return -1;
  if (s[3] == '+')
    return amk_hex_digit(s[4]);
  int hi = amk_hex_digit(s[3]), lo = amk_hex_digit(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* The bytes of a run of byte tokens: one token when they are UTF-8, else
 * one U+FFFD per byte. */
static void flush_bytes(AmkStrBuf *run, TokenList *out) {
  if (run->len == 0)
    return;
  if (tok_utf8_valid_prefix(run->data, run->len) == run->len)
    list_push(out, run->data, run->len);
  else
    for (size_t i = 0; i < run->len; i++)
      list_push(out, "\xEF\xBF\xBD", 3);
  run->len = 0;
}

static void decode_byte_fallback(const TokenList *in, TokenList *out) {
  AmkStrBuf run;
  amk_sb_init(&run);
  for (size_t i = 0; i < in->n; i++) {
    int byte = byte_token(item(in, i), in->len[i]);
    if (byte >= 0) {
      amk_sb_putc(&run, (char)byte);
      continue;
    }
    flush_bytes(&run, out);
    list_push(out, item(in, i), in->len[i]);
  }
  flush_bytes(&run, out);
  amk_sb_free(&run);
}

static void decode_fuse(const TokenList *in, TokenList *out) {
  size_t at = out->text.len;
  for (size_t i = 0; i < in->n; i++)
    amk_sb_putn(&out->text, item(in, i), in->len[i]);
  list_close(out, at);
}

/* The character that starts at s[k], and its length. */
static size_t next_char(const char *s, size_t len, size_t k, uint32_t *cp) {
  return amk_utf8_decode((const unsigned char *)s + k,
                         (const unsigned char *)s + len, cp);
}

static void decode_strip(const TokDecoder *d, const TokenList *in,
                         TokenList *out) {
  for (size_t i = 0; i < in->n; i++) {
    const char *s = item(in, i);
    size_t len = in->len[i], from = 0, to = len;
    uint32_t cp;
    /* Up to strip_start of the content character at the start... */
    for (size_t k = 0; k < d->strip_start && from < len; k++) {
      size_t n = next_char(s, len, from, &cp);
      if (n == 0 || cp != d->strip_char)
        break;
      from += n;
    }
    /* ...and up to strip_stop at the end (never past the start's cut:
     * tokenizers would panic there). */
    for (size_t k = 0; k < d->strip_stop && to > from; k++) {
      size_t back = to - 1;
      while (back > from && ((unsigned char)s[back] & 0xC0) == 0x80)
        back--;
      if (next_char(s, len, back, &cp) == 0 || cp != d->strip_char)
        break;
      to = back;
    }
    list_push(out, s + from, to - from);
  }
}

/* Each replacement character becomes a space, except in the first token
 * when the pre-tokenizer put one first: there it goes. */
static void decode_metaspace(const TokDecoder *d, const TokenList *in,
                             TokenList *out) {
  for (size_t i = 0; i < in->n; i++) {
    const char *s = item(in, i);
    size_t len = in->len[i], at = out->text.len;
    for (size_t k = 0; k < len;) {
      uint32_t cp;
      size_t n = next_char(s, len, k, &cp);
      if (n == 0) /* not UTF-8 (a Replace made it): copy the byte */
        n = 1, cp = 0xFFFFFFFF;
      if (cp != d->strip_char)
        amk_sb_putn(&out->text, s + k, n);
      else if (!(i == 0 && d->drop_first))
        amk_sb_putc(&out->text, ' ');
      k += n;
    }
    list_close(out, at);
  }
}

static bool decode_replace(const TokDecoder *d, const TokenList *in,
                           TokenList *out, AmkStrBuf *error) {
  for (size_t i = 0; i < in->n; i++) {
    size_t at = out->text.len;
    if (!tok_replace(&d->replace, item(in, i), in->len[i], &out->text, error))
      return false;
    list_close(out, at);
  }
  return true;
}

/* ---- decode ------------------------------------------------------------------- */

static bool run_decoders(const AmkTokenizer *t, TokenList *tokens,
                         AmkStrBuf *out, AmkDiagEngine *diag) {
  if (!t->has_decoder) {
    for (size_t i = 0; i < tokens->n; i++) {
      if (i)
        amk_sb_putc(out, ' ');
      amk_sb_putn(out, item(tokens, i), tokens->len[i]);
    }
    return true;
  }
  AmkStrBuf error;
  amk_sb_init(&error);
  bool ok = true;
  for (size_t k = 0; k < t->n_decoders && ok; k++) {
    const TokDecoder *d = &t->decoders[k];
    TokenList next = {0};
    switch (d->kind) {
    case TOK_DECODE_BYTE_LEVEL:
      decode_byte_level(tokens, &next);
      break;
    case TOK_DECODE_BYTE_FALLBACK:
      decode_byte_fallback(tokens, &next);
      break;
    case TOK_DECODE_FUSE:
      decode_fuse(tokens, &next);
      break;
    case TOK_DECODE_STRIP:
      decode_strip(d, tokens, &next);
      break;
    case TOK_DECODE_METASPACE:
      decode_metaspace(d, tokens, &next);
      break;
    case TOK_DECODE_REPLACE:
      ok = decode_replace(d, tokens, &next, &error);
      break;
    }
    list_free(tokens);
    *tokens = next;
  }
  if (ok) {
    /* Replace can write any bytes; what is printed is UTF-8. */
    for (size_t i = 0; i < tokens->n; i++)
      tok_utf8_append_lossy(out, item(tokens, i), tokens->len[i]);
  } else {
    amk_error(diag, no_loc(), "%s: while decoding: %s", t->label, error.data);
  }
  amk_sb_free(&error);
  return ok;
}

/* The token strings of ids, or false after naming the first unknown id. */
static bool gather_tokens(const AmkTokenizer *t, const int32_t *ids, size_t n,
                          bool skip_special, TokenList *tokens,
                          AmkDiagEngine *diag) {
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || (size_t)id >= t->vocab_size || !t->token_of_id[id]) {
      amk_error(diag, no_loc(),
                "cannot decode id %lld (at position %zu): no token has it "
                "(ids run from 0 to %zu)",
                (long long)id, i, t->vocab_size - 1);
      return false;
    }
    if (skip_special && t->special[id])
      continue;
    list_push(tokens, t->token_of_id[id], t->token_len[id]);
  }
  return true;
}

bool amk_tokenizer_decode(const AmkTokenizer *t, const int32_t *ids, size_t n,
                          bool skip_special_tokens, AmkStrBuf *out,
                          AmkDiagEngine *diag) {
  TokenList tokens = {0};
  bool ok = gather_tokens(t, ids, n, skip_special_tokens, &tokens, diag) &&
            run_decoders(t, &tokens, out, diag);
  list_free(&tokens);
  return ok;
}

/* ---- streaming -------------------------------------------------------------------- */

/* Ids held back at most: a character has at most 4 bytes, so more held ids
 * mean bytes that will never form one (or ids that print nothing, such as
 * skipped special tokens); what is held is then printed as it stands,
 * which also keeps each push's work bounded. */
enum { MAX_HELD_IDS = 8 };

struct AmkTokenizerStream {
  const AmkTokenizer *t;
  bool skip_special;
  AmkTokenIds ids;   /* the context, then the ids not yet printed */
  size_t n_context;  /* ids of the last printed step */
  AmkStrBuf context; /* their text */
};

AmkTokenizerStream *amk_tokenizer_stream_new(const AmkTokenizer *t,
                                             bool skip_special_tokens) {
  AmkTokenizerStream *s = amk_xcalloc(1, sizeof *s);
  s->t = t;
  s->skip_special = skip_special_tokens;
  return s;
}

static bool ends_incomplete(const AmkStrBuf *text) {
  return text->len >= 3 &&
         memcmp(text->data + text->len - 3, "\xEF\xBF\xBD", 3) == 0;
}

static bool decode_ids(const AmkTokenizerStream *s, const int32_t *ids,
                       size_t n, AmkStrBuf *out, AmkDiagEngine *diag) {
  return amk_tokenizer_decode(s->t, ids, n, s->skip_special, out, diag);
}

/* Prints `text` (the context and the held ids decoded) past the context,
 * and makes the held ids the next context. */
static bool print_past_context(AmkTokenizerStream *s, const AmkStrBuf *text,
                               AmkStrBuf *out, AmkDiagEngine *diag) {
  size_t skip = s->context.len;
  const int32_t *held = s->ids.ids + s->n_context;
  size_t n_held = s->ids.len - s->n_context;
  if (text->len < skip ||
      (skip && memcmp(text->data, s->context.data, skip) != 0)) {
    /* The context reads otherwise with the held ids after it: print those
     * decoded alone rather than stop (tokenizers reports an error). */
    if (!decode_ids(s, held, n_held, out, diag))
      return false;
  } else if (text->len > skip) {
    amk_sb_putn(out, text->data + skip, text->len - skip);
  }
  memmove(s->ids.ids, held, n_held * sizeof *held);
  s->ids.len = s->n_context = n_held;
  s->context.len = 0;
  return decode_ids(s, s->ids.ids, s->ids.len, &s->context, diag);
}

bool amk_tokenizer_stream_push(AmkTokenizerStream *s, int32_t id,
                               AmkStrBuf *out, AmkDiagEngine *diag) {
  tok_ids_push(&s->ids, id);
  AmkStrBuf text;
  amk_sb_init(&text);
  if (!decode_ids(s, s->ids.ids, s->ids.len, &text, diag)) {
    s->ids.len--;
    amk_sb_free(&text);
    return false;
  }
  bool complete = text.len > s->context.len && !ends_incomplete(&text);
  bool ok = true;
  if (complete || s->ids.len - s->n_context >= MAX_HELD_IDS)
    ok = print_past_context(s, &text, out, diag);
  amk_sb_free(&text);
  return ok;
}

bool amk_tokenizer_stream_flush(AmkTokenizerStream *s, AmkStrBuf *out,
                                AmkDiagEngine *diag) {
  bool ok = true;
  if (s->ids.len > s->n_context) {
    AmkStrBuf text;
    amk_sb_init(&text);
    ok = decode_ids(s, s->ids.ids, s->ids.len, &text, diag) &&
         print_past_context(s, &text, out, diag);
    amk_sb_free(&text);
  }
  s->ids.len = 0;
  s->n_context = 0;
  s->context.len = 0;
  return ok;
}

void amk_tokenizer_stream_free(AmkTokenizerStream *s) {
  if (!s)
    return;
  amk_token_ids_free(&s->ids);
  amk_sb_free(&s->context);
  free(s);
}
