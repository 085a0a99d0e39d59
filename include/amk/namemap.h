/* A name -> record index map (support layer): open addressing, power-of-two
 * size, FNV-1a. The parser and the printer both resolve names through it. */
#ifndef AMK_NAMEMAP_H
#define AMK_NAMEMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *key; /* NULL: empty slot */
  size_t len;
  uint32_t hash;
  int32_t index;  /* first record with this name */
  uint32_t count; /* how many records carry it */
} AmkNameSlot;

typedef struct {
  AmkNameSlot *slots;
  size_t cap, used;
} AmkNameMap;

void amk_name_map_free(AmkNameMap *map);
/* Adds one occurrence of `key` (which must outlive the map) and returns its
 * slot; slot->count is 1 for a new name. */
AmkNameSlot *amk_name_map_add(AmkNameMap *map, const char *key, size_t len,
                              int32_t index);
const AmkNameSlot *amk_name_map_find(const AmkNameMap *map, const char *key,
                                     size_t len);

#endif
