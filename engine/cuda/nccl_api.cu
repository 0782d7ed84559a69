/* nccl_api.cu - the all-reduce of data-parallel replicas on several GPUs
 * (cuda_ops.h, eng_cuda_comm): NCCL, loaded with dlopen at the first
 * group opened (as cuBLASLt is, lt_api.cu: a process that never spans GPUs
 * never maps it), one communicator per device from ncclCommInitAll (one
 * process drives them all), and the replicas' in-place sums grouped
 * (ncclGroupStart/End) so one host thread can enqueue them on every
 * context's stream. Finalize and abort are intra-node collectives, grouped
 * for the same reason (NCCL's docs: one thread over several ranks must
 * group them, or the first call waits for the others); destroy is then
 * local. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_internal.h"

#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)
#define NCCL_SONAME "libnccl.so." CU_STR(NCCL_MAJOR)

typedef struct nccl_api {
    decltype(&ncclCommInitAll) CommInitAll;
    decltype(&ncclCommFinalize) CommFinalize;
    decltype(&ncclCommDestroy) CommDestroy;
    decltype(&ncclCommAbort) CommAbort;
    decltype(&ncclAllReduce) AllReduce;
    decltype(&ncclGroupStart) GroupStart;
    decltype(&ncclGroupEnd) GroupEnd;
    decltype(&ncclGetErrorString) GetErrorString;
} nccl_api;

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static nccl_api nccl_table;
static int nccl_loaded;
static char nccl_why[256];

static void nccl_load(void) {
    void *lib = cu_dlopen(NCCL_SONAME, nccl_why, sizeof nccl_why);
    if (!lib) return;
    nccl_api t;
#define NCCL_SYM(member)                                                                                   \
    if (!(*(void **)&t.member = dlsym(lib, "nccl" #member))) {                                            \
        snprintf(nccl_why, sizeof nccl_why, "%s has no nccl%s (an older NCCL than the headers)", NCCL_SONAME, \
                 #member);                                                                                 \
        return;                                                                                            \
    }
    NCCL_SYM(CommInitAll);
    NCCL_SYM(CommFinalize);
    NCCL_SYM(CommDestroy);
    NCCL_SYM(CommAbort);
    NCCL_SYM(AllReduce);
    NCCL_SYM(GroupStart);
    NCCL_SYM(GroupEnd);
    NCCL_SYM(GetErrorString);
#undef NCCL_SYM
    nccl_table = t; /* loaded for the life of the process */
    nccl_loaded = 1;
}

struct eng_cuda_comm {
    int n;
    ncclComm_t comms[ENG_CUDA_MAX_REPLICAS];
};

extern "C" int eng_cuda_comm_open(eng_cuda *const *cus, int n, eng_cuda_comm **out, hpo_error *err) {
    if (n < 2 || n > ENG_CUDA_MAX_REPLICAS)
        return hpo_fail(err, HPO_EINVAL, "devices", "an all-reduce group spans 2 to %d GPUs, not %d",
                        ENG_CUDA_MAX_REPLICAS, n);
    int devs[ENG_CUDA_MAX_REPLICAS];
    for (int k = 0; k < n; k++) {
        devs[k] = cus[k]->device;
        for (int j = 0; j < k; j++)
            if (devs[j] == devs[k])
                return hpo_fail(err, HPO_EINVAL, "devices", "cuda:%d twice in an all-reduce group (NCCL needs one "
                                "rank per GPU)", devs[k]);
    }
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_loaded) return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "%s", nccl_why);
    eng_cuda_comm *c = (eng_cuda_comm *)calloc(1, sizeof *c);
    if (!c) return hpo_fail(err, HPO_ENOMEM, "devices", "out of memory");
    ncclResult_t r = nccl_table.CommInitAll(c->comms, n, devs);
    if (r != ncclSuccess) {
        free(c);
        return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "ncclCommInitAll over %d GPUs: %s", n,
                        nccl_table.GetErrorString(r));
    }
    c->n = n;
    *out = c;
    return 0;
}

extern "C" void eng_cuda_comm_free(eng_cuda_comm *c) {
    if (!c) return;
    nccl_table.GroupStart();
    for (int k = 0; k < c->n; k++) nccl_table.CommFinalize(c->comms[k]); /* flushes what is in flight */
    nccl_table.GroupEnd();
    for (int k = 0; k < c->n; k++) nccl_table.CommDestroy(c->comms[k]);
    free(c);
}

extern "C" void eng_cuda_comm_abort(eng_cuda_comm *c) {
    if (!c) return;
    nccl_table.GroupStart();
    for (int k = 0; k < c->n; k++) nccl_table.CommAbort(c->comms[k]);
    nccl_table.GroupEnd();
    free(c);
}

extern "C" int eng_cuda_allreduce_sum(eng_cuda_comm *c, eng_cuda *const *cus, float *const *bufs, size_t n) {
    for (int k = 0; k < c->n; k++) CU_READY(cus[k]);
    ncclResult_t r = nccl_table.GroupStart();
    for (int k = 0; k < c->n && r == ncclSuccess; k++)
        r = nccl_table.AllReduce(bufs[k], bufs[k], n, ncclFloat32, ncclSum, c->comms[k], cus[k]->stream);
    ncclResult_t r2 = nccl_table.GroupEnd();
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) return cu_fail(cus[0], HPO_EINTERNAL, "ncclAllReduce: %s", nccl_table.GetErrorString(r));
    return 0;
}
