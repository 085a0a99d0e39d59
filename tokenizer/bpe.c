/* The BPE model: a word becomes one symbol per character (or per byte for
 * byte-level files), then the adjacent pair with the lowest merge rank is
 * merged, leftmost first among equals, until no pair has a merge. This is
 * tokenizers' merge_word, with its rules for characters missing from the
 * vocabulary (byte fallback to <0xNN> tokens, else the unk token, fused when
 * fuse_unk, else nothing), and its priority queue of (rank, position).
 *
 * Speed: the vocabulary, the merge ranks and the single characters are hash
 * maps (ASCII and the 256 byte-level characters are plain tables), words are
 * merged in reused scratch arrays, and the ids of words seen before come
 * from a cache keyed by the word's bytes.
 *
 * SentencePiece-style files have no pre-tokenizer, so a whole segment of
 * text is one word. When no token of the vocabulary has a '▁' right after
 * another character, no merge can join the symbols on either side of such a
 * '▁': the word is then merged piece by piece, each piece starting at a '▁'
 * that follows another character. The ids are the same (merges on one side
 * never change the pairs on the other, and the order among a side's merges
 * is the same), and each piece is short enough to be cached. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Words longer than this are not cached (tokenizers' limit too). */
enum { MAX_CACHED_WORD = 256, CACHE_SLOTS = 1 << 16 };

typedef struct {
  uint64_t key; /* left << 32 | right; EMPTY_PAIR: a free slot */
  uint32_t rank;
  int32_t result;
} MergeSlot;

static const uint64_t EMPTY_PAIR = UINT64_MAX;

typedef struct {
  uint32_t code_point; /* 0: a free slot (U+0000 is ASCII, never here) */
  int32_t id;
} CharSlot;

typedef struct {
  uint64_t hash;
  uint32_t key_at, key_len; /* in cache_bytes */
  uint32_t ids_at, n_ids;   /* in cache_ids; n_ids UINT32_MAX: free slot */
} CacheSlot;

typedef struct {
  int32_t id;
  int32_t prev, next; /* -1 at the ends */
  bool removed;       /* merged into the symbol on its left */
} Symbol;

typedef struct {
  uint32_t rank, pos;
  int32_t result;
} Candidate;

/* U+2581, the SentencePiece word marker. */
static const char MARKER[] = "\xE2\x96\x81";
enum { MARKER_LEN = 3 };

struct TokBpe {
  TokBpeConfig config;
  bool split_at_markers; /* see above */
  AmkNameMap vocab;
  const char **token_of_id;
  size_t id_count;

  MergeSlot *merges;
  size_t merge_mask;

  int32_t ascii_ids[128];
  CharSlot *chars;       /* non-ASCII one-character tokens */
  size_t char_mask;
  int32_t byte_tokens[256];     /* <0xNN>, for byte fallback; -1: none */
  int32_t byte_level_ids[256];  /* the token of each byte's character */
  char byte_level_utf8[256][5]; /* those characters, NUL-terminated */

  /* Scratch for one word. */
  Symbol *symbols;
  size_t cap_symbols;
  Candidate *heap;
  size_t heap_len, cap_heap;
  AmkStrBuf mapped; /* a byte-level word as the vocabulary spells it */

  CacheSlot *cache;
  size_t cache_used;
  AmkStrBuf cache_bytes;
  AmkTokenIds cache_ids;
};

/* ---- hashing ------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h ^ (h >> 29);
}

static size_t hash_u64(uint64_t key, size_t mask) {
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static size_t table_size_for(size_t n) {
  size_t size = 16;
  while (size < 2 * n)
    size *= 2;
  return size;
}

/* ---- building --------------------------------------------------------------------- */

static void add_char(TokBpe *m, uint32_t cp, int32_t id) {
  size_t i = hash_u64(cp, m->char_mask);
  while (m->chars[i].code_point && m->chars[i].code_point != cp)
    i = (i + 1) & m->char_mask;
  m->chars[i] = (CharSlot){cp, id};
}

