/* A program outside the tree: links the installed libamk and uses it. */
#include <stdio.h>
#include <string.h>

#include <amk/ir.h>
#include <amk/version.h>

int main(void) {
  const char *v = amk_version_string();
  AmkModule *m = amk_module_new();
  int ok = v && strlen(v) > 0 && m != NULL;
  printf("amk %s, module %s\n", v, m ? "made" : "missing");
  amk_module_free(m);
  return ok ? 0 : 1;
}
