/* main.c - `hpo`: global flags, help, and the subcommand table (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hpo.h"

static const char help[] =
    "usage: hpo [--url URL] [--token TOKEN] COMMAND [ARGS]\n"
    "\n"
    "The command-line client of hpod, the hyperparameter-search service.\n"
    "\n"
    "Studies:\n"
    "  study create FILE.json [--json]  create a study from its definition (FILE - reads stdin);\n"
    "                                   prints its id (--json: the study)\n"
    "  study list [--json]              id, name, algorithm, state, progress, best value\n"
    "  study get ID                     the study as JSON (definition, counts, best)\n"
    "  study delete ID                  delete it with its trials\n"
    "  study watch ID [--interval S]    progress bar with ETA, trial counts by state and the\n"
    "                                   best so far (plain lines when stdout is not a terminal);\n"
    "                                   exits 0 when the study is finished (embedded: complete;\n"
    "                                   external: max_trials trials finished), 130 on Ctrl-C\n"
    "  best ID [--top N] [--json]       the N best complete trials, best first\n"
    "  trials ID [--state S] [--order number|value] [--desc] [--limit N] [--offset N] [--json]\n"
    "                                   the trials of a study (S: running, complete, pruned,\n"
    "                                   failed, cancelled, queued)\n"
    "\n"
    "Ask/tell, for your own training loop:\n"
    "  ask ID [--params-only]           start a trial; prints it as JSON (trial_id, number,\n"
    "                                   params, lease_expires) or only its params\n"
    "  report TRIAL STEP VALUE          report an intermediate value; prints \"continue\" (exit 0)\n"
    "                                   or \"prune\" (exit 3): stop and `tell TRIAL --state pruned`\n"
    "  tell TRIAL VALUE [VALUE...]      finish a trial with its value (several: one per execution)\n"
    "  tell TRIAL --state failed|pruned [--error TEXT]\n"
    "\n"
    "Models of an embedded study (hpod trains them):\n"
    "  refit ID [--top N | --trials T,T] [--epochs-factor F] [--wait] [--json]\n"
    "                                   retrain the best trials on train+validation for\n"
    "                                   ceil(F x best epoch) epochs (F 1.2), test them; prints\n"
    "                                   the queued models, or with --wait their metrics\n"
    "  ensemble ID [--members M,M | --top N] [--method mean|weighted|greedy] [--rounds R]\n"
    "           [--wait] [--json]       ensemble models; prints its id, or with --wait each\n"
    "                                   member's weight and the val/test metrics\n"
    "  models ID [--json]               the study's refits, trial models and ensembles\n"
    "  predict MODEL [FILE.json|-]      predictions for {\"inputs\": [[...], ...]} (or the bare\n"
    "                                   rows), from a file or stdin\n"
    "\n"
    "Options and environment:\n"
    "  --url URL      hpod's address; default $HPO_URL, else http://127.0.0.1:8080\n"
    "  --token TOKEN  bearer token for hpod --token; default $HPO_TOKEN\n"
    "  -h, --help     this text;  --version  the client's version\n"
    "\n"
    "Exit codes:\n"
    "  0    ok\n"
    "  1    usage error (bad command, argument or file)\n"
    "  2    hpod refused the request (HTTP 4xx); its JSON error is printed on stderr\n"
    "  3    report: the pruner says stop this trial\n"
    "  4    cannot reach hpod (connection refused, timeout, bad URL)\n"
    "  5    hpod failed (HTTP 5xx) or answered something unreadable\n"
    "  6    refit/ensemble --wait: the job failed (its error is printed)\n"
    "  130  interrupted (Ctrl-C in watch)\n";

typedef struct command {
    const char *word1, *word2; /* "study" "create"; word2 NULL for one-word commands */
    int (*fn)(cli_ctx *c, int argc, char **argv);
} command;

static const command commands[] = {
    {"study", "create", cli_study_create}, {"study", "list", cli_study_list},
    {"study", "get", cli_study_get},       {"study", "delete", cli_study_delete},
    {"study", "watch", cli_study_watch},   {"studies", NULL, cli_study_list},
    {"best", NULL, cli_best},              {"ask", NULL, cli_ask},
    {"report", NULL, cli_report},          {"tell", NULL, cli_tell},
    {"trials", NULL, cli_trials},          {"refit", NULL, cli_refit},
    {"ensemble", NULL, cli_ensemble},      {"models", NULL, cli_models},
    {"predict", NULL, cli_predict},
};

int main(int argc, char **argv) {
    const char *url = getenv("HPO_URL");
    const char *token = getenv("HPO_TOKEN");
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) { /* global flags come first */
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(help, stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("hpo %s\n", HPO_VERSION);
            return CLI_OK;
        } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
            token = argv[++i];
        } else {
            return cli_usage("unknown option %s", argv[i]);
        }
    }
    if (i >= argc) {
        fputs(help, stderr);
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
        cli_ctx c = {0};
        int rc = cli_init(&c, base, token);
        if (rc == CLI_OK) rc = cmd->fn(&c, argc - i - words, argv + i + words);
        cli_clear(&c);
        return rc;
    }
    if (strcmp(argv[i], "study") == 0)
        return cli_usage("study needs one of: create, list, get, delete, watch");
    return cli_usage("unknown command %s", argv[i]);
}
