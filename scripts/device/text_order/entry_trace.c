// Records which functions of an executable run, and when each first ran: an LD_PRELOAD library
// that puts a breakpoint (int3) on the first byte of every function listed in
// $ENTRY_TRACE_FUNCS (hex offsets from the executable's first address, one per line, as
// `functions.py list` writes them) and writes "offset first_hit_ms" lines to $ENTRY_TRACE_OUT
// when the process exits. Each breakpoint is taken once: the handler puts the byte back and
// resumes at the function's first instruction. The traced run's memory and timing mean nothing
// (the code becomes writable, private pages); only the list of functions does.
//
// Build: gcc -O2 -shared -fPIC -o libentry_trace.so entry_trace.c
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static uintptr_t base;
static uintptr_t *addrs;      // sorted runtime addresses of the functions
static unsigned char *saved;  // each function's first byte
static int64_t *first_hit_ns; // -1 until the function runs
static size_t count;
static struct timespec start;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - start.tv_sec) * 1000000000LL + (t.tv_nsec - start.tv_nsec);
}

static int find_exe(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  base = info->dlpi_addr; // the first object is the executable
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    if (p->p_type == PT_LOAD && (p->p_flags & PF_X)) {
      long page = sysconf(_SC_PAGESIZE);
      uintptr_t lo = (base + p->p_vaddr) & ~(uintptr_t)(page - 1);
      uintptr_t hi = base + p->p_vaddr + p->p_memsz;
      if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
        perror("entry_trace: mprotect");
        _exit(97);
      }
    }
  }
  return 1;
}

static void on_trap(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  ucontext_t *uc = context;
  uintptr_t at = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
  size_t lo = 0, hi = count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (addrs[mid] < at)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == count || addrs[lo] != at) {
    static const char msg[] = "entry_trace: a breakpoint that is not ours\n";
    write(2, msg, sizeof msg - 1);
    _exit(98);
  }
  *(volatile unsigned char *)at = saved[lo];
  __builtin___clear_cache((char *)at, (char *)at + 1);
  if (first_hit_ns[lo] < 0)
    first_hit_ns[lo] = now_ns();
  uc->uc_mcontext.gregs[REG_RIP] = (greg_t)at;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return (x > y) - (x < y);
}

__attribute__((constructor)) static void arm(void) {
  const char *path = getenv("ENTRY_TRACE_FUNCS");
  if (!path || !getenv("ENTRY_TRACE_OUT"))
    return;
  clock_gettime(CLOCK_MONOTONIC, &start);
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    _exit(96);
  }
  size_t cap = 1 << 16;
  addrs = malloc(cap * sizeof *addrs);
  unsigned long long offset;
  while (fscanf(f, "%llx", &offset) == 1) {
    if (count == cap)
      addrs = realloc(addrs, (cap *= 2) * sizeof *addrs);
    addrs[count++] = offset;
  }
  fclose(f);
  dl_iterate_phdr(find_exe, NULL);
  for (size_t i = 0; i < count; i++)
    addrs[i] += base;
  qsort(addrs, count, sizeof *addrs, by_address);
  saved = malloc(count);
  first_hit_ns = malloc(count * sizeof *first_hit_ns);
  for (size_t i = 0; i < count; i++) {
    saved[i] = *(unsigned char *)addrs[i];
    first_hit_ns[i] = -1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGTRAP, &sa, NULL);
  for (size_t i = 0; i < count; i++)
    *(unsigned char *)addrs[i] = 0xCC;
  __builtin___clear_cache((char *)addrs[0], (char *)addrs[count - 1] + 1);
}

__attribute__((destructor)) static void dump(void) {
  const char *out = getenv("ENTRY_TRACE_OUT");
  if (!addrs || !out)
    return;
  FILE *f = fopen(out, "w");
  if (!f) {
    perror(out);
    return;
  }
  size_t hit = 0;
  for (size_t i = 0; i < count; i++)
    if (first_hit_ns[i] >= 0) {
      fprintf(f, "%lx %.3f\n", (unsigned long)(addrs[i] - base), first_hit_ns[i] / 1e6);
      hit++;
    }
  fclose(f);
  fprintf(stderr, "entry_trace: %zu of %zu functions ran\n", hit, count);
}
