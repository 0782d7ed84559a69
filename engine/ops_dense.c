/* ops_dense.c - activations, dense and conv2d layer kernels (see ops.h). */
#include <math.h>
#include <string.h>

#include "bf16.h"
#include "ops.h"

static const char *act_names[] = {"none", "relu", "gelu", "tanh", "sigmoid", "softmax"};

int eng_act_parse(const char *name) {
    if (!name || !strcmp(name, "linear") || !strcmp(name, "none")) return ENG_ACT_NONE;
    for (int i = 1; i < (int)HPO_ARRAY_LEN(act_names); i++)
        if (!strcmp(name, act_names[i])) return i;
    return -1;
}

const char *eng_act_name(int act) {
    return act >= 0 && act < (int)HPO_ARRAY_LEN(act_names) ? act_names[act] : "?";
}

int eng_act_needs_z(int act) { return act == ENG_ACT_GELU; }

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static inline float gelu(float z) {
    float t = tanhf(GELU_K * (z + GELU_C * z * z * z));
    return 0.5f * z * (1.0f + t);
}

static inline float gelu_grad(float z) {
    float u = GELU_K * (z + GELU_C * z * z * z);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * z * z);
}

static inline float sigmoid(float z) {
    return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}

static void softmax_rows(const float *z, float *y, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *zr = z + r * cols;
        float *yr = y + r * cols;
        float m = zr[0];
        for (size_t j = 1; j < cols; j++) m = zr[j] > m ? zr[j] : m;
        float s = 0;
        for (size_t j = 0; j < cols; j++) s += (yr[j] = expf(zr[j] - m));
        float inv = 1.0f / s;
        for (size_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

void eng_act_forward(int act, const float *z, float *y, size_t rows, size_t cols) {
    size_t n = rows * cols;
    switch (act) {
    case ENG_ACT_NONE:
        if (y != z) memcpy(y, z, n * sizeof *y);
        break;
    case ENG_ACT_RELU:
        for (size_t i = 0; i < n; i++) y[i] = z[i] > 0.0f ? z[i] : 0.0f;
        break;
    case ENG_ACT_GELU:
        for (size_t i = 0; i < n; i++) y[i] = gelu(z[i]);
        break;
    case ENG_ACT_TANH:
        for (size_t i = 0; i < n; i++) y[i] = tanhf(z[i]);
        break;
    case ENG_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) y[i] = sigmoid(z[i]);
        break;
    case ENG_ACT_SOFTMAX:
        softmax_rows(z, y, rows, cols);
        break;
    }
}

void eng_act_backward(int act, const float *z, const float *y, float *d, size_t rows, size_t cols) {
    size_t n = rows * cols;
    switch (act) {
    case ENG_ACT_NONE:
        break;
    case ENG_ACT_RELU:
        for (size_t i = 0; i < n; i++) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
        break;
    case ENG_ACT_GELU:
        for (size_t i = 0; i < n; i++) d[i] *= gelu_grad(z[i]);
        break;
    case ENG_ACT_TANH:
        for (size_t i = 0; i < n; i++) d[i] *= 1.0f - y[i] * y[i];
        break;
    case ENG_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) d[i] *= y[i] * (1.0f - y[i]);
        break;
    case ENG_ACT_SOFTMAX:
        for (size_t r = 0; r < rows; r++) {
            float *dr = d + r * cols;
            const float *yr = y + r * cols;
            float s = 0;
            for (size_t j = 0; j < cols; j++) s += dr[j] * yr[j];
            for (size_t j = 0; j < cols; j++) dr[j] = yr[j] * (dr[j] - s);
        }
        break;
    }
}

/* Reference: one element at a time in double where it matters. */
void eng_act_forward_ref(int act, const float *z, float *y, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *zr = z + r * cols;
        float *yr = y + r * cols;
        if (act == ENG_ACT_SOFTMAX) {
            double m = zr[0], s = 0;
            for (size_t j = 0; j < cols; j++) m = zr[j] > m ? zr[j] : m;
            for (size_t j = 0; j < cols; j++) s += exp(zr[j] - m);
            for (size_t j = 0; j < cols; j++) yr[j] = (float)(exp(zr[j] - m) / s);
            continue;
        }
        for (size_t j = 0; j < cols; j++) {
            double v = zr[j];
            switch (act) {
            case ENG_ACT_RELU: v = v > 0 ? v : 0; break;
            case ENG_ACT_GELU: v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); break;
            case ENG_ACT_TANH: v = tanh(v); break;
            case ENG_ACT_SIGMOID: v = 1 / (1 + exp(-v)); break;
            default: break;
            }
            yr[j] = (float)v;
        }
    }
}

