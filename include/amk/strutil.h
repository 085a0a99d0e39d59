/* String helpers for diagnostics (support layer). */
#ifndef AMK_STRUTIL_H
#define AMK_STRUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Levenshtein distance between a[0..la) and b[0..lb); words of 64 bytes or
 * more count as 64 away from everything. */
size_t amk_edit_distance(const char *a, size_t la, const char *b, size_t lb);

/* Closest of `n` candidate words to `word` (for "did you mean"), or NULL when
 * none is close enough to be a typo (a third of the word, at most 3 edits). */
const char *amk_suggest(const char *word, size_t len,
                        const char *const *candidates, size_t n);

/* Whether `s` ends with `suffix`. */
bool amk_str_ends_with(const char *s, const char *suffix);

/* The value of a hexadecimal digit (either case), or -1. */
int amk_hex_digit(char c);

/* Decode one strict UTF-8 sequence (no overlongs, no surrogates, nothing
 * past U+10FFFF) of the bytes [p, end): its length, with the code point in
 * *code_point, or 0 when it is not well-formed. */
size_t amk_utf8_decode(const unsigned char *p, const unsigned char *end,
                       uint32_t *code_point);

#endif
