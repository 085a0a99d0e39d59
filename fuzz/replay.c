/* main() for the fuzz drivers in builds without libFuzzer:
 *
 *   fuzz_<target> PATH...
 *
 * runs LLVMFuzzerTestOneInput once on each file, and on each file of each
 * folder (not recursively), in name order. Each input is a heap copy of
 * exactly the file's size, so AddressSanitizer sees a read past its end as
 * libFuzzer's own buffers would. A crash or a broken property aborts; exit
 * status 0 means every input passed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amk/fileio.h"
#include "amk/path.h"
#include "fuzz.h"

static int run_file(const char *path, size_t *count) {
  AmkDiagEngine *diag = amk_diag_new(stderr);
  size_t len = 0;
  char *text = amk_read_regular_file(path, &len, diag);
  amk_diag_free(diag);
  if (!text)
    return 1;
  /* amk_read_file's buffer has a NUL after the bytes; the copy does not. */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    fprintf(stderr, "replay: out of memory for %s\n", path);
    free(text);
    return 1;
  }
  memcpy(exact, text, len);
  free(text);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  (*count)++;
  return 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_folder(const char *dir, size_t *count) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return 1;
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    names = amk_xrealloc(names, (n + 1) * sizeof *names);
    names[n++] = amk_path_join(dir, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, compare_names);
  int status = 0;
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
      status |= run_file(names[i], count);
    free(names[i]);
  }
  free(names);
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  int status = 0;
  size_t count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      status = 1;
    } else if (S_ISDIR(st.st_mode)) {
      status |= run_folder(argv[i], &count);
    } else {
      status |= run_file(argv[i], &count);
    }
  }
  const char *slash = strrchr(argv[0], '/');
  printf("%s: %zu inputs\n", slash ? slash + 1 : argv[0], count);
  return status;
}
