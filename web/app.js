/* app.js - the dashboard's pages, routed by the URL hash:
 *   #/                 studies
 *   #/studies/{id}     a study: summary, actions, note and user_attrs
 *                      (notes.js), charts, trials table
 *   #/studies/{id}/V   its analysis views (views.js: contour, slice, edf,
 *                      timeline, compare, lineage)
 *   #/trials/{id}      a trial: params, timings, note and user_attrs,
 *                      learning curve
 *
 * A page is a function(main, params) that renders and returns a cleanup
 * (feeds stopped, charts disposed). Pages get fresh data from feeds (api.js)
 * and never render more than one page of trials: the table asks the API for
 * PAGE rows (limit/offset/order/state); the charts read a TrialStore.
 * window.__hpo exposes the state the browser test checks.
 */
"use strict";

const PAGE = 50;
const MAX_CURVES = 12;
const IMPORTANCE_MS = 10000;

/* ---------------- studies ---------------- */
function studiesPage(main) {
  setCrumbs(h("span", {}, "studies"));
  const body = h("tbody");
  main.replaceChildren(
    h("h1", {}, "Studies"),
    h("table", { class: "grid studies" },
      h("thead", {}, h("tr", {}, ["id", "name", "algorithm", "kind", "state", "progress", "best", "created", "active for"].map((c) => h("th", {}, c)))),
      body));
  const feed = studiesFeed(5000).on((list) => {
    window.__hpo.studies = list.length;
    if (!list.length) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No studies yet: POST /api/v1/studies (see the README).")));
      return;
    }
    body.replaceChildren(...list.map((s) => h("tr", { class: "link", "data-study": s.id, onclick: () => { location.hash = `#/studies/${s.id}`; } },
      h("td", {}, s.id),
      h("td", {}, h("a", { href: `#/studies/${s.id}` }, s.name)),
      h("td", {}, s.algorithm),
      h("td", {}, s.kind),
      h("td", {}, stateBadge(studyState(s))),
      h("td", {}, progress(s)),
      h("td", { class: "num", title: s.best ? paramsText(s.best.params) : "" }, s.best ? fmt(s.best.value) : "–"),
      h("td", {}, when(s.created)),
      h("td", {}, dur(s.updated - s.created)))));
  }).start();
  return () => feed.stop();
}

