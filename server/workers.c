/* workers.c - the worker pool (see workers.h). */
#include "workers.h"

#include "gpu.h"
#include "train.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"

typedef struct worker {
    srv_workers *pool;
    int index;
    srv_slot slot;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int busy, quit;
    api_job job;
    double started;
    atomic_int stop; /* API_STOP_*: written by the scheduler thread, read by the job */
    int retired;     /* a GPU of the slot is lost (eng_gpu_lost): no more jobs; the scheduler's */
} worker;

struct srv_workers {
    api_ctx *api;
    worker *w;
    int n;
    void (*on_done)(void *arg);
    void *arg;
};

/* The machine's memory: physical, or the cgroup's limit when lower (a
 * container), v2 or v1. */
static uint64_t machine_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_C(8) << 30;
    static const char *limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        FILE *f = fopen(limits[i], "r");
        unsigned long long v;
        if (!f) continue;
        if (fscanf(f, "%llu", &v) == 1 && v > 0 && v < mem) mem = v; /* "max": no limit */
        fclose(f);
    }
    return mem;
}

uint64_t srv_default_model_budget(int n_slots) {
    uint64_t b = machine_memory() / 2 / (uint64_t)(n_slots > 0 ? n_slots : 1);
    uint64_t lo = UINT64_C(64) << 20, hi = UINT64_C(4) << 30;
    return b < lo ? lo : b > hi ? hi : b;
}

/* "cpu:N" or "cpu:NxT" appended to *out. */
static int parse_cpu(const char *tok, srv_slot **out, int *count, hpo_error *err) {
    int slots_n = 0, threads = 1, used = 0;
    if (sscanf(tok + 4, "%d%n", &slots_n, &used) != 1 ||
        (tok[4 + used] == 'x' ? sscanf(tok + 5 + used, "%d", &threads) != 1 : tok[4 + used] != '\0') ||
        slots_n < 1 || slots_n > 256 || threads < 1 || threads > 256)
        return hpo_fail(err, HPO_EINVAL, "devices",
                        "--devices: '%s' must be cpu:N (N slots of 1 thread) or cpu:NxT (N slots of T threads)", tok);
    *out = hpo_xrealloc(*out, (size_t)(*count + slots_n) * sizeof **out);
    for (int i = 0; i < slots_n; i++) {
        srv_slot *sl = &(*out)[*count];
        memset(sl, 0, sizeof *sl);
        snprintf(sl->name, sizeof sl->name, "cpu:%d", *count);
        sl->threads = threads;
        sl->kind = SRV_SLOT_CPU;
        (*count)++;
    }
    return 0;
}

/* "cuda:G[+H...][xK]" or "cuda:all[xK]" appended to *out. */
static int parse_cuda(const char *tok, srv_slot **out, int *count, hpo_error *err) {
    srv_slot proto;
    memset(&proto, 0, sizeof proto);
    proto.kind = SRV_SLOT_CUDA;
    proto.threads = 1;
    const char *p = tok + 5;
    int per_gpu = 1, used = 0;
    if (strncmp(p, "all", 3) == 0) {
        proto.gpus[proto.n_gpus++] = -1;
        p += 3;
    } else {
        for (;;) {
            int g;
            if (sscanf(p, "%d%n", &g, &used) != 1 || g < 0 || g > 63 || proto.n_gpus == SRV_SLOT_MAX_GPUS) goto bad;
            for (int i = 0; i < proto.n_gpus; i++)
                if (proto.gpus[i] == g) goto bad;
            proto.gpus[proto.n_gpus++] = g;
            p += used;
            if (*p != '+') break;
            p++;
        }
    }
    if (*p == 'x') {
        if (sscanf(p + 1, "%d%n", &per_gpu, &used) != 1 || p[1 + used] != '\0' || per_gpu < 1 || per_gpu > 64)
            goto bad;
    } else if (*p != '\0') {
        goto bad;
    }
    *out = hpo_xrealloc(*out, (size_t)(*count + per_gpu) * sizeof **out);
    for (int k = 0; k < per_gpu; k++) {
        srv_slot *sl = &(*out)[*count];
        *sl = proto;
        /* at most "cuda:" + 8 two-digit GPUs joined by '+' + "/63": 31 bytes */
        size_t len = (size_t)snprintf(sl->name, sizeof sl->name, "cuda:");
        for (int i = 0; i < proto.n_gpus && len < sizeof sl->name; i++)
            len += (size_t)snprintf(sl->name + len, sizeof sl->name - len, proto.gpus[i] < 0 ? "%sall" : "%s%d",
                                    i ? "+" : "", proto.gpus[i]);
        if (len < sizeof sl->name) snprintf(sl->name + len, sizeof sl->name - len, "/%d", k);
        (*count)++;
    }
    return 0;
bad:
    return hpo_fail(err, HPO_EINVAL, "devices",
                    "--devices: '%s' must be cuda:G (a slot on GPU G), cuda:GxK (K slots on GPU G), cuda:G+H[xK] "
                    "(slots spanning GPUs G and H) or cuda:all[xK]", tok);
}

