/* The small containers the tokenizer's files share: lists of spans and ids,
 * and the arena that holds text made during one encode. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

void tok_spans_push(TokSpans *list, const char *text, size_t len) {
  if (list->len == list->cap) {
    list->cap = list->cap ? list->cap * 2 : 64;
    list->items = amk_xrealloc(list->items, list->cap * sizeof *list->items);
  }
  list->items[list->len++] = (TokSpan){text, len};
}

void tok_ids_push(AmkTokenIds *ids, int32_t id) {
  if (ids->len == ids->cap) {
    ids->cap = ids->cap ? ids->cap * 2 : 64;
    ids->ids = amk_xrealloc(ids->ids, ids->cap * sizeof *ids->ids);
  }
  ids->ids[ids->len++] = id;
}

void amk_token_ids_free(AmkTokenIds *ids) {
  free(ids->ids);
  memset(ids, 0, sizeof *ids);
}

struct TokArenaBlock {
  TokArenaBlock *next;
  size_t used, cap;
  char data[];
};

char *tok_arena_alloc(TokArena *a, size_t n) {
  TokArenaBlock *b = a->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = b ? b->cap * 2 : 4096;
    while (cap < n)
      cap *= 2;
    TokArenaBlock *fresh = amk_xmalloc(sizeof *fresh + cap);
    fresh->next = b;
    fresh->used = 0;
    fresh->cap = cap;
    a->head = b = fresh;
  }
  char *p = b->data + b->used;
  b->used += n;
  return p;
}

void tok_arena_reset(TokArena *a) {
  /* The newest block is the largest: keep it for the next encode. */
  TokArenaBlock *b = a->head;
  if (!b)
    return;
  TokArenaBlock *older = b->next;
  while (older) {
    TokArenaBlock *next = older->next;
    free(older);
    older = next;
  }
  b->next = NULL;
  b->used = 0;
}

void tok_arena_free(TokArena *a) {
  tok_arena_reset(a);
  free(a->head);
  a->head = NULL;
}
