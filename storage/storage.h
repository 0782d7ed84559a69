/*
 * storage.h - the database: studies, trials, their parameters,
 * intermediate values, results, models, datasets' rows and events, in
 * SQLite (the embedded default) or PostgreSQL (hpod --database, for
 * several hpod nodes on one database). The files beside it (checkpoints,
 * uploaded datasets, exported weights) are api/data_dir.h's.
 *
 * Design notes
 * - Two backends, one code path: the files below bind, step and read
 *   through a small statement driver (sql.h) with a SQLite and a libpq
 *   implementation; the SQL differs only where the dialects must (db.c).
 *   What follows describes SQLite; PostgreSQL keeps the same promises
 *   (one transaction per call, events with their change, ids never
 *   reused) with its own schema list (schema_pg.c) and row locks for what
 *   several connections race for (db_internal.h). Several hpod processes
 *   (nodes) may share a PostgreSQL database: they register, beat and
 *   reclaim a dead node's running jobs through the calls of "nodes" below
 *   (nodes.c), and the limits of a study (max_trials, parallel_trials)
 *   are counted in the transaction that starts a trial. They also follow
 *   each other: a study's events and its trials' changes become visible in
 *   the order of their ids / change numbers, so a cursor misses none
 *   (sto_event_list, sto_trials_changed), and a watch hears other
 *   processes' events as they commit (sto_watch).
 * - One file, <data-dir>/hpo.db, in WAL mode. The schema is created and
 *   migrated from a versioned list of SQL scripts (PRAGMA user_version);
 *   opening an older database applies the missing steps in one transaction.
 * - Durability. Every mutating call is one transaction that has committed
 *   when the call returns; the API acknowledges only after that. In WAL mode
 *   a committed transaction is in the WAL file (the OS page cache) before
 *   COMMIT returns, so a kill -9 of hpod at any moment loses nothing
 *   acknowledged. synchronous=NORMAL (the default, STO_SYNC_NORMAL) does not
 *   fsync on every commit, so a power cut or kernel crash may roll back the
 *   last transactions; STO_SYNC_FULL (hpod --sync full) fsyncs the WAL at
 *   every commit and survives power loss too, at the cost of one fsync per
 *   call. We chose NORMAL by default: the promise hpod makes is against
 *   process crashes, and NORMAL is the setting SQLite documents as safe
 *   against corruption in WAL mode.
 * - Every statement is prepared once, with bound parameters; no SQL is
 *   built from client text.
 * - Threading: an sto_db may be used from any number of threads; calls are
 *   serialised by a mutex around one connection (SQLite's own writers are
 *   serialised anyway, and the statements are short).
 * - Ownership: structs returned through out-params own their strings; free
 *   them with the matching _clear / _list_free. Out-params are written only
 *   on success. Errors: HPO_ENOTFOUND for unknown ids, HPO_ECONFLICT when
 *   the state forbids the change (tell twice, report after the end),
 *   HPO_ESTORAGE when SQLite fails (logged with sqlite3_errmsg).
 * - JSON columns (spec, params, data, user_attrs) are stored as text,
 *   exactly as given; storage does not parse them (the api's merge of
 *   user_attrs runs as a callback inside the transaction: sto_attrs_fn).
 * - NaN is stored as NULL and read back as NaN (value, value_std,
 *   last_value, intermediate values).
 * - Ids are never reused: studies, trials, models, datasets and events are
 *   AUTOINCREMENT tables (schema v5 rebuilt studies and trials), so an id
 *   that once named a deleted row is unknown forever (HPO_ENOTFOUND), never
 *   a newer row: a stale client or worker cannot write into another study.
 * - Events with their change: the _ev variants of the state-changing calls
 *   (study create and state, trial start/requeue/finish, epochs, model
 *   start/finish, user_attrs and notes) store an event in the same transaction, so either both
 *   the change and its event are stored or neither is: an event stream
 *   replayed from the start tells every state change that happened.
 * - A full disk: when SQLite cannot write (SQLITE_FULL: ENOSPC/EDQUOT) a
 *   call returns HPO_ENOSPACE, with its transaction rolled back.
 * - Implementation: db.c (connection, migrations, the statement cache
 *   with all SQL), sql.h + sql_sqlite.c + sql_pg.c (the driver),
 *   schema_pg.c (PostgreSQL's schema), studies.c, trials.c, training.c (queueing,
 *   epochs), trials_in.c (enqueued and added trials), datasets.c,
 *   events.c, watch.c (LISTEN, PostgreSQL), nodes.c (the nodes of a shared database); db_internal.h is
 *   shared by them and by the tests. Measured on the dev VM (2 vCPU, ext4),
 *   tests/unit/storage/test_perf: create/report/finish ~20-45 us mean each
 *   with NORMAL, ~0.2-0.35 ms with FULL (fsync); ~10,000 ask+report+tell round trips/s
 *   from 4 threads. test_durability kill -9s a writer at random moments and
 *   finds every acknowledged finish.
 */
#ifndef HPO_STORAGE_H
#define HPO_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "hpo.h"

typedef struct sto_db sto_db;

typedef enum { STO_SYNC_NORMAL = 0, STO_SYNC_FULL = 1 } sto_sync;

/* An event to store with a change (the _ev calls): type required; data a
 * JSON object text (NULL: "{}"). Its study (and trial) are those of the
 * row the call changes. */
typedef struct sto_event_in {
    const char *type;
    const char *data;
} sto_event_in;

/* Opens (creating and migrating) the database file at path. ":memory:" works
 * for tests. A database written by a newer build (user_version above
 * sto_schema_version()) is refused with HPO_ESTORAGE, untouched. A path
 * naming a PostgreSQL database (sto_is_database_url) opens that instead,
 * with the same calls and rules; several connections (hpod nodes) may
 * share it (db_internal.h says how races are decided); sync does not
 * apply there (commits are as durable as the server makes them).
 * A SQLite file that fails SQLite's PRAGMA quick_check (a bad sector or
 * copy, a stale hpo.db-wal replayed over a backup copied back) is refused
 * with HPO_EFORMAT, untouched, before anything reads it wrong. */
