/*
 * blas_select.h - make OpenBLAS use the right kernels on this CPU.
 *
 * Design notes
 * - Debian 12's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not recognise newer Xeons
 *   (family 6 model 207, Sapphire/Emerald Rapids) and silently falls back to
 *   its Prescott (SSE3) kernels: 14 GFLOP/s instead of ~120 with SkylakeX.
 *   OpenBLAS picks its kernel from OPENBLAS_CORETYPE when the library is
 *   loaded, before main(), so setting the variable inside main() is too late.
 *   eng_blas_select() therefore re-executes the program once:
 *     if OPENBLAS_CORETYPE is unset, the env marker HPO_BLAS_REEXEC is unset,
 *     openblas_get_corename() names a generic kernel (Prescott, Core2,
 *     Penryn, Dunnington, Nehalem, Atom, Katmai, Coppermine, Northwood,
 *     Banias, unknown) and the CPU supports AVX-512 (-> "SkylakeX") or AVX2
 *     (-> "Haswell"), it sets OPENBLAS_CORETYPE, HPO_BLAS_REEXEC=1 and, when
 *     unset, OPENBLAS_NUM_THREADS=1 (workers choose their own count with
 *     openblas_set_num_threads) and OMP_WAIT_POLICY=PASSIVE (spin-waiting
 *     OpenMP threads of oneDNN fight OpenBLAS on a 2-core machine: 2x in
 *     baselines.md), then execv("/proc/self/exe", argv).
 *   If execv fails the process continues on the slow kernel with a warning.
 *   HPO_BLAS_SELECT=0 in the environment disables the whole mechanism.
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
/* The kernel eng_blas_select would choose for this CPU ("SkylakeX",
 * "Haswell") or NULL when it would leave OpenBLAS alone. */
const char *eng_blas_preferred_core(void);

#endif