/* 0, or HPO_EINVAL naming the first slot named twice ("cuda:0,cuda:0",
 * "cuda:all,cuda:1"): slots are told apart by name (the trials' slot,
 * /metrics) */
static int names_unique(const srv_slot *s, int n, hpo_error *err) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(s[i].name, s[j].name) == 0)
                return hpo_fail(err, HPO_EINVAL, "devices",
                                "--devices names slot %s twice (K slots on GPU G: cuda:GxK)", s[i].name);
    return 0;
}

int srv_devices_parse(const char *spec, srv_slot **slots, int *n, hpo_error *err) {
    srv_slot *out = NULL;
    int count = 0;
    char *copy = hpo_strdup(spec), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        if (strncmp(tok, "cpu:", 4) == 0)
            rc = parse_cpu(tok, &out, &count, err);
        else if (strncmp(tok, "cuda:", 5) == 0)
            rc = parse_cuda(tok, &out, &count, err);
        else
            rc = hpo_fail(err, HPO_EINVAL, "devices", "--devices: '%s' is not cpu:N[xT] or cuda:G[xK]", tok);
    }
    if (rc == 0 && count == 0) rc = hpo_fail(err, HPO_EINVAL, "devices", "--devices names no slot");
    if (rc == 0) rc = names_unique(out, count, err);
    free(copy);
    if (rc) {
        free(out);
        return rc;
    }
    *slots = out;
    *n = count;
    return 0;
}

int srv_devices_resolve(srv_slot **slots, int *n, hpo_error *err) {
    int n_cuda = 0;
    for (int i = 0; i < *n; i++) n_cuda += (*slots)[i].kind == SRV_SLOT_CUDA;
    if (n_cuda == 0) return 0;
    int n_gpus = 0;
    int rc = eng_gpu_count(&n_gpus, err);
    if (rc) return rc;
    for (int i = 0; i < *n; i++) {
        srv_slot *sl = &(*slots)[i];
        for (int g = 0; sl->kind == SRV_SLOT_CUDA && g < sl->n_gpus; g++)
            if (sl->gpus[g] >= n_gpus)
                return hpo_fail(err, HPO_EINVAL, "devices", "--devices: slot %s names GPU %d; this machine has %d",
                                sl->name, sl->gpus[g], n_gpus);
    }
    /* cuda:all[xK]: the same slots on every GPU */
    srv_slot *out = NULL;
    int count = 0;
    for (int i = 0; i < *n; i++) {
        srv_slot sl = (*slots)[i];
        int all = sl.kind == SRV_SLOT_CUDA && sl.gpus[0] < 0;
        out = hpo_xrealloc(out, (size_t)(count + (all ? n_gpus : 1)) * sizeof *out);
        if (!all) {
            out[count++] = sl;
            continue;
        }
        int k = atoi(strrchr(sl.name, '/') + 1);
        for (int g = 0; g < n_gpus; g++) {
            srv_slot *o = &out[count++];
            *o = sl;
            o->gpus[0] = g;
            snprintf(o->name, sizeof o->name, "cuda:%d/%d", g, k);
        }
    }
    if ((rc = names_unique(out, count, err))) {
        free(out);
        return rc;
    }
    free(*slots);
    *slots = out;
    *n = count;
    return 0;
}

