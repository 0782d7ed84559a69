/* outcome.c - what `tell` and `study add-trial` send as a trial's outcome
 * (cli.h): numbers, the values (one per objective, or with --repeats one
 * per execution) and --metric NAME=V. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_parse_number(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int cli_put_metric(json_t *metrics, const char *arg) {
    const char *eq = strchr(arg, '=');
    double x;
    if (!eq || eq == arg || eq - arg > 64 || cli_parse_number(eq + 1, &x))
        return cli_usage("--metric takes NAME=VALUE (VALUE a finite number), not %s", arg);
    char name[65];
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = 0;
    json_object_set_new(metrics, name, json_real(x));
    return CLI_OK;
}

void cli_put_outcome(json_t *body, json_t *values, int repeats, json_t *metrics) {
    size_t n = json_array_size(values);
    if (repeats && n > 0)
        json_object_set(body, "repeats", values);
    else if (n == 1)
        json_object_set(body, "value", json_array_get(values, 0));
    else if (n > 1)
        json_object_set(body, "values", values);
    if (json_object_size(metrics)) json_object_set(body, "metrics", metrics);
}
