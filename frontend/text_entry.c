/* amk_parse_text (include/amk/io.h): set up the parser state, run the Bison
 * parser, resolve names. Kept apart from text_parse.c's helpers, which the
 * generated parser calls, so the parser and its helpers do not use each
 * other. */
#include "amk/io.h"
#include "parser.h"
#include "text_internal.h"

AmkModule *amk_parse_text(const char *name, const char *text, size_t len,
                          AmkDiagEngine *diag) {
  AmkTextParser p;
  amk_text_parser_init(&p, name, text, len, diag);
  int status = amk_yyparse(&p);
  return amk_text_parser_finish(&p, status);
}
