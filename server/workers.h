/*
 * workers.h - the worker pool: one thread per device slot, each running one
 * job (a trial, a refit, a model, an ensemble: api/jobs.h) at a time with
 * the slot's BLAS thread count.
 *
 * Design notes
 * - Slots come from --devices: "cpu:2" is two CPU slots of one BLAS thread
 *   each, "cpu:1x2" one slot of two threads; several groups are separated by
 *   commas ("cpu:2,cuda:0x1" once a CUDA backend exists). Slot names are
 *   "cpu:0", "cpu:1", ... and are recorded on the trials they run.
 * - Only the scheduler thread dispatches and stops jobs; a worker thread
 *   runs api_jobs_run and, when it returns, marks its slot idle and calls
 *   on_done (which wakes the scheduler's loop). The stop flag (an
 *   atomic_int) is the one word both sides touch while a job runs: the
 *   scheduler writes it, the job reads it between epochs.
 * - The slots on one GPU share its memory: srv_workers_new tells the engine
 *   how many there are (eng_train_cuda_set_slots), and a trial whose
 *   device memory does not fit its share fails with the reason before it
 *   starts (train.h, eng_train_cuda_check_budget).
 * - A GPU lost for the process (a device fault: engine/gpu.h,
 *   eng_gpu_lost) retires its slots: the trial that met the fault fails
 *   with the reason, those running beside it on that GPU fail as their
 *   next call does, and the scheduler hands that GPU's slots nothing more
 *   (one error line in the log each; /metrics' hpo_gpu_lost); the other
 *   slots go on.
 * - srv_workers_free asks every running trial to stop (API_STOP_SHUTDOWN:
 *   it is requeued and resumes from its checkpoint after a restart) and
 *   joins the threads.
 */
#ifndef HPO_SERVER_WORKERS_H
#define HPO_SERVER_WORKERS_H

#include "jobs.h"

enum { SRV_SLOT_CPU = 0, SRV_SLOT_CUDA = 1 };
#define SRV_SLOT_MAX_GPUS 8
typedef struct srv_slot {
    char name[32]; /* "cpu:0"; "cuda:0/1" (GPU 0, its slot 1); "cuda:0+1/0" (spans GPUs 0 and 1) */
    int threads;   /* BLAS/oneDNN threads of the slot (CPU) */
    int kind;      /* SRV_SLOT_CPU or SRV_SLOT_CUDA */
    int gpus[SRV_SLOT_MAX_GPUS]; /* CUDA: the devices it spans; gpus[0] == -1: "all" (srv_devices_resolve) */
    int n_gpus;
} srv_slot;

/* Parses a --devices value into slots (*slots malloc'd): comma-separated
 * groups "cpu:N" / "cpu:NxT" (N slots of T BLAS threads), "cuda:G" / "cuda:GxK"
 * (K slots on GPU G, default 1), "cuda:G+H[xK]" (slots spanning GPUs G and
 * H: data parallel), "cuda:all[xK]" (K slots on every GPU, resolved by
 * srv_devices_resolve). A slot named twice ("cuda:0,cuda:0") is
 * HPO_EINVAL: slots are told apart by name. */
int srv_devices_parse(const char *spec, srv_slot **slots, int *n, hpo_error *err);

/* Checks the CUDA slots against the machine's GPUs (engine/gpu.h) and
 * expands "cuda:all"; *slots may be reallocated. HPO_EUNSUPPORTED "no CUDA
 * device: ..." on a machine without one, HPO_EINVAL naming a GPU that is
 * not there. A no-op for CPU-only layouts. */
int srv_devices_resolve(srv_slot **slots, int *n, hpo_error *err);

/* How many of the slots train on GPU g at once (a slot spanning several
 * GPUs counts on each): the share of its memory each gets
 * (eng_train_cuda_set_slots, which srv_workers_new sets for every GPU). */
int srv_devices_gpu_slots(const srv_slot *slots, int n, int g);

/* The default memory budget of one model (--max-model-bytes): half the
 * machine's memory (or its cgroup limit) shared by the n slots, so that all
 * of them training a model at the budget at once leave the other half to
 * datasets, the database and the system; at most 4 GiB (a model beyond that
 * is asked for with the flag), at least 64 MiB. */
uint64_t srv_default_model_budget(int n_slots);

typedef struct srv_workers srv_workers;

int srv_workers_new(api_ctx *api, const srv_slot *slots, int n, void (*on_done)(void *arg), void *arg,
                    srv_workers **out);
void srv_workers_free(srv_workers *w);
int srv_workers_count(const srv_workers *w);
/* The first idle slot at or after from, or -1. A CUDA slot whose GPU this
 * process has lost (engine/gpu.h: eng_gpu_lost) is never idle again. Only
 * the scheduler thread calls it. */
int srv_workers_idle(srv_workers *w, int from);
const char *srv_workers_slot_name(const srv_workers *w, int slot);
/* Starts job on an idle slot. */
void srv_workers_dispatch(srv_workers *w, int slot, const api_job *job);
/* 1 and the job and its start time (monotonic) if the slot is busy. */
int srv_workers_job(const srv_workers *w, int slot, api_job *job, double *started);
/* Asks the slot's running trial to stop (API_STOP_*); the first reason wins. */
void srv_workers_stop(srv_workers *w, int slot, int reason);

#endif
