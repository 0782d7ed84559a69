/* export.js - a study's trials downloaded as CSV or JSON, made in the
 * browser from the trials it already holds (a Blob and a download link; no
 * server route).
 *
 * Columns: number, trial_id, state, value, value_std, value_n, with
 * several objectives one value_<metric> column per objective, one column
 * per parameter (the study's space, then any other name a trial has; empty
 * when a conditional parameter is inactive), one metric_<name> column per
 * metric told (tell's metrics) any trial has, one user_attr_<key> column
 * per user_attrs key any trial has (first seen first; a string as itself,
 * any other value as compact JSON; empty when the trial lacks it),
 * last_step, started, finished (seconds since the epoch), slot, error. CSV
 * quotes a field holding a comma, a quote or a line break (RFC 4180), and
 * puts a ' before a text that a spreadsheet would take for a formula (=, +,
 * -, @, tab, CR first). JSON: {study (with its objectives, user_attrs and
 * note), trials: [...]} with the same fields, values (one per objective),
 * and params, metrics and user_attrs as objects.
 */
"use strict";

const Export = {
  FIELDS: ["number", "trial_id", "state", "value", "value_std", "value_n"],
  TAIL: ["last_step", "started", "finished", "slot", "error"],

  paramNames(space, trials) {
    const names = Object.keys(space || {});
    for (const t of trials) for (const k of Object.keys(t.params || {})) if (!names.includes(k)) names.push(k);
    return names;
  },
  /* the keys of trials' objects `field` (user_attrs, metrics), first seen first */
  keyNames(trials, field) {
    const names = [];
    for (const t of trials) for (const k of Object.keys(t[field] || {})) if (!names.includes(k)) names.push(k);
    return names;
  },
  cell(v) {
    if (v === null || v === undefined) return "";
    let s = typeof v === "object" ? JSON.stringify(v) : String(v);
    if (typeof v === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`; /* not a formula */
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  },
  csv(study, trials) {
    const params = Export.paramNames(studySpace(study), trials);
    const attrs = Export.keyNames(trials, "user_attrs"), metrics = Export.keyNames(trials, "metrics");
    const objectives = (study.objectives || []).length > 1 ? study.objectives : [];
    const head = [...Export.FIELDS, ...objectives.map((o) => `value_${o.metric}`), ...params.map((p) => `param_${p}`),
      ...metrics.map((m) => `metric_${m}`), ...attrs.map((a) => `user_attr_${a}`), ...Export.TAIL];
    const lines = [head.map(Export.cell).join(",")];
    for (const t of trials) {
      lines.push([...Export.FIELDS.map((f) => t[f]), ...objectives.map((o, i) => (t.values || [])[i]),
        ...params.map((p) => (t.params || {})[p]), ...metrics.map((m) => (t.metrics || {})[m]),
        ...attrs.map((a) => (t.user_attrs || {})[a]), ...Export.TAIL.map((f) => t[f])]
        .map(Export.cell).join(","));
    }
    return lines.join("\r\n") + "\r\n";
  },
  json(study, trials) {
    const keep = [...Export.FIELDS, "values", "params", "metrics", "user_attrs", ...Export.TAIL];
    return JSON.stringify({
      study: { id: study.id, name: study.name, direction: study.direction, objectives: study.objectives || [], state: study.state,
        user_attrs: study.user_attrs || {}, note: study.note || "" },
      trials: trials.map((t) => Object.fromEntries(keep.map((k) => [k, t[k] === undefined ? null : t[k]]))),
    }, null, 2);
  },
  fileName(study, ext) {
    const slug = String(study.name || "study").toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "") || "study";
    return `study-${study.id}-${slug}-trials.${ext}`;
  },
  save(name, type, text) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = h("a", { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  },
  /* The download buttons; study() and trials() give what to save (trials
   * may be a promise: every trial, fresh). */
  buttons(study, trials) {
    const run = (ext) => async () => {
      const s = study();
      if (!s) return; /* not loaded yet */
      const list = (await trials()).filter(Boolean);
      if (ext === "csv") Export.save(Export.fileName(s, "csv"), "text/csv", Export.csv(s, list));
      else Export.save(Export.fileName(s, "json"), "application/json", Export.json(s, list));
    };
    return h("span", { class: "downloads" },
      h("button", { id: "download-csv", title: "every trial as CSV", onclick: run("csv") }, "⤓ CSV"),
      h("button", { id: "download-json", title: "every trial as JSON", onclick: run("json") }, "⤓ JSON"));
  },
};
