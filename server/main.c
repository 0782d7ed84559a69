/* main.c - hpod: flags, configuration, start-up and shutdown.
 *
 *   hpod [--port N] [--bind ADDR] [--data-dir DIR] [--database postgresql://...]
 *        [--artifacts-dir DIR] [--node-timeout S] [--node-name NAME]
 *        [--devices cpu:N[xT],cuda:G[xK],...] [--token T] [--sync normal|full]
 *        [--max-connections N] [--max-connections-per-client N] [--max-streams N]
 *        [--header-timeout S] [--allowed-host NAME]... [--max-body BYTES] [--max-upload BYTES]
 *        [--max-model-bytes SIZE] [--max-dataset-bytes SIZE] [--max-dataset-loads N]
 *        [--log-level debug|info|warn|error] [--log-format text|json]
 *   hpod --help | --version
 *
 * One hpod per data dir: a second one on the same dir exits with "data dir
 * DIR in use by pid N" (api/data_dir.h); one on a port in use exits too. A
 * --data-dir longer than API_DIR_ROOT_MAX bytes is refused at start (exit
 * 2), so every path under it fits (data_dir.h), and so is one whose SQLite
 * database's path, absolute with links resolved, SQLite cannot open (over
 * 497 bytes: api_dir_check_db_path; not with --database).
 *
 * The database: SQLite in the data dir (hpo.db) by default, refused (exit
 * 1) when SQLite's quick_check finds it damaged, naming the complaint and
 * the remedy (storage.h: sto_open); --database
 * postgresql://user@host/db (or postgres://...) keeps it in PostgreSQL
 * instead (storage/sql.h). A URL of another scheme, or a server that
 * cannot be reached or used, exits 2 with the reason.
 *
 * The files (datasets, checkpoints, models, TensorBoard runs) are in
 * --artifacts-dir, the data dir by default. Several nodes on one database
 * share one (a network file system): a trial a dead node trained resumes
 * from its checkpoint on another, a model trained on one node is served by
 * every node. The data dir keeps what is the node's own: its lock, its
 * node-id (data_dir.h), SQLite's file. Each hpod is a node of its
 * database (api/jobs.h: nodes), named --node-name (default host:port);
 * --node-timeout is how long a node may go without a heartbeat before the
 * others take its jobs over.
 *
 * --max-dataset-bytes and --max-dataset-loads set the engine's process-wide
 * dataset limits (engine/data.h: the most bytes one dataset may take, and
 * how many are loaded at once) before anything is loaded.
 * --max-upload BYTES is the largest dataset upload (POST /api/v1/datasets,
 * the whole multipart body; default 1 GiB); over it the upload gets 413.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blas_select.h"
#include "data.h"
#include "data_dir.h"
#include "engine_cli.h"
#include "gpu.h"
#include "http.h"
#include "scheduler.h"

#define MAX_ALLOWED_HOSTS 16

typedef struct config {
    srv_http_options http;
    const char *allowed_hosts[MAX_ALLOWED_HOSTS]; /* --allowed-host, into http */
    const char *data_dir;
    const char *artifacts_dir; /* --artifacts-dir; NULL: data_dir */
    const char *node_name;     /* --node-name; NULL: host:port */
    double node_timeout;       /* --node-timeout; 0: API_NODE_TIMEOUT */
    const char *database; /* --database URL; NULL: SQLite in data_dir */
    const char *devices;
    sto_sync sync;
    uint64_t max_upload; /* --max-upload; 0: the api's default */
    uint64_t max_model;  /* --max-model-bytes; 0: srv_default_model_budget */
    size_t max_dataset_bytes; /* --max-dataset-bytes; 0: the engine's default */
    int max_dataset_loads;    /* --max-dataset-loads; 0: the engine's default */
} config;