/* ---------------- study ---------------- */
function studyPage(main, { id }) {
  const t0 = performance.now();
  const st = { id: Number(id), study: null, store: new TrialStore(Number(id)), curves: new Set(), autoCurves: true,
    table: { order: "number", desc: true, state: "", offset: 0 }, importanceAt: -1, stopped: false };
  window.__hpo.study = st;
  window.__hpo.ready = false;
  window.__hpo.interactiveMs = 0;
  window.__hpo.marks = {};
  /* first time each step was reached, in ms since the page started (for the test's figures) */
  const mark = (name) => { if (!(name in window.__hpo.marks)) window.__hpo.marks[name] = Math.round(performance.now()); };
  setCrumbs(h("a", { href: "#/" }, "studies"), h("span", {}, `study ${id}`));
  const summary = h("section", { class: "summary" }, h("p", { class: "muted" }, "Loading…"));
  const panel = (name, title, note) => h("section", { class: "panel" },
    h("h2", {}, title, note ? h("span", { class: "note" }, note) : null), h("div", { class: `chart ${name}`, id: `chart-${name}` }));
  const tbody = h("tbody"), thead = h("thead"), pager = h("div", { class: "pager" });
  /* refits, trial models and ensembles (embedded studies); hidden until there is one */
  const modelsBody = h("tbody");
  const modelsPanel = h("section", { class: "panel models", id: "models", hidden: true },
    h("h2", {}, "Refits and ensembles", h("span", { class: "note" }, "trained by hpod; test split used only here")),
    h("div", { class: "charts models-grid" },
      h("div", { class: "chart", id: "chart-models" }),
      h("table", { class: "grid" }, h("thead", {}, h("tr", {}, ["model", "kind", "state", "from", "how", "validation", "test"].map((c) => h("th", {}, c)))), modelsBody)));
  const paretoPanel = h("section", { class: "panel pareto", id: "pareto", hidden: true },
    h("h2", {}, "Pareto front", h("span", { class: "note" }, "feasible non-dominated trials; infeasible grey; a third objective as colour")),
    h("div", { class: "chart pareto", id: "chart-pareto" }));
  const actions = Actions.studyBar(() => feed.refresh(), () => drawModels(st.study));
  const notes = Notes.row((note) => Api.updateStudy(st.id, { note }));
  const stateSel = h("select", { id: "state-filter", onchange: () => { st.table.state = stateSel.value; st.table.offset = 0; loadTable(); } },
    ...["", "running", "complete", "pruned", "failed", "cancelled", "queued"].map((s) => h("option", { value: s }, s || "all states")));
  /* the ticked trials, by number, for the compare view */
  const ticked = () => st.store.byNumber.filter((t) => t && st.curves.has(t.trial_id)).map((t) => t.number);
  const tools = h("span", { class: "tools" },
    h("button", { id: "compare-ticked", title: "compare the ticked trials side by side",
      onclick: () => { location.hash = `#/studies/${st.id}/compare/${ticked().join(",")}`; } }, "Compare ticked"),
    h("button", { id: "untick-all", title: "untick every trial", onclick: () => {
      st.autoCurves = false;
      st.curves.clear();
      for (const box of tbody.querySelectorAll("input[type=checkbox]")) box.checked = false;
      drawCurves();
    } }, "Untick all"),
    /* every trial fetched afresh: a finished trial's user_attrs may have changed since the store got it */
    Export.buttons(() => st.study, () => Api.trials(st.id, { order: "number", limit: 100000 }).then((r) => r.trials)),
    stateSel);
  main.replaceChildren(
    studyTabs(id, ""),
    summary,
    actions.el,
    notes.el,
    h("div", { class: "charts" },
      panel("history", "Optimisation history", "objective per trial, best so far"),
      panel("importance", "Hyperparameter importance", "permutation importance, random forest"),
      panel("curves", "Learning curves", "intermediate values; tick trials in the table"),
      panel("parallel", "Parallel coordinates", "hyperparameters against the objective")),
    /* a study with several objectives: its Pareto front; hidden otherwise */
    paretoPanel,
    modelsPanel,
    h("section", { class: "panel trials" },
      h("h2", {}, "Trials", tools),
      h("table", { class: "grid trials", id: "trials" }, thead, tbody), pager));

  let space = {};
  const tableQuery = () => ({ order: st.table.order, desc: st.table.desc, limit: PAGE, offset: st.table.offset, state: st.table.state });
  async function loadTable(prefetched) {
    const page = await (prefetched || Api.trials(st.id, tableQuery()));
    if (st.stopped) return;
    const names = Object.keys(space);
    const sortable = (key, label) => {
      const on = st.table.order === key;
      return h("th", { class: `sort${on ? " on" : ""}`, "data-sort": key, title: "sort",
        onclick: () => { if (on) st.table.desc = !st.table.desc; else { st.table.order = key; st.table.desc = key === "number" ? true : !!(st.study && st.study.direction === "maximize"); } st.table.offset = 0; loadTable(); } },
      label, on ? (st.table.desc ? " ▼" : " ▲") : "");
    };
    thead.replaceChildren(h("tr", {}, h("th", { title: "show in the learning curves" }, "curve"), sortable("number", "#"), h("th", {}, "state"),
      sortable("value", "value"), ...names.map((n) => h("th", {}, n)), h("th", {}, "last step"), h("th", {}, "duration")));
    tbody.replaceChildren(...page.trials.map((t) => h("tr", { "data-trial": t.trial_id },
      h("td", {}, h("input", { type: "checkbox", checked: st.curves.has(t.trial_id), title: "learning curve",
        onchange: (e) => { st.autoCurves = false; chooseCurve(t.trial_id, e.target.checked); drawCurves(); } })),
      h("td", {}, h("a", { href: `#/trials/${t.trial_id}` }, t.number)),
      h("td", {}, stateBadge(t.state)),
      h("td", { class: "num" }, fmt(t.value), t.value_n > 1 ? h("span", { class: "muted" }, ` ±${fmt(t.value_std, 2)}`) : null),
      ...names.map((n) => h("td", { class: "num" }, t.params && n in t.params ? fmt(t.params[n], 4) : "–")),
      h("td", { class: "num" }, t.last_step === null ? "–" : t.last_step),
      h("td", { class: "num" }, t.started ? dur((t.finished || Date.now() / 1000) - t.started) : "–"))));
    const from = page.total ? page.offset + 1 : 0, to = page.offset + page.trials.length;
    pager.replaceChildren(
      h("button", { disabled: page.offset <= 0, onclick: () => { st.table.offset = Math.max(0, st.table.offset - PAGE); loadTable(); } }, "‹ prev"),
      h("span", {}, `${from}–${to} of ${page.total}`),
      h("button", { disabled: to >= page.total, onclick: () => { st.table.offset += PAGE; loadTable(); } }, "next ›"));
    window.__hpo.tableRows = page.trials.length;
  }

  function renderSummary(s) {
    const b = s.trials_by_state || {};
    const several = (s.objectives || []).length > 1;
    summary.replaceChildren(
      h("h1", {}, s.name, " ", stateBadge(studyState(s))),
      h("dl", { class: "facts" },
        h("dt", {}, several ? "objectives" : "objective"), h("dd", {}, several ? s.objectives.map((o) => `${o.direction} ${o.metric}`).join(", ")
          : `${s.direction}${s.definition && s.definition.objective && s.definition.objective.metric ? " " + s.definition.objective.metric : ""}`),
        h("dt", {}, "algorithm"), h("dd", {}, s.algorithm + (s.definition && s.definition.tuner && s.definition.tuner.pruner ? `, ${s.definition.tuner.pruner.algorithm} pruner` : "")),
        h("dt", {}, "kind"), h("dd", {}, s.kind),
        h("dt", {}, "progress"), h("dd", {}, progress(s)),
        h("dt", {}, "trials"), h("dd", {}, Object.entries(b).filter(([, n]) => n).map(([k, n]) => h("span", { class: `count ${k}` }, `${n} ${k}`))),
        h("dt", {}, "best"), h("dd", {}, s.best ? h("span", {}, h("a", { href: `#/trials/${s.best.trial_id}` }, `#${s.best.number}`), ` ${fmt(s.best.value)} `, h("span", { class: "muted" }, paramsText(s.best.params))) : "–"),
        h("dt", {}, "created"), h("dd", {}, `${when(s.created)} · active for ${dur(s.updated - s.created)}`)));
  }

  /* The chosen trials: the ones ticked, or by default the 4 best complete,
   * the running ones (live curves) and the newest finished others (pruned
   * ones show where they stopped), MAX_CURVES in all. */
  function defaultCurves(trials) {
    const maximize = st.study.direction === "maximize";
    const withSteps = trials.filter((t) => t && t.last_step !== null);
    const best = withSteps.filter((t) => t.state === "complete").sort((a, b) => (maximize ? b.value - a.value : a.value - b.value)).slice(0, 4);
    const running = withSteps.filter((t) => t.state === "running").slice(-4);
    const chosen = best.concat(running);
    const rest = withSteps.filter((t) => !chosen.includes(t) && t.state !== "complete");
    chosen.push(...rest.slice(-(MAX_CURVES - chosen.length)));
    if (chosen.length < MAX_CURVES) chosen.push(...withSteps.filter((t) => !chosen.includes(t)).slice(-(MAX_CURVES - chosen.length)));
    return chosen.slice(0, MAX_CURVES).map((t) => t.trial_id);
  }
  /* ticked trials join the curves; past MAX_CURVES the oldest choice leaves */
  function chooseCurve(tid, on) {
    if (!on) { st.curves.delete(tid); return; }
    st.curves.add(tid);
    while (st.curves.size > MAX_CURVES) st.curves.delete(st.curves.values().next().value);
    showTicks();
  }
  /* the table's boxes tick the trials whose curves are drawn */
  function showTicks() {
    for (const row of tbody.querySelectorAll("tr[data-trial]"))
      row.querySelector("input").checked = st.curves.has(Number(row.dataset.trial));
  }
  const curveCache = new Map(); /* trial_id -> trial with intermediate (finished ones never change) */
  async function drawCurves() {
    const ids = [...st.curves].slice(0, MAX_CURVES);
    const trials = await Promise.all(ids.map(async (tid) => {
      const c = curveCache.get(tid);
      if (c && TrialStore.finished(c)) return c;
      const t = await Api.trial(tid).catch(() => null);
      if (t) curveCache.set(tid, t);
      return t;
    }));
    if (st.stopped) return;
    const el = $("#chart-curves");
    const shown = trials.filter((t) => t && t.intermediate && t.intermediate.length);
    if (!shown.length) {
      Charts.show("curves", el, { title: { text: "No intermediate values reported yet", left: "center", top: "middle", textStyle: { color: "#999", fontSize: 13 } }, series: [] });
      return;
    }
    Charts.show("curves", el, Charts.curves(shown));
  }

  async function drawImportance(s, prefetched) {
    const done = (s.trials_by_state || {}).complete || 0;
    if (done === st.importanceAt) return;
    st.importanceAt = done;
    const el = $("#chart-importance");
    const r = await (prefetched || Api.importance(st.id));
    if (st.stopped) return;
    const note = (text) => Charts.show("importance", el, { title: { text, left: "center", top: "middle", textStyle: { color: "#999", fontSize: 13 } }, series: [] });
    if (r.importance.length && r.importance[0].importance === null) return note("Needs at least 2 complete trials");
    if (!r.importance.some((i) => i.importance > 0))
      return note(`No parameter explains the objective yet (${r.n_trials} complete trials)`);
    Charts.show("importance", el, Charts.importance(r));
  }

  function metricsText(m) {
    if (!m) return "–";
    return Object.entries(m).filter(([, v]) => typeof v === "number").map(([k, v]) => `${k} ${fmt(v, 4)}`).join(", ");
  }
  function howText(m) {
    const how = m.how || {};
    if (m.kind === "refit") return `${how.epochs} epochs (${how.epochs_factor} × best epoch ${how.best_epoch}) on ${how.data || "train+validation"}`;
    if (m.kind === "ensemble") {
      const members = (m.result && m.result.members) || [];
      const ws = members.filter((x) => typeof x.weight === "number").map((x) => `${x.model_id}: ${fmt(x.weight, 3)}`);
      return `${how.method || "mean"} of ${members.length || (how.members || []).length} models${ws.length ? " (weights " + ws.join(", ") + ")" : ""}`;
    }
    return how.best_epoch ? `best-epoch checkpoint (epoch ${how.best_epoch})` : "trial checkpoint";
  }
  async function drawPareto(s, trials) {
    const objectives = s.objectives || [];
    if (objectives.length < 2) return;
    const best = await Api.best(st.id).catch(() => null);
    if (st.stopped || !best) return;
    paretoPanel.hidden = false;
    const frontIds = (best.trials || []).map((t) => t.trial_id);
    Charts.show("pareto", $("#chart-pareto"), Charts.pareto(trials, frontIds, objectives, s.constraints || []));
    window.__hpo.pareto = { front: frontIds.length, points: trials.filter((t) => t && t.state === "complete").length };
  }
  /* refits and ensembles train without changing the study (its feed sees
   * nothing): while one is queued or running, the list is polled */
  let modelsTimer = null;
  async function drawModels(s) {
    if (s.kind !== "embedded") return;
    const models = await Api.models(st.id).catch(() => []);
    if (st.stopped || !models.length) return;
    modelsPanel.hidden = false;
    modelsBody.replaceChildren(...models.map((m) => h("tr", { "data-model": m.id },
      h("td", {}, m.id), h("td", {}, m.kind), h("td", {}, stateBadge(m.state)),
      h("td", {}, m.trial_id ? h("a", { href: `#/trials/${m.trial_id}` }, `trial ${m.trial_id}`) : "–"),
      h("td", { class: "wrap" }, howText(m), m.error ? h("div", { class: "error" }, m.error) : null),
      h("td", {}, metricsText(m.result && m.result.val)),
      h("td", {}, metricsText(m.result && m.result.test)))));
    const objective = (s.definition && s.definition.objective && s.definition.objective.metric) || "val_accuracy";
    const metric = objective.replace(/^val_/, "");
    Charts.show("models", $("#chart-models"), Charts.models(models, metric));
    window.__hpo.models = models.length;
    clearTimeout(modelsTimer);
    if (models.some((m) => m.state === "queued" || m.state === "running")) modelsTimer = setTimeout(() => drawModels(st.study), 2000);
  }

  /* On every change: the summary and the table first (one page from the
   * API), the importance request in parallel (computed by hpod), then the
   * charts from the trial store. __hpo.interactiveMs: table and history
   * drawn; __hpo.readyMs: every chart drawn. */
  /* the importance is drawn at most every IMPORTANCE_MS; a change within
   * that time is drawn at its end */
  let lastImportance = -Infinity, importanceTimer = null;
  function importanceSoon(s, prefetched) {
    const wait = lastImportance + IMPORTANCE_MS - performance.now();
    if (wait <= 0) {
      lastImportance = performance.now();
      return drawImportance(s, prefetched);
    }
    if (!importanceTimer) {
      importanceTimer = setTimeout(() => {
        importanceTimer = null;
        if (!st.stopped) Promise.resolve(importanceSoon(st.study)).catch(() => {}); /* the feed reports what fails */
      }, wait);
    }
    return null;
  }
  /* The first load asks for the table and the trials at once, not after the
   * study came; the importance (computed by hpod) once the trials are here,
   * so it does not compete with them for the server's CPU. */
  const trialsFirst = st.store.refresh();
  let first = { table: Api.trials(st.id, tableQuery()), trials: trialsFirst,
    importance: trialsFirst.then(() => Api.importance(st.id), () => Api.importance(st.id)) };
  for (const p of Object.values(first)) p.catch(() => {}); /* reported when awaited */
  const feed = studyFeed(st.id, 3000).on(async (s) => {
    st.study = s;
    space = studySpace(s); /* the effective space (template + overrides) */
    renderSummary(s);
    actions.update(s);
    notes.update(s);
    const pre = first || {};
    first = null;
    const imp = importanceSoon(s, pre.importance);
    const trialsP = pre.trials || st.store.refresh();
    await loadTable(pre.table);
    mark("table");
    const trials = await trialsP;
    mark("trials");
    if (st.stopped) return;
    const maximize = s.direction === "maximize";
    Charts.show("history", $("#chart-history"), Charts.history(trials, maximize));
    mark("history");
    if (!window.__hpo.interactiveMs) window.__hpo.interactiveMs = performance.now() - t0;
    Charts.show("parallel", $("#chart-parallel"), Charts.parallel(space, trials, maximize));
    mark("parallel");
    if (st.autoCurves) {
      st.curves = new Set(defaultCurves(trials));
      showTicks(); /* the table was drawn before the choice */
    }
    await Promise.all([drawCurves().then(() => mark("curves")), imp && imp.then(() => mark("importance")), drawModels(s),
      drawPareto(s, trials)]);
    /* embedded studies stream their progress: refresh on each event */
    if (s.kind === "embedded" && !st.listening && s.state !== "complete" && s.state !== "cancelled") {
      st.listening = true;
      /* only what happens from now on: the page has just loaded the rest */
      feed.listen(`/api/v1/studies/${st.id}/events?after=${s.last_event_id || 0}`, ["study_complete", "study_cancelled"]);
    }
    if (!window.__hpo.ready) {
      window.__hpo.ready = true;
      window.__hpo.readyMs = performance.now() - t0;
    }
  });
  const stop = () => { st.stopped = true; feed.stop(); clearTimeout(importanceTimer); clearTimeout(modelsTimer); };
  feed.onGone((seen) => { stop(); gonePage(main, "study", id, seen); }).start();
  return stop;
}

