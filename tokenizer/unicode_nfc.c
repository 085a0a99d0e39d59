/* NFC as Unicode's UAX #15 defines it: full canonical decomposition
 * (Hangul syllables by arithmetic), canonical ordering of combining marks,
 * then canonical composition of each mark with the last starter that it is
 * not blocked from. */
#include <stdlib.h>

#include "amk/strutil.h"
#include "tokenizer_internal.h"
#include "unicode_nfc.h"

/* Hangul syllables: S = SBase + (L * VCount + V) * TCount + T. */
enum {
  S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
  L_COUNT = 19, V_COUNT = 21, T_COUNT = 28,
  N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT,
};

bool tok_nfc_is_trivial(const char *text, size_t len) {
  /* U+0300 is the first code point whose UTF-8 lead byte is 0xCC or more. */
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)text[i] >= 0xCC)
      return false;
  return true;
}

static unsigned combining_class(uint32_t cp) {
  if (cp < 0x300)
    return 0;
  size_t lo = 0, hi = tok_combining_range_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const TokCombiningRange *r = &tok_combining_ranges[mid];
    if (cp < r->first)
      hi = mid;
    else if (cp > r->last)
      lo = mid + 1;
    else
      return r->combining_class;
  }
  return 0;
}

static const TokDecomposition *find_decomposition(uint32_t cp) {
  size_t lo = 0, hi = tok_decomposition_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (tok_decompositions[mid].code_point < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < tok_decomposition_count && tok_decompositions[lo].code_point == cp
             ? &tok_decompositions[lo]
             : NULL;
}

/* A growable list of code points. */
typedef struct {
  uint32_t *items;
  size_t len, cap;
} CodePoints;

static void push(CodePoints *l, uint32_t cp) {
  if (l->len == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->items = amk_xrealloc(l->items, l->cap * sizeof *l->items);
  }
  l->items[l->len++] = cp;
}

static void decompose(uint32_t cp, CodePoints *out) {
  if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
    uint32_t s = cp - S_BASE;
    push(out, L_BASE + s / N_COUNT);
    push(out, V_BASE + (s % N_COUNT) / T_COUNT);
    if (s % T_COUNT)
      push(out, T_BASE + s % T_COUNT);
    return;
  }
  const TokDecomposition *d = cp < 0xC0 ? NULL : find_decomposition(cp);
  if (!d) {
    push(out, cp);
    return;
  }
  decompose(d->first, out);
  if (d->second)
    decompose(d->second, out);
}

/* Marks of one run of non-zero classes go in class order, equal classes
 * keeping their order (an insertion sort: runs are short). */
static void order_marks(CodePoints *l) {
  for (size_t i = 1; i < l->len; i++) {
    uint32_t cp = l->items[i];
    unsigned cc = combining_class(cp);
    if (cc == 0)
      continue;
    size_t j = i;
    while (j > 0) {
      unsigned before = combining_class(l->items[j - 1]);
      if (before == 0 || before <= cc)
        break;
      l->items[j] = l->items[j - 1];
      j--;
    }
    l->items[j] = cp;
  }
}

/* The primary composite of a pair, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
    return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
  if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
      b > T_BASE && b < T_BASE + T_COUNT)
    return a + (b - T_BASE);
  size_t lo = 0, hi = tok_composition_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const TokComposition *c = &tok_compositions[mid];
    if (c->first < a || (c->first == a && c->second < b))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < tok_composition_count && tok_compositions[lo].first == a &&
                 tok_compositions[lo].second == b
             ? tok_compositions[lo].composite
             : 0;
}

/* Composes in place: each character joins the last starter when nothing
 * between them has class 0 or a class as high as its own. */
static void compose(CodePoints *l) {
  size_t n = 0, starter = SIZE_MAX;
  bool adjacent = false; /* nothing between the starter and here */
  unsigned last_class = 0;
  for (size_t i = 0; i < l->len; i++) {
    uint32_t cp = l->items[i];
    unsigned cc = combining_class(cp);
    if (starter != SIZE_MAX && (adjacent || (last_class != 0 && last_class < cc))) {
      uint32_t composite = compose_pair(l->items[starter], cp);
      if (composite) {
        l->items[starter] = composite;
        continue;
      }
    }
    l->items[n++] = cp;
    if (cc == 0) {
      starter = n - 1;
      adjacent = true;
    } else {
      adjacent = false;
      last_class = cc;
    }
  }
  l->len = n;
}

void tok_nfc(const char *text, size_t len, AmkStrBuf *out) {
  CodePoints cps = {0};
  const unsigned char *p = (const unsigned char *)text, *end = p + len;
  while (p < end) {
    uint32_t cp;
    size_t n = amk_utf8_decode(p, end, &cp);
    if (n == 0) /* the text was checked to be UTF-8 */
      AMK_UNREACHABLE("NFC of text that is not UTF-8");
    decompose(cp, &cps);
    p += n;
  }
  order_marks(&cps);
  compose(&cps);
  for (size_t i = 0; i < cps.len; i++)
    tok_utf8_append_code_point(out, cps.items[i]);
  free(cps.items);
}
