/* Chat formats (include/amk/generation.h): recognising the chat templates
 * that real models ship (test/run/Inputs/chat-templates: Llama 3, ChatML,
 * Llama 2, Mistral, and one amk-run does not render), the names
 * --chat-template takes, and each format's rendering of a conversation turn
 * by turn, checked against the text its Jinja template gives for the whole
 * conversation (written out by hand here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/generation.h"
#include "unit.h"

static char *read_template(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/test/run/Inputs/chat-templates/%s.jinja", AMK_SOURCE_DIR, name);
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  size_t got = fread(text, 1, (size_t)n, f);
  text[got] = '\0';
  fclose(f);
  return text;
}

static void test_recognise_files(UnitCounts *c) {
  const struct {
    const char *file;
    AmkChatFormat want;
  } cases[] = {{"llama3", AMK_CHAT_LLAMA3},
               {"chatml", AMK_CHAT_CHATML},
               {"llama2", AMK_CHAT_LLAMA2},
               {"mistral", AMK_CHAT_MISTRAL},
               {"unknown", AMK_CHAT_NONE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = read_template(cases[i].file);
    CHECK(c, text != NULL);
    CHECK_STR(c, amk_chat_format_name(amk_chat_format_recognise(text)),
              amk_chat_format_name(cases[i].want));
    free(text);
  }
}

/* Other spellings of the same formats: Llama 3.1's template (a system
 * header block, tools), Qwen2.5's ChatML with tools, a Mixtral template
 * without raise_exception. */
static void test_recognise_variants(UnitCounts *c) {
  const char *llama31 =
      "{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}\n"
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
      "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"<|eot_id|>\" }}\n"
      "{%- for message in messages %}\n"
      "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
      "message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}";
  const char *qwen25 =
      "{%- if tools %}\n{{- '<|im_start|>system\\n' }}\n{%- endif %}\n"
      "{%- for message in messages %}\n{{- '<|im_start|>' + message.role + '\\n' + "
      "message.content + '<|im_end|>' + '\\n' }}\n{%- endfor %}\n"
      "{%- if add_generation_prompt %}\n{{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
  const char *mixtral =
      "{{ bos_token }}\n{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
      "{{ '[INST] ' + message['content'] + ' [/INST]' }}\n{% elif message['role'] == "
      "'assistant' %}\n{{ message['content'] + eos_token}}\n{% endif %}\n{% endfor %}";
  CHECK(c, amk_chat_format_recognise(llama31) == AMK_CHAT_LLAMA3);
  CHECK(c, amk_chat_format_recognise(qwen25) == AMK_CHAT_CHATML);
  CHECK(c, amk_chat_format_recognise(mixtral) == AMK_CHAT_MISTRAL);
  CHECK(c, amk_chat_format_recognise("{{ messages }}") == AMK_CHAT_NONE);
  CHECK(c, amk_chat_format_recognise("") == AMK_CHAT_NONE);
  CHECK(c, amk_chat_format_recognise(NULL) == AMK_CHAT_NONE);
}

static void test_names(UnitCounts *c) {
  const char *names[] = {"llama3", "chatml", "llama2", "mistral"};
  for (size_t i = 0; i < 4; i++) {
    AmkChatFormat f = amk_chat_format_named(names[i]);
    CHECK(c, f != AMK_CHAT_NONE);
    CHECK_STR(c, amk_chat_format_name(f), names[i]);
    CHECK(c, strstr(AMK_CHAT_FORMAT_NAMES, names[i]) != NULL);
  }
  CHECK(c, amk_chat_format_named("gemma") == AMK_CHAT_NONE);
  CHECK(c, amk_chat_format_named("Llama3") == AMK_CHAT_NONE);
  CHECK(c, amk_chat_format_named("") == AMK_CHAT_NONE);
  CHECK_STR(c, amk_chat_end_of_turn(AMK_CHAT_LLAMA3, "</s>"), "<|eot_id|>");
  CHECK_STR(c, amk_chat_end_of_turn(AMK_CHAT_CHATML, "</s>"), "<|im_end|>");
  CHECK_STR(c, amk_chat_end_of_turn(AMK_CHAT_LLAMA2, "</s>"), "</s>");
  CHECK_STR(c, amk_chat_end_of_turn(AMK_CHAT_MISTRAL, "</s>"), "</s>");
  CHECK(c, amk_chat_end_of_turn(AMK_CHAT_MISTRAL, NULL) == NULL);
}

/* A conversation rendered turn by turn, with the model's replies between
 * the turns as a decoder would leave them in the KV cache (a reply's end of
 * turn is not fed: the next turn's text closes it). */
static char *conversation(AmkChatFormat f, const char *bos, const char *eos, const char *system,
                          const char *const *users, const char *const *replies, size_t n) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  for (size_t i = 0; i < n; i++) {
    AmkChatTurn t = {.bos_token = bos, .eos_token = eos, .system = i == 0 ? system : NULL,
                     .user = users[i], .first = i == 0};
    amk_chat_render_turn(f, &t, &sb);
    if (replies[i])
      amk_sb_puts(&sb, replies[i]);
  }
  return sb.data;
}

static void test_render(UnitCounts *c) {
  const char *users[] = {"  Hi there \n", "And now?"};
  const char *replies[] = {"Hello.", NULL};
  const char *spm_replies[] = {" Hello.", NULL}; /* SentencePiece models reply after a space */
  char *got;

  /* Meta-Llama-3-8B-Instruct's template with add_generation_prompt. */
  got = conversation(AMK_CHAT_LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", " Be brief. ",
                     users, replies, 2);
  CHECK_STR(c, got,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnd now?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  free(got);

  /* ChatML keeps the content as typed. */
  got = conversation(AMK_CHAT_CHATML, NULL, "<|im_end|>", "Be brief.", users, replies, 2);
  CHECK_STR(c, got,
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\n  Hi there \n<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nAnd now?<|im_end|>\n"
            "<|im_start|>assistant\n");
  free(got);
  got = conversation(AMK_CHAT_CHATML, NULL, NULL, NULL, users + 1, replies + 1, 1);
  CHECK_STR(c, got, "<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n");
  free(got);

  /* Llama-2-chat: the system block inside the first [INST], stripped with
   * the content; a BOS before every [INST]. */
  got = conversation(AMK_CHAT_LLAMA2, "<s>", "</s>", "Be brief.", users, spm_replies, 2);
  CHECK_STR(c, got,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n  Hi there [/INST] Hello. </s>"
            "<s>[INST] And now? [/INST]");
  free(got);
  got = conversation(AMK_CHAT_LLAMA2, "<s>", "</s>", NULL, users, spm_replies, 2);
  CHECK_STR(c, got, "<s>[INST] Hi there [/INST] Hello. </s><s>[INST] And now? [/INST]");
  free(got);

  /* Mistral-7B-Instruct (v0.2's reply end: the EOS alone); no system role,
   * so the system message leads the first user message. */
  got = conversation(AMK_CHAT_MISTRAL, "<s>", "</s>", NULL, users, replies, 2);
  CHECK_STR(c, got, "<s>[INST]   Hi there \n [/INST]Hello.</s>[INST] And now? [/INST]");
  free(got);
  got = conversation(AMK_CHAT_MISTRAL, "<s>", "</s>", "Be brief.", users + 1, replies + 1, 1);
  CHECK_STR(c, got, "<s>[INST] Be brief.\n\nAnd now? [/INST]");
  free(got);
}

int main(void) {
  const UnitTest tests[] = {test_recognise_files, test_recognise_variants, test_names,
                            test_render};
  return unit_run("test_chat", tests, sizeof tests / sizeof tests[0]);
}