static int32_t char_id(const TokBpe *m, uint32_t cp) {
  size_t i = hash_u64(cp, m->char_mask);
  while (m->chars[i].code_point) {
    if (m->chars[i].code_point == cp)
      return m->chars[i].id;
    i = (i + 1) & m->char_mask;
  }
  return -1;
}

/* Whether a word can be merged piece by piece, split before each '▁' that
 * follows another character: '▁' is a token (so it is never an unknown
 * character, nor bytes) and no token has a '▁' right after another
 * character. With ignore_merges the whole word must be looked up first, so
 * words stay whole. */
static bool can_split_at_markers(const TokBpe *m) {
  const TokBpeConfig *c = &m->config;
  if (c->byte_level || c->ignore_merges ||
      tok_bpe_token_id(m, MARKER, MARKER_LEN) < 0)
    return false;
  for (size_t i = 0; i < c->n; i++) {
    const char *s = c->strings + c->offsets[i];
    for (const char *p = strstr(s, MARKER); p; p = strstr(p + 1, MARKER))
      if (p > s && !(p - s >= MARKER_LEN &&
                     memcmp(p - MARKER_LEN, MARKER, MARKER_LEN) == 0))
        return false;
  }
  return true;
}

TokBpe *tok_bpe_new(TokBpeConfig *config) {
  TokBpe *m = amk_xcalloc(1, sizeof *m);
  m->config = *config;
  memset(config, 0, sizeof *config);
  const TokBpeConfig *c = &m->config;

  for (size_t i = 0; i < c->n; i++)
    if ((size_t)c->ids[i] + 1 > m->id_count)
      m->id_count = (size_t)c->ids[i] + 1;
  m->token_of_id = amk_xcalloc(m->id_count ? m->id_count : 1,
                               sizeof *m->token_of_id);
  for (int b = 0; b < 128; b++)
    m->ascii_ids[b] = -1;
  for (int b = 0; b < 256; b++)
    m->byte_tokens[b] = -1;
  m->char_mask = table_size_for(c->n) - 1;
  m->chars = amk_xcalloc(m->char_mask + 1, sizeof *m->chars);

  for (size_t i = 0; i < c->n; i++) {
    const char *s = c->strings + c->offsets[i];
    size_t len = strlen(s);
    int32_t id = c->ids[i];
    amk_name_map_add(&m->vocab, s, len, id);
    m->token_of_id[id] = s;
    uint32_t cp;
    if (len == 1 && (unsigned char)s[0] < 0x80)
      m->ascii_ids[(unsigned char)s[0]] = id;
    else if (amk_utf8_decode((const unsigned char *)s,
                             (const unsigned char *)s + len, &cp) == len)
      add_char(m, cp, id); /* a token of one character */
    /* <0xNN>, spelled as tokenizers spells it (upper-case hex digits). */
    if (len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
      static const char hex[] = "0123456789ABCDEF";
      const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
      if (hi && lo)
        m->byte_tokens[(hi - hex) * 16 + (lo - hex)] = id;
    }
  }
  for (int b = 0; b < 256; b++) {
    uint32_t cp = tok_byte_level_char((unsigned char)b);
    m->byte_level_utf8[b][tok_utf8_encode(cp, m->byte_level_utf8[b])] = '\0';
    m->byte_level_ids[b] = cp < 0x80 ? m->ascii_ids[cp] : char_id(m, cp);
  }
  m->split_at_markers = can_split_at_markers(m);
  m->merge_mask = 15;
  m->merges = amk_xmalloc(16 * sizeof *m->merges);
  for (size_t i = 0; i < 16; i++)
    m->merges[i].key = EMPTY_PAIR;
  m->cache = amk_xmalloc(CACHE_SLOTS * sizeof *m->cache);
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    m->cache[i].n_ids = UINT32_MAX;
  return m;
}

static uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

