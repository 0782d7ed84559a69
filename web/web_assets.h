/*
 * web_assets.h - the dashboard's files, embedded into hpod at build time
 * (web/CMakeLists.txt runs cmake/embed_assets.c over web/index.html and
 * the .js and .css files of web/, plus ECharts from web/node_modules).
 *
 * Design notes
 * - One table, sorted by path, generated as C: hpod stays one file and
 *   serves the dashboard with no directory to install.
 * - hpo_web_build_id is a hash of every asset's bytes. index.html names its
 *   assets "/assets/<file>?v=<build id>" (the generator fills the
 *   __HPO_BUILD__ token), so a browser may cache them for a year and still
 *   picks up a new build at once; index.html itself is revalidated.
 * - When web/node_modules was not installed (no `npm ci`), the table has no
 *   echarts.min.js: the pages still load and say the charts are missing.
 * - Read-only data; safe from every thread.
 */
#ifndef HPO_WEB_ASSETS_H
#define HPO_WEB_ASSETS_H

typedef struct hpo_web_asset {
    const char *path;         /* "/index.html", "/assets/app.js" */
    const char *content_type; /* "text/javascript; charset=utf-8" */
    const unsigned char *data;
    unsigned long len;
} hpo_web_asset;

extern const hpo_web_asset hpo_web_assets[];
extern const unsigned long hpo_web_assets_count;
extern const char hpo_web_build_id[]; /* 16 hex digits */

#endif