void eng_act_backward_ref(int act, const float *z, const float *y, float *d, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        float *dr = d + r * cols;
        const float *zr = z + r * cols, *yr = y + r * cols;
        if (act == ENG_ACT_SOFTMAX) {
            double s = 0;
            for (size_t j = 0; j < cols; j++) s += (double)dr[j] * yr[j];
            for (size_t j = 0; j < cols; j++) dr[j] = (float)(yr[j] * (dr[j] - s));
            continue;
        }
        for (size_t j = 0; j < cols; j++) {
            double g = 1, v = zr[j];
            switch (act) {
            case ENG_ACT_RELU: g = yr[j] > 0; break;
            case ENG_ACT_GELU: {
                double t = tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
                g = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
                break;
            }
            case ENG_ACT_TANH: g = 1 - (double)yr[j] * yr[j]; break;
            case ENG_ACT_SIGMOID: g = (double)yr[j] * (1 - yr[j]); break;
            default: break;
            }
            dr[j] = (float)(dr[j] * g);
        }
    }
}

/* ---- dense ---- */

/* z[B][O] += b (broadcast), y = act(z): one pass over the GEMM output. */
static void bias_act(const float *b, float *z, float *y, int B, int O, int act) {
    if (act == ENG_ACT_RELU && b) {
        for (int r = 0; r < B; r++) {
            float *zr = z + (size_t)r * O, *yr = y + (size_t)r * O;
            for (int j = 0; j < O; j++) {
                float v = zr[j] + b[j];
                yr[j] = v > 0.0f ? v : 0.0f;
            }
        }
        return;
    }
    if (b)
        for (int r = 0; r < B; r++) {
            float *zr = z + (size_t)r * O;
            for (int j = 0; j < O; j++) zr[j] += b[j];
        }
    eng_act_forward(act, z, y, (size_t)B, (size_t)O);
}

/* d = act'(.) * d and db = column sums of d, in one pass where possible. */
static void act_back_bias(const float *z, const float *y, float *d, float *db, int B, int O, int act) {
    if (act == ENG_ACT_RELU || act == ENG_ACT_NONE) {
        if (db) memset(db, 0, (size_t)O * sizeof *db);
        for (int r = 0; r < B; r++) {
            float *dr = d + (size_t)r * O;
            const float *yr = y + (size_t)r * O;
            if (act == ENG_ACT_RELU)
                for (int j = 0; j < O; j++) dr[j] = yr[j] > 0.0f ? dr[j] : 0.0f;
            if (db)
                for (int j = 0; j < O; j++) db[j] += dr[j];
        }
        return;
    }
    eng_act_backward(act, z, y, d, (size_t)B, (size_t)O);
    if (!db) return;
    memset(db, 0, (size_t)O * sizeof *db);
    for (int r = 0; r < B; r++)
        for (int j = 0; j < O; j++) db[j] += d[(size_t)r * O + j];
}

void eng_dense_forward(const eng_backend *be, const float *x, const float *w, const float *b, float *z,
                       float *y, int B, int I, int O, int act) {
    /* z[B][O] = x[B][I] w[I][O] */
    be->gemm_f32(0, 0, B, O, I, 1.0f, x, I, w, O, 0.0f, z, O);
    bias_act(b, z, y, B, O, act);
}

void eng_dense_backward(const eng_backend *be, const float *x, const float *w, const float *z,
                        const float *y, float *d, float *dx, float *dw, float *db, int B, int I, int O,
                        int act) {
    act_back_bias(z, y, d, db, B, O, act);
    /* dw[I][O] = x^T[I][B] dz[B][O] */
    be->gemm_f32(1, 0, I, O, B, 1.0f, x, I, d, O, 0.0f, dw, O);
    /* dx[B][I] = dz[B][O] w^T[O][I] */
    if (dx) be->gemm_f32(0, 1, B, I, O, 1.0f, d, O, w, O, 0.0f, dx, I);
}

int eng_dense_forward_bf16(const eng_backend *be, const uint16_t *xb, const uint16_t *wb, const float *b,
                           float *z, float *y, int B, int I, int O, int act) {
    int rc = be->gemm_bf16(0, 0, B, O, I, 1.0f, xb, I, wb, O, 0.0f, z, O, b);
    if (rc < 0) return rc;
    if (act != ENG_ACT_NONE || z != y) eng_act_forward(act, z, y, (size_t)B, (size_t)O);
    return HPO_OK;
}