void tok_bpe_set_merges(TokBpe *m, int32_t *triples, size_t n) {
  free(m->merges);
  size_t size = table_size_for(n);
  m->merge_mask = size - 1;
  m->merges = amk_xmalloc(size * sizeof *m->merges);
  for (size_t i = 0; i < size; i++)
    m->merges[i].key = EMPTY_PAIR;
  for (size_t r = 0; r < n; r++) {
    uint64_t key = pair_key(triples[3 * r], triples[3 * r + 1]);
    size_t i = hash_u64(key, m->merge_mask);
    while (m->merges[i].key != EMPTY_PAIR && m->merges[i].key != key)
      i = (i + 1) & m->merge_mask;
    m->merges[i] = (MergeSlot){key, (uint32_t)r, triples[3 * r + 2]};
  }
  free(triples);
}

void tok_bpe_set_unk(TokBpe *m, int32_t unk_id) { m->config.unk_id = unk_id; }

void tok_bpe_free(TokBpe *m) {
  if (!m)
    return;
  free(m->config.strings);
  free(m->config.offsets);
  free(m->config.ids);
  amk_name_map_free(&m->vocab);
  free(m->token_of_id);
  free(m->merges);
  free(m->chars);
  free(m->symbols);
  free(m->heap);
  amk_sb_free(&m->mapped);
  free(m->cache);
  amk_sb_free(&m->cache_bytes);
  amk_token_ids_free(&m->cache_ids);
  free(m);
}

int32_t tok_bpe_token_id(const TokBpe *m, const char *token, size_t len) {
  const AmkNameSlot *slot = amk_name_map_find(&m->vocab, token, len);
  return slot ? slot->index : -1;
}

const char *const *tok_bpe_tokens(const TokBpe *m, size_t *count) {
  *count = m->id_count;
  return m->token_of_id;
}

size_t tok_bpe_vocab_count(const TokBpe *m) { return m->config.n; }

/* ---- the word cache ----------------------------------------------------------------- */

static CacheSlot *cache_find(TokBpe *m, const char *word, size_t len,
                             uint64_t hash) {
  size_t i = (size_t)hash & (CACHE_SLOTS - 1);
  for (;;) {
    CacheSlot *slot = &m->cache[i];
    if (slot->n_ids == UINT32_MAX ||
        (slot->hash == hash && slot->key_len == len &&
         memcmp(m->cache_bytes.data + slot->key_at, word, len) == 0))
      return slot;
    i = (i + 1) & (CACHE_SLOTS - 1);
  }
}

static void cache_insert(TokBpe *m, CacheSlot *slot, const char *word,
                         size_t len, uint64_t hash, const int32_t *ids,
                         size_t n) {
  if (m->cache_used + 1 > CACHE_SLOTS / 2) {
    /* Full: start again rather than track what is least used. */
    for (size_t i = 0; i < CACHE_SLOTS; i++)
      m->cache[i].n_ids = UINT32_MAX;
    m->cache_used = 0;
    m->cache_bytes.len = 0;
    m->cache_ids.len = 0;
    slot = cache_find(m, word, len, hash);
  }
  *slot = (CacheSlot){hash, (uint32_t)m->cache_bytes.len, (uint32_t)len,
                      (uint32_t)m->cache_ids.len, (uint32_t)n};
  amk_sb_putn(&m->cache_bytes, word, len);
  for (size_t i = 0; i < n; i++)
    tok_ids_push(&m->cache_ids, ids[i]);
  m->cache_used++;
}

/* ---- merging ----------------------------------------------------------------------- */

static const MergeSlot *find_merge(const TokBpe *m, int32_t left, int32_t right) {
  uint64_t key = pair_key(left, right);
  size_t i = hash_u64(key, m->merge_mask);
  while (m->merges[i].key != EMPTY_PAIR) {
    if (m->merges[i].key == key)
      return &m->merges[i];
    i = (i + 1) & m->merge_mask;
  }
  return NULL;
}

