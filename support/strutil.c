/* String helpers: edit distance, "did you mean" suggestions, suffixes
 * (include/amk/strutil.h). */
#include <string.h>

#include "amk/strutil.h"

size_t amk_edit_distance(const char *a, size_t la, const char *b,
                            size_t lb) {
  enum { MAX = 64 };
  if (la >= MAX || lb >= MAX)
    return MAX;
  size_t row[MAX + 1];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t above = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = diagonal + cost;
      if (above + 1 < best)
        best = above + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  return row[lb];
}

const char *amk_suggest(const char *word, size_t len,
                             const char *const *candidates, size_t n) {
  const char *best = NULL;
  size_t best_distance = len / 3 + 1; /* close enough to be a typo */
  if (best_distance > 3)
    best_distance = 3;
  best_distance++;
  for (size_t i = 0; i < n; i++) {
    size_t d = amk_edit_distance(word, len, candidates[i], strlen(candidates[i]));
    if (d < best_distance) {
      best = candidates[i];
      best_distance = d;
    }
  }
  return best;
}

bool amk_str_ends_with(const char *s, const char *suffix) {
  size_t len = strlen(s), suffix_len = strlen(suffix);
  return len >= suffix_len && strcmp(s + len - suffix_len, suffix) == 0;
}
