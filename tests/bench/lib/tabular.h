/*
 * tabular.h - the tabular HPO benchmark's grid and table (issue 16): a grid
 * of MLP and CNN configurations trained on Fashion-MNIST subsets by hpod's
 * own engine (tests/bench/tabular_gen.c), with per-epoch validation curves,
 * stored in tests/bench/data/tabular_fmnist.csv; tests/bench/tabular_hpo.c
 * searches it (a surrogate study: suggesting a configuration is looking it
 * up, training k epochs is reading k points of its curve and charging k
 * epochs) beside Optuna (tests/bench/peers/optuna_tabular.py).
 *
 * Design notes
 * - The grid (tab_tasks below) is defined once, here; a configuration's id is
 *   its mixed-radix index over the task's axes (the first axis varies
 *   slowest). The table file repeats each configuration's values, and the
 *   loader checks them against the grid, so a file from another grid is
 *   refused instead of being misread.
 * - Two tasks, the benchmark's halves: "mlp" is the half any default may be
 *   tuned on (TAB_TUNING_TASK), "cnn" is held out.
 * - File format (text, '#' lines are comments): one line per configuration,
 *   comma-separated: task, config id, params ("name=value" separated by
 *   spaces, values as %g), epochs E (1..TAB_MAX_EPOCHS; fewer than the
 *   generator's when training diverged: the configuration fails after
 *   epoch E), then three space-separated lists of E numbers: val_accuracy,
 *   val_loss, seconds of each epoch (training plus validation).
 * - Snapping: a point of the search space maps to the nearest grid value on
 *   each axis, in log scale for the log axes (tab_snap).
 * Pure C (no engine): the loader and the surrogate also serve the ctest
 * bench.tabular_selftest. Not thread-safe; a table is read-only after load.
 */
#ifndef HPO_BENCH_TABULAR_H
#define HPO_BENCH_TABULAR_H

#include <stddef.h>

#define TAB_MAX_AXES 8
#define TAB_MAX_VALUES 8
#define TAB_MAX_EPOCHS 27
#define TAB_N_TASKS 2
#define TAB_TUNING_TASK 0 /* "mlp": defaults may be tuned on it; "cnn" is held out */

typedef enum {
    TAB_INT = 0,    /* integers, linear ("int") */
    TAB_INT_LOG,    /* integers, log scale ("int", "log") */
    TAB_FLOAT_LOG,  /* reals, log scale ("float", "log") */
    TAB_FLOAT_STEP, /* reals on a step ("float", "step": values[1] - values[0]) */
    TAB_CHOICE,     /* a choice of labels[] */
} tab_axis_kind;

typedef struct tab_axis {
    const char *name;
    tab_axis_kind kind;
    int n;
    double values[TAB_MAX_VALUES];    /* increasing; a choice: 0 .. n-1 */
    const char *labels[TAB_MAX_VALUES]; /* a choice's values */
} tab_axis;

typedef struct tab_task {
    const char *name;
    int n_axes;
    tab_axis axes[TAB_MAX_AXES];
} tab_task;

extern const tab_task tab_tasks[TAB_N_TASKS];

int tab_task_index(const char *name); /* -1 if unknown */
int tab_task_size(const tab_task *t); /* configurations in the grid */
/* Axis value indices of configuration id (idx[n_axes]). */
void tab_decode(const tab_task *t, int id, int *idx);
int tab_encode(const tab_task *t, const int *idx);
/* The nearest grid value's index of v on axis a (log axes in log scale; a
 * choice: v is the index, rounded and clamped). */
int tab_snap(const tab_axis *a, double v);
/* "layers=2 units=64 lr=0.001 ..." for configuration id. */
void tab_params_text(const tab_task *t, int id, char *buf, size_t len);

typedef struct tab_curve {
    int epochs; /* recorded epochs; < the table's max epochs: diverged after them */
    float acc[TAB_MAX_EPOCHS], loss[TAB_MAX_EPOCHS], sec[TAB_MAX_EPOCHS];
} tab_curve;

typedef struct tab_table {
    int max_epochs;                 /* the longest curve (the generator's epochs) */
    int n[TAB_N_TASKS];             /* configurations of each task in the file */
    tab_curve *curves[TAB_N_TASKS]; /* [tab_task_size] each; epochs 0 = missing */
    double best[TAB_N_TASKS];       /* the best val_accuracy at any epoch of any config */
} tab_table;

/* Loads and checks a table file: every line well-formed and of a known task,
 * ids in range and each once, params equal to the grid's, 1 <= epochs <=
 * TAB_MAX_EPOCHS, metrics finite (accuracy in [0, 1], loss and seconds >= 0).
 * complete: also every configuration of every task present, and every curve
 * of max_epochs unless diverged. 0, or -1 with a message in msg (naming the
 * line). */
int tab_load(const char *path, int complete, tab_table *out, char *msg, size_t msg_len);
void tab_clear(tab_table *t);

/* The best of a curve's first k epochs (hpod's value of a complete trial:
 * the best epoch's objective, api/job_trial.c). */
double tab_best_of(const tab_curve *c, int k);

#endif