int sto_open(const char *path, sto_sync sync, sto_db **out);
/* sto_open, and for HPO_EFORMAT err->message says what SQLite found
 * damaged (its first complaint). */
int sto_open_why(const char *path, sto_sync sync, sto_db **out, hpo_error *err);
/* path is a postgresql:// or postgres:// URL. */
int sto_is_database_url(const char *path);
/* The longest SQLite database path sto_open takes, in bytes, as SQLite
 * sees it (absolute, links resolved): its unix VFS keeps room for the
 * "-journal" suffix under a 512-byte limit, so 504; a longer one fails to
 * open (HPO_ESTORAGE, "unable to open database file"). */
size_t sto_sqlite_path_max(void);
void sto_close(sto_db *db);
/* Why this thread's last HPO_ESTORAGE or HPO_ENOSPACE came back: what
 * failed and the database's own words ("trial create: disk I/O error"),
 * for a 5xx answer to say more than "storage error"; "" after
 * sto_error_reason_clear (a request's start) or none. */
const char *sto_error_reason(void);
void sto_error_reason_clear(void);
/* The schema version this build migrates to (== PRAGMA user_version after
 * open; PostgreSQL keeps it in the table hpo_schema). */
int sto_schema_version(void);

/* ---- studies ---- */
typedef enum {
    STO_STUDY_RUNNING = 0,
    STO_STUDY_PAUSED,
    STO_STUDY_COMPLETE,
    STO_STUDY_CANCELLED,
    STO_STUDY_N_STATES
} sto_study_state;

typedef struct sto_study {
    int64_t id;
    char *name;
    char *spec; /* the validated study definition, JSON text */
    sto_study_state state;
    double created;          /* wall-clock seconds */
    double updated;          /* its latest change: a state change, or one of its trials
                                created, started, reported, requeued, given an epoch or
                                finished, or its or a trial's user_attrs or note set
                                (stored in that change's transaction; never moves back
                                for a trial's change) */
    char *user_attrs;        /* schema v6: the user's attributes, a JSON object text ("{}") */
    char *note;              /* schema v6: free UTF-8 text ("" when none) */
} sto_study;

/* name and spec are required (HPO_EINVAL); the study starts RUNNING. */
int sto_study_create(sto_db *db, const char *name, const char *spec, int64_t *id_out);
/* The same, storing ev (if not NULL) as the study's first event; ev->data
 * NULL is stored as {"id": <the new id>}. */
int sto_study_create_ev(sto_db *db, const char *name, const char *spec, const sto_event_in *ev,
                        int64_t *id_out);
/* The general create (schema v6): user_attrs (a JSON object text; NULL:
 * "{}") and note (NULL: "") are stored with the study. load_if_exists: when
 * a study named `name` exists the oldest one (lowest id) is the answer:
 * *id_out is its id, *created_out 0, nothing is written and ev is not
 * stored; the lookup and the insert are one transaction, so callers racing
 * with one name get one study. created_out may be NULL. */
typedef struct sto_study_new {
    const char *name, *spec; /* required */
    const char *user_attrs, *note;
    int load_if_exists;
    sto_study_state state; /* the state it starts in: STO_STUDY_RUNNING (0) or STO_STUDY_PAUSED */
    /* the uploaded dataset an embedded study trains on (0: none, or a
     * builtin one): its row is held in the insert's transaction, so a
     * delete racing with the create (another thread or node) either sees
     * the study as a user or has removed the row, and then the create is
     * HPO_ESTALE with nothing stored (sto_dataset_delete_unused) */
    int64_t dataset_id;
    /* NULL, or called in the insert's transaction once the row has its id,
     * before the commit (an error: nothing is stored), so that what it
     * records outside the database (a marker file) is never missing for a
     * study that committed */
    int (*on_insert)(void *arg, int64_t id);
    void *on_insert_arg;
} sto_study_new;
int sto_study_create_with(sto_db *db, const sto_study_new *in, const sto_event_in *ev, int64_t *id_out,
                          int *created_out);
int sto_study_get(sto_db *db, int64_t id, sto_study *out);
void sto_study_clear(sto_study *s);
/* All studies, newest first. */
int sto_study_list(sto_db *db, sto_study **out, size_t *n_out);
void sto_study_list_free(sto_study *list, size_t n);
/* Deletes a study with its trials, intermediate values and events. */
int sto_study_delete(sto_db *db, int64_t id);
int sto_study_set_state(sto_db *db, int64_t id, sto_study_state state);
/* The same with an event (ev may be NULL). */
int sto_study_set_state_ev(sto_db *db, int64_t id, sto_study_state state, const sto_event_in *ev);
/* The same, only from the states of from_mask (bit 1 << state): one of
 * several nodes changing a study at once wins, the others get
 * HPO_ECONFLICT (HPO_ENOTFOUND: no such study). */
int sto_study_transition_ev(sto_db *db, int64_t id, unsigned from_mask, sto_study_state to, const sto_event_in *ev);
/* Studies created or whose state changed after *since (a value of the
 * database's study change counter; start from 0), in the order of their
 * changes; *since moves past them. Every change committed by any
 * connection before the call is seen by it or an earlier one: changes
 * commit in counter order (db_internal.h). A deleted study is not listed. */
int sto_studies_changed(sto_db *db, int64_t *since, sto_study **out, size_t *n_out);
/* The study change counter now: read it before listing the studies, and
 * sto_studies_changed from it misses nothing that listing did not see. */
