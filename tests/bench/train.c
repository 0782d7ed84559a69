/* train.c - `bench_train ...`: the engine's training CLI (hpod train) as a
 * standalone program, for benchmarks and manual runs:
 *   bench_train --model engine/models/mlp.json --dataset fashion-mnist --epochs 3 --threads 1 */
#include "blas_select.h"
#include "engine_cli.h"

int main(int argc, char **argv) {
    eng_blas_select(argc, argv);
    return eng_train_main(argc, argv);
}
