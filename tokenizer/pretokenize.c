/* Pre-tokenizers: a segment of text becomes words. Split (and the splits
 * that Digits, ByteLevel's own regex and Metaspace make) cut each piece at
 * a regex's matches; ByteLevel's add_prefix_space puts a space before each
 * piece; Metaspace turns spaces into its replacement and puts one first.
 * ByteLevel's byte mapping itself is left to the model (bpe.c), which maps
 * each word's bytes as it reads them. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static void push_segment(TokScratch *s, size_t start, size_t end,
                         bool is_match) {
  if (s->n_segments == s->cap_segments) {
    s->cap_segments = s->cap_segments ? s->cap_segments * 2 : 128;
    s->segments =
        amk_xrealloc(s->segments, s->cap_segments * sizeof *s->segments);
  }
  s->segments[s->n_segments++] = (TokSegment){start, end, is_match};
}

typedef struct {
  TokScratch *scratch;
  size_t covered; /* the piece up to here has segments */
  bool invert;
} SegmentState;

/* The piece as tokenizers' find_matches gives it: the gaps and the matches
 * in order, covering it. Invert swaps which are matches. */
static void add_match(void *ctx, size_t start, size_t end) {
  SegmentState *state = ctx;
  if (start > state->covered)
    push_segment(state->scratch, state->covered, start, state->invert);
  push_segment(state->scratch, start, end, !state->invert);
  state->covered = end;
}

/* Emits [start, end) of the piece unless it is empty. */
static void emit(TokSpans *out, const char *text, size_t start, size_t end) {
  if (end > start)
    tok_spans_push(out, text + start, end - start);
}

static bool split_piece(const TokPreStep *step, TokSpan piece, TokScratch *s,
                        TokSpans *out, AmkStrBuf *error) {
  s->n_segments = 0;
  SegmentState state = {s, 0, step->invert};
  if (!tok_regex_each_match(step->regex, piece.text, piece.len, add_match,
                            &state, error))
    return false;
  if (state.covered < piece.len)
    push_segment(s, state.covered, piece.len, step->invert);

  const TokSegment *seg = s->segments;
  size_t n = s->n_segments;
  switch (step->behavior) {
  case TOK_SPLIT_ISOLATED:
    for (size_t i = 0; i < n; i++)
      emit(out, piece.text, seg[i].start, seg[i].end);
    break;
  case TOK_SPLIT_REMOVED:
    for (size_t i = 0; i < n; i++)
      if (!seg[i].is_match)
        emit(out, piece.text, seg[i].start, seg[i].end);
    break;
  case TOK_SPLIT_CONTIGUOUS:
    /* Runs of matches (or of non-matches) become one piece. */
    for (size_t i = 0; i < n;) {
      size_t j = i + 1;
      while (j < n && seg[j].is_match == seg[i].is_match)
        j++;
      emit(out, piece.text, seg[i].start, seg[j - 1].end);
      i = j;
    }
    break;
  case TOK_SPLIT_MERGED_WITH_PREVIOUS:
    /* A match that follows a non-match joins it. */
    for (size_t i = 0; i < n;) {
      size_t j = i + 1;
      if (!seg[i].is_match && j < n && seg[j].is_match)
        j++;
      emit(out, piece.text, seg[i].start, seg[j - 1].end);
      i = j;
    }
    break;
  case TOK_SPLIT_MERGED_WITH_NEXT: {
    /* A match that precedes a non-match joins it: the same walk from the
     * end. Pieces are found last to first, so they are reversed after. */
    size_t first = out->len;
    for (size_t i = n; i > 0;) {
      size_t j = i - 1;
      if (!seg[j].is_match && j > 0 && seg[j - 1].is_match)
        j--;
      emit(out, piece.text, seg[j].start, seg[i - 1].end);
      i = j;
    }
    for (size_t a = first, b = out->len; a + 1 < b; a++, b--) {
      TokSpan t = out->items[a];
      out->items[a] = out->items[b - 1];
      out->items[b - 1] = t;
    }
    break;
  }
  }
  return true;
}

/* Metaspace on one piece: each space becomes the replacement, and the
 * replacement goes first unless the piece starts with it or the scheme
 * says not here. */
static void metaspace(const TokPreStep *step, TokSpan piece, bool at_start,
                      TokScratch *s, TokSpans *out) {
  size_t spaces = 0;
  for (size_t i = 0; i < piece.len; i++)
    spaces += piece.text[i] == ' ';
  size_t rlen = step->replacement_len;
  bool starts_with = piece.text[0] == ' ' ||
                     (piece.len >= rlen && memcmp(piece.text, step->replacement, rlen) == 0);
  bool prepend = !starts_with && (step->prepend == TOK_PREPEND_ALWAYS ||
                                  (step->prepend == TOK_PREPEND_FIRST && at_start));
  size_t len = piece.len + spaces * (rlen - 1) + (prepend ? rlen : 0);
  char *text = tok_arena_alloc(&s->arena, len), *p = text;
  if (prepend)
    memcpy(p, step->replacement, rlen), p += rlen;
  for (size_t i = 0; i < piece.len; i++) {
    if (piece.text[i] == ' ')
      memcpy(p, step->replacement, rlen), p += rlen;
    else
      *p++ = piece.text[i];
  }
  tok_spans_push(out, text, len);
}

bool tok_pre_tokenize(const TokPreStep *steps, size_t n, TokSpan segment,
                      bool at_start, TokScratch *s, AmkStrBuf *error) {
  s->pieces.len = 0;
  if (segment.len == 0)
    return true;
  tok_spans_push(&s->pieces, segment.text, segment.len);
  for (size_t k = 0; k < n; k++) {
    const TokPreStep *step = &steps[k];
    s->next.len = 0;
    for (size_t i = 0; i < s->pieces.len; i++) {
      TokSpan piece = s->pieces.items[i];
      if (step->kind == TOK_STEP_PREFIX_SPACE) {
        if (piece.text[0] == ' ') {
          tok_spans_push(&s->next, piece.text, piece.len);
          continue;
        }
        char *spaced = tok_arena_alloc(&s->arena, piece.len + 1);
        spaced[0] = ' ';
        memcpy(spaced + 1, piece.text, piece.len);
        tok_spans_push(&s->next, spaced, piece.len + 1);
      } else if (step->kind == TOK_STEP_METASPACE) {
        /* Metaspace comes first (load.c), so the only piece here is the
         * segment itself. */
        metaspace(step, piece, at_start && i == 0, s, &s->next);
      } else if (!split_piece(step, piece, s, &s->next, error)) {
        return false;
      }
    }
    TokSpans t = s->pieces;
    s->pieces = s->next;
    s->next = t;
  }
  return true;
}

void tok_scratch_free(TokScratch *s) {
  free(s->pieces.items);
  free(s->next.items);
  free(s->segments);
  amk_sb_free(&s->work[0]);
  amk_sb_free(&s->work[1]);
  tok_arena_free(&s->arena);
  memset(s, 0, sizeof *s);
}
