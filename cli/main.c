/* main.c - `hpo`: global flags, the command table (synopsis, help and flags
 * of each command: `hpo --help`, `hpo CMD --help`), and the output flags
 * every command takes (--json, --quiet, --field PATH, --help), taken out of
 * argv here so the commands parse only their own (cli.h). The table and
 * cli/hpo-completion.bash list the same commands and flags
 * (tests/api/test_cli.py checks it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

typedef struct command {
    const char *word1, *word2; /* "study" "create"; word2 NULL for one-word commands */
    int (*fn)(cli_ctx *c, int argc, char **argv);
    const char *args;  /* after the words: "ID [--top N]" */
    const char *help;  /* what it does and prints, lines of at most ~72 columns */
    const char *value_flags; /* its flags that take a value, " "-separated and -enclosed */
} command;

static const command commands[] = {
    {"study", "create", cli_study_create, "FILE.json [--load-if-exists]",
     "create a study from its definition (FILE - reads stdin); prints its id\n(--json: the study). "
     "--load-if-exists: if a study of that name exists,\nprint its id instead (the oldest of that name; "
     "refused, exit 2, when its\ndefinition differs, naming the first differing field)", " "},
    {"study", "list", cli_study_list, "", "id, name, algorithm, state, progress, best value of every study", " "},
    {"study", "get", cli_study_get, "ID", "the study as JSON (definition, counts, best)", " "},
    {"study", "delete", cli_study_delete, "ID", "delete it with its trials", " "},
    {"study", "pause", cli_study_pause, "ID",
     "pause a study: no new trials; an embedded study's running trials are\nqueued again from their last checkpoint. "
     "Prints \"study ID: paused\"", " "},
    {"study", "resume", cli_study_resume, "ID", "resume a paused study; prints \"study ID: running\" (or complete: an\nexternal study whose budget was spent)", " "},
    {"study", "cancel", cli_study_cancel, "ID",
     "cancel a running or paused study for good (its running and queued trials\nare cancelled); prints \"study ID: cancelled\"",
     " "},
    {"study", "watch", cli_study_watch, "ID [--interval S]",
     "progress bar with ETA, trial counts by state and the best so far (plain\nlines when stdout is not a terminal; "
     "--json: the study's JSON at each change);\nfollows the study's event stream (reconnecting with Last-Event-ID), "
     "and\nlooks at the study at least every S seconds (default 1) for what sends\nno event (external asks and "
     "tells); exits 0 when the study is finished\n(complete or cancelled; external: max_trials trials finished), "
     "130 on\nCtrl-C",
     " --interval "},
    {"study", "attr", cli_study_attr, "ID [KEY=VALUE...]",
     "set user attributes of a study (VALUE as JSON when it parses: 0.5, true,\n[1,2], \"text\"; null deletes "
     "the key; else a string); prints its\nuser_attrs (all of them without KEY=VALUE)", " "},
    {"study", "note", cli_study_note, "ID [TEXT|-]",
     "set a study's note (- reads it from stdin; at most 64 KiB of UTF-8);\nprints the note (the current one "
     "without TEXT)", " "},
    {"study", "enqueue", cli_study_enqueue, "ID [--param NAME=VALUE]...",
     "enqueue a trial with these params fixed (the tuner draws the others when\nit is handed out); enqueued trials "
     "go first. VALUE is JSON (3, 0.01,\ntrue, \"x\") or else a string (adam). Prints the queued trial",
     " --param "},
    {"study", "add-trial", cli_study_add_trial,
     "ID --param NAME=VALUE... (--value V... [--repeats] | --state pruned|failed) [--metric NAME=V]... "
     "[--intermediate STEP=V]... [--error TEXT]",
     "add a finished trial (every active param; several --value: one per\nobjective, or per execution with "
     "--repeats); the tuner learns from it. Prints the stored trial",
     " --param --value --repeats --metric --state --intermediate --error "},
    {"study", "export", cli_study_export, "ID [-o|--output FILE]",
     "the study and its trials as a JSON document (format hpo.study/1, which\nstudy import and Optuna read) on stdout, "
     "or written to FILE", " -o --output "},
    {"study", "import", cli_study_import, "FILE [--name NAME]",
     "a new study from an exported document (FILE - reads stdin) with its\nfinished trials; prints its id (the counts "
     "on stderr)", " --name "},
    {"study", "copy", cli_study_copy, "ID [--name NAME]",
     "copy a study with its finished trials (not an embedded study's weights);\nprints the copy's id", " --name "},
    {"studies", NULL, cli_study_list, "", "the same as study list", " "},
    {"best", NULL, cli_best, "ID [--top N]", "the N best complete trials, best first (several objectives: the\nPareto front, each with its values)", " --top "},
    {"trials", NULL, cli_trials, "ID [--state S] [--order number|value] [--desc] [--limit N] [--offset N]",
     "the trials of a study (S: running, complete, pruned, failed, cancelled,\nqueued)",
     " --state --order --limit --offset "},
    {"trial", "attr", cli_trial_attr, "TRIAL [KEY=VALUE...]",
     "set user attributes of a trial, as study attr; prints its user_attrs", " "},
    {"trial", "note", cli_trial_note, "TRIAL [TEXT|-]", "set a trial's note, as study note; prints it", " "},
    {"trial", NULL, cli_trial, "TRIAL", "one trial as JSON, with its intermediate values (and curves)", " "},
    {"importance", NULL, cli_importance, "ID",
     "how much each hyperparameter matters for the objective, most important\nfirst (a random forest's permutation "
     "importance over the complete trials)", " "},
    {"events", NULL, cli_events, "ID [--after N] [--timeout S]",
     "the study's events as JSON lines {\"id\", \"event\", \"data\"}, from after event\nN (default 0: all); ends "
     "with the study (study_complete, study_cancelled),\nafter S seconds (exit 0) or on Ctrl-C (130)",
     " --after --timeout "},
    {"ask", NULL, cli_ask, "ID",
     "start a trial; prints it as JSON (trial_id, number, params,\nlease_expires); --field trial_id --field params.lr "
     "prints just those", " "},
    {"report", NULL, cli_report, "TRIAL STEP VALUE [VALUE...]",
     "report an intermediate value (one per objective of a study with several);\nprints \"continue\" (exit 0) or \"prune\" (exit 3): stop and `tell TRIAL --state pruned`",
     " "},
    {"tell", NULL, cli_tell,
     "TRIAL VALUE [VALUE...] [--repeats] [--metric NAME=V]... | TRIAL --state failed|pruned [--error TEXT]",
     "finish a trial with its value (several: one per objective of a\nmulti-objective study, or one per execution "
     "with --repeats; --metric:\nthe metrics its constraints read), or as failed or pruned",
     " --state --error --repeats --metric "},
    {"refit", NULL, cli_refit, "ID [--top N | --trials T,T] [--epochs-factor F] [--wait]",
     "embedded studies: retrain the best trials on train+validation for\nceil(F x best epoch) epochs (F 1.2), test "
     "them; prints the queued models,\nor with --wait their metrics (exit 6 if one failed)",
     " --top --trials --epochs-factor "},
    {"ensemble", NULL, cli_ensemble, "ID [--members M,M | --top N] [--method mean|weighted|greedy] [--rounds R] [--wait]",
     "ensemble models; prints its id, or with --wait each member's weight and\nthe val/test metrics (exit 6 if it failed)",
     " --members --top --method --rounds "},
    {"models", NULL, cli_models, "ID", "the study's refits, trial models and ensembles", " "},
    {"predict", NULL, cli_predict, "MODEL [FILE.json|-]",
     "predictions for {\"inputs\": [[...], ...]} (or the bare rows), from a file\nor stdin", " "},
    {"weights", NULL, cli_weights, "MODEL [-o|--output FILE|-]",
     "download a model's trained weights (safetensors) to FILE (default\nmodel-MODEL.safetensors; - for stdout); "
     "prints the file and its size", " -o --output "},
    {"dataset", "list", cli_dataset_list, "", "the builtin and uploaded datasets", " "},
    {"dataset", "get", cli_dataset_get, "ID", "an uploaded dataset as JSON", " "},
    {"dataset", "upload", cli_dataset_upload,
     "NAME FILE.csv [--label-column COL] [--task classification|regression] | NAME X Y [--format idx|npy]",
     "upload a dataset: one CSV file (its label column named by --label-column),\nor the inputs X and labels Y as idx "
     "(plain or gzipped) or .npy files\n(--format: by default npy when X ends with .npy, else idx); prints its id",
     " --format --label-column --task "},
    {"dataset", "delete", cli_dataset_delete, "ID", "delete an uploaded dataset and its files", " "},
};