int sto_study_changes_seq(sto_db *db, int64_t *seq);
const char *sto_study_state_name(sto_study_state s);
/* A study's (or trial's) user_attrs change: called inside the annotate
 * call's transaction, under storage's lock, with the stored user_attrs
 * text; *out gets the new text (malloc'd; storage frees it), or an error
 * is returned, which stores nothing. It must not call storage. So a
 * read-merge-write is atomic, whatever else writes. */
typedef int (*sto_attrs_fn)(void *arg, const char *stored, char **out);
/* Changes a study's user_attrs through merge (NULL keeps them) and sets
 * its note (NULL keeps it), in one transaction with ev (if not NULL);
 * moves updated. Any state. HPO_ENOTFOUND for an unknown study; merge's
 * error as it returned it. */
int sto_study_annotate(sto_db *db, int64_t id, sto_attrs_fn merge, void *arg, const char *note,
                       const sto_event_in *ev);

/* ---- trials ---- */
typedef enum {
    STO_TRIAL_RUNNING = 0,
    STO_TRIAL_COMPLETE,
    STO_TRIAL_PRUNED,
    STO_TRIAL_FAILED,
    STO_TRIAL_CANCELLED,
    STO_TRIAL_QUEUED,
    STO_TRIAL_N_STATES
} sto_trial_state;

const char *sto_trial_state_name(sto_trial_state s);
int sto_trial_state_parse(const char *name); /* -1 if unknown */

typedef struct sto_trial {
    int64_t id, study_id;
    int64_t number;            /* 0, 1, 2, ... within the study */
    sto_trial_state state;
    char *params;              /* JSON object text */
    double value;              /* objective (mean over executions); NaN when none */
    double value_std;          /* std over executions; NaN when n < 2 */
    int value_n;               /* number of executions behind value; 0 when none */
    int64_t last_step;         /* highest reported step, -1 when none */
    double last_value;         /* value at last_step; NaN when none */
    double created, started, finished; /* wall clock; finished 0 while not finished */
    double lease_expires;      /* wall clock; 0 = no lease */
    char *error;               /* why it failed; NULL otherwise */
    /* embedded studies (schema v3) */
    int64_t best_epoch;        /* 1-based epoch of the best mean objective; 0 if none */
    char *slot;                /* worker slot that last ran it ("cpu:0"); NULL if none */
    double train_seconds;      /* training time over all its runs */
    /* schema v6 */
    char *user_attrs;          /* the user's attributes, a JSON object text ("{}") */
    char *note;                /* free UTF-8 text ("" when none) */
    /* schema v7: multi-objective studies */
    char *values_json;         /* a complete trial's objective values, a JSON array text; NULL: none */
    char *metrics_json;        /* the metrics told with them, a JSON object text; NULL: none */
    /* schema v8: population-based training */
    char *lineage;             /* a bred trial's lineage, a JSON object text; NULL: none */
    int64_t pbt_epoch;         /* the last boundary it was ranked at (a bred one: its start epoch) */
    /* schema v9 */
    int64_t node_id;           /* the node that runs it, or ran it last (0: none, e.g. a client's) */
    /* schema v10 (PostgreSQL; 0 on SQLite) */
    int64_t seq;               /* its study's change number at its latest change (sto_trials_changed) */
} sto_trial;

void sto_trial_clear(sto_trial *t);
void sto_trial_list_free(sto_trial *list, size_t n);

/* Creates a running trial with the next number of the study (atomically:
 * concurrent callers get distinct numbers). HPO_ENOTFOUND for an unknown
 * study. params NULL is stored as "{}"; lease_expires <= 0 means no lease.
 * trial_id_out and number_out may be NULL. */
int sto_trial_create(sto_db *db, int64_t study_id, const char *params, double lease_expires,
                     int64_t *trial_id_out, int64_t *number_out);
/* The same, numbered `number`: the next number of the study as the caller
 * knows it (its tuner suggested for that number). HPO_ESTALE, storing
 * nothing, when the study's next number is another: another connection
 * (hpod node) numbered a trial since the caller last looked. */
int sto_trial_create_at(sto_db *db, int64_t study_id, int64_t number, const char *params, double lease_expires,
                        int64_t *trial_id_out);
/* The data of an event about a trial the call itself creates: a JSON
 * object text to free(), or NULL for "{}". */
typedef char *(*sto_trial_event_fn)(void *arg, int64_t trial_id, int64_t number);
/* A trial to create running, or a queued one to start (sto_trial_claim_ev),
 * within limits that hold across every connection (node) of the database:
 * they are counted under the study's row lock in the same transaction. */
typedef struct sto_trial_run {
    const char *params;   /* JSON object text (NULL: "{}"; claim: NULL resumes a requeued
                             trial, else an enqueued one is handed out with these) */
    double lease_expires; /* <= 0: none */
    const char *slot;     /* a slot of this connection's node runs it (its node is recorded);
                             NULL: a client runs it (an ask) */
    int64_t max_trials;   /* > 0: HPO_EEXHAUSTED once the study has this many trials */
    int64_t parallel;     /* > 0: HPO_ECONFLICT while this many of its trials run */
    int exact_number;     /* create: nonzero stores it only as `number`, the study's next number as
                             the caller knows it (its tuner suggested for it): HPO_ESTALE, storing
                             nothing, when another connection (node) numbered a trial since */
    int64_t number;
    /* exact_number: when set, called under the study's row lock (no other
     * connection can number a trial until the commit), after the limits,
     * before the insert, on the caller's thread (it may read storage): the
     * caller catches up with the trials other connections stored and sets
     * *number to the study's next number as it now knows it (r->number on
     * entry), and may set *params to other params (r->params on entry; it
     * keeps them valid until the call returns); nonzero aborts the create
     * (nothing stored) with that code */
    int (*catch_up)(void *arg, int64_t *number, const char **params);
    void *catch_up_arg;
    const char *ev_type;  /* an event stored with it (NULL: none), with its data from */
    sto_trial_event_fn ev_data; /* ev_data(ev_arg, id, number) (NULL: "{}") */
    void *ev_arg;
} sto_trial_run;
/* sto_trial_create within r's limits: numbered as sto_trial_create, running
 * (started now) on r->slot. HPO_ENOTFOUND for an unknown study. */
