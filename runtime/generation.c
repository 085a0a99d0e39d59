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

/* tokenizer_config.json's `chat_template`: a string, or a list of {name,
 * template} of which the one named "default" renders chats. */
static const cJSON *template_text(const cJSON *item) {
  if (cJSON_IsString(item))
    return item;
  if (!cJSON_IsArray(item))
    return NULL;
  for (const cJSON *e = item->child; e; e = e->next) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "template");
    if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 &&
        cJSON_IsString(text))
      return text;
  }
  return NULL;
}

static bool read_chat_template(const char *dir, AmkGenerationConfig *out, AmkDiagEngine *diag) {
  FolderJson tokenizer_config;
  bool ok = read_folder_json(dir, "tokenizer_config.json", &tokenizer_config, diag);
  const cJSON *item =
      ok && tokenizer_config.root
          ? cJSON_GetObjectItemCaseSensitive(tokenizer_config.root, "chat_template")
          : NULL;
  if (item && !cJSON_IsNull(item)) {
    out->has_chat_template = true;
    const cJSON *text = template_text(item);
    if (text) {
      out->chat_template = amk_xstrdup(text->valuestring);
      out->chat_template_file = amk_xstrdup(tokenizer_config.path);
    }
  }
  free_folder_json(&tokenizer_config);
  /* transformers reads chat_template.jinja before tokenizer_config.json's. */
  char *jinja = amk_path_join(dir, "chat_template.jinja");
  if (ok && amk_path_kind(jinja) != AMK_PATH_ABSENT) {
    size_t len = 0;
    char *text = amk_read_regular_file(jinja, &len, diag);
    ok = text != NULL;
    if (ok) {
      out->has_chat_template = true;
      free(out->chat_template);
      free(out->chat_template_file);
      out->chat_template = text;
      out->chat_template_file = jinja;
      jinja = NULL;
    }
  }
  free(jinja);
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
  free(g->chat_template);
  free(g->chat_template_file);
  memset(g, 0, sizeof *g);
}

/* ---- chat formats ------------------------------------------------------------ */

AmkChatFormat amk_chat_format_recognise(const char *t) {
  if (!t)
    return AMK_CHAT_NONE;
  if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>"))
    return AMK_CHAT_LLAMA3;
  if (strstr(t, "<|im_start|>") && strstr(t, "<|im_end|>"))
    return AMK_CHAT_CHATML;
  if (strstr(t, "[INST]") && strstr(t, "[/INST]"))
    return strstr(t, "<<SYS>>") ? AMK_CHAT_LLAMA2 : AMK_CHAT_MISTRAL;
  return AMK_CHAT_NONE;
}

static const char *const chat_names[] = {
    [AMK_CHAT_NONE] = "none",     [AMK_CHAT_LLAMA3] = "llama3", [AMK_CHAT_CHATML] = "chatml",
    [AMK_CHAT_LLAMA2] = "llama2", [AMK_CHAT_MISTRAL] = "mistral",
};

AmkChatFormat amk_chat_format_named(const char *name) {
  for (int f = AMK_CHAT_LLAMA3; f <= AMK_CHAT_MISTRAL; f++)
    if (strcmp(name, chat_names[f]) == 0)
      return (AmkChatFormat)f;
  return AMK_CHAT_NONE;
}

const char *amk_chat_format_name(AmkChatFormat f) { return chat_names[f]; }

const char *amk_chat_end_of_turn(AmkChatFormat f, const char *eos_token) {
  switch (f) {
  case AMK_CHAT_LLAMA3:
    return "<|eot_id|>";
  case AMK_CHAT_CHATML:
    return "<|im_end|>";
  case AMK_CHAT_LLAMA2:
  case AMK_CHAT_MISTRAL:
  case AMK_CHAT_NONE:
    break;
  }
  return eos_token;
}

/* Jinja's `trim` and Python's strip(): without leading and trailing
 * whitespace. */