static const char common_help[] =
    "Every command also takes:\n"
    "  --json          print the server's answer as one line of JSON\n"
    "  --field PATH    print only that field of the answer (dotted: params.lr,\n"
    "                  trials.0.value; strings bare; null when absent); repeatable,\n"
    "                  one line each\n"
    "  -q, --quiet     print nothing on success: the exit code says it\n"
    "  -h, --help      that command's usage\n";

static const char exit_help[] =
    "Exit codes:\n"
    "  0    ok\n"
    "  1    usage error (bad command, argument or file)\n"
    "  2    hpod refused the request (HTTP 4xx); its JSON error is printed on stderr\n"
    "  3    report: the pruner says stop this trial\n"
    "  4    cannot reach hpod (connection refused, timeout, bad URL)\n"
    "  5    hpod failed (HTTP 5xx) or answered something unreadable\n"
    "  6    refit/ensemble --wait: the job failed (its error is printed)\n"
    "  130  interrupted (Ctrl-C in watch, events)\n";

static void print_name(FILE *f, const command *cmd) {
    fprintf(f, "%s%s%s", cmd->word1, cmd->word2 ? " " : "", cmd->word2 ? cmd->word2 : "");
}

/* The help text indented by `indent` spaces on every line. */
static void print_indented(FILE *f, const char *text, int indent) {
    for (const char *s = text; *s;) {
        const char *nl = strchr(s, '\n');
        int n = nl ? (int)(nl - s) : (int)strlen(s);
        fprintf(f, "%*s%.*s\n", indent, "", n, s);
        s += n + (nl ? 1 : 0);
    }
}

