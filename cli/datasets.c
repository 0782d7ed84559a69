/* datasets.c - `hpo dataset list|get|upload|delete` (cli.h). An upload is
 * a multipart/form-data POST built with libcurl's mime API, the files
 * streamed from disk: `dataset upload NAME FILE` (csv) or `NAME X Y` (idx
 * or npy, told apart by the files' .npy suffix unless --format says). */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "hpo.h"

int cli_dataset_list(cli_ctx *c, int argc, char **argv) {
    if (argc) return cli_usage("dataset list takes no argument %s", argv[0]);
    json_t *out = NULL;
    int rc = cli_call(c, "GET", "/api/v1/datasets", NULL, &out);
    if (rc) return rc;
    if (!cli_emit(c, out)) {
        printf("%-5s %-24s %-7s %-14s %-9s %s\n", "ID", "NAME", "FORMAT", "TASK", "ROWS", "SHAPE");
        size_t i;
        json_t *d;
        json_array_foreach(json_object_get(out, "datasets"), i, d) {
            char id[24] = "-", shape[64] = "", task[32];
            const json_t *ij = json_object_get(d, "id");
            if (json_is_integer(ij)) snprintf(id, sizeof id, "%lld", (long long)json_integer_value(ij));
            size_t k, used = 0;
            json_t *dim;
            json_array_foreach(json_object_get(d, "shape"), k, dim) {
                int w = snprintf(shape + used, sizeof shape - used, "%s%lld", k ? "x" : "",
                                 (long long)json_integer_value(dim));
                if (w < 0 || (size_t)w >= sizeof shape - used) break;
                used += (size_t)w;
            }
            cli_fmt_value(task, sizeof task, json_object_get(d, "task"));
            printf("%-5s %-24.24s %-7s %-14s %-9lld %s\n", id, json_string_value(json_object_get(d, "name")),
                   json_is_true(json_object_get(d, "builtin")) ? "builtin" : json_string_value(json_object_get(d, "format")),
                   task, (long long)json_integer_value(json_object_get(d, "n_rows")), shape);
        }
    }
    json_decref(out);
    return CLI_OK;
}

int cli_dataset_get(cli_ctx *c, int argc, char **argv) {
    return cli_id_call(c, argc, argv, "dataset get", "dataset", "GET", "/api/v1/datasets");
}
int cli_dataset_delete(cli_ctx *c, int argc, char **argv) {
    return cli_id_call(c, argc, argv, "dataset delete", "dataset", "DELETE", "/api/v1/datasets");
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static void add_text(curl_mime *m, const char *name, const char *value) {
    curl_mimepart *p = curl_mime_addpart(m);
    curl_mime_name(p, name);
    curl_mime_data(p, value, CURL_ZERO_TERMINATED);
}

static int add_file(curl_mime *m, const char *name, const char *file) {
    curl_mimepart *p = curl_mime_addpart(m);
    curl_mime_name(p, name);
    return curl_mime_filedata(p, file) == CURLE_OK ? 0 : -1; /* sends the file's base name */
}

int cli_dataset_upload(cli_ctx *c, int argc, char **argv) {
    const char *name = NULL, *format = NULL, *label = NULL, *task = NULL, *files[2];
    int n_files = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int f;
        if ((f = cli_flag_value(argc, argv, &i, "--format", &v))) format = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--label-column", &v))) label = v;
        else if ((f = cli_flag_value(argc, argv, &i, "--task", &v))) task = v;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage("dataset upload: unknown option %s", argv[i]);
        else if (!name) name = argv[i];
        else if (n_files < 2) files[n_files++] = argv[i];
        else return cli_usage("dataset upload takes NAME and one file (csv) or two (X Y: idx, npy)");
        if (f < 0) return cli_usage("%s needs a value", argv[i]);
    }
    if (!name || !n_files) return cli_usage("dataset upload needs NAME and FILE (csv) or X Y (idx, npy)");
    if (!format) format = n_files == 1 ? "csv" : ends_with(files[0], ".npy") ? "npy" : "idx";
    int two = strcmp(format, "csv") != 0;
    if (strcmp(format, "csv") && strcmp(format, "idx") && strcmp(format, "npy"))
        return cli_usage("--format must be csv, idx or npy");
    if (n_files != (two ? 2 : 1))
        return cli_usage("dataset upload --format %s takes %s", format, two ? "two files, X Y" : "one FILE");
    for (int i = 0; i < n_files; i++)
        if (access(files[i], R_OK) != 0) {
            fprintf(stderr, "hpo: cannot read %s\n", files[i]);
            return CLI_EUSAGE;
        }
    curl_mime *m = curl_mime_init(c->curl);
    add_text(m, "name", name);
    add_text(m, "format", format);
    if (label) add_text(m, "label_column", label);
    if (task) add_text(m, "task", task);
    int bad = two ? add_file(m, "x", files[0]) || add_file(m, "y", files[1]) : add_file(m, "file", files[0]);
    int rc = CLI_EUSAGE;
    json_t *out = NULL;
    if (bad) {
        fprintf(stderr, "hpo: cannot read %s\n", files[0]);
        goto fail;
    }
    cli_req r = {.method = "POST", .path = "/api/v1/datasets", .mime = m};
    rc = cli_request(c, &r, &out);
    if (rc == CLI_OK && !cli_emit(c, out)) printf("%lld\n", (long long)json_integer_value(json_object_get(out, "id")));
fail:
    json_decref(out);
    curl_mime_free(m);
    return rc;
}
