/* What a model folder says about generating text (runtime layer): the
 * end-of-sequence and beginning-of-sequence token ids, and whether a chat
 * template comes with it.
 *
 * Each id is read from generation_config.json when that file has the key,
 * else from config.json, as transformers' generate() falls back on the model
 * config. eos_token_id is an id or a list of ids; bos_token_id one id; null or
 * absent means none. The chat template is tokenizer_config.json's
 * `chat_template` or a chat_template.jinja file. Files that are there must be
 * regular files holding JSON that Python reads the same way
 * (amk/json_strict.h); each error names its file and key.
 */
#ifndef AMK_GENERATION_H
#define AMK_GENERATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"

typedef struct {
  int32_t *eos; /* n_eos ids; decoding stops at any of them */
  size_t n_eos;
  char *eos_file; /* the file they came from; NULL when there are none */
  int32_t bos;    /* -1: none */
  char *bos_file;
  bool has_chat_template;
} AmkGenerationConfig;

/* Reads the folder `dir`. An absent file is not an error (a folder of weights
 * only has no ids). False after reporting; *out is then empty. */
bool amk_generation_config_read(const char *dir, AmkGenerationConfig *out, AmkDiagEngine *diag);

/* Every id inside [0, vocab), else an error naming the file and the id. */
bool amk_generation_config_check_vocab(const AmkGenerationConfig *g, int64_t vocab,
                                       AmkDiagEngine *diag);

bool amk_generation_config_is_eos(const AmkGenerationConfig *g, int32_t token);

void amk_generation_config_free(AmkGenerationConfig *g);

#endif
