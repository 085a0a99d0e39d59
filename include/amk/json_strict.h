/* Strict checks on JSON that cJSON has already parsed (support layer).
 *
 * cJSON is looser than Python's json module, which is what writes and reads
 * the HuggingFace files we read (config.json, model.safetensors.index.json,
 * safetensors headers, tokenizer.json). Where the two would read a file
 * differently, we refuse the file rather than guess:
 *   - duplicate keys in an object (cJSON finds the first, Python keeps the
 *     last);
 *   - text after the value (cJSON can stop early; Python refuses it);
 *   - U+0000 in a string or key (cJSON's C strings end there);
 *   - what Python's grammar refuses and cJSON accepts: raw control characters
 *     in strings, numbers such as 01, 1. or 1e, bytes between tokens other
 *     than space, tab, CR and LF (a byte-order mark, form feed, NUL).
 * Each error names the file (through `label`) and the key path, written as
 * `rope_parameters.factor` or `architectures[1]`.
 */
#ifndef AMK_JSON_STRICT_H
#define AMK_JSON_STRICT_H

#include <stdbool.h>
#include <stddef.h>

#include "amk/diag.h"

struct cJSON;

typedef enum {
  /* Space, tab, CR and LF may follow the value, as json.loads allows. */
  AMK_JSON_TRAILING_WHITESPACE,
  /* Only spaces (0x20) may follow: the safetensors header's padding. */
  AMK_JSON_TRAILING_SPACES,
} AmkJsonTrailing;

/* Checks `text` (`len` bytes), which cJSON parsed into `root`, stopping at
 * `value_end` (its return_parse_end with require_null_terminated off).
 * Errors start with `label` (the file name, perhaps with a word such as
 * "header"). True when the text reads the same in Python. */
bool amk_json_check_strict(const char *label, const char *text, size_t len,
                           const char *value_end, const struct cJSON *root,
                           AmkJsonTrailing trailing, AmkDiagEngine *diag);

/* Parses a whole JSON file's `text` (`len` bytes) as Python's json.loads
 * would read it (amk_json_check_strict, white space after the value). The
 * tree for cJSON_Delete, or NULL after reporting "PATH: not valid JSON (near
 * byte N)" or what the strict check found. */
struct cJSON *amk_json_parse_strict(const char *path, const char *text, size_t len,
                                    AmkDiagEngine *diag);

#endif
