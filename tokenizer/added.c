/* Added tokens: cutting them out of the text before the model sees it, as
 * tokenizers' AddedVocabulary does. Its Aho-Corasick automaton finds the
 * leftmost match, the longest one there, then searches on from that match's
 * end; a byte trie walked from each position gives the same matches. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

typedef struct {
  int32_t first_child, next_sibling; /* -1: none */
  int32_t token;                     /* a token ends here; -1: none */
  unsigned char byte;
} TrieNode;

struct TokTrie {
  TrieNode *nodes;
  size_t n, cap;
  int32_t root_child[256]; /* the root's children, by byte */
};

static int32_t new_node(TokTrie *t, unsigned char byte) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 256;
    t->nodes = amk_xrealloc(t->nodes, t->cap * sizeof *t->nodes);
  }
  t->nodes[t->n] = (TrieNode){-1, -1, -1, byte};
  return (int32_t)t->n++;
}

static int32_t child(const TokTrie *t, int32_t node, unsigned char byte) {
  int32_t c = t->nodes[node].first_child;
  while (c >= 0 && t->nodes[c].byte != byte)
    c = t->nodes[c].next_sibling;
  return c;
}

TokTrie *tok_trie_new(const char *const *strings, const size_t *lens,
                      size_t n) {
  TokTrie *t = amk_xcalloc(1, sizeof *t);
  for (int b = 0; b < 256; b++)
    t->root_child[b] = -1;
  for (size_t i = 0; i < n; i++) {
    const char *s = strings[i];
    if (!s || lens[i] == 0)
      continue;
    unsigned char first = (unsigned char)s[0];
    if (t->root_child[first] < 0)
      t->root_child[first] = new_node(t, first);
    int32_t node = t->root_child[first];
    for (size_t k = 1; k < lens[i]; k++) {
      unsigned char b = (unsigned char)s[k];
      int32_t next = child(t, node, b);
      if (next < 0) {
        next = new_node(t, b);
        t->nodes[next].next_sibling = t->nodes[node].first_child;
        t->nodes[node].first_child = next;
      }
      node = next;
    }
    /* Two tokens with one match string: the later one, as tokenizers'
     * map from string to id keeps it. */
    t->nodes[node].token = (int32_t)i;
  }
  return t;
}

void tok_trie_free(TokTrie *trie) {
  if (!trie)
    return;
  free(trie->nodes);
  free(trie);
}

/* The leftmost-longest match at or after `from`: true with [*start, *end)
 * and the token's index. */
static bool find_token(const TokTrie *t, const char *text, size_t len,
                       size_t from, size_t *start, size_t *end,
                       int32_t *token) {
  for (size_t i = from; i < len; i++) {
    int32_t node = t->root_child[(unsigned char)text[i]];
    if (node < 0)
      continue;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t k = i + 1;; k++) {
      if (t->nodes[node].token >= 0) {
        best = t->nodes[node].token;
        best_end = k;
      }
      if (k == len || (node = child(t, node, (unsigned char)text[k])) < 0)
        break;
    }
    if (best >= 0) {
      *start = i;
      *end = best_end;
      *token = best;
      return true;
    }
  }
  return false;
}

static uint32_t char_at(const char *text, size_t len, size_t at) {
  uint32_t cp = 0;
  amk_utf8_decode((const unsigned char *)text + at,
                  (const unsigned char *)text + len, &cp);
  return cp;
}

/* The start of the character that ends at `at`. */
static size_t char_start_before(const char *text, size_t at) {
  size_t i = at - 1;
  while (i > 0 && ((unsigned char)text[i] & 0xC0) == 0x80)
    i--;
  return i;
}

static void push_cut(TokCuts *cuts, size_t start, size_t end, int32_t token) {
  if (cuts->len == cuts->cap) {
    cuts->cap = cuts->cap ? cuts->cap * 2 : 32;
    cuts->items = amk_xrealloc(cuts->items, cuts->cap * sizeof *cuts->items);
  }
  cuts->items[cuts->len++] = (TokCut){start, end, token};
}

void tok_cut_added(const TokTrie *trie, const TokAddedToken *tokens,
                   const char *text, size_t len, TokCharTest word_char,
                   void *word_ctx, TokCuts *out) {
  size_t covered = 0; /* tokenizers' start_offset */
  size_t from = 0, start, end;
  int32_t index;
  while (trie && find_token(trie, text, len, from, &start, &end, &index)) {
    const TokAddedToken *token = &tokens[index];
    /* The automaton goes on from the match's end, whatever the strips do. */
    from = end;
    if (token->single_word) {
      bool word_before =
          start > 0 &&
          word_char(word_ctx, char_at(text, len, char_start_before(text, start)));
      bool word_after = end < len && word_char(word_ctx, char_at(text, len, end));
      if (word_before || word_after)
        continue;
    }
    if (token->lstrip) {
      size_t s = start;
      while (s > 0 &&
             tok_is_white_space(char_at(text, len, char_start_before(text, s))))
        s = char_start_before(text, s);
      start = s > covered ? s : covered;
    }
    if (token->rstrip)
      while (end < len && tok_is_white_space(char_at(text, len, end)))
        end += tok_utf8_char_len(text + end, len - end);
    if (covered < start)
      push_cut(out, covered, start, -1);
    push_cut(out, start, end, index);
    covered = end;
  }
  if (covered < len)
    push_cut(out, covered, len, -1);
}