static void usage(FILE *f) {
    fprintf(f,
            "usage: hpod [options]        run the hyperparameter-search service\n"
            "       hpod train --help     train one model outside any study\n"
            "\n"
            "  --port N            TCP port (default 8080; 0 picks a free one)\n"
            "  --bind ADDR         IPv4 address to listen on (default 127.0.0.1)\n"
            "  --data-dir DIR      where the SQLite database and the files (datasets,\n"
            "                      checkpoints, models) live (default ./hpo-data); one hpod\n"
            "                      per data dir\n"
            "  --database URL      keep the database in PostgreSQL instead of SQLite:\n"
            "                      postgresql://[user[:password]@]host[:port]/dbname[?...]\n"
            "                      (or postgres://); the schema is created on first use.\n"
            "                      Several hpod (nodes) may share one database\n"
            "  --artifacts-dir DIR where the files live instead of --data-dir: datasets,\n"
            "                      checkpoints, models, TensorBoard runs. Nodes sharing a\n"
            "                      database share one (a network file system), so any node\n"
            "                      resumes a trial or serves a model another one trained\n"
            "  --node-timeout S    seconds a node may go without a heartbeat before the other\n"
            "                      nodes take its jobs over (default 10)\n"
            "  --node-name NAME    this node's name in GET /api/v1/nodes (default host:port)\n"
            "  --token T           require 'Authorization: Bearer T' on mutating calls\n"
            "                      (default: $HPO_TOKEN; none if unset)\n"
            "  --devices SPEC      worker slots: cpu:N (N slots of 1 BLAS thread) or cpu:NxT\n"
            "                      (N slots of T threads); default cpu:2. cuda:G[xK]: K\n"
            "                      slots training on GPU G; cuda:all[xK]: K on every GPU;\n"
            "                      cuda:G+H[xK]: slots training data parallel on GPUs G and H\n"
            "                      (NCCL); pools mix: cpu:1,cuda:0x4 (training.device picks\n"
            "                      a kind)\n"
            "  --sync MODE         normal (default): durable against process crashes;\n"
            "                      full: fsync every commit and trial checkpoint,\n"
            "                      durable against power loss\n"
            "  --max-connections N HTTP connections served at once, a thread each (default 1024;\n"
            "                      as many more may wait for their first request headers)\n"
            "  --max-connections-per-client N\n"
            "                      connections one client address may hold (default 64;\n"
            "                      0: no cap, e.g. behind a reverse proxy); over it: 503\n"
            "  --max-streams N     open event streams (default 256); over it: 503\n"
            "  --header-timeout S  seconds a connection has to send a request's headers,\n"
            "                      from its accept or its previous response (default 10)\n"
            "  --allowed-host NAME a Host name that reaches this hpod besides localhost and\n"
            "                      the bind address (repeatable; without --token other names\n"
            "                      get 421, against DNS rebinding)\n"
            "  --max-body BYTES    largest accepted request body (default 1048576)\n"
            "  --max-upload BYTES  largest dataset upload, the whole multipart body of\n"
            "                      POST /api/v1/datasets (default 1073741824); over it: 413\n"
            "  --max-model-bytes SIZE  memory one model may take to train (weights,\n"
            "                      gradients, optimiser state, activations; e.g. 2G, 512M);\n"
            "                      larger models fail their trial with the reason. Default:\n"
            "                      half the memory shared by the slots, at most 4G\n"
            "  --max-dataset-bytes BYTES\n"
            "                      the most memory one dataset may take, decoded (an upload\n"
            "                      or a study's dataset over it gets 413); default: a quarter\n"
            "                      of physical memory, at least 256 MiB, at most 4 GiB\n"
            "  --max-dataset-loads N\n"
            "                      datasets decoded at once (uploads wait up to 30 s for a\n"
            "                      turn, then get 503); default: as many as fit in a quarter\n"
            "                      of memory at --max-dataset-bytes each, 1 to 4\n"
            "  --log-level L       debug, info (default), warn or error\n"
            "  --log-format F      text (default) or json: one object per line with ts,\n"
            "                      level, msg and the line's fields (route, status, ...)\n"
            "  --help, --version\n");
}