int srv_devices_gpu_slots(const srv_slot *slots, int n, int g) {
    int count = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; slots[i].kind == SRV_SLOT_CUDA && k < slots[i].n_gpus; k++) count += slots[i].gpus[k] == g;
    return count;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cond, &w->mu);
        if (w->quit && !w->busy) break;
        api_job job = w->job;
        pthread_mutex_unlock(&w->mu);
        api_metrics_slot_busy(w->pool->api, w->slot.name, 1); /* hpo_slot_busy_seconds_total */
        api_jobs_run(w->pool->api, &job, w->slot.name, w->slot.threads, &w->stop);
        api_metrics_slot_busy(w->pool->api, w->slot.name, 0);
        pthread_mutex_lock(&w->mu);
        w->busy = 0;
        pthread_mutex_unlock(&w->mu);
        w->pool->on_done(w->pool->arg);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int srv_workers_new(api_ctx *api, const srv_slot *slots, int n, void (*on_done)(void *arg), void *arg,
                    srv_workers **out) {
    srv_workers *p = hpo_xcalloc(1, sizeof *p);
    p->api = api;
    p->on_done = on_done;
    p->arg = arg;
    p->w = hpo_xcalloc((size_t)n, sizeof *p->w);
    const char **names = hpo_xcalloc((size_t)n + 1, sizeof *names);
    for (int i = 0; i < n; i++) names[i] = slots[i].name;
    api_metrics_slots(api, names, (size_t)n); /* before any job runs */
    free(names);
    for (int i = 0; i < n; i++) /* each GPU's memory is shared by its slots */
        for (int k = 0; slots[i].kind == SRV_SLOT_CUDA && k < slots[i].n_gpus; k++)
            if (slots[i].gpus[k] >= 0) eng_train_cuda_set_slots(slots[i].gpus[k], srv_devices_gpu_slots(slots, n, slots[i].gpus[k]));
    for (int i = 0; i < n; i++) {
        worker *w = &p->w[i];
        w->pool = p;
        w->index = i;
        w->slot = slots[i];
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cond, NULL);
        if (pthread_create(&w->thread, NULL, worker_main, w)) {
            HPO_ERROR("cannot start worker thread %d", i);
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cond);
            p->n = i;
            srv_workers_free(p);
            return HPO_EIO;
        }
        p->n = i + 1;
    }
    *out = p;
    return 0;
}

void srv_workers_free(srv_workers *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        worker *w = &p->w[i];
        pthread_mutex_lock(&w->mu);
        if (w->busy && !atomic_load(&w->stop)) atomic_store(&w->stop, API_STOP_SHUTDOWN);
        w->quit = 1;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->mu);
    }
    for (int i = 0; i < p->n; i++) {
        pthread_join(p->w[i].thread, NULL);
        pthread_mutex_destroy(&p->w[i].mu);
        pthread_cond_destroy(&p->w[i].cond);
    }
    free(p->w);
    free(p);
}

int srv_workers_count(const srv_workers *p) { return p->n; }

/* 1 if a GPU of the slot is lost for this process (engine/gpu.h): its
 * every call fails until hpod restarts, so the slot retires, saying so
 * once; the slots on other devices go on */
static int slot_lost(worker *w) {
    if (w->retired) return 1;
    for (int k = 0; w->slot.kind == SRV_SLOT_CUDA && k < w->slot.n_gpus; k++)
        if (eng_gpu_lost(w->slot.gpus[k])) {
            HPO_ERROR("slot %s takes no more jobs: this process lost its context on GPU %d (an error the CUDA "
                      "runtime does not recover from; the trial that met it failed with the reason); restart "
                      "hpod to use the GPU again",
                      w->slot.name, w->slot.gpus[k]);
            w->retired = 1;
            return 1;
        }
    return 0;
}

int srv_workers_idle(srv_workers *p, int from) {
    for (int i = from < 0 ? 0 : from; i < p->n; i++) {
        worker *w = &p->w[i];
        if (slot_lost(w)) continue;
        pthread_mutex_lock(&w->mu);
        int busy = w->busy;
        pthread_mutex_unlock(&w->mu);
        if (!busy) return i;
    }
    return -1;
}

const char *srv_workers_slot_name(const srv_workers *p, int slot) { return p->w[slot].slot.name; }

void srv_workers_dispatch(srv_workers *p, int slot, const api_job *job) {
    worker *w = &p->w[slot];
    pthread_mutex_lock(&w->mu);
    w->job = *job;
    atomic_store(&w->stop, API_STOP_NONE);
    w->started = hpo_monotonic();
    w->busy = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

int srv_workers_job(const srv_workers *p, int slot, api_job *job, double *started) {
    worker *w = &p->w[slot];
    pthread_mutex_lock(&w->mu);
    int busy = w->busy;
    if (busy) {
        *job = w->job;
        *started = w->started;
    }
    pthread_mutex_unlock(&w->mu);
    return busy;
}

void srv_workers_stop(srv_workers *p, int slot, int reason) {
    worker *w = &p->w[slot];
    pthread_mutex_lock(&w->mu);
    if (w->busy && !atomic_load(&w->stop)) atomic_store(&w->stop, reason);
    pthread_mutex_unlock(&w->mu);
}
