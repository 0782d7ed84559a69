/*
 * blas_select.h - make OpenBLAS use the right kernels on this CPU.
 *
 * Design notes
 * - Debian 12's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not recognise newer Xeons
 *   (family 6 model 207, Sapphire/Emerald Rapids) and silently falls back to
 *   its Prescott (SSE3) kernels: 14 GFLOP/s instead of ~120 with SkylakeX.
 *   OpenBLAS picks its kernel from OPENBLAS_CORETYPE when the library is
 *   loaded, before main(), so setting the variable inside main() is too late.
 *   eng_blas_select() therefore re-executes the program once
 *   (execv of its own path, read from /proc/self/exe, so ps still shows its
 *   name) when either
 *   a) the kernel the re-executed process would load leaves the CPU's
 *      widest vectors unused, or needs instructions the CPU lacks. What a
 *      process loads is OPENBLAS_CORETYPE when the environment names one,
 *      else OpenBLAS's own detection (the kernel loaded now). Kernels are
 *      ranked by the vectors their sgemm uses: 2 for SkylakeX, Cooperlake,
 *      SapphireRapids (AVX-512; the last two also need AVX512-BF16), 1 for
 *      Haswell, Zen, Excavator (AVX2), 0 for the rest (Prescott and the
 *      other generic fallbacks, Sandybridge, unknown names). The CPU's rank
 *      is 2 with AVX-512 F/BW/VL/DQ/CD, 1 with AVX2+FMA. When the kernel to
 *      be loaded ranks lower (or cannot run here), the re-exec names the
 *      kernel loaded now if that one ranks as the CPU and runs here (so
 *      OpenBLAS's own Cooperlake on an AMD Zen 4 is kept), else SkylakeX or
 *      Haswell. This covers OpenBLAS's misdetection (Sapphire Rapids seen
 *      as Prescott) and an environment that names a weaker kernel: some
 *      machines of this project's kind (AMD Zen 5) run with
 *      OPENBLAS_CORETYPE=Haswell set for every process, which halves sgemm
 *      (122 against 229 GFLOP/s on one thread, tests/bench/engine).
 *      Upstream OpenBLAS (0.3.22+) likewise runs Zen 4/5 on its AVX-512
 *      kernels. The decision is the pure function eng_blas_choose_core(),
 *      tested over tables of (CPU, environment, loaded kernel);
 *      HPO_BLAS_SELECT=0 keeps whatever the environment chose; or
 *   b) OMP_WAIT_POLICY is unset: libgomp also reads it at load time, and
 *      spin-waiting OpenMP threads (oneDNN) fight OpenBLAS's threads on a
 *      2-core machine (PyTorch trains the MLP 2-3x slower on 2 threads
 *      without it: tests/bench/peers/torch_mlp.py), so it becomes PASSIVE.
 *   The re-exec also sets OPENBLAS_NUM_THREADS=1 when unset (a worker sets
 *   its slot's count with openblas_set_num_threads) and the marker
 *   HPO_BLAS_REEXEC=1, which stops any second re-exec. If execv fails the
 *   process continues as it is, with a warning.
 *   HPO_BLAS_SELECT=0 disables the mechanism (debuggers, valgrind);
 *   HPO_BLAS_SELECT=force re-executes even when nothing needs fixing (tests).
 * - Call it first thing in main(), before threads exist and before anything
 *   else has side effects (opened files, printed output): the process image
 *   is replaced. argv must be main()'s argv (NULL-terminated).
 *
 * Threading: call from main() only, single-threaded.
 */
#ifndef ENG_BLAS_SELECT_H
#define ENG_BLAS_SELECT_H

/* See above. Returns only when no re-exec happened (or it failed). */
void eng_blas_select(int argc, char **argv);
/* The OpenBLAS kernel in use ("SkylakeX", "Prescott", ...), for logs. */
const char *eng_blas_corename(void);
/* 2 for OpenBLAS kernels built on AVX-512, 1 for AVX2 ones, 0 otherwise
 * (case-insensitive core names, NULL gives 0). */
int eng_blas_core_level(const char *core);

/* What the kernel choice needs to know of a CPU. */
typedef struct eng_cpu_caps {
    int avx512;      /* AVX-512 F, BW, VL, DQ and CD */
    int avx512_bf16; /* AVX512-BF16 (Cooperlake, Sapphire Rapids, AMD Zen 4/5) */
    int avx2_fma;    /* AVX2 and FMA */
} eng_cpu_caps;
/* This CPU's capabilities (cpuid, through __builtin_cpu_supports). */
eng_cpu_caps eng_cpu_caps_detect(void);
/* The kernel for a CPU when OpenBLAS's own choice will not do: "SkylakeX"
 * with AVX-512, "Haswell" with AVX2+FMA, NULL otherwise. */
const char *eng_blas_preferred_core(eng_cpu_caps cpu);
/* The decision of eng_blas_select, a pure function: the OPENBLAS_CORETYPE a
 * re-executed process must be given, or NULL to leave the environment as it
 * is. env_core: the environment's OPENBLAS_CORETYPE (NULL or "" if unset);
 * loaded_core: the kernel OpenBLAS loaded in this process. The result is
 * one of the two names passed in or a literal, never freed. */
const char *eng_blas_choose_core(eng_cpu_caps cpu, const char *env_core, const char *loaded_core);

#endif