static bool comes_first(Candidate a, Candidate b) {
  return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(TokBpe *m, Candidate c) {
  if (m->heap_len == m->cap_heap) {
    m->cap_heap = m->cap_heap ? m->cap_heap * 2 : 64;
    m->heap = amk_xrealloc(m->heap, m->cap_heap * sizeof *m->heap);
  }
  size_t i = m->heap_len++;
  while (i > 0 && comes_first(c, m->heap[(i - 1) / 2])) {
    m->heap[i] = m->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  m->heap[i] = c;
}

static Candidate heap_pop(TokBpe *m) {
  Candidate top = m->heap[0], last = m->heap[--m->heap_len];
  size_t i = 0, n = m->heap_len;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n)
      break;
    if (child + 1 < n && comes_first(m->heap[child + 1], m->heap[child]))
      child++;
    if (!comes_first(m->heap[child], last))
      break;
    m->heap[i] = m->heap[child];
    i = child;
  }
  if (n)
    m->heap[i] = last;
  return top;
}

static void push_pair(TokBpe *m, int32_t pos) {
  const Symbol *s = &m->symbols[pos];
  if (s->next < 0)
    return;
  const MergeSlot *merge = find_merge(m, s->id, m->symbols[s->next].id);
  if (merge)
    heap_push(m, (Candidate){merge->rank, (uint32_t)pos, merge->result});
}

static void merge_symbols(TokBpe *m, size_t n) {
  m->heap_len = 0;
  for (size_t i = 0; i + 1 < n; i++)
    push_pair(m, (int32_t)i);
  while (m->heap_len) {
    Candidate top = heap_pop(m);
    Symbol *left = &m->symbols[top.pos];
    if (left->removed || left->next < 0)
      continue;
    Symbol *right = &m->symbols[left->next];
    /* A stale entry: the pair at this position has changed since. */
    const MergeSlot *merge = find_merge(m, left->id, right->id);
    if (!merge || merge->result != top.result)
      continue;
    left->id = top.result;
    right->removed = true;
    left->next = right->next;
    if (left->next >= 0)
      m->symbols[left->next].prev = (int32_t)top.pos;
    if (left->prev >= 0)
      push_pair(m, left->prev);
    push_pair(m, (int32_t)top.pos);
  }
}

/* ---- a word's first symbols --------------------------------------------------------- */

typedef struct {
  size_t n;
  bool unk_pending; /* unknown characters waiting to become one unk */
} Word;

static void add_symbol(TokBpe *m, Word *w, int32_t id) {
  if (w->n == m->cap_symbols) {
    m->cap_symbols = m->cap_symbols ? m->cap_symbols * 2 : 256;
    m->symbols = amk_xrealloc(m->symbols, m->cap_symbols * sizeof *m->symbols);
  }
  m->symbols[w->n] = (Symbol){id, (int32_t)w->n - 1, (int32_t)w->n + 1, false};
  w->n++;
}

static void add_known(TokBpe *m, Word *w, int32_t id) {
  if (w->unk_pending) {
    add_symbol(m, w, m->config.unk_id);
    w->unk_pending = false;
  }
  add_symbol(m, w, id);
}

/* A character (its UTF-8 bytes) that is not in the vocabulary. */
static void add_unknown(TokBpe *m, Word *w, const char *bytes, size_t len) {
  if (m->config.byte_fallback) {
    size_t i = 0;
    while (i < len && m->byte_tokens[(unsigned char)bytes[i]] >= 0)
      i++;
    if (i == len) {
      /* tokenizers adds these without first adding a pending unk. */
      for (i = 0; i < len; i++)
        add_symbol(m, w, m->byte_tokens[(unsigned char)bytes[i]]);
      return;
    }
  }
  if (m->config.unk_id < 0)
    return; /* no unk token: the character is dropped */
  if (w->unk_pending && !m->config.fuse_unk)
    add_symbol(m, w, m->config.unk_id);
  w->unk_pending = true;
}

