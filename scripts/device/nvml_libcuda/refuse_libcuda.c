// LD_PRELOAD shim: refuses dlopen of libcuda, to see NVML without it (nvml_calls.py).
// Build: gcc -O2 -shared -fPIC refuse_libcuda.c -o refuse_libcuda.so -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <stdio.h>
static void *(*real_dlopen)(const char *, int);
void *dlopen(const char *file, int flags) {
    if (!real_dlopen) real_dlopen = dlsym(RTLD_NEXT, "dlopen");
    if (file && strstr(file, "libcuda.so")) {
        fprintf(stderr, "[shim] refused dlopen(%s)\n", file);
        return NULL;
    }
    return real_dlopen(file, flags);
}