static void print_help(FILE *f) {
    fputs("usage: hpo [--url URL] [--token TOKEN] COMMAND [ARGS] [--json|--field PATH|--quiet]\n"
          "\n"
          "The command-line client of hpod, the hyperparameter-search service.\n"
          "`hpo COMMAND --help` shows one command.\n\nCommands:\n",
          f);
    for (size_t k = 0; k < HPO_ARRAY_LEN(commands); k++) {
        if (strcmp(commands[k].word1, "studies") == 0) continue; /* an alias */
        fputs("  ", f);
        print_name(f, &commands[k]);
        fprintf(f, "%s%s\n", *commands[k].args ? " " : "", commands[k].args);
        print_indented(f, commands[k].help, 6);
    }
    fprintf(f, "\n%s\n", common_help);
    fputs("Options and environment:\n"
          "  --url URL      hpod's address; default $HPO_URL, else http://127.0.0.1:8080\n"
          "  --token TOKEN  bearer token for hpod --token; default $HPO_TOKEN\n"
          "  -h, --help     this text;  --version  the client's version\n"
          "\n",
          f);
    fputs(exit_help, f);
}

static void print_command_help(const command *cmd) {
    fputs("usage: hpo ", stdout);
    print_name(stdout, cmd);
    printf(" %s [--json|--field PATH|--quiet]\n\n", cmd->args);
    print_indented(stdout, cmd->help, 0);
    printf("\n%s\n%s", common_help, exit_help);
}

static int takes_value(const command *cmd, const char *arg) {
    char key[64];
    if (strlen(arg) > sizeof key - 3) return 0;
    snprintf(key, sizeof key, " %s ", arg);
    return strstr(cmd->value_flags, key) != NULL;
}

/* Takes the output flags out of argv (in place; *argc shrinks). Returns
 * CLI_OK, CLI_EUSAGE, or -1 for --help. */
