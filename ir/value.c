/* Generic JSON-shaped values, and Python's repr() of a double. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/ir.h"

bool amk_value_as_int(const AmkValue *v, int64_t *out) {
  if (!v || v->kind != AMK_VALUE_INT)
    return false;
  *out = v->as.i;
  return true;
}

bool amk_value_as_real(const AmkValue *v, double *out) {
  if (!v)
    return false;
  if (v->kind == AMK_VALUE_INT) {
    *out = (double)v->as.i;
    return true;
  }
  if (v->kind == AMK_VALUE_FLOAT) {
    *out = v->as.f;
    return true;
  }
  return false;
}

const AmkValue *amk_object_get(const AmkValue *obj, const char *key) {
  if (!obj || obj->kind != AMK_VALUE_OBJECT)
    return NULL;
  /* Readers keep keys unique; scanning from the end still gives Python's
   * "last one wins" for objects that were built by hand. */
  for (uint32_t i = obj->count; i-- > 0;)
    if (strcmp(obj->as.members[i].key, key) == 0)
      return &obj->as.members[i].value;
  return NULL;
}

/* Structural equality: kinds must match (1 and 1.0 differ, because they are
 * written differently), objects compare in member order, NaN equals NaN. */
bool amk_value_equal(const AmkValue *a, const AmkValue *b) {
  if (a->kind != b->kind)
    return false;
  switch (a->kind) {
  case AMK_VALUE_NULL:
    return true;
  case AMK_VALUE_BOOL:
    return a->as.b == b->as.b;
  case AMK_VALUE_INT:
    return a->as.i == b->as.i;
  case AMK_VALUE_FLOAT:
    if (isnan(a->as.f) && isnan(b->as.f))
      return true;
    /* -0.0 and 0.0 print differently, so they are different values here. */
    return a->as.f == b->as.f && signbit(a->as.f) == signbit(b->as.f);
  case AMK_VALUE_STRING:
    return strcmp(a->as.s, b->as.s) == 0;
  case AMK_VALUE_LIST:
    if (a->count != b->count)
      return false;
    for (uint32_t i = 0; i < a->count; i++)
      if (!amk_value_equal(&a->as.items[i], &b->as.items[i]))
        return false;
    return true;
  case AMK_VALUE_OBJECT:
    if (a->count != b->count)
      return false;
    for (uint32_t i = 0; i < a->count; i++) {
      if (strcmp(a->as.members[i].key, b->as.members[i].key) != 0)
        return false;
      if (!amk_value_equal(&a->as.members[i].value, &b->as.members[i].value))
        return false;
    }
    return true;
  }
  return false;
}

AmkValue amk_value_clone(AmkArena *arena, const AmkValue *v) {
  AmkValue copy = *v;
  switch (v->kind) {
  case AMK_VALUE_STRING:
    copy.as.s = amk_arena_strdup(arena, v->as.s);
    break;
  case AMK_VALUE_LIST:
    copy.as.items = amk_arena_alloc(arena, sizeof(AmkValue) * (v->count ? v->count : 1));
    for (uint32_t i = 0; i < v->count; i++)
      copy.as.items[i] = amk_value_clone(arena, &v->as.items[i]);
    break;
  case AMK_VALUE_OBJECT:
    copy.as.members =
        amk_arena_alloc(arena, sizeof(AmkMember) * (v->count ? v->count : 1));
    for (uint32_t i = 0; i < v->count; i++) {
      copy.as.members[i].key = amk_arena_strdup(arena, v->as.members[i].key);
      copy.as.members[i].value = amk_value_clone(arena, &v->as.members[i].value);
    }
    break;
  default:
    break;
  }
  return copy;
}

/* ---- repr(float) ---------------------------------------------------------- */

/* The shortest decimal digits that read back as `f` (f finite, > 0), as in
 * David Gay's dtoa mode 0: `digits` gets the significant digits without
 * trailing zeros and the return value is `decpt`, so that
 * f == 0.DIGITS * 10^decpt. */
