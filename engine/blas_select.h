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
 *   (execv("/proc/self/exe", argv)) when either
 *   a) the kernel in use leaves the CPU's widest vectors unused: the CPU has
 *      AVX-512 (-> OPENBLAS_CORETYPE=SkylakeX) and the kernel is not one of
 *      SkylakeX, Cooperlake, SapphireRapids; or the CPU has AVX2+FMA
 *      (-> Haswell) and the kernel is a generic one (Prescott, Core2, Penryn,
 *      Dunnington, Nehalem, Atom, Katmai, Coppermine, Northwood, Banias,
 *      Generic, unknown, Opteron, Barcelona) or another without AVX2. This
 *      covers OpenBLAS's own misdetection and an environment that names a
 *      weaker kernel: some machines of this project's kind (AMD Zen 5) run
 *      with OPENBLAS_CORETYPE=Haswell set for every process, which halves
 *      sgemm (122 against 229 GFLOP/s on one thread, tests/bench/engine).
 *      Upstream OpenBLAS (0.3.22+) likewise runs Zen 4/5 on its AVX-512
 *      kernels. HPO_BLAS_SELECT=0 keeps whatever the environment chose; or
 *   b) OMP_WAIT_POLICY is unset: libgomp also reads it at load time, and
 *      spin-waiting OpenMP threads (oneDNN) fight OpenBLAS's threads on a
 *      2-core machine (2x slower in baselines.md), so it becomes PASSIVE.
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
/* 1 if the current OpenBLAS kernel is one of the generic fallbacks above. */
int eng_blas_is_generic(void);
/* 2 for OpenBLAS kernels built on AVX-512, 1 for AVX2 ones, 0 otherwise
 * (case-insensitive core names, NULL gives 0). */
int eng_blas_core_level(const char *core);
/* 1 if the kernel in use is of a lower level than eng_blas_preferred_core(). */
int eng_blas_core_underuses_cpu(void);
/* The kernel eng_blas_select would choose for this CPU ("SkylakeX",
 * "Haswell") or NULL when it would leave OpenBLAS alone. */
const char *eng_blas_preferred_core(void);

#endif