static void put_trimmed(AmkStrBuf *out, const char *s) {
  const char *end = s + strlen(s);
  while (*s && strchr(" \t\n\r\f\v", *s))
    s++;
  while (end > s && strchr(" \t\n\r\f\v", end[-1]))
    end--;
  amk_sb_putn(out, s, (size_t)(end - s));
}

static void put_opt(AmkStrBuf *out, const char *s) {
  if (s)
    amk_sb_puts(out, s);
}

/* Meta-Llama-3-8B-Instruct's template: every message a header block, the
 * BOS before the first. */
static void render_llama3(const AmkChatTurn *t, AmkStrBuf *out) {
  if (!t->first)
    amk_sb_puts(out, "<|eot_id|>");
  else
    put_opt(out, t->bos_token);
  if (t->first && t->system) {
    amk_sb_puts(out, "<|start_header_id|>system<|end_header_id|>\n\n");
    put_trimmed(out, t->system);
    amk_sb_puts(out, "<|eot_id|>");
  }
  amk_sb_puts(out, "<|start_header_id|>user<|end_header_id|>\n\n");
  put_trimmed(out, t->user);
  amk_sb_puts(out, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* ChatML: no BOS, content as given. */
static void render_chatml(const AmkChatTurn *t, AmkStrBuf *out) {
  if (!t->first)
    amk_sb_puts(out, "<|im_end|>\n");
  if (t->first && t->system) {
    amk_sb_puts(out, "<|im_start|>system\n");
    amk_sb_puts(out, t->system);
    amk_sb_puts(out, "<|im_end|>\n");
  }
  amk_sb_puts(out, "<|im_start|>user\n");
  amk_sb_puts(out, t->user);
  amk_sb_puts(out, "<|im_end|>\n<|im_start|>assistant\n");
}

/* Llama-2-chat: a BOS before every [INST], the system message inside the
 * first one, a reply closed by ' ' and the EOS. */
static void render_llama2(const AmkChatTurn *t, AmkStrBuf *out) {
  if (!t->first) {
    amk_sb_putc(out, ' ');
    put_opt(out, t->eos_token);
  }
  put_opt(out, t->bos_token);
  amk_sb_puts(out, "[INST] ");
  if (t->first && t->system) {
    /* The template strips the whole content, system block included. */
    AmkStrBuf content;
    amk_sb_init(&content);
    amk_sb_puts(&content, "<<SYS>>\n");
    amk_sb_puts(&content, t->system);
    amk_sb_puts(&content, "\n<</SYS>>\n\n");
    amk_sb_puts(&content, t->user);
    put_trimmed(out, content.data);
    amk_sb_free(&content);
  } else {
    put_trimmed(out, t->user);
  }
  amk_sb_puts(out, " [/INST]");
}

/* Mistral-7B-Instruct: one BOS, replies closed by the EOS; no system role,
 * so a system message goes before the first user message. */
static void render_mistral(const AmkChatTurn *t, AmkStrBuf *out) {
  if (!t->first)
    put_opt(out, t->eos_token);
  else
    put_opt(out, t->bos_token);
  amk_sb_puts(out, "[INST] ");
  if (t->first && t->system) {
    amk_sb_puts(out, t->system);
    amk_sb_puts(out, "\n\n");
  }
  amk_sb_puts(out, t->user);
  amk_sb_puts(out, " [/INST]");
}

void amk_chat_render_turn(AmkChatFormat f, const AmkChatTurn *turn, AmkStrBuf *out) {
  switch (f) {
  case AMK_CHAT_LLAMA3:
    render_llama3(turn, out);
    return;
  case AMK_CHAT_CHATML:
    render_chatml(turn, out);
    return;
  case AMK_CHAT_LLAMA2:
    render_llama2(turn, out);
    return;
  case AMK_CHAT_MISTRAL:
    render_mistral(turn, out);
    return;
  case AMK_CHAT_NONE:
    break;
  }
  amk_sb_puts(out, turn->user);
}