static int output_flags(cli_ctx *c, const command *cmd, int *argc, char **argv) {
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (takes_value(cmd, a) && i + 1 < *argc) { /* a value that looks like --json is still a value */
            argv[n++] = argv[i++];
            argv[n++] = argv[i];
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            return -1;
        } else if (strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            c->quiet = 1;
        } else if (strcmp(a, "--field") == 0) {
            if (i + 1 >= *argc || !argv[i + 1][0]) return cli_usage("--field needs a PATH such as trial_id or params.lr");
            if (c->n_field == CLI_MAX_FIELDS) return cli_usage("at most %d --field", CLI_MAX_FIELDS);
            c->field[c->n_field++] = argv[++i];
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    if (c->quiet && (c->json || c->n_field)) return cli_usage("--quiet prints nothing: it goes with neither --json nor --field");
    return CLI_OK;
}

int main(int argc, char **argv) {
    const char *url = getenv("HPO_URL");
    const char *token = getenv("HPO_TOKEN");
    cli_ctx c = {0};
    int i = 1, rc;
    for (; i < argc && argv[i][0] == '-'; i++) { /* global flags come first */
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            print_help(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("hpo %s\n", HPO_VERSION);
            return CLI_OK;
        } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
            token = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) { /* the output flags may come first too */
            c.json = 1;
        } else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
            c.quiet = 1;
        } else if (strcmp(argv[i], "--field") == 0 && i + 1 < argc && argv[i + 1][0] && c.n_field < CLI_MAX_FIELDS) {
            c.field[c.n_field++] = argv[++i];
        } else {
            return cli_usage("unknown option %s", argv[i]);
        }
    }
    if (i >= argc) {
        print_help(stderr);
        return CLI_EUSAGE;
    }
    if (!url || !*url) url = "http://127.0.0.1:8080";
    char base[1024];
    snprintf(base, sizeof base, "%s", url);
    size_t n = strlen(base);
    while (n && base[n - 1] == '/') base[--n] = '\0';
    for (size_t k = 0; k < HPO_ARRAY_LEN(commands); k++) {
        const command *cmd = &commands[k];
        if (strcmp(argv[i], cmd->word1) != 0) continue;
        int words = 1;
        if (cmd->word2) {
            if (i + 1 >= argc || strcmp(argv[i + 1], cmd->word2) != 0) continue;
            words = 2;
        }
        int cargc = argc - i - words;
        char **cargv = hpo_xcalloc((size_t)cargc + 1, sizeof *cargv);
        memcpy(cargv, argv + i + words, (size_t)cargc * sizeof *cargv);
        rc = output_flags(&c, cmd, &cargc, cargv);
        if (rc < 0) {
            print_command_help(cmd);
            rc = CLI_OK;
        } else if (rc == CLI_OK) {
            rc = cli_init(&c, base, token);
            if (rc == CLI_OK) rc = cmd->fn(&c, cargc, cargv);
            cli_clear(&c);
        }
        free(cargv);
        return rc;
    }
    for (size_t k = 0; k < HPO_ARRAY_LEN(commands); k++) {
        if (!commands[k].word2 || strcmp(argv[i], commands[k].word1) != 0) continue;
        int help = i + 1 < argc && (strcmp(argv[i + 1], "--help") == 0 || strcmp(argv[i + 1], "-h") == 0);
        if (help) { /* `hpo study --help`: its subcommands */
            for (size_t j = k; j < HPO_ARRAY_LEN(commands); j++) {
                if (!commands[j].word2 || strcmp(commands[j].word1, argv[i]) != 0) continue;
                printf("hpo %s %s %s\n", argv[i], commands[j].word2, commands[j].args);
                print_indented(stdout, commands[j].help, 6);
            }
            return CLI_OK;
        }
        fprintf(stderr, "hpo: %s needs one of:", argv[i]);
        for (size_t j = k; j < HPO_ARRAY_LEN(commands); j++)
            if (commands[j].word2 && strcmp(commands[j].word1, argv[i]) == 0) fprintf(stderr, " %s", commands[j].word2);
        fprintf(stderr, " (see hpo %s --help)\n", argv[i]);
        return CLI_EUSAGE;
    }
    return cli_usage("unknown command %s", argv[i]);
}
