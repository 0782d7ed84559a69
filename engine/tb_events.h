/*
 * tb_events.h - TensorBoard event files of a training run: one scalar
 * summary per epoch (training.tensorboard in a study definition).
 *
 * Format (TensorFlow's event files, from tensorflow/core/util/event.proto,
 * framework/summary.proto and lib/io/record_writer.cc):
 * - A file is a sequence of TFRecords:
 *     uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
 *   all little-endian; CRC-32C (Castagnoli, the iSCSI polynomial) masked as
 *   ((crc >> 15) | (crc << 17)) + 0xa282ead8.
 * - Each record's data is a serialized Event: wall_time (double, field 1),
 *   step (int64, field 2), then one of file_version (string, field 3) or
 *   summary (message, field 5). Summary: repeated value (field 1). Value:
 *   tag (string, field 1), simple_value (float, field 2). Hand-encoded
 *   protobuf: varint keys and lengths, little-endian fixed64/fixed32.
 * - The first record is an Event with file_version "brain.Event:2";
 *   every epoch then adds one Event at step = epoch with its scalars.
 *
 * Design notes
 * - CRC-32C comes from ISA-L (libisal, Debian's libisal-dev:
 *   crc32_iscsi, which picks the SSE4.2/PCLMUL path at run time);
 *   tests/unit/engine/test_tb_events.c checks it against RFC 3720's vectors.
 * - File name: events.out.tfevents.<unix seconds>.<hostname>, created with
 *   O_EXCL in the given folder (the caller's run folder: TensorBoard shows
 *   each folder holding event files as one run and merges the files of a
 *   folder in name order); a name already taken (a second file in the same
 *   second) gets .1, .2, ... appended. Every open makes a new file: a
 *   resumed run appends to its run by starting one.
 * - Writes: each record is built in memory and written with write(2) at
 *   once, no buffering, no fsync (a log, not a checkpoint: TensorBoard sees
 *   an epoch as soon as it is written, and a crash loses at most the record
 *   being written, which readers skip as a truncated tail). ENOSPC/EDQUOT
 *   are HPO_ENOSPACE, other failures HPO_EIO; what to do then is the
 *   caller's (hpod logs once and stops writing that trial's events).
 * - Values: values are float32 on disk; a value not finite as float32 is
 *   left out of an event (TensorBoard plots NaN and inf badly, and hpod
 *   stores them as null), a finite double beyond float32's range included.
 * - Threads: a writer belongs to one thread at a time.
 */
#ifndef ENG_TB_EVENTS_H
#define ENG_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "hpo.h"
#include "train.h"

#define ENG_TB_FILE_VERSION "brain.Event:2"

typedef struct eng_tb_writer eng_tb_writer;

typedef struct eng_tb_scalar {
    const char *tag;
    double value;
} eng_tb_scalar;

/* Creates a new event file in dir (an existing folder) and writes its
 * file_version event. 0, HPO_ENOSPACE, HPO_EIO (err names the path) or
 * HPO_EINVAL (the path is too long). */
int eng_tb_open(const char *dir, eng_tb_writer **out, hpo_error *err);
/* Closes the file; NULL is fine. */
void eng_tb_close(eng_tb_writer *w);
/* The file's path. */
const char *eng_tb_path(const eng_tb_writer *w);

/* One Event at step with the values of v[0..n) finite as float32 as simple
 * values (none: nothing is written). Tags are at most 255 bytes. */
int eng_tb_write_scalars(eng_tb_writer *w, int64_t step, double wall_time, const eng_tb_scalar *v, size_t n,
                         hpo_error *err);

/* The scalars of an epoch at step r->epoch, wall_time now: train/loss,
 * val/loss, and train/accuracy, val/accuracy (classify) or train/mse,
 * train/mae, val/mse, val/mae (regression); the val/ ones only when the run
 * has a validation split; train/learning_rate, perf/epoch_seconds (the
 * training part of the epoch) and perf/samples_per_s. */
int eng_tb_write_epoch(eng_tb_writer *w, const eng_epoch_report *r, int classify, hpo_error *err);

/* CRC-32C of data (RFC 3720: "123456789" -> 0xe3069283), and the masked
 * form TFRecords store. */
uint32_t eng_crc32c(const void *data, size_t n);
uint32_t eng_tb_masked_crc(const void *data, size_t n);

#endif
