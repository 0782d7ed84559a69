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

/* Kernels by the widest vector instructions their sgemm uses; the other
 * names (Prescott, Core2, Nehalem, Sandybridge, Generic, unknown, ...: what
 * OpenBLAS falls back to for a CPU it does not know) rank 0. */
static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
static const char *const avx512_bf16_cores[] = {"Cooperlake", "SapphireRapids"};
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

int eng_blas_core_level(const char *core) {
    if (!core) return 0;
    if (name_in(core, avx512_cores, HPO_ARRAY_LEN(avx512_cores))) return 2;
    if (name_in(core, avx2_cores, HPO_ARRAY_LEN(avx2_cores))) return 1;
    return 0;
}

eng_cpu_caps eng_cpu_caps_detect(void) {
    __builtin_cpu_init();
    eng_cpu_caps c = {
        .avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512cd"),
        .avx512_bf16 = __builtin_cpu_supports("avx512bf16") != 0,
        .avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
    };
    return c;
}

static int cpu_level(eng_cpu_caps cpu) { return cpu.avx512 ? 2 : cpu.avx2_fma ? 1 : 0; }

const char *eng_blas_preferred_core(eng_cpu_caps cpu) {
    int level = cpu_level(cpu);
    return level == 2 ? "SkylakeX" : level == 1 ? "Haswell" : NULL;
}

/* Does the kernel run on this CPU (its instructions are all there)? */
static int core_runs_on(const char *core, eng_cpu_caps cpu) {
    if (eng_blas_core_level(core) > cpu_level(cpu)) return 0;
    if (name_in(core, avx512_bf16_cores, HPO_ARRAY_LEN(avx512_bf16_cores)) && !cpu.avx512_bf16) return 0;
    return 1;
}

/* Good enough: runs here and uses the CPU's widest vectors. */
static int core_fits(const char *core, eng_cpu_caps cpu) {
    return core && core_runs_on(core, cpu) && eng_blas_core_level(core) >= cpu_level(cpu);
}

const char *eng_blas_choose_core(eng_cpu_caps cpu, const char *env_core, const char *loaded_core) {
    const char *pref = eng_blas_preferred_core(cpu);
    if (!pref) return NULL; /* no AVX2: any kernel OpenBLAS picks is as good */
    const char *will_load = env_core && *env_core ? env_core : loaded_core;
    if (core_fits(will_load, cpu)) return NULL;
    if (core_fits(loaded_core, cpu)) return loaded_core;
    return pref;
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
        if (eng_blas_choose_core(eng_cpu_caps_detect(), NULL, eng_blas_corename()))
            HPO_WARN("blas: OpenBLAS kernel is still %s after re-exec", eng_blas_corename());
        return;
    }
    /* Decide from what the re-executed process will load: the environment's
     * OPENBLAS_CORETYPE if set (it may have been set after OpenBLAS loaded),
     * else what OpenBLAS detected; HPO_BLAS_SELECT=0 keeps the environment. */
    eng_cpu_caps cpu = eng_cpu_caps_detect();
    const char *env_core = getenv("OPENBLAS_CORETYPE");
    const char *core = eng_blas_choose_core(cpu, env_core, eng_blas_corename());
    if (!core && force && !(env_core && *env_core)) core = eng_blas_preferred_core(cpu);
    if (core && env_core && *env_core && strcasecmp(core, env_core) != 0)
        HPO_INFO("blas: OPENBLAS_CORETYPE=%s leaves this CPU's widest vectors unused or does not run "
                 "here; using %s (HPO_BLAS_SELECT=0 keeps it)",
                 env_core, core);
    int need_omp = !getenv("OMP_WAIT_POLICY");
    if (!core && !need_omp && !force) return;
    if (argc < 1 || !argv || !argv[0]) {
        HPO_WARN("blas: no argv to re-exec with; OpenBLAS kernel %s", eng_blas_corename());
        return;
    }
    const char *was = eng_blas_corename();
    char *env_was = env_core ? hpo_strdup(env_core) : NULL; /* setenv may free it */
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("HPO_BLAS_REEXEC", "1", 1);
    set_default("OPENBLAS_NUM_THREADS", "1");
    set_default("OMP_WAIT_POLICY", "PASSIVE");
    HPO_DEBUG("blas: re-executing with OPENBLAS_CORETYPE=%s (was %s), OMP_WAIT_POLICY=%s",
              core ? core : "(unchanged)", was, getenv("OMP_WAIT_POLICY"));
    fflush(stdout);
    fflush(stderr);
    /* The program's own path, so that ps and pgrep still call it hpod
     * (exec'ing "/proc/self/exe" names the process "exe"). */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    int e = errno;
    HPO_WARN("blas: re-exec failed (%s); continuing with OpenBLAS kernel %s", strerror(e), was);
    /* keep the environment consistent with what is really running */
    if (core && env_was)
        setenv("OPENBLAS_CORETYPE", env_was, 1);
    else if (core)
        unsetenv("OPENBLAS_CORETYPE");
    unsetenv("HPO_BLAS_REEXEC");
    free(env_was);
}
