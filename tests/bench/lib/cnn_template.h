/*
 * cnn_template.h - the CNN template and search space the CNN benchmarks
 * share (cnn_study.c: TPE + Hyperband and its refits; pbt_study.c: PBT
 * against TPE + Hyperband): augmentation, two conv/pool blocks, dropout, a
 * dense layer, Adam with a cosine schedule; filters, units, dropout and
 * the learning rate searched. Header-only, static.
 */
#ifndef HPO_BENCH_CNN_TEMPLATE_H
#define HPO_BENCH_CNN_TEMPLATE_H

static const char *TEMPLATE =
    "{\"layers\": ["
    " {\"augment\": {\"translate\": 1, \"flip\": true}},"
    " {\"conv2d\": {\"filters\": \"$filters1\", \"kernel\": 3, \"padding\": \"same\", \"activation\": \"relu\"}},"
    " {\"maxpool2d\": {\"pool\": 2}},"
    " {\"conv2d\": {\"filters\": \"$filters2\", \"kernel\": 3, \"padding\": \"same\", \"activation\": \"relu\"}},"
    " {\"maxpool2d\": {\"pool\": 2}},"
    " {\"flatten\": {}},"
    " {\"dropout\": {\"rate\": \"$dropout\"}},"
    " {\"dense\": {\"units\": \"$units\", \"activation\": \"relu\"}},"
    " {\"dropout\": {\"rate\": \"$dropout\"}},"
    " {\"dense\": {\"units\": 10, \"activation\": \"softmax\"}}],"
    " \"loss\": \"sparse_categorical_crossentropy\","
    " \"optimizer\": {\"name\": \"adam\", \"learning_rate\": \"$lr\"},"
    " \"schedule\": {\"name\": \"cosine\"}}";

static const char *SPACE =
    "{\"filters1\": {\"type\": \"choice\", \"values\": [16, 32]},"
    " \"filters2\": {\"type\": \"choice\", \"values\": [32, 64]},"
    " \"units\": {\"type\": \"int\", \"low\": 64, \"high\": 256, \"log\": true},"
    " \"dropout\": {\"type\": \"float\", \"low\": 0.1, \"high\": 0.5},"
    " \"lr\": {\"type\": \"float\", \"low\": 5e-4, \"high\": 3e-3, \"log\": true}}";

#endif
