/* cuda_none.c - cuda_ops.h in a build without the CUDA backend: no context
 * can be opened (eng_gpu_count says why), so no other call can be reached
 * with a context; they answer HPO_EUNSUPPORTED all the same. */
#include "cuda_ops.h"
#include "gpu.h"

int eng_cuda_open(int device, int allow_tf32, eng_cuda **out, hpo_error *err) {
    (void)device, (void)allow_tf32, (void)out;
    int n;
    return eng_gpu_count(&n, err);
}

void eng_cuda_close(eng_cuda *cu) { (void)cu; }
void eng_cuda_set_fp16(eng_cuda *cu, int fp16) { (void)cu, (void)fp16; }

#define NONE(...) (void)cu, __VA_ARGS__; return HPO_EUNSUPPORTED

static int none(hpo_error *err) {
    int n;
    return eng_gpu_count(&n, err);
}

int eng_cuda_blas_load(hpo_error *err) { return none(err); }
int eng_cuda_sync(eng_cuda *cu, hpo_error *err) { (void)cu; return none(err); }
int eng_cuda_alloc(eng_cuda *cu, size_t bytes, void **out, hpo_error *err) {
    (void)cu, (void)bytes, (void)out;
    return none(err);
}
void eng_cuda_free(eng_cuda *cu, void *p) { (void)cu, (void)p; }
int eng_cuda_upload(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    (void)cu, (void)dst, (void)src, (void)bytes;
    return none(err);
}
int eng_cuda_download(eng_cuda *cu, void *dst, const void *src, size_t bytes, hpo_error *err) {
    (void)cu, (void)dst, (void)src, (void)bytes;
    return none(err);
}
int eng_cuda_zero(eng_cuda *cu, void *p, size_t bytes) { NONE((void)p, (void)bytes); }
int eng_cuda_copy(eng_cuda *cu, void *dst, const void *src, size_t bytes) { NONE((void)dst, (void)src, (void)bytes); }
int eng_cuda_gather_x(eng_cuda *cu, const void *x_all, int x_u8, size_t ss, float scale, const uint32_t *idx, int n,
                      float *out, uint16_t *out16) {
    NONE((void)x_all, (void)x_u8, (void)ss, (void)scale, (void)idx, (void)n, (void)out, (void)out16);
}
int eng_cuda_gather_labels(eng_cuda *cu, const int32_t *y_all, const uint32_t *idx, int n, int32_t *out) {
    NONE((void)y_all, (void)idx, (void)n, (void)out);
}
int eng_cuda_gather_targets(eng_cuda *cu, const float *t_all, int K, const uint32_t *idx, int n, float *out) {
    NONE((void)t_all, (void)K, (void)idx, (void)n, (void)out);
}
int eng_cuda_to_h16(eng_cuda *cu, const float *x, uint16_t *y, size_t n) { NONE((void)x, (void)y, (void)n); }
int eng_cuda_round_fp16(eng_cuda *cu, const float *x, float *y, size_t n) { NONE((void)x, (void)y, (void)n); }
int eng_cuda_act_forward(eng_cuda *cu, int act, const float *z, float *y, size_t rows, size_t cols) {
    NONE((void)act, (void)z, (void)y, (void)rows, (void)cols);
}
int eng_cuda_act_backward(eng_cuda *cu, int act, const float *z, const float *y, float *d, size_t rows, size_t cols) {
    NONE((void)act, (void)z, (void)y, (void)d, (void)rows, (void)cols);
}
int eng_cuda_dense_forward(eng_cuda *cu, const float *x, const float *w, const float *b, float *z, float *y, int B,
                           int I, int O, int act) {
    NONE((void)x, (void)w, (void)b, (void)z, (void)y, (void)B, (void)I, (void)O, (void)act);
}
int eng_cuda_dense_backward(eng_cuda *cu, const float *x, const float *w, const float *z, const float *y, float *d,
                            float *dx, float *dw, float *db, int B, int I, int O, int act) {
    NONE((void)x, (void)w, (void)z, (void)y, (void)d, (void)dx, (void)dw, (void)db, (void)B, (void)I, (void)O,
         (void)act);
}
int eng_cuda_dense_forward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *b, float *z,
                                float *y, int B, int I, int O, int act) {
    NONE((void)xb, (void)wb, (void)b, (void)z, (void)y, (void)B, (void)I, (void)O, (void)act);
}
int eng_cuda_dense_backward_h16(eng_cuda *cu, const uint16_t *xb, const uint16_t *wb, const float *z, const float *y,
                                 float *d, uint16_t *d16, float *dx, float *dw, float *db, int B, int I, int O,
                                 int act) {
    NONE((void)xb, (void)wb, (void)z, (void)y, (void)d, (void)d16, (void)dx, (void)dw, (void)db, (void)B, (void)I,
         (void)O, (void)act);
}
int eng_cuda_im2col(eng_cuda *cu, const eng_conv2d_shape *s, const float *x, const uint16_t *x16, float *cols,
                    uint16_t *cols16) {
    NONE((void)s, (void)x, (void)x16, (void)cols, (void)cols16);
}
int eng_cuda_col2im(eng_cuda *cu, const eng_conv2d_shape *s, const float *dcols, float *dx) {
    NONE((void)s, (void)dcols, (void)dx);
}
int eng_cuda_maxpool_forward(eng_cuda *cu, const float *x, float *y, int32_t *arg, int N, int H, int W, int C, int ph,
                             int pw, int sh, int sw, int OH, int OW) {
    NONE((void)x, (void)y, (void)arg, (void)N, (void)H, (void)W, (void)C, (void)ph, (void)pw, (void)sh, (void)sw,
         (void)OH, (void)OW);
}
int eng_cuda_maxpool_backward(eng_cuda *cu, const float *dy, const int32_t *arg, float *dx, int N, int H, int W, int C,
                              int ph, int pw, int sh, int sw, int OH, int OW) {
    NONE((void)dy, (void)arg, (void)dx, (void)N, (void)H, (void)W, (void)C, (void)ph, (void)pw, (void)sh, (void)sw,
         (void)OH, (void)OW);
}
int eng_cuda_augment_forward(eng_cuda *cu, const float *x, float *y, const int32_t *params, int N, int H, int W, int C) {
    NONE((void)x, (void)y, (void)params, (void)N, (void)H, (void)W, (void)C);
}
int eng_cuda_augment_backward(eng_cuda *cu, const float *dy, const int32_t *params, float *dx, int N, int H, int W,
                              int C) {
    NONE((void)dy, (void)params, (void)dx, (void)N, (void)H, (void)W, (void)C);
}
int eng_cuda_gap_forward(eng_cuda *cu, const float *x, float *y, int N, int HW, int C) {
    NONE((void)x, (void)y, (void)N, (void)HW, (void)C);
}
int eng_cuda_gap_backward(eng_cuda *cu, const float *dy, float *dx, int N, int HW, int C) {
    NONE((void)dy, (void)dx, (void)N, (void)HW, (void)C);
}
int eng_cuda_batchnorm_forward_train(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                     float *run_mean, float *run_var, float momentum, float eps, float *xhat,
                                     float *mu, float *invstd, size_t M, int C) {
    NONE((void)x, (void)y, (void)gamma, (void)beta, (void)run_mean, (void)run_var, (void)momentum, (void)eps,
         (void)xhat, (void)mu, (void)invstd, (void)M, (void)C);
}
int eng_cuda_batchnorm_forward_eval(eng_cuda *cu, const float *x, float *y, const float *gamma, const float *beta,
                                    const float *run_mean, const float *run_var, float eps, size_t M, int C) {
    NONE((void)x, (void)y, (void)gamma, (void)beta, (void)run_mean, (void)run_var, (void)eps, (void)M, (void)C);
}
int eng_cuda_batchnorm_backward(eng_cuda *cu, const float *dy, const float *xhat, const float *invstd,
                                const float *gamma, float *dx, float *dgamma, float *dbeta, float *k, size_t M, int C) {
    NONE((void)dy, (void)xhat, (void)invstd, (void)gamma, (void)dx, (void)dgamma, (void)dbeta, (void)k, (void)M, (void)C);
}
int eng_cuda_dropout_forward(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                             uint64_t key) {
    NONE((void)x, (void)y, (void)mask, (void)n, (void)rate, (void)key);
}
int eng_cuda_dropout_forward_dev(eng_cuda *cu, const float *x, float *y, float *mask, size_t n, float rate,
                                 const uint64_t *key) {
    NONE((void)x, (void)y, (void)mask, (void)n, (void)rate, (void)key);
}
int eng_cuda_dropout_backward(eng_cuda *cu, const float *dy, const float *mask, float *dx, size_t n) {
    NONE((void)dy, (void)mask, (void)dx, (void)n);
}
int eng_cuda_add(eng_cuda *cu, const float *a, const float *b, float *y, size_t n) {
    NONE((void)a, (void)b, (void)y, (void)n);
}
int eng_cuda_loss(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels, const float *targets,
                  int B, int K, float scale, float *dz, double *sums) {
    NONE((void)loss, (void)fused_act, (void)z, (void)labels, (void)targets, (void)B, (void)K, (void)scale, (void)dz,
         (void)sums);
}
int eng_cuda_sums_add(eng_cuda *cu, const double *sums, size_t n, int K, eng_metric_sums *acc, hpo_error *err) {
    (void)cu, (void)sums, (void)n, (void)K, (void)acc;
    return none(err);
}
int eng_cuda_loss_scaled(eng_cuda *cu, int loss, int fused_act, const float *z, const int32_t *labels,
                         const float *targets, int B, int K, float scale, const eng_cuda_scaler *s, float *dz,
                         double *sums) {
    NONE((void)loss, (void)fused_act, (void)z, (void)labels, (void)targets, (void)B, (void)K, (void)scale, (void)s,
         (void)dz, (void)sums);
}
int eng_cuda_grad_norm(eng_cuda *cu, float *g, size_t n, float unscale, double *out) {
    NONE((void)g, (void)n, (void)unscale, (void)out);
}
int eng_cuda_grad_unscale_norm(eng_cuda *cu, float *g, size_t n, const eng_cuda_scaler *s, double *out) {
    NONE((void)g, (void)n, (void)s, (void)out);
}
int eng_cuda_scaler_update(eng_cuda *cu, const double *norm, eng_cuda_scaler *s, int growth_interval,
                           float max_scale) {
    NONE((void)norm, (void)s, (void)growth_interval, (void)max_scale);
}
int eng_cuda_optim_step(eng_cuda *cu, const eng_optim_config *c, float lr, long t, float *p, float *g, float *state,
                        size_t n, const double *norm) {
    NONE((void)c, (void)lr, (void)t, (void)p, (void)g, (void)state, (void)n, (void)norm);
}
int eng_cuda_optim_step_dev(eng_cuda *cu, const eng_optim_config *c, const eng_cuda_step_args *a, float *p, float *g,
                            float *state, size_t n) {
    NONE((void)c, (void)a, (void)p, (void)g, (void)state, (void)n);
}
int eng_cuda_stage_steps(eng_cuda *cu, const uint32_t *order, size_t rows, int bs, const void *recs,
                         size_t rec_bytes, const int32_t *cursor, int steps, uint32_t *idx, void *rec) {
    NONE((void)order, (void)rows, (void)bs, (void)recs, (void)rec_bytes, (void)cursor, (void)steps, (void)idx,
         (void)rec);
}
int eng_cuda_cursor_advance(eng_cuda *cu, int32_t *cursor, int steps) { NONE((void)cursor, (void)steps); }
int eng_cuda_capture_begin(eng_cuda *cu, hpo_error *err) { (void)cu; return none(err); }
int eng_cuda_capture_end(eng_cuda *cu, eng_cuda_graph **out, hpo_error *err) {
    (void)cu, (void)out;
    return none(err);
}
int eng_cuda_graph_launch(eng_cuda *cu, eng_cuda_graph *g) { NONE((void)g); }
void eng_cuda_graph_free(eng_cuda_graph *g) { (void)g; }
int eng_cuda_comm_open(eng_cuda *const *cus, int n, eng_cuda_comm **out, hpo_error *err) {
    (void)cus, (void)n, (void)out;
    return none(err);
}
void eng_cuda_comm_free(eng_cuda_comm *c) { (void)c; }
void eng_cuda_comm_abort(eng_cuda_comm *c) { (void)c; }
int eng_cuda_allreduce_sum(eng_cuda_comm *c, eng_cuda *const *cus, float *const *bufs, size_t n) {
    (void)c, (void)cus, (void)bufs, (void)n;
    return HPO_EUNSUPPORTED;
}
