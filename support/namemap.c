/* The name -> record index map (include/amk/namemap.h). */
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/namemap.h"

static uint32_t hash_bytes(const char *s, size_t len) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= 16777619u;
  }
  return h;
}

void amk_name_map_free(AmkNameMap *map) {
  free(map->slots);
  memset(map, 0, sizeof *map);
}

static AmkNameSlot *find_slot(AmkNameSlot *slots, size_t cap, const char *key,
                              size_t len, uint32_t hash) {
  size_t i = hash & (cap - 1);
  while (slots[i].key &&
         !(slots[i].hash == hash && slots[i].len == len &&
           memcmp(slots[i].key, key, len) == 0))
    i = (i + 1) & (cap - 1);
  return &slots[i];
}

AmkNameSlot *amk_name_map_add(AmkNameMap *map, const char *key, size_t len,
                              int32_t index) {
  if ((map->used + 1) * 4 >= map->cap * 3) {
    size_t cap = map->cap ? map->cap * 2 : 64;
    AmkNameSlot *slots = amk_xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < map->cap; i++)
      if (map->slots[i].key)
        *find_slot(slots, cap, map->slots[i].key, map->slots[i].len,
                   map->slots[i].hash) = map->slots[i];
    free(map->slots);
    map->slots = slots;
    map->cap = cap;
  }
  uint32_t hash = hash_bytes(key, len);
  AmkNameSlot *slot = find_slot(map->slots, map->cap, key, len, hash);
  if (slot->key) {
    slot->count++;
    return slot;
  }
  slot->key = key;
  slot->len = len;
  slot->hash = hash;
  slot->index = index;
  slot->count = 1;
  map->used++;
  return slot;
}

const AmkNameSlot *amk_name_map_find(const AmkNameMap *map, const char *key,
                                     size_t len) {
  if (!map->cap)
    return NULL;
  const AmkNameSlot *slot =
      find_slot(map->slots, map->cap, key, len, hash_bytes(key, len));
  return slot->key ? slot : NULL;
}
