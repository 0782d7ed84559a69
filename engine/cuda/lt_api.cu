/* lt_api.cu - cuBLASLt, loaded with dlopen at the first use (see
 * cuda_internal.h, cu_lt), and the loader the other dlopen'd CUDA libraries
 * share (cu_dlopen: NCCL, nccl_api.cu). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_internal.h"

#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)
/* The soname of the cuBLASLt the headers belong to: libcublasLt.so.13. */
#define CU_LT_SONAME "libcublasLt.so." CU_STR(CUBLAS_VER_MAJOR)

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static cu_lt_api lt_table;
static int lt_loaded;
static char lt_why[256];

/* dlsym of name into *slot; 0, or -1 with lt_why set. */
static int lt_sym(void *lib, const char *name, void **slot) {
    *slot = dlsym(lib, name);
    if (*slot) return 0;
    snprintf(lt_why, sizeof lt_why, "%s has no %s (an older cuBLASLt than the headers)", CU_LT_SONAME, name);
    return -1;
}

void *cu_dlopen(const char *soname, char *why, size_t why_size) {
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
#ifdef HPO_CUDA_LIBDIR
    if (!lib) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", HPO_CUDA_LIBDIR, soname);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, why_size, "cannot load %s: %s", soname, e ? e : "not found");
    }
    return lib;
}

static void lt_load(void) {
    void *lib = cu_dlopen(CU_LT_SONAME, lt_why, sizeof lt_why);
    if (!lib) return;
    cu_lt_api t;
#define LT_SYM(member) \
    if (lt_sym(lib, "cublasLt" #member, (void **)&t.member)) return
    LT_SYM(Create);
    LT_SYM(Destroy);
    LT_SYM(GetStatusString);
    LT_SYM(Matmul);
    LT_SYM(MatmulAlgoGetHeuristic);
    LT_SYM(MatmulDescCreate);
    LT_SYM(MatmulDescDestroy);
    LT_SYM(MatmulDescSetAttribute);
    LT_SYM(MatmulPreferenceCreate);
    LT_SYM(MatmulPreferenceDestroy);
    LT_SYM(MatmulPreferenceSetAttribute);
    LT_SYM(MatrixLayoutCreate);
    LT_SYM(MatrixLayoutDestroy);
#undef LT_SYM
    lt_table = t; /* the library stays loaded for the life of the process */
    lt_loaded = 1;
}

const cu_lt_api *cu_lt(const char **why) {
    pthread_once(&lt_once, lt_load);
    if (why) *why = lt_loaded ? NULL : lt_why;
    return lt_loaded ? &lt_table : NULL;
}

extern "C" int eng_cuda_blas_load(hpo_error *err) {
    const char *why;
    if (cu_lt(&why)) return 0;
    return hpo_fail(err, HPO_EUNSUPPORTED, "devices", "%s", why);
}
