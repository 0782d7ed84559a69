/*
 * engine_cli.h - command-line entry points of the engine, called by hpod's
 * main (server/main.c) for its subcommands.
 *
 * Design notes
 * - eng_train_main(argc, argv) implements `hpod train ...` (see
 *   train_cli.c for the flags): argv[0] is the program, an optional "train"
 *   word is skipped. It prints JSON lines on stdout (one per epoch, then a
 *   summary with "summary": true) and messages on stderr. Returns the
 *   process exit status: 0 ok, 1 error, 2 usage, 3 diverged.
 * - The caller should have run eng_blas_select() first in main() (the
 *   OpenBLAS kernel is fixed when the library loads).
 * Threading: trains on the calling thread.
 */
#ifndef ENG_ENGINE_CLI_H
#define ENG_ENGINE_CLI_H

int eng_train_main(int argc, char **argv);

#endif