int sto_trial_create_with(sto_db *db, int64_t study_id, const sto_trial_run *r, int64_t *trial_id_out,
                          int64_t *number_out);
int sto_trial_get(sto_db *db, int64_t trial_id, sto_trial *out);

typedef struct sto_trial_filter {
    int state;        /* a sto_trial_state, or -1 for all */
    int order;        /* STO_ORDER_* */
    int descending;   /* 0 ascending, 1 descending */
    int64_t limit;    /* <= 0: no limit */
    int64_t offset;
} sto_trial_filter;
enum { STO_ORDER_NUMBER = 0, STO_ORDER_VALUE = 1 };
/* Trials of a study; with STO_ORDER_VALUE trials without a value come last
 * (in both directions) and ties go by number. f NULL: all, by number.
 * HPO_ENOTFOUND for an unknown study, HPO_EINVAL for a bad filter. */
int sto_trial_list(sto_db *db, int64_t study_id, const sto_trial_filter *f, sto_trial **out,
                   size_t *n_out);
/* The trials of a study in state (-1: all), by number, without the
 * columns a client can make large: error, user_attrs and note are NULL
 * (for reads of every trial's outcome: a front, a look for params). Free
 * with sto_trial_list_free. HPO_ENOTFOUND for an unknown study. */
int sto_trial_outcomes(sto_db *db, int64_t study_id, int state, sto_trial **out, size_t *n_out);
/* counts[s] = number of trials in state s; study_id < 0 counts all studies;
 * HPO_ENOTFOUND for an unknown study (counts untouched). */
int sto_trial_counts(sto_db *db, int64_t study_id, int64_t counts[STO_TRIAL_N_STATES]);
/* The queue depth of the job layer: *trials = queued trials of running
 * studies (a paused study's wait), *models = queued model jobs. Two indexed
 * counts (trials_study_state probed once per running study, models_state),
 * for the metrics. */
int sto_jobs_queued(sto_db *db, int64_t *trials, int64_t *models);

/* Records an intermediate value (a step reported again keeps its first
 * value, as the pruner does) and extends the lease: lease_expires > 0
 * replaces it, <= 0 keeps the current one. last_step/last_value follow the
 * highest step reported (its first value). step must be >= 0. pruned: the
 * pruner told the trial to stop at this report (it then says so at every
 * later one): 0 no, 1 yes, 2 + k yes at rung k (asha, hyperband); kept with
 * the step in the same transaction, so that a restart, or another node
 * catching up on the trial, never reads the step without the answer
 * (sto_intermediate.flags and rung; a step reported again gains the flag).
 * HPO_ECONFLICT unless the trial is running. */
int sto_trial_report(sto_db *db, int64_t trial_id, int64_t step, double value,
                     double lease_expires, int pruned);

/* What a replay of the pruner needs of a stored report besides its value. */
enum {
    STO_STEP_LATE = 1,   /* reported after a higher step of its trial */
    STO_STEP_PRUNED = 2, /* the pruner said stop at this report */
};
typedef struct sto_intermediate {
    int64_t number; /* the trial's (sto_study_intermediates only) */
    int64_t step;
    double value;
    int flags; /* STO_STEP_* */
    int rung;  /* STO_STEP_PRUNED: the rung asha or hyperband said stop at; -1 none or not known */
} sto_intermediate;

/* Intermediate values of a trial, ordered by step; the caller frees both
 * arrays (free()). HPO_ENOTFOUND for an unknown trial. */
int sto_trial_intermediates(sto_db *db, int64_t trial_id, int64_t **steps_out,
                            double **values_out, size_t *n_out);
/* The reports of a trial after after_step, ordered by step (number 0); the
 * caller frees the array. HPO_ENOTFOUND for an unknown trial. */
int sto_trial_intermediates_after(sto_db *db, int64_t trial_id, int64_t after_step, sto_intermediate **out,
                                  size_t *n_out);
/* Calls fn for every intermediate value of every trial of a study (ordered by
 * trial number, then step): used to rebuild a tuner's history at start-up.
 * The rows are read first and fn runs after the lock is released, so fn may
 * call storage itself. HPO_ENOTFOUND for an unknown study. */
int sto_study_intermediates(sto_db *db, int64_t study_id, void (*fn)(void *ctx, const sto_intermediate *row),
                            void *ctx);

/* Ends a running trial: state COMPLETE (with value, std, n), PRUNED (value
 * may be NaN: the last intermediate is then kept as value), FAILED or
 * CANCELLED (error text may be NULL). A queued trial (schema v3) may be
 * ended FAILED or CANCELLED (a study cancelled while paused); otherwise
 * HPO_ECONFLICT unless running, HPO_EINVAL for any other state. value_n is stored as 0 when the final
 * value is NaN and at least 1 otherwise; the lease is cleared. */
int sto_trial_finish(sto_db *db, int64_t trial_id, sto_trial_state state, double value,
                     double value_std, int value_n, const char *error);
/* The same with an event (ev may be NULL). */
int sto_trial_finish_ev(sto_db *db, int64_t trial_id, sto_trial_state state, double value,
                        double value_std, int value_n, const char *error, const sto_event_in *ev);

/* The same with the outcome in a struct, and what a multi-objective study
 * adds: values_json and metrics_json (JSON texts stored as given; NULL:
 * none). */
typedef struct sto_outcome {
    sto_trial_state state;
    double value, value_std;
    int value_n;
    const char *error;
    const char *values_json, *metrics_json;
} sto_outcome;
int sto_trial_finish_outcome(sto_db *db, int64_t trial_id, const sto_outcome *o, const sto_event_in *ev);

