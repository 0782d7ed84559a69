/*
 * datadir.h - one hpod per data directory.
 *
 * Design notes
 * - Two hpods on one database each run the scheduler and the tuners over
 *   the same studies: a grid study got a duplicate trial and a trial was
 *   trained twice. srv_data_dir_lock takes an exclusive flock(2) on
 *   <dir>/hpod.lock (holding the owner's pid, for the message) and keeps
 *   its descriptor open for the life of the process; the kernel drops the
 *   lock when the process ends, however it ends (kill -9 included), so a
 *   restart never finds a stale lock.
 */
#ifndef HPO_SERVER_DATADIR_H
#define HPO_SERVER_DATADIR_H

#include "hpo.h"

/* 0 and the lock held until exit; HPO_ECONFLICT ("data dir DIR in use by
 * pid N") when another process holds it; HPO_EIO when the lock file cannot
 * be opened. A file system without flock is warned about, not refused. */
int srv_data_dir_lock(const char *dir, hpo_error *err);

#endif