static int shortest_digits(double f, char digits[24]) {
  char buf[40];
  for (int precision = 1; precision <= 17; precision++) {
    snprintf(buf, sizeof buf, "%.*e", precision - 1, f);
    /* buf is "d.ddde[+-]XX" (or "de[+-]XX" at precision 1). */
    uint64_t mantissa = 0;
    int exp10 = 0;
    const char *p = buf;
    for (; *p != 'e'; p++)
      if (*p != '.')
        mantissa = mantissa * 10 + (uint64_t)(*p - '0');
    exp10 = atoi(p + 1) - (precision - 1); /* f ~= mantissa * 10^exp10 */

    /* The correctly rounded candidate normally round-trips when any string of
     * this length does; at a power of two the interval of values that read
     * back as f is lopsided, so the neighbour on the wide side may be the only
     * one that does. */
    uint64_t smallest = 1; /* 10^(precision-1) */
    for (int i = 1; i < precision; i++)
      smallest *= 10;
    /* Below 100 (p=3) the neighbour is 999 at one exponent lower, not 99. */
    bool at_decade = mantissa == smallest;
    uint64_t candidates[3] = {mantissa, mantissa + 1,
                              at_decade ? mantissa * 10 - 1 : mantissa - 1};
    int exponents[3] = {exp10, exp10, at_decade ? exp10 - 1 : exp10};
    for (int c = 0; c < 3; c++) {
      uint64_t m = candidates[c];
      if (m == 0)
        continue;
      char probe[40];
      snprintf(probe, sizeof probe, "%" PRIu64 "e%d", m, exponents[c]);
      if (strtod(probe, NULL) != f)
        continue;
      /* Lay out the digits of m, drop trailing zeros, compute decpt. */
      char mdigits[24];
      int n = snprintf(mdigits, sizeof mdigits, "%" PRIu64, m);
      int decpt = n + exponents[c];
      while (n > 1 && mdigits[n - 1] == '0')
        n--;
      memcpy(digits, mdigits, (size_t)n);
      digits[n] = '\0';
      return decpt;
    }
  }
  /* %.17e always round-trips, so the loop returns. */
  AMK_UNREACHABLE("no round-tripping digit string for a finite double");
}

int amk_format_float_repr(double f, char buf[32]) {
  if (isnan(f))
    return snprintf(buf, 32, "nan");
  if (isinf(f))
    return snprintf(buf, 32, f < 0 ? "-inf" : "inf");
  int len = 0;
  if (signbit(f)) {
    buf[len++] = '-';
    f = -f;
  }
  if (f == 0.0) {
    memcpy(buf + len, "0.0", 4);
    return len + 3;
  }
  char digits[24];
  int decpt = shortest_digits(f, digits);
  int ndigits = (int)strlen(digits);
  int exponent = decpt - 1;

  if (exponent < -4 || exponent >= 16) {
    /* d[.ddd]e[+-]XX: no ".0" is added in exponent form. */
    buf[len++] = digits[0];
    if (ndigits > 1) {
      buf[len++] = '.';
      memcpy(buf + len, digits + 1, (size_t)ndigits - 1);
      len += ndigits - 1;
    }
    len += snprintf(buf + len, (size_t)(32 - len), "e%c%02d", exponent < 0 ? '-' : '+',
                    exponent < 0 ? -exponent : exponent);
    return len;
  }
  if (decpt <= 0) {
    /* 0.000ddd */
    buf[len++] = '0';
    buf[len++] = '.';
    for (int i = 0; i < -decpt; i++)
      buf[len++] = '0';
    memcpy(buf + len, digits, (size_t)ndigits);
    len += ndigits;
  } else if (decpt < ndigits) {
    memcpy(buf + len, digits, (size_t)decpt);
    len += decpt;
    buf[len++] = '.';
    memcpy(buf + len, digits + decpt, (size_t)(ndigits - decpt));
    len += ndigits - decpt;
  } else {
    /* Integral: digits, padding zeros, ".0". */
    memcpy(buf + len, digits, (size_t)ndigits);
    len += ndigits;
    for (int i = ndigits; i < decpt; i++)
      buf[len++] = '0';
    buf[len++] = '.';
    buf[len++] = '0';
  }
  buf[len] = '\0';
  return len;
}