/* A trial's user_attrs and note, as sto_study_annotate (any state; the
 * study's updated moves). HPO_ENOTFOUND for an unknown trial. */
int sto_trial_annotate(sto_db *db, int64_t trial_id, sto_attrs_fn merge, void *arg, const char *note,
                       const sto_event_in *ev);

/* ---- other connections' changes (several hpod nodes on PostgreSQL) ----
 * Other processes may write the database (sto_shared: PostgreSQL), so what
 * a process caches of it (a tuner's history, an event stream's position)
 * must be refreshed from it. Every change of a trial (created, started,
 * reported, requeued, finished, handed out, annotated, ...) stamps it with
 * its study's next change number, trial.seq (schema v10), drawn under the
 * study's row lock in the change's transaction: a study's changes commit
 * in seq order, so a reader that keeps the highest seq it has read misses
 * none by asking for the trials changed after it. On SQLite (one hpod per
 * database) seq stays 0. */
int sto_shared(const sto_db *db);
/* The trials of a study changed after seq `after` (as they are now, by
 * number; *out NULL and *n_out 0 when none), *seq_out the highest seq
 * among them (after when none): the cursor of the next call, and the
 * study's state into *state_out (may be NULL); one statement.
 * HPO_ENOTFOUND for an unknown study. */
int sto_trials_changed(sto_db *db, int64_t study_id, int64_t after, sto_trial **out, size_t *n_out,
                       int64_t *seq_out, sto_study_state *state_out);

/* Fails every running trial whose lease expired before now, with the error
 * "lease expired". Returns the affected trials (caller frees the list) so the
 * caller can update tuner state. They keep lease_expires (when it ran out);
 * finished = now. */
int sto_trials_expire(sto_db *db, double now, sto_trial **out, size_t *n_out);

/* ---- trials a client brings (trials_in.c) ----
 * Enqueued trials (Optuna's enqueue_trial) are QUEUED with started = 0 and
 * the parameters the client fixed (maybe not all); the first hand-out
 * (an ask, or the scheduler) stores the completed parameters and makes it
 * running. Finished trials (add_trial, an import) are created whole. The
 * _ev calls store ev (may be NULL) with the change; ev->data NULL is stored
 * as {"trial_id", "number", "state"}. */
/* A queued trial with the next number. HPO_ENOTFOUND for an unknown study. */
int sto_trial_enqueue_ev(sto_db *db, int64_t study_id, const char *params, const sto_event_in *ev,
                         int64_t *trial_id_out, int64_t *number_out);
/* An enqueued trial that was never started -> running, with params (the
 * full set), started = now, lease_expires (<= 0: none) and slot (may be
 * NULL). HPO_ECONFLICT for any other state (or a requeued trial). */
int sto_trial_hand_out_ev(sto_db *db, int64_t trial_id, const char *params, double lease_expires,
                          const char *slot, const sto_event_in *ev);
typedef struct sto_trial_in {
    const char *params;       /* JSON object text */
    sto_trial_state state;    /* COMPLETE, PRUNED, FAILED or CANCELLED (else HPO_EINVAL) */
    double value, value_std;  /* NaN: none (a pruned trial then keeps its last intermediate) */
    int value_n;
    const char *error;        /* may be NULL */
    double started, finished; /* wall clock; <= 0: now */
    const int64_t *steps;     /* intermediate values (steps >= 0, else HPO_EINVAL) */
    const double *step_values;
    size_t n_steps;
    const char *user_attrs;   /* a JSON object text; NULL: "{}" */
    const char *note;         /* NULL: "" */
    const char *values_json;  /* multi-objective: JSON array text; NULL: none */
    const char *metrics_json; /* JSON object text; NULL: none */
    /* per step, as a study document gives them (NULL: none): the report's
     * STO_STEP_* flags and rung (sto_intermediate's; without them, a step
     * below an earlier one is late and none was pruned), and the curve
     * point stored with a vector report (execution 0's epoch, NULL: none) */
    const int *step_flags, *step_rungs;
    const char *const *step_curves;
} sto_trial_in;
/* A finished trial with the next number and its intermediate values. */
int sto_trial_add_ev(sto_db *db, int64_t study_id, const sto_trial_in *in, const sto_event_in *ev,
                     int64_t *trial_id_out, int64_t *number_out);

/* ---- population-based training (schema v8; api/pbt.c) ----
 * A member of the population waits QUEUED at each perturbation boundary
 * until it is ranked there. Ranked to go on: sto_trial_pbt_ranked stores
 * the boundary (pbt_epoch). Ranked in the bottom quantile:
 * sto_trial_pbt_breed_ev ends it PRUNED (its value the last reported one)
 * and creates, in the same transaction, its replacement: a QUEUED trial
 * with the next number, started (so it resumes from the checkpoint the
 * caller puts in its folder), pbt_epoch = the boundary and its lineage;
 * ev_end and ev_new (may be NULL) are stored with the two changes (the
 * trial ids in their data are the caller's: ev_new's data may name the new
 * trial only as "the replacement"). HPO_ECONFLICT unless the member is
 * queued. */
int sto_trial_pbt_ranked(sto_db *db, int64_t trial_id, int64_t epoch);
typedef struct sto_pbt_breed {
    int64_t replaced_id;   /* the member replaced (queued) */
    const char *params;    /* the new trial's params, a JSON object text */
    const char *lineage;   /* its lineage, a JSON object text */
    int64_t epoch;         /* the boundary: its start epoch */
    int64_t max_trials;    /* > 0: HPO_EEXHAUSTED, nothing stored, when the study has that many
                            * (counted under its row lock, whatever other nodes bred) */
} sto_pbt_breed;
int sto_trial_pbt_breed_ev(sto_db *db, int64_t study_id, const sto_pbt_breed *b, const sto_event_in *ev_end,
                           const sto_event_in *ev_new, int64_t *trial_id_out, int64_t *number_out);

