/* audit_lib.c - the smallest rtld auditor (LD_AUDIT), for ld_audit.sh: glibc loads an
 * auditor before the preloaded libraries, and a preloaded library whose initial-exec TLS
 * does not fit the static TLS left then fails to load ("cannot allocate memory in static TLS
 * block"), so the program never starts. It says on stderr that it was loaded. */
#include <link.h>
#include <unistd.h>

unsigned int la_version(unsigned int version) {
  static const char msg[] = "audit_lib: loaded\n";
  ssize_t w = write(2, msg, sizeof msg - 1); /* nothing to do if stderr is gone */
  (void)w;
  return version;
}