static size_t split_word(TokBpe *m, const char *word, size_t len) {
  Word w = {0, false};
  if (m->config.byte_level) {
    for (size_t i = 0; i < len; i++) {
      unsigned char b = (unsigned char)word[i];
      if (m->byte_level_ids[b] >= 0)
        add_known(m, &w, m->byte_level_ids[b]);
      else
        add_unknown(m, &w, m->byte_level_utf8[b],
                    strlen(m->byte_level_utf8[b]));
    }
  } else {
    for (size_t i = 0; i < len;) {
      unsigned char b = (unsigned char)word[i];
      if (b < 0x80) {
        if (m->ascii_ids[b] >= 0)
          add_known(m, &w, m->ascii_ids[b]);
        else
          add_unknown(m, &w, word + i, 1);
        i++;
        continue;
      }
      uint32_t cp;
      size_t n = amk_utf8_decode((const unsigned char *)word + i,
                                 (const unsigned char *)word + len, &cp);
      if (n == 0) /* the text was checked to be UTF-8 */
        AMK_UNREACHABLE("a word that is not UTF-8");
      int32_t id = char_id(m, cp);
      if (id >= 0)
        add_known(m, &w, id);
      else
        add_unknown(m, &w, word + i, n);
      i += n;
    }
  }
  if (w.unk_pending)
    add_symbol(m, &w, m->config.unk_id);
  if (w.n)
    m->symbols[w.n - 1].next = -1;
  return w.n;
}

/* With ignore_merges, a word that is itself a token is that token. */
static int32_t whole_word_id(TokBpe *m, const char *word, size_t len) {
  if (!m->config.byte_level)
    return tok_bpe_token_id(m, word, len);
  m->mapped.len = 0;
  for (size_t i = 0; i < len; i++)
    amk_sb_puts(&m->mapped, m->byte_level_utf8[(unsigned char)word[i]]);
  return tok_bpe_token_id(m, m->mapped.data, m->mapped.len);
}

/* A word, or a piece of one, through the cache and the merges. */
static void encode_piece(TokBpe *m, const char *word, size_t len,
                         AmkTokenIds *out) {
  bool cacheable = len <= MAX_CACHED_WORD;
  uint64_t hash = 0;
  CacheSlot *slot = NULL;
  if (cacheable) {
    hash = hash_bytes(word, len);
    slot = cache_find(m, word, len, hash);
    if (slot->n_ids != UINT32_MAX) {
      for (uint32_t i = 0; i < slot->n_ids; i++)
        tok_ids_push(out, m->cache_ids.ids[slot->ids_at + i]);
      return;
    }
  }
  size_t first = out->len;
  int32_t whole = m->config.ignore_merges ? whole_word_id(m, word, len) : -1;
  if (whole >= 0) {
    tok_ids_push(out, whole);
  } else {
    size_t n = split_word(m, word, len);
    merge_symbols(m, n);
    for (int32_t i = n ? 0 : -1; i >= 0; i = m->symbols[i].next)
      tok_ids_push(out, m->symbols[i].id);
  }
  /* A word may make no ids (out->ids still NULL): no pointer arithmetic on
   * NULL (found by fuzzing). */
  if (cacheable)
    cache_insert(m, slot, word, len, hash, out->ids ? out->ids + first : NULL,
                 out->len - first);
}

/* Where the next piece starts: at the next '▁' after `from` that follows
 * another character, or at `len`. */
static size_t next_piece(const char *word, size_t len, size_t from) {
  const char *end = word + len;
  for (const char *p = word + from + 1; end - p >= MARKER_LEN; p++) {
    p = memchr(p, MARKER[0], (size_t)(end - p));
    if (!p || end - p < MARKER_LEN)
      break;
    if (memcmp(p, MARKER, MARKER_LEN) == 0 &&
        !(p - word >= MARKER_LEN && memcmp(p - MARKER_LEN, MARKER, MARKER_LEN) == 0))
      return (size_t)(p - word);
  }
  return len;
}

void tok_bpe_encode_word(TokBpe *m, const char *word, size_t len,
                         AmkTokenIds *out) {
  if (len == 0)
    return;
  if (!m->split_at_markers) {
    encode_piece(m, word, len, out);
    return;
  }
  for (size_t start = 0; start < len;) {
    size_t end = next_piece(word, len, start);
    encode_piece(m, word + start, end - start, out);
    start = end;
  }
}