/* ---- embedded trials: queueing, per-epoch curves (schema v3) ----
 * A trial of an embedded study is created running by the scheduler (with
 * lease 0: workers, not leases, keep it alive). When hpod restarts, or a
 * study is paused, its running trials go back to QUEUED and are resumed
 * later from their checkpoints; sto_trial_start marks one running again. */

/* running -> queued. HPO_ECONFLICT unless running. */
int sto_trial_requeue(sto_db *db, int64_t trial_id);
int sto_trial_requeue_ev(sto_db *db, int64_t trial_id, const sto_event_in *ev);
/* Every running trial of a study -> queued (crash recovery); *n_out (may be
 * NULL) gets how many. */
int sto_trials_requeue_running(sto_db *db, int64_t study_id, int64_t *n_out);
/* queued (or running) -> running on a slot; sets started the first time.
 * HPO_ECONFLICT if the trial is finished. */
int sto_trial_start(sto_db *db, int64_t trial_id, const char *slot);
int sto_trial_start_ev(sto_db *db, int64_t trial_id, const char *slot, const sto_event_in *ev);
/* A requeued trial (queued, started before) -> running on a slot, for one
 * caller only: HPO_ECONFLICT when it is not queued (any more: another
 * connection, another hpod on the same database, took it first). */
int sto_trial_resume_ev(sto_db *db, int64_t trial_id, const char *slot, const sto_event_in *ev);
/* The one call behind resume and hand-out, within r's parallel limit (its
 * max_trials and event fields are not used: the trial has its number; ev
 * is stored): queued -> running on r->slot. HPO_ECONFLICT when the trial
 * is not waiting any more (another node took it) or r->parallel trials of
 * its study run. */
int sto_trial_claim_ev(sto_db *db, int64_t trial_id, const sto_trial_run *r, const sto_event_in *ev);
/* Records the best epoch (best_epoch < 0 keeps the stored one) and adds
 * add_seconds (>= 0, else HPO_EINVAL) to the training time of a trial, in
 * any state. HPO_ENOTFOUND for an unknown trial. */
int sto_trial_set_training(sto_db *db, int64_t trial_id, int64_t best_epoch, double add_seconds);

/* Per-epoch metrics of one execution of a trial (a learning curve point):
 * metrics is a JSON object text ({"loss":..,"val_loss":..,"val_accuracy":..,
 * "seconds":..}); replaces an existing (trial, execution, epoch). NULL is
 * stored as "{}"; execution and epoch must be >= 0 (HPO_EINVAL); any state;
 * HPO_ENOTFOUND for an unknown trial, HPO_ECONFLICT for a trial whose node
 * (schema v9) is not this connection's (it left this node: its runner must
 * stop), or, on a connection of a node, a trial of no node that is not
 * running (an external trial's curve point comes with a report). Deleted
 * with the trial (cascade). */
int sto_epoch_put(sto_db *db, int64_t trial_id, int execution, int64_t epoch, const char *metrics);
/* The same with an event (ev may be NULL). */
int sto_epoch_put_ev(sto_db *db, int64_t trial_id, int execution, int64_t epoch, const char *metrics,
                     const sto_event_in *ev);
/* An external trial's reported vector at step (execution 0): the first one
 * of a step is kept, as the step's intermediate value is (a repeated
 * report changes neither, so a restart replays what the pruner saw). */
int sto_epoch_put_report(sto_db *db, int64_t trial_id, int64_t step, const char *metrics);
typedef struct sto_epoch {
    int execution;
    int64_t epoch;
    char *metrics; /* JSON text */
} sto_epoch;
/* Curves of a trial ordered by execution, then epoch (the caller frees the
 * list with sto_epoch_list_free). HPO_ENOTFOUND for an unknown trial. */
int sto_trial_epochs(sto_db *db, int64_t trial_id, sto_epoch **out, size_t *n_out);
void sto_epoch_list_free(sto_epoch *list, size_t n);

/* ---- datasets uploaded to hpod (schema v3) ---- */
typedef struct sto_dataset {
    int64_t id;
    char *name;     /* unique */
    char *format;   /* "csv" | "idx" | "npy" */
    char *path;     /* the file name (JSON array text of names for formats
                       with two files, e.g. ["x.npy","y.npy"]); the api keeps
                       them in <data_dir>/datasets/<id>-<name>/ (ids are
                       never reused: AUTOINCREMENT) */
    char *meta;     /* JSON text: shape, n_classes, label column, ... */
    int64_t n_rows;
    int64_t bytes;
    double created;
} sto_dataset;

/* name, format and path are required (HPO_EINVAL); meta NULL is stored as
 * "{}". HPO_ECONFLICT if the name is taken. get/get_by_name/delete:
 * HPO_ENOTFOUND when there is no such dataset. list: oldest first (by id).
 * Storage only records the paths; the caller owns the files. */
int sto_dataset_create(sto_db *db, const char *name, const char *format, const char *path,
                       const char *meta, int64_t n_rows, int64_t bytes, int64_t *id_out);
/* The same with place(arg, id) called inside the insert's transaction,
 * once the id is known and before the commit: it puts the files where the
 * id says (0, or an error: nothing is stored). A crash before the commit
 * leaves files without a row (the start-up sweep moves them aside), never
 * a row without its files. */
typedef int (*sto_dataset_place_fn)(void *arg, int64_t id);
int sto_dataset_create_placed(sto_db *db, const char *name, const char *format, const char *path,
                              const char *meta, int64_t n_rows, int64_t bytes, sto_dataset_place_fn place, void *arg,
                              int64_t *id_out);
