/*
 * regret_bbob.h - bench_tuner_regret --suite bbob: hpo's tuners beside
 * Optuna 3.1's TPE, CmaEsSampler and RandomSampler on the 24 noiseless BBOB
 * functions (lib/bbob.h) in several dimensions, and the checks of those
 * functions.
 *
 *   bench_tuner_regret --suite bbob [--dims 2,5,10] [--seeds 5]
 *       [--budgets 25,50,100] [--algos random,tpe,bayesian,cmaes,evolution]
 *       [--functions 1,2,..,24] [--startup N] [--no-optuna] [--csv FILE]
 *       [--variant noiseless|noisy-gauss|noisy-uniform|noisy-cauchy|mixed]
 *       [--tpe-max-components N]  (tpe's bound on the components of a side
 *                                  of its split; -1: exact, every trial)
 *       [--seed0 S]      (runs seeds S..S+N-1, instances S+1..S+N: the tuning
 *                         seeds, 100.., apart from the reported 0..N-1)
 *       [--tuner JSON]   (a "tuner" object the runs start from, e.g.
 *                         '{"n_startup_trials": 5}': a default under trial)
 *       [--peer-jobs N]  (processes running Optuna's studies, default 1:
 *                         for many seeds of a cheap hpo tuner such as tpe)
 *       [--peer-csv FILE] (the peer's regrets from an earlier run's --csv
 *                         instead of running it: for tuning loops only; a
 *                         reported table runs the peer in the same run)
 *   bench_tuner_regret --suite bbob --selftest     (the functions' checks)
 *   bench_tuner_regret --suite bbob --check-peer   (C and the ctypes peer agree)
 *
 * Design notes
 * - Seed s (0..N-1) runs instance s+1 of every function, on both sides, and
 *   is the seed of the tuner or sampler; one run of max(budgets) trials
 *   gives every budget as a prefix of best-so-far.
 * - Optuna runs in the background (peers/optuna_bbob.py, which loads the
 *   same libhpo_bbob.so with ctypes) while hpo's tuners run here; its
 *   per-seed regrets come back in a CSV.
 * - Variants (bbob.h): noisy-* tell the tuners values under one of the
 *   testbed's severe noise models, and the regret of a run after k trials is
 *   the NOISELESS value of the configuration with the best told value (what
 *   the run would recommend) minus f_opt. `mixed` searches the mixed space
 *   of bench_mixed_coord (int, log float, numeric choice, and a mode choice
 *   with a conditional float or stepped int under it) instead of the box;
 *   its regret is still against f_opt, which that space may not reach, so
 *   only the ratio between the two sides means anything there.
 * - Ratios are of median simple regrets, hpo / peer, both floored at 1e-8
 *   (COCO's final target precision), so two solved runs compare as 1.
 * - Regrets are heavy-tailed (several decades between seeds), so the median
 *   of 40 seeds moves by up to 2x between two runs of one sampler. Every
 *   cell beyond 1.5x is printed with its paired-bootstrap 90% interval, and
 *   the summary counts those whose whole interval is beyond 1.5x: beyond
 *   it by more than the seeds' noise. Up to 256 seeds.
 * - The functions are split into two fixed halves, odd ids and even ids
 *   (each half holds functions of all five BBOB groups): tuning of hpo's
 *   defaults is to look at the odd half only, the even half is the held-out
 *   report; the summary prints all, odd and even separately.
 */
#ifndef HPO_BENCH_REGRET_BBOB_H
#define HPO_BENCH_REGRET_BBOB_H

int regret_bbob_main(int argc, char **argv);

#endif
