/*
 * cuda_emulated.h - what a test may ask of the emulated device
 * (cuda_emulated.c) beyond cuda_ops.h: the faults a GPU run meets on a
 * device, on cue, so that the host side's handling of them runs on any
 * machine. Each cue acts once armed, from any thread; a test arms it just
 * before the run it concerns.
 */
#ifndef HPO_CUDA_EMULATED_H
#define HPO_CUDA_EMULATED_H

/* The wait-th wait from now (1-based; eng_cuda_sync, and so every upload
 * or download) of a context on GPU `device` that belongs to an all-reduce
 * group fails that context, sticky, as a kernel fault (an illegal address)
 * shows on a device at the next wait after it. */
void emu_cuda_fault_in_group(int device, int wait);

/* From the n-th gradient norm on (eng_cuda_grad_norm and
 * eng_cuda_grad_unscale_norm, counted from this call, at the kernel's run)
 * on GPU `device`, the gradients hold a NaN, as after an overflow; n <= 0
 * turns the cue off. */
void emu_cuda_nan_gradients_from(int device, long n);

#endif