int eng_dense_backward_bf16(const eng_backend *be, const uint16_t *xb, const uint16_t *wb, const float *z,
                            const float *y, float *d, uint16_t *d16, float *dx, float *dw, float *db,
                            int B, int I, int O, int act) {
    act_back_bias(z, y, d, db, B, O, act);
    eng_f32_to_bf16_n(d, d16, (size_t)B * O);
    int rc = be->gemm_bf16(1, 0, I, O, B, 1.0f, xb, I, d16, O, 0.0f, dw, O, NULL);
    if (rc == 0 && dx) rc = be->gemm_bf16(0, 1, B, I, O, 1.0f, d16, O, wb, O, 0.0f, dx, I, NULL);
    return rc;
}

void eng_dense_forward_ref(const float *x, const float *w, const float *b, float *z, float *y, int B,
                           int I, int O, int act) {
    for (int r = 0; r < B; r++)
        for (int j = 0; j < O; j++) {
            double s = b ? b[j] : 0;
            for (int i = 0; i < I; i++) s += (double)x[(size_t)r * I + i] * w[(size_t)i * O + j];
            z[(size_t)r * O + j] = (float)s;
        }
    eng_act_forward_ref(act, z, y, (size_t)B, (size_t)O);
}

void eng_dense_backward_ref(const float *x, const float *w, const float *z, const float *y, float *d,
                            float *dx, float *dw, float *db, int B, int I, int O, int act) {
    eng_act_backward_ref(act, z, y, d, (size_t)B, (size_t)O);
    for (int j = 0; j < O; j++) {
        double s = 0;
        for (int r = 0; r < B; r++) s += d[(size_t)r * O + j];
        if (db) db[j] = (float)s;
    }
    for (int i = 0; i < I; i++)
        for (int j = 0; j < O; j++) {
            double s = 0;
            for (int r = 0; r < B; r++) s += (double)x[(size_t)r * I + i] * d[(size_t)r * O + j];
            dw[(size_t)i * O + j] = (float)s;
        }
    if (dx)
        for (int r = 0; r < B; r++)
            for (int i = 0; i < I; i++) {
                double s = 0;
                for (int j = 0; j < O; j++) s += (double)d[(size_t)r * O + j] * w[(size_t)i * O + j];
                dx[(size_t)r * I + i] = (float)s;
            }
}

/* ---- conv2d: the backend convolution with bias fused, then the activation ---- */

int eng_conv2d_forward(const eng_backend *be, const eng_conv2d_shape *s, eng_dtype dt, const void *x,
                       const void *w, const float *b, float *z, float *y, int act) {
    int rc = be->conv2d_forward(s, dt, x, w, b, z);
    if (rc < 0) return rc;
    if (act != ENG_ACT_NONE || z != y)
        eng_act_forward(act, z, y, (size_t)s->N * s->OH * s->OW, (size_t)s->OC);
    return HPO_OK;
}

int eng_conv2d_backward(const eng_backend *be, const eng_conv2d_shape *s, eng_dtype dt, const void *x,
                        const void *w, const float *z, const float *y, float *d, uint16_t *d16, float *dx,
                        float *dw, float *db, int act) {
    size_t rows = (size_t)s->N * s->OH * s->OW;
    eng_act_backward(act, z, y, d, rows, (size_t)s->OC);
    const void *dd = d;
    if (dt == ENG_BF16) {
        eng_f32_to_bf16_n(d, d16, rows * s->OC);
        dd = d16;
    }
    int rc = be->conv2d_backward_weights(s, dt, x, dd, dw, db);
    if (rc == 0 && dx) rc = be->conv2d_backward_data(s, dt, dd, w, dx);
    return rc;
}

void eng_conv2d_forward_ref(const eng_conv2d_shape *s, const float *x, const float *w, const float *b,
                            float *z, float *y, int act) {
    eng_dnnl_conv2d_forward_ref(s, ENG_DNNL_F32, x, w, b, z);
    eng_act_forward_ref(act, z, y, (size_t)s->N * s->OH * s->OW, (size_t)s->OC);
}

void eng_conv2d_backward_ref(const eng_conv2d_shape *s, const float *x, const float *w, const float *z,
                             const float *y, float *d, float *dx, float *dw, float *db, int act) {
    eng_act_backward_ref(act, z, y, d, (size_t)s->N * s->OH * s->OW, (size_t)s->OC);
    eng_dnnl_conv2d_backward_weights_ref(s, ENG_DNNL_F32, x, d, dw, db);
    if (dx) eng_dnnl_conv2d_backward_data_ref(s, ENG_DNNL_F32, d, w, dx);
}