/* Why hpod cannot start: "hpod: ..." on stderr, or under --log-format json
 * an ERROR line of the log, so that a shipper parsing each line as JSON
 * keeps it (usage and --help stay plain text). */
static void start_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void start_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (hpo_log_format == HPO_LOG_JSON)
        hpo_log(HPO_LOG_ERROR, "%s", msg);
    else
        fprintf(stderr, "hpod: %s\n", msg);
}

static int parse_uint(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        start_error("%s must be an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A byte count with an optional K, M, G or T suffix (powers of 1024). */
static int parse_size(const char *flag, const char *s, uint64_t lo, uint64_t *out) {
    char *end = (char *)s;
    unsigned long long v = 0;
    int shift = -1;
    errno = 0;
    if (*s >= '0' && *s <= '9') v = strtoull(s, &end, 10);
    if (end != s && !errno) {
        if (!*end) shift = 0;
        else if (!end[1]) shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : *end == 'T' ? 40 : -1;
    }
    if (shift < 0 || v > (UINT64_MAX >> shift) || (v << shift) < lo) {
        start_error("%s must be a size of at least %llu bytes (e.g. 4G, 512M), got '%s'", flag,
                    (unsigned long long)lo, s);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* 0 to run, 1 to exit successfully (help/version), -1 on a bad flag. */
static int parse_flags(int argc, char **argv, config *cfg) {
    enum { O_PORT = 1, O_BIND, O_DATA, O_TOKEN, O_SYNC, O_THREADS, O_MAXBODY, O_LOG, O_HELP, O_VERSION,
           O_DEVICES, O_MAXMODEL };
    enum { O_PERCLIENT = 32, O_STREAMS, O_HEADERTIMEOUT, O_ALLOWEDHOST };
    enum { O_MAXUPLOAD = 64, O_MAXDSBYTES, O_MAXDSLOADS };
    enum { O_LOGFORMAT = 96, O_DATABASE, O_ARTIFACTS, O_NODETIMEOUT, O_NODENAME };
    static const struct option opts[] = {
        {"port", required_argument, 0, O_PORT},       {"bind", required_argument, 0, O_BIND},
        {"data-dir", required_argument, 0, O_DATA},   {"token", required_argument, 0, O_TOKEN},
        {"sync", required_argument, 0, O_SYNC},       {"max-connections", required_argument, 0, O_THREADS},
        {"max-body", required_argument, 0, O_MAXBODY}, {"log-level", required_argument, 0, O_LOG},
        {"help", no_argument, 0, O_HELP},             {"version", no_argument, 0, O_VERSION},
        {"devices", required_argument, 0, O_DEVICES}, {"max-model-bytes", required_argument, 0, O_MAXMODEL},
        {"max-upload", required_argument, 0, O_MAXUPLOAD},
        {"max-dataset-bytes", required_argument, 0, O_MAXDSBYTES},
        {"max-dataset-loads", required_argument, 0, O_MAXDSLOADS},
        {"log-format", required_argument, 0, O_LOGFORMAT},
        {"database", required_argument, 0, O_DATABASE},
        {"artifacts-dir", required_argument, 0, O_ARTIFACTS},
        {"node-timeout", required_argument, 0, O_NODETIMEOUT},
        {"node-name", required_argument, 0, O_NODENAME},
        {"max-connections-per-client", required_argument, 0, O_PERCLIENT},
        {"max-streams", required_argument, 0, O_STREAMS},
        {"header-timeout", required_argument, 0, O_HEADERTIMEOUT},
        {"allowed-host", required_argument, 0, O_ALLOWEDHOST},
        {0, 0, 0, 0}};
    long v;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_PORT:
            if (parse_uint("--port", optarg, 0, 65535, &v)) return -1;
            cfg->http.port = (int)v;
            break;
        case O_BIND: cfg->http.bind = optarg; break;
        case O_DATA: cfg->data_dir = optarg; break;
        case O_ARTIFACTS: cfg->artifacts_dir = optarg; break;
        case O_NODETIMEOUT:
            if (parse_uint("--node-timeout", optarg, 1, 3600, &v)) return -1;
            cfg->node_timeout = (double)v;
            break;
        case O_NODENAME:
            if (!*optarg || strlen(optarg) > 200) {
                start_error("--node-name takes 1 to 200 bytes");
                return -1;
            }
            cfg->node_name = optarg;
            break;
        case O_DEVICES: cfg->devices = optarg; break;
        case O_TOKEN: cfg->http.token = optarg; break;
        case O_SYNC:
            if (strcmp(optarg, "normal") == 0)
                cfg->sync = STO_SYNC_NORMAL;
            else if (strcmp(optarg, "full") == 0)
                cfg->sync = STO_SYNC_FULL;
            else {
                start_error("--sync must be normal or full");
                return -1;
            }
            break;
        case O_THREADS:
            if (parse_uint("--max-connections", optarg, 1, 100000, &v)) return -1;
            cfg->http.max_connections = (unsigned)v;
            break;
        case O_PERCLIENT:
            if (parse_uint("--max-connections-per-client", optarg, 0, 100000, &v)) return -1;
            cfg->http.max_per_client = v ? (unsigned)v : SRV_HTTP_UNLIMITED;
            break;
        case O_STREAMS:
            if (parse_uint("--max-streams", optarg, 1, 100000, &v)) return -1;
            cfg->http.max_streams = (unsigned)v;
            break;
        case O_HEADERTIMEOUT:
            if (parse_uint("--header-timeout", optarg, 1, 3600, &v)) return -1;
            cfg->http.header_timeout_s = (unsigned)v;
            break;
        case O_ALLOWEDHOST:
            if (cfg->http.n_allowed_hosts == MAX_ALLOWED_HOSTS || !*optarg || strchr(optarg, ':')) {
                start_error("--allowed-host takes a host name without a port, at most %d times",
                            MAX_ALLOWED_HOSTS);
                return -1;
            }
            cfg->allowed_hosts[cfg->http.n_allowed_hosts++] = optarg;
            cfg->http.allowed_hosts = cfg->allowed_hosts;
            break;
        case O_MAXUPLOAD:
            if (parse_uint("--max-upload", optarg, 1, 1L << 40, &v)) return -1;
            cfg->max_upload = (uint64_t)v;
            break;
        case O_MAXMODEL:
            if (parse_size("--max-model-bytes", optarg, UINT64_C(1) << 20, &cfg->max_model)) return -1;
            break;
        case O_MAXDSBYTES: {
            uint64_t bytes;
            if (parse_size("--max-dataset-bytes", optarg, UINT64_C(1) << 20, &bytes)) return -1;
            cfg->max_dataset_bytes = (size_t)bytes;
            break;
        }
        case O_MAXDSLOADS:
            if (parse_uint("--max-dataset-loads", optarg, 1, 64, &v)) return -1;
            cfg->max_dataset_loads = (int)v;
            break;
        case O_MAXBODY:
            if (parse_uint("--max-body", optarg, 1024, 1L << 30, &v)) return -1;
            cfg->http.max_body = (size_t)v;
            break;
        case O_LOG:
            if ((hpo_log_level = hpo_log_level_parse(optarg)) < 0) {
                start_error("--log-level must be debug, info, warn or error");
                return -1;
            }
            break;
        case O_LOGFORMAT:
            if ((hpo_log_format = hpo_log_format_parse(optarg)) < 0) {
                hpo_log_format = HPO_LOG_TEXT;
                start_error("--log-format must be text or json");
                return -1;
            }
            break;
        case O_DATABASE:
            if (!sto_is_database_url(optarg)) {
                start_error("--database must be a postgresql:// or postgres:// URL "
                            "(SQLite, the default, lives in --data-dir)");
                return -1;
            }
            cfg->database = optarg;
            break;
        case O_HELP: usage(stdout); return 1;
        case O_VERSION: {
            char gpu[160];
            eng_gpu_describe(gpu, sizeof gpu);
            printf("hpod %s\nGPU: %s\n", HPO_VERSION, gpu);
            return 1;
        }
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        start_error("unexpected argument '%s'", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* --log-format before the flags are parsed, so that the lines logged
 * before (the OpenBLAS re-exec) are in it too; parse_flags checks it. */
static void early_log_format(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--log-format") == 0 && i + 1 < argc) v = argv[i + 1];
        else if (strncmp(argv[i], "--log-format=", 13) == 0) v = argv[i] + 13;
        if (v && hpo_log_format_parse(v) >= 0) hpo_log_format = hpo_log_format_parse(v);
    }
}

int main(int argc, char **argv) {
    early_log_format(argc, argv);
    /* First: OpenBLAS picks its kernel when it loads, so a generic kernel on
     * an AVX-512 machine means re-executing with OPENBLAS_CORETYPE set. */
    eng_blas_select(argc, argv);
    if (argc > 1 && strcmp(argv[1], "train") == 0) return eng_train_main(argc - 1, argv + 1);

    config cfg = {.http = {.bind = "127.0.0.1", .port = 8080}, .data_dir = "./hpo-data", .devices = "cpu:2"};
    cfg.http.token = getenv("HPO_TOKEN");
    int rc = parse_flags(argc, argv, &cfg);
    if (rc) return rc > 0 ? 0 : 2;
    eng_data_set_max_bytes(cfg.max_dataset_bytes);
    eng_data_set_max_loads(cfg.max_dataset_loads);
    srv_slot *slots = NULL;
    int n_slots = 0;
    hpo_error derr = {{0}, {0}};
    if (srv_devices_parse(cfg.devices, &slots, &n_slots, &derr)) {
        start_error("%s", derr.message);
        return 2;
    }
    if (srv_devices_resolve(&slots, &n_slots, &derr)) { /* cuda slots: their GPUs must be there */
        start_error("%s", derr.message);
        free(slots);
        return 2;
    }

    hpo_error lerr = {{0}, {0}};
    const char *artifacts = cfg.artifacts_dir ? cfg.artifacts_dir : cfg.data_dir;
    /* every path below either fits (data_dir.h) */
    if (api_dir_check_root(cfg.data_dir, "data-dir", &lerr) || api_dir_check_root(artifacts, "artifacts-dir", &lerr)) {
        start_error("--%s: %s", lerr.field, lerr.message);
        free(slots);
        return 2;
    }
    char ident[API_NODE_IDENT_MAX];
    int made[2] = {0, 0}; /* the folders made now */
    for (int i = 0; i < 2; i++) {
        const char *dir = i ? artifacts : cfg.data_dir;
        if (mkdir(dir, 0755) == 0) {
            made[i] = 1;
        } else if (errno != EEXIST) {
            start_error("cannot create --%s %s: %s", i ? "artifacts-dir" : "data-dir", dir, strerror(errno));
            free(slots);
            return 1;
        }
    }
    if (!cfg.database && api_dir_check_db_path(cfg.data_dir, &lerr)) { /* SQLite's path limit */
        start_error("--%s: %s", lerr.field, lerr.message);
        if (made[1]) rmdir(artifacts);
        if (made[0]) rmdir(cfg.data_dir);
        free(slots);
        return 2;
    }
    if (api_dir_lock(cfg.data_dir, &lerr) || api_dir_node_ident(cfg.data_dir, ident, &lerr)) {
        start_error("%s", lerr.message);
        free(slots);
        return 1;
    }
    char db_path[API_PATH_MAX];
    api_dir_db(db_path, cfg.data_dir);
    sto_db *db = NULL;
    api_ctx *api = NULL;
    srv_http *http = NULL;
    srv_scheduler *sched = NULL;
    hpo_error err = {{0}, {0}};
    int exit_code = 1;
    if (cfg.database) {
        snprintf(db_path, sizeof db_path, "postgresql (--database)"); /* the URL may hold a password */
        if ((rc = sto_open(cfg.database, cfg.sync, &db))) {
            start_error("cannot use the database of --database: %s (the log says why)",
                        hpo_strerror(rc));
            exit_code = 2;
            goto done;
        }
    } else if (api_db_lock(db_path, &lerr)) {
        start_error("%s", lerr.message);
        goto done;
    } else if ((rc = sto_open_why(db_path, cfg.sync, &db, &lerr)) == HPO_EFORMAT) {
        start_error("the database %s is damaged (%s): restore it from a backup, and remove %s-wal and %s-shm "
                    "if they are beside it (a stale write-ahead log is replayed over a restored file and damages "
                    "it again)",
                    db_path, lerr.message, db_path, db_path);
        goto done;
    } else if (rc) {
        start_error("cannot open the database %s: %s", db_path, hpo_strerror(rc));
        goto done;
    }
    if (!cfg.max_model) cfg.max_model = srv_default_model_budget(n_slots);
    /* partial uploads and files of ids without a row (data_dir.h), before
     * any job or request can touch them */
    api_dir_sweep(db, artifacts);
    /* the api's files are the artifacts */
    api_options api_opt = {.data_dir = artifacts, .max_upload_bytes = cfg.max_upload,
                           .durable_checkpoints = cfg.sync == STO_SYNC_FULL, .max_model_bytes = cfg.max_model};
    if ((rc = api_ctx_new(db, &api_opt, &api))) {
        start_error("cannot start the api: %s", hpo_strerror(rc));
        goto done;
    }
    char host[256] = "hpod", name[320];
    if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "hpod");
    host[sizeof host - 1] = '\0';
    api_node_options node = {.ident = ident, .name = cfg.node_name ? cfg.node_name : host, .timeout = cfg.node_timeout};
    if ((rc = api_node_start(api, &node))) { /* before the recovery, which ends this data dir's earlier runs */
        start_error("cannot register this node in the database: %s", hpo_strerror(rc));
        goto done;
    }
    if ((rc = srv_scheduler_new(api, slots, n_slots, &sched))) goto done;
    if ((rc = srv_http_start(api, &cfg.http, &http, &err))) {
        start_error("%s", err.message);
        goto done;
    }
    snprintf(name, sizeof name, "%s:%d", host, srv_http_port(http));
    if (!cfg.node_name) api_node_rename(api, name);
    HPO_INFO("hpod %s listening on http://%s:%d (node %lld, data %s, artifacts %s, sync %s, auth %s, %d slot(s) of "
             "%d thread(s), model budget %.1f GiB, datasets up to %.1f GiB, %d loaded at once, OpenBLAS kernel %s)",
             HPO_VERSION, cfg.http.bind, srv_http_port(http), (long long)api_node_id(api), db_path, artifacts,
             cfg.sync == STO_SYNC_FULL ? "full" : "normal",
             cfg.http.token && *cfg.http.token ? "bearer token" : "none", n_slots, slots[0].threads,
             (double)cfg.max_model / (1 << 30), (double)eng_data_max_bytes() / (1 << 30), eng_data_max_loads(),
             eng_blas_corename());
    printf("hpod listening on http://%s:%d\n", cfg.http.bind, srv_http_port(http));
    fflush(stdout);
    srv_scheduler_run(sched);
    exit_code = 0;
done:
    if (api) api_ctx_shutdown(api); /* ends event streams */
    srv_http_stop(http);             /* no request may reach a freed api */
    srv_scheduler_free(sched);       /* running trials are requeued for the next start */
    if (api) api_node_stop(api);     /* its jobs are queued: the node's row ends */
    free(slots);
    api_ctx_free(api);
    sto_close(db);
    if (exit_code == 0) HPO_INFO("hpod stopped");
    return exit_code;
}