int sto_dataset_get(sto_db *db, int64_t id, sto_dataset *out);
int sto_dataset_get_by_name(sto_db *db, const char *name, sto_dataset *out);
int sto_dataset_list(sto_db *db, sto_dataset **out, size_t *n_out);
int sto_dataset_delete(sto_db *db, int64_t id);
/* Deletes a dataset unless in_use(arg), called inside the transaction
 * after the dataset's row is locked (PostgreSQL: FOR UPDATE), says a study
 * or model uses it: in_use returns 1 (in use: HPO_ECONFLICT, nothing
 * deleted), 0 (deleted) or an error (returned). A study or model created
 * concurrently holds the row (sto_study_new.dataset_id), so in_use reads
 * it once it committed, or it finds the row gone. HPO_ENOTFOUND if there
 * is no such dataset. */
typedef int (*sto_dataset_in_use_fn)(void *arg);
int sto_dataset_delete_unused(sto_db *db, int64_t id, sto_dataset_in_use_fn in_use, void *arg);
void sto_dataset_clear(sto_dataset *d);
void sto_dataset_list_free(sto_dataset *list, size_t n);

/* ---- models (schema v4) ----
 * A model is made from a study's trials by a job on the worker pool: a
 * refit (retrained on train+validation), a trial's own checkpoint, or an
 * ensemble of other models. It is created QUEUED, a worker starts it
 * (RUNNING) and finishes it COMPLETE (with a result JSON and, for trained
 * models, the path of its weights file relative to the data dir) or FAILED
 * (with an error). Models of a running job go back to QUEUED at restart. */
typedef enum { STO_MODEL_REFIT = 0, STO_MODEL_TRIAL = 1, STO_MODEL_ENSEMBLE = 2 } sto_model_kind;
typedef enum {
    STO_MODEL_QUEUED = 0,
    STO_MODEL_RUNNING = 1,
    STO_MODEL_COMPLETE = 2,
    STO_MODEL_FAILED = 3
} sto_model_state;

typedef struct sto_model {
    int64_t id, study_id;
    int64_t trial_id;      /* origin trial; 0 for ensembles */
    sto_model_kind kind;
    sto_model_state state;
    char *spec;            /* JSON: how it is made (epochs, members, method, ...) */
    char *result;          /* JSON: metrics, weights, members; NULL until finished */
    char *path;            /* weights file under the data dir; NULL if none */
    char *error;           /* why it failed; NULL otherwise */
    double created, started, finished;
    int64_t node_id;       /* schema v9: the node that runs it or ran it (0: none) */
} sto_model;

const char *sto_model_kind_name(sto_model_kind k);
const char *sto_model_state_name(sto_model_state s);
/* HPO_ENOTFOUND for an unknown study. dataset_id: the uploaded dataset
 * the job trains or predicts on (0: none, or a builtin one), held in the
 * insert's transaction as sto_study_new's is: HPO_ESTALE if it was
 * deleted since the caller read it. */
int sto_model_create(sto_db *db, int64_t study_id, int64_t trial_id, sto_model_kind kind, const char *spec,
                     int64_t dataset_id, int64_t *id_out);
int sto_model_get(sto_db *db, int64_t id, sto_model *out);
/* Models of a study (kind < 0: every kind), oldest first. */
int sto_model_list(sto_db *db, int64_t study_id, int kind, sto_model **out, size_t *n_out);
/* The oldest queued model (any study); HPO_ENOTFOUND when none. */
int sto_model_next_queued(sto_db *db, sto_model *out);
/* The data of an event about a row the call itself picks (its id): a JSON
 * object text to free(), or NULL for "{}". */
typedef char *(*sto_event_data_fn)(void *arg, int64_t id);
/* Claims the oldest queued model job (any study): queued -> running, in
 * one transaction with its event (ev_type, NULL for none, with data from
 * data(arg, id) when data is not NULL), the model as it is now in *out.
 * Each queued model is claimed once, whatever the number of connections
 * (hpod nodes) claiming together: on PostgreSQL a row another transaction
 * is claiming is skipped (FOR UPDATE SKIP LOCKED). HPO_ENOTFOUND when
 * none is queued (or all are being claimed). */
int sto_model_claim_ev(sto_db *db, const char *ev_type, sto_event_data_fn data, void *arg, sto_model *out);
/* queued -> running; HPO_ECONFLICT if it is finished. */
int sto_model_start(sto_db *db, int64_t id);
int sto_model_start_ev(sto_db *db, int64_t id, const sto_event_in *ev);
/* -> COMPLETE or FAILED; HPO_ECONFLICT if already finished. */
int sto_model_finish(sto_db *db, int64_t id, sto_model_state state, const char *result, const char *path,
                     const char *error);
int sto_model_finish_ev(sto_db *db, int64_t id, sto_model_state state, const char *result, const char *path,
                        const char *error, const sto_event_in *ev);
/* running -> queued (a job that must run again later: the disk was full);
 * HPO_ECONFLICT unless running. */
int sto_model_requeue(sto_db *db, int64_t id);
/* Every running model -> queued (crash recovery); *n_out may be NULL. */
int sto_models_requeue_running(sto_db *db, int64_t *n_out);
void sto_model_clear(sto_model *m);
void sto_model_list_free(sto_model *list, size_t n);

/* ---- nodes (schema v9; nodes.c): several hpod processes on one database ----
 * A node is one run of an hpod process. It registers at start (a row with
 * an ident naming its data dir across runs, and a display name), beats
 * every second or so (a write: heartbeat = now), and ends its row when it
 * stops. A trial or model job started on one of its slots records it, and
 * only that node writes to it while it runs (report, finish, requeue,
 * epochs: HPO_ECONFLICT for another), so a node found dead can be replaced
 * safely: a node whose heartbeat is older than a timeout is ended by the
 * first other node that looks (exactly once: sto_nodes_end_stale), and its
 * running jobs are reclaimed, each by one caller (sto_trial_reclaim_ev,
 * sto_models_reclaim): trials back to the queue to resume from their
 * checkpoints, model jobs queued again. A node that beats after it was
 * ended learns it (sto_node_beat: HPO_ECONFLICT) and registers again. On
 * PostgreSQL the times are the server's clock, the same for every node;
 * on SQLite (one node) the caller's. */