/* ---------------- trial ---------------- */
function trialPage(main, { id }) {
  setCrumbs(h("a", { href: "#/" }, "studies"), h("span", {}, `trial ${id}`));
  let stopped = false;
  /* the note stays in place across redraws (an open editor keeps its text and focus) */
  const head = h("div"), rest = h("div");
  const notes = Notes.row((note) => Api.updateTrial(id, { note }));
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const sig = (t) => `${t.state}|${t.last_step}|${t.value}|${t.note}|${JSON.stringify(t.user_attrs)}`;
  const feed = new Feed(() => Api.trial(id), sig, 3000).on(async (t) => {
    if (stopped) return;
    setCrumbs(h("a", { href: "#/" }, "studies"), h("a", { href: `#/studies/${t.study_id}` }, `study ${t.study_id}`), h("span", {}, `trial #${t.number}`));
    if (main.firstChild !== head) main.replaceChildren(head, notes.el, rest);
    notes.update(t);
    head.replaceChildren(
      h("section", { class: "summary" },
        h("h1", {}, `Trial #${t.number} `, stateBadge(t.state)),
        h("dl", { class: "facts" },
          h("dt", {}, "value"), h("dd", { class: "num" }, fmt(t.value), t.value_n > 1 ? ` ± ${fmt(t.value_std, 3)} over ${t.value_n} executions` : ""),
          h("dt", {}, "started"), h("dd", {}, when(t.started)),
          h("dt", {}, "finished"), h("dd", {}, t.finished ? `${when(t.finished)} (${t.started ? dur(t.finished - t.started) : "–"})` : t.state),
          t.lease_expires ? [h("dt", {}, "lease until"), h("dd", {}, when(t.lease_expires))] : null,
          t.error ? [h("dt", {}, "error"), h("dd", { class: "error" }, t.error)] : null,
          h("dt", {}, "steps reported"), h("dd", {}, (t.intermediate || []).length),
          t.best_epoch ? [h("dt", {}, "best epoch"), h("dd", {}, t.best_epoch)] : null,
          t.slot ? [h("dt", {}, "trained on"), h("dd", {}, `${t.slot}${t.train_seconds ? `, ${dur(t.train_seconds)} of training` : ""}`)] : null)));
    rest.replaceChildren(
      h("div", { class: "charts one" },
        h("section", { class: "panel" }, h("h2", {}, "Parameters"),
          h("table", { class: "grid params", id: "params" }, h("tbody", {}, Object.entries(t.params || {}).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", { class: "num" }, fmt(v, 6))))))),
        h("section", { class: "panel" }, h("h2", {}, "Learning curve"), h("div", { class: "chart curves", id: "chart-trial" }))),
      (t.curves || []).length ? h("section", { class: "panel" }, h("h2", {}, "Training curves", h("span", { class: "note" }, "every metric per epoch (dashed: training split)")),
        h("div", { class: "chart", id: "chart-training" })) : "");
    if ((t.intermediate || []).length) Charts.show("trial", $("#chart-trial"), Charts.curves([t]));
    else $("#chart-trial").replaceChildren(h("p", { class: "muted" }, "No intermediate values reported."));
    if ((t.curves || []).length) Charts.show("training", $("#chart-training"), Charts.trainingCurves(t));
    window.__hpo.trial = t.trial_id;
  });
  const stop = () => { stopped = true; feed.stop(); };
  feed.onGone((seen) => { stop(); gonePage(main, "trial", id, seen); }).start();
  return stop;
}

/* ---------------- router ---------------- */
window.__hpo = { ready: false };
const routes = [
  [/^#?\/?$/, studiesPage],
  [/^#\/studies\/(\d+)$/, (m, p) => studyPage(m, { id: p[1] })],
  [/^#\/studies\/(\d+)\/(contour|slice|edf|timeline|compare|lineage)(?:\/([\d,]*))?$/, (m, p) => studyView(m, p[1], p[2], p[3])],
  [/^#\/trials\/(\d+)$/, (m, p) => trialPage(m, { id: p[1] })],
];
let leave = null;
function route() {
  if (leave) leave();
  leave = null;
  Charts.disposeAll();
  const main = $("#main");
  const hash = location.hash || "#/";
  for (const [re, page] of routes) {
    const m = hash.match(re);
    if (m) {
      leave = page(main, m);
      return;
    }
  }
  main.replaceChildren(h("p", {}, "No such page. ", h("a", { href: "#/" }, "Studies")));
}
window.addEventListener("hashchange", route);
/* a new theme: the page draws itself again with it */
window.addEventListener("hpo-theme", () => { if (leave) route(); });
Theme.init();
Actions.initToken();
Api.health().then((hh) => { $("#version").textContent = hh.version; }).catch(() => {});
route();
