/* blas_select.c - pick OpenBLAS's kernel for this CPU by re-executing the
 * program with OPENBLAS_CORETYPE set (see blas_select.h for why). */
#include "blas_select.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hpo.h"

/* Kernels OpenBLAS falls back to when it does not know the CPU: all of them
 * lack AVX, so any AVX2/AVX-512 CPU running one of them is misdetected. */
static const char *const generic_cores[] = {
    "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai",
    "Coppermine", "Northwood", "Banias", "Generic", "unknown", "Opteron", "Barcelona",
};
/* Kernels by the widest vector instructions their sgemm uses. */
static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
static const char *const avx2_cores[] = {"Haswell", "Zen", "Excavator"};

static int name_in(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(name, list[i]) == 0) return 1;
    return 0;
}

const char *eng_blas_corename(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

int eng_blas_is_generic(void) {
    return name_in(eng_blas_corename(), generic_cores, HPO_ARRAY_LEN(generic_cores));
}

int eng_blas_core_level(const char *core) {
    if (!core) return 0;
    if (name_in(core, avx512_cores, HPO_ARRAY_LEN(avx512_cores))) return 2;
    if (name_in(core, avx2_cores, HPO_ARRAY_LEN(avx2_cores))) return 1;
    return 0;
}

const char *eng_blas_preferred_core(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

int eng_blas_core_underuses_cpu(void) {
    const char *pref = eng_blas_preferred_core();
    return pref && eng_blas_core_level(eng_blas_corename()) < eng_blas_core_level(pref);
}

static void set_default(const char *name, const char *value) {
    if (!getenv(name)) setenv(name, value, 1);
}

void eng_blas_select(int argc, char **argv) {
    const char *mode = getenv("HPO_BLAS_SELECT");
    if (mode && strcmp(mode, "0") == 0) return;
    int force = mode && strcmp(mode, "force") == 0; /* tests: re-exec even if not needed */
    if (getenv("HPO_BLAS_REEXEC")) {
        /* We already re-executed once: never loop. */
        if (eng_blas_core_underuses_cpu())
            HPO_WARN("blas: OpenBLAS kernel is still %s after re-exec", eng_blas_corename());
        return;
    }
    /* A kernel weaker than the CPU, whether OpenBLAS guessed it or the
     * environment's OPENBLAS_CORETYPE named it, is replaced; HPO_BLAS_SELECT=0
     * keeps the environment's choice. */
    const char *core = NULL;
    if (eng_blas_core_underuses_cpu() || (force && !getenv("OPENBLAS_CORETYPE")))
        core = eng_blas_preferred_core();
    if (core && getenv("OPENBLAS_CORETYPE"))
        HPO_INFO("blas: OPENBLAS_CORETYPE=%s leaves this CPU's widest vectors unused; using %s "
                 "(HPO_BLAS_SELECT=0 keeps it)",
                 getenv("OPENBLAS_CORETYPE"), core);
    int need_omp = !getenv("OMP_WAIT_POLICY");
    if (!core && !need_omp && !force) return;
    if (argc < 1 || !argv || !argv[0]) {
        HPO_WARN("blas: no argv to re-exec with; OpenBLAS kernel %s", eng_blas_corename());
        return;
    }
    const char *was = eng_blas_corename();
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("HPO_BLAS_REEXEC", "1", 1);
    set_default("OPENBLAS_NUM_THREADS", "1");
    set_default("OMP_WAIT_POLICY", "PASSIVE");
    HPO_DEBUG("blas: re-executing with OPENBLAS_CORETYPE=%s (was %s), OMP_WAIT_POLICY=%s",
              core ? core : "(unchanged)", was, getenv("OMP_WAIT_POLICY"));
    fflush(stdout);
    fflush(stderr);
    execv("/proc/self/exe", argv);
    int e = errno;
    HPO_WARN("blas: re-exec failed (%s); continuing with OpenBLAS kernel %s", strerror(e), was);
    /* keep the environment consistent with what is really running */
    if (core) unsetenv("OPENBLAS_CORETYPE");
    unsetenv("HPO_BLAS_REEXEC");
}
