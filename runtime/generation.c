/* A model folder's generation facts: see amk/generation.h. */
#include "amk/generation.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/json_strict.h"
#include "amk/path.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* One JSON file of the folder, parsed; an absent file leaves root NULL. */
typedef struct {
  char *path;
  cJSON *root;
} FolderJson;

static bool read_folder_json(const char *dir, const char *name, FolderJson *out,
                             AmkDiagEngine *diag) {
  out->path = amk_path_join(dir, name);
  out->root = NULL;
  if (amk_path_kind(out->path) == AMK_PATH_ABSENT)
    return true;
  size_t len = 0;
  /* Found in a model folder: a FIFO or device there is refused, not waited on. */
  char *text = amk_read_regular_file(out->path, &len, diag);
  if (!text)
    return false;
  out->root = amk_json_parse_strict(out->path, text, len, diag);
  free(text);
  if (out->root && !cJSON_IsObject(out->root)) {
    amk_error(diag, no_loc(), "%s: the top level must be a JSON object", out->path);
    cJSON_Delete(out->root);
    out->root = NULL;
  }
  return out->root != NULL;
}

static void free_folder_json(FolderJson *f) {
  cJSON_Delete(f->root);
  free(f->path);
}

/* The first of the files that has `key`, and its value there. */
static const cJSON *find_key(const FolderJson *files, size_t n, const char *key,
                             const FolderJson **from) {
  for (size_t i = 0; i < n; i++) {
    const cJSON *item =
        files[i].root ? cJSON_GetObjectItemCaseSensitive(files[i].root, key) : NULL;
    if (item) {
      *from = &files[i];
      return item;
    }
  }
  return NULL;
}

static bool token_id(const cJSON *item, int32_t *out) {
  if (!cJSON_IsNumber(item))
    return false;
  double v = item->valuedouble;
  if (!(v >= 0 && v <= INT32_MAX) || floor(v) != v)
    return false;
  *out = (int32_t)v;
  return true;
}

/* `key` from the first file that has it: one token id, or with `list` also
 * a list of them. Null or absent: none. *file receives the file's path. */
static bool read_ids(const FolderJson *files, size_t n, const char *key, bool list,
                     int32_t **ids, size_t *n_ids, char **file, AmkDiagEngine *diag) {
  const FolderJson *from = NULL;
  const cJSON *item = find_key(files, n, key, &from);
  if (!item || cJSON_IsNull(item))
    return true;
  bool is_list = list && cJSON_IsArray(item);
  size_t count = is_list ? (size_t)cJSON_GetArraySize(item) : 1;
  *ids = amk_xmalloc((count ? count : 1) * sizeof **ids);
  const cJSON *id = is_list ? item->child : item;
  for (; *n_ids < count; id = id->next)
    if (!token_id(id, &(*ids)[(*n_ids)++])) {
      amk_error(diag, no_loc(), "%s: '%s' must be a token id (an integer >= 0)%s", from->path,
                key, list ? " or a list of them" : "");
      return false;
    }
  *file = amk_xstrdup(from->path);
  return true;
}

static bool read_chat_template(const char *dir, AmkGenerationConfig *out, AmkDiagEngine *diag) {
  char *jinja = amk_path_join(dir, "chat_template.jinja");
  out->has_chat_template = amk_path_kind(jinja) != AMK_PATH_ABSENT;
  free(jinja);
  FolderJson tokenizer_config;
  bool ok = read_folder_json(dir, "tokenizer_config.json", &tokenizer_config, diag);
  const cJSON *item =
      ok && tokenizer_config.root
          ? cJSON_GetObjectItemCaseSensitive(tokenizer_config.root, "chat_template")
          : NULL;
  if (item && !cJSON_IsNull(item))
    out->has_chat_template = true;
  free_folder_json(&tokenizer_config);
  return ok;
}

bool amk_generation_config_read(const char *dir, AmkGenerationConfig *out,
                                AmkDiagEngine *diag) {
  memset(out, 0, sizeof *out);
  out->bos = -1;
  /* generation_config.json first: its keys win over config.json's. */
  FolderJson files[2];
  bool ok = read_folder_json(dir, "generation_config.json", &files[0], diag);
  ok = read_folder_json(dir, "config.json", &files[1], diag) && ok;
  ok = ok && read_ids(files, 2, "eos_token_id", true, &out->eos, &out->n_eos, &out->eos_file,
                      diag);
  int32_t *bos = NULL;
  size_t n_bos = 0;
  ok = ok && read_ids(files, 2, "bos_token_id", false, &bos, &n_bos, &out->bos_file, diag);
  if (ok && n_bos)
    out->bos = bos[0];
  free(bos);
  ok = ok && read_chat_template(dir, out, diag);
  free_folder_json(&files[0]);
  free_folder_json(&files[1]);
  if (!ok) {
    amk_generation_config_free(out);
    out->bos = -1;
  }
  return ok;
}

bool amk_generation_config_check_vocab(const AmkGenerationConfig *g, int64_t vocab,
                                       AmkDiagEngine *diag) {
  for (size_t i = 0; i < g->n_eos; i++)
    if (g->eos[i] >= vocab) {
      amk_error(diag, no_loc(),
                "%s: eos_token_id %" PRId32 " is outside the vocabulary [0, %" PRId64 ")",
                g->eos_file, g->eos[i], vocab);
      return false;
    }
  if (g->bos >= vocab) {
    amk_error(diag, no_loc(),
              "%s: bos_token_id %" PRId32 " is outside the vocabulary [0, %" PRId64 ")",
              g->bos_file, g->bos, vocab);
    return false;
  }
  return true;
}

bool amk_generation_config_is_eos(const AmkGenerationConfig *g, int32_t token) {
  for (size_t i = 0; i < g->n_eos; i++)
    if (g->eos[i] == token)
      return true;
  return false;
}

void amk_generation_config_free(AmkGenerationConfig *g) {
  free(g->eos);
  free(g->eos_file);
  free(g->bos_file);
  memset(g, 0, sizeof *g);
}