typedef struct sto_node {
    int64_t id;
    char *ident, *name;
    double started, heartbeat, ended; /* ended 0 while it lives */
    char *end_reason;                 /* "stopped", "no heartbeat", "restarted"; NULL while it lives */
    double now;                       /* sto_node_list: the database's clock when it was read */
} sto_node;
void sto_node_clear(sto_node *n);
void sto_node_list_free(sto_node *list, size_t n);
/* A new node row (ident, name required); this connection then works for
 * it: the trials and model jobs it starts on a slot record it, and its
 * runners' writes are kept to it. */
int sto_node_register(sto_db *db, const char *ident, const char *name, int64_t *id_out);
/* The node this connection works for (0: none registered). */
int64_t sto_node_current(sto_db *db);
int sto_node_rename(sto_db *db, int64_t id, const char *name);
/* heartbeat = now; HPO_ECONFLICT once the node was ended (found dead). */
int sto_node_beat(sto_db *db, int64_t id);
/* Ends the node's row with reason (it stopped); HPO_ECONFLICT if it had
 * ended already. */
int sto_node_end(sto_db *db, int64_t id, const char *reason);
/* Ends every live node other than the caller's (sto_node_current) whose
 * heartbeat is older than timeout seconds, or whose ident is ident (an
 * earlier run of the caller's data dir; NULL: none), or every other one
 * when all_others (one node per database: SQLite). The nodes this call
 * ended in *out (may be NULL); a node is ended by one caller only. */
int sto_nodes_end_stale(sto_db *db, double timeout, const char *ident, int all_others, sto_node **out,
                        size_t *n_out);
/* The newest limit nodes (<= 0: all), newest first. */
int sto_node_list(sto_db *db, int64_t limit, sto_node **out, size_t *n_out);
/* A running trial's state and node (0: none), for its runner to see
 * whether it still runs there. HPO_ENOTFOUND when it is gone. */
int sto_trial_owner(sto_db *db, int64_t trial_id, sto_trial_state *state, int64_t *node_id);
/* Running trials whose node has ended; with unowned also those of no node
 * and no lease (started before schema v9: at start-up only). */
int sto_trials_orphaned(sto_db *db, int unowned, sto_trial **out, size_t *n_out);
/* An orphaned trial (running on node_id, 0: none) queued again (its node
 * cleared; resumed later from its checkpoint), or failed with fail_error
 * when that is not NULL, with ev (may be NULL) in the same transaction;
 * HPO_ECONFLICT when it no longer runs there (another caller reclaimed it
 * first). */
int sto_trial_reclaim_ev(sto_db *db, int64_t trial_id, int64_t node_id, const char *fail_error,
                         const sto_event_in *ev);
/* Running model jobs whose node has ended (with unowned: or of no node)
 * queued again; *n_out (may be NULL) how many. */
int sto_models_reclaim(sto_db *db, int unowned, int64_t *n_out);
/* The model jobs sto_models_reclaim would queue again, by id (free with
 * sto_model_list_free). */
int sto_models_orphaned(sto_db *db, int unowned, sto_model **out, size_t *n_out);
/* Another connection to the database db was opened with (a node's
 * heartbeat has its own, so a long call on db never delays it). */
int sto_reopen(sto_db *db, sto_db **out);
/* On a shared database: a transaction of this connection left idle for
 * seconds (its process stalled: stopped, swapped out) is ended by the
 * server, so its row locks hold the other nodes up no longer (0: the
 * server's setting). hpod's transactions never wait between statements.
 * Nothing on SQLite. */
int sto_set_stall_timeout(sto_db *db, double seconds);

/* ---- events (the study's progress stream; ids increase) ---- */
/* ---- events (the study's progress stream; ids increase, and a study's
 * events become visible in id order on PostgreSQL too: each insert locks
 * its study's row before it draws the id) ---- */
typedef struct sto_event {
    int64_t id, study_id, trial_id; /* trial_id 0 when none */
    char *type;                     /* "trial_started", "trial_complete", ... */
    char *data;                     /* JSON text */
    double created;
} sto_event;

/* type is required; data NULL is stored as "{}"; trial_id <= 0 means none.
 * HPO_ENOTFOUND for an unknown study. */
int sto_event_append(sto_db *db, int64_t study_id, int64_t trial_id, const char *type,
                     const char *data, int64_t *id_out);
/* Events of a study with id > after_id, oldest first, at most limit (<= 0:
 * no limit). HPO_ENOTFOUND for an unknown study. */
int sto_event_list(sto_db *db, int64_t study_id, int64_t after_id, int64_t limit,
                   sto_event **out, size_t *n_out);
void sto_event_list_free(sto_event *list, size_t n);
/* The id of a study's latest event (0 when it has none). */
int sto_event_last_id(sto_db *db, int64_t study_id, int64_t *id_out);

/* ---- events stored by other connections (PostgreSQL: watch.c) ----
 * A watch is a connection of its own that LISTENs on hpo_events: every
 * transaction that stores an event sends NOTIFY hpo_events (the study id)
 * in it, delivered at its commit, so a process learns at once that other
 * processes (hpod nodes) stored events. HPO_EUNSUPPORTED on SQLite (its
 * one hpod stores every event itself). */
typedef struct sto_watch sto_watch;
int sto_watch_open(sto_db *db, sto_watch **out);
/* Waits up to timeout_ms: 1 when notices arrived, or when the connection
 * broke and was made again (events may have been missed meanwhile: read
 * them), 0 on timeout or sto_watch_interrupt. Never fails: a server that
 * is gone is tried again at the next call. */
int sto_watch_wait(sto_watch *w, int timeout_ms);
/* Makes a sto_watch_wait under way (or the next one) return 0 at once;
 * from any thread. */
void sto_watch_interrupt(sto_watch *w);
void sto_watch_close(sto_watch *w);

#endif
