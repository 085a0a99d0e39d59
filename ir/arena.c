/* The arena every module (and the values it owns) allocates from: bump
 * allocation in 1 MiB blocks, freed all at once. A file of its own so that
 * values (value.c) and modules (module.c) both build on it without using
 * each other. */
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/ir.h"

struct AmkArenaBlock {
  AmkArenaBlock *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK_SIZE = 1 << 20 };

void *amk_arena_alloc(AmkArena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  AmkArenaBlock *b = a->head;
  if (!b || b->used + size > b->size) {
    /* Large requests get a block of their own so the current block's
     * remaining space is not wasted. */
    size_t block_size = size > ARENA_BLOCK_SIZE / 4 ? size : ARENA_BLOCK_SIZE;
    AmkArenaBlock *nb = amk_xmalloc(sizeof *nb + block_size);
    nb->used = 0;
    nb->size = block_size;
    if (b && block_size == size) {
      nb->next = b->next;
      b->next = nb;
      b = nb;
    } else {
      nb->next = b;
      a->head = nb;
      b = nb;
    }
  }
  void *p = b->data + b->used;
  b->used += size;
  memset(p, 0, size);
  return p;
}

char *amk_arena_strndup(AmkArena *a, const char *s, size_t n) {
  char *p = amk_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *amk_arena_strdup(AmkArena *a, const char *s) {
  return s ? amk_arena_strndup(a, s, strlen(s)) : NULL;
}

void *amk_arena_memdup(AmkArena *a, const void *p, size_t size) {
  void *q = amk_arena_alloc(a, size);
  if (size)
    memcpy(q, p, size);
  return q;
}

void amk_arena_free(AmkArena *a) {
  AmkArenaBlock *b = a->head;
  while (b) {
    AmkArenaBlock *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
}
