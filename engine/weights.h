/*
 * weights.h - trained models as files users can download and load
 * (GET /api/v1/models/{id}/weights), models rebuilt from those files or from
 * a trial's checkpoint, and batch predictions (POST .../predict).
 *
 * Design notes
 * - File: safetensors (safetensors.h), all tensors F32, C order, one tensor
 *   per parameter array of every layer, in layer order, named
 *   "<layer path>.<kind>.<role>" with the layer paths of model.h:
 *     dense      "layers[1].dense.weight"  [in, out]  (IO: y = x W + b;
 *                "layers[1].dense.bias"    [out]       the engine's layout)
 *     conv2d     "layers[0].conv2d.weight" [KH, KW, Cin, Cout] (HWIO, NHWC
 *                "layers[0].conv2d.bias"   [Cout]      activations)
 *     batchnorm  "layers[2].batchnorm.gamma" / ".beta" /
 *                ".running_mean" / ".running_var"      [C]
 *     residual   the block's layers under their own paths
 *                ("layers[3].residual.layers[0].conv2d.weight") and the
 *                projection, when the block has one, as
 *                "layers[3].residual.projection.weight" (dense [in, out] or
 *                1x1 conv [1, 1, Cin, Cout]) and ".bias".
 *   Layers without parameters (pools, flatten, dropout, augment,
 *   activations) have no tensors.
 * - __metadata__ (all strings): "format": "hpo-model-1"; "template": the
 *   model template JSON text with every "$name" whose name is in params
 *   replaced by its value (expanded); "params": the params JSON text ("{}"
 *   if none); "input_shape": JSON array ("[28,28,1]" or "[784]");
 *   "n_classes": decimal (0 for regression / binary); "out_dim"; "nparams";
 *   "layout": "dense IO, conv HWIO, NHWC"; "loss"; "summary" (one line,
 *   eng_model_summary); plus every member of the caller's metadata object
 *   (e.g. "trial", "epochs", "dataset") that is not one of these reserved
 *   keys: strings as they are, integers in decimal, anything else as its
 *   JSON text (every JSON text here with its reals in shortest round-trip
 *   form, common/json_text.h). The caller's "template" (object, needed for
 *   eng_model_new_from_weights) and "params" (object or null) give those two
 *   keys; "n_classes" (integer) overrides the value derived from the model
 *   (out_dim for sparse categorical cross-entropy, else 0).
 * - Writes are crash-safe (temp file + fsync + rename, safetensors.h).
 *   Loads validate every tensor (present, F32, exact shape) before touching
 *   the model: on error the model is unchanged; HPO_EFORMAT names the
 *   tensor in err. Extra tensors in the file are an error too.
 * - Predictions are eval mode (no dropout/augmentation, running BN
 *   statistics) and apply the fused final activation (softmax / sigmoid) as
 *   eng_model_predict does; regression models give raw values. Rows are
 *   per-sample in_size floats in the layout the model was trained on (NHWC
 *   images). The data layer stores uint8 images and scales them by 1/255
 *   when batching (data.h); a caller holding raw 0..255 pixels converts
 *   them with eng_weights_scale_u8 (or divides by 255 itself); other
 *   datasets use their eng_dataset x_scale.
 * - The predict calls reserve the model's buffers (eng_model_reserve, in
 *   m->precision) only when none are reserved yet (batch_size, or
 *   min(n, 256) rows); otherwise batches are capped at m->cap. Eval mode is
 *   per-sample, so the batch size does not change the results' meaning.
 *   A model from eng_model_new_from_weights predicts in fp32 (call
 *   eng_model_reserve with another precision first to change that).
 * Threading: a model is used by one thread at a time; a file is read or
 *   written by the calling thread only.
 * Ownership: eng_model_new_from_weights returns a new model (eng_model_free)
 *   and a new metadata object (json_decref); out-params written only on
 *   success.
 */
#ifndef ENG_WEIGHTS_H
#define ENG_WEIGHTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "hpo.h"
#include "model.h"

#define ENG_WEIGHTS_FORMAT "hpo-model-1"

/* Save m's parameters and batch-norm statistics to path (crash-safe).
 * metadata: object or NULL (see the design notes for its members).
 * HPO_EINVAL for a metadata object of the wrong type; I/O errors as
 * safetensors.h. */
int eng_model_export_weights(const eng_model *m, const char *path, const json_t *metadata, hpo_error *err);

/* The same file as a malloc'd buffer (*buf: free()), for HTTP responses. */
int eng_model_export_weights_buffer(const eng_model *m, const json_t *metadata, void **buf, size_t *len, hpo_error *err);

/* Load a file written by eng_model_export_weights into m, built from the same
 * template/params (eng_model_new). HPO_EFORMAT naming the first missing,
 * extra or misshapen tensor, or a wrong "format"; m unchanged on error. */
int eng_model_load_weights(eng_model *m, const char *path, hpo_error *err);

/* Build the model from the file's own metadata (template, params,
 * input_shape, n_classes) and load its weights. *metadata_out (may be NULL)
 * receives every metadata entry as a JSON object of strings. HPO_EFORMAT if
 * the metadata is missing or not valid JSON; model errors as eng_model_new. */
int eng_model_new_from_weights(const char *path, eng_model **out, json_t **metadata_out,
                               hpo_error *err);

/* Load a trial checkpoint's weights (train.h) into m: the best epoch's
 * parameters and BN running statistics when use_best is set and the
 * checkpoint holds "best_params" (a checkpoint without "best_bn_stats",
 * written before they were saved, gives the last epoch's statistics), else
 * the last epoch's. Also restores the optimiser state and RNG
 * (eng_checkpoint_load); m unchanged on error. */
int eng_model_from_checkpoint(eng_model *m, const char *checkpoint_path, int use_best, hpo_error *err);

/* Predictions for every row of s into out[s->n * m->out_dim], eval mode,
 * in batches of batch_size (<= 0: 256). */
int eng_predict_split(eng_model *m, const eng_split *s, int batch_size, float *out, hpo_error *err);

/* Predictions for n caller-provided rows of row_size values x[n * row_size]
 * (already scaled as the model expects) into out[n * m->out_dim];
 * HPO_ESHAPE, nothing read, when row_size is not the model's in_size. */
int eng_predict_rows(eng_model *m, const float *x, size_t n, size_t row_size, float *out);

/* dst[i] = src[i] / 255 for raw 8-bit pixels (the data layer's scaling). */
void eng_weights_scale_u8(const uint8_t *src, size_t n, float *dst);

#endif
