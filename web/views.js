/* views.js - a study's analysis pages, one per tab (ui.js studyTabs):
 *   #/studies/{id}/contour             objective over two chosen parameters
 *   #/studies/{id}/slice               objective against each parameter
 *   #/studies/{id}/edf                 empirical distribution of the objective
 *   #/studies/{id}/timeline            trials per worker slot over time
 *   #/studies/{id}/compare[/3,7,12]    chosen trials (by number) side by side
 *   #/studies/{id}/lineage             pbt: each trial's epochs and where it was copied from
 *
 * Each view is {title, build(body, st) -> draw(study, space, trials)}; the
 * page around it (studyView) follows the study with a feed and the trials
 * with a TrialStore (api.js) and calls draw on every change.
 * window.__hpo.view / .drawn tell the browser test a view has drawn.
 */
"use strict";

const MAX_COMPARE = 12;

function studySpace(s) { return (s && (s.space || (s.definition && s.definition.space))) || {}; }
const isMax = (s) => s.direction === "maximize";

function studyView(main, id, name, arg) {
  const view = Views[name];
  const st = { id: Number(id), arg, store: new TrialStore(Number(id)), stopped: false };
  setCrumbs(h("a", { href: "#/" }, "studies"), h("a", { href: `#/studies/${id}` }, `study ${id}`), h("span", {}, view.title));
  const title = h("h1", {}, view.title);
  const body = h("div", { class: `view view-${name}` });
  main.replaceChildren(studyTabs(id, name), title, body);
  const draw = view.build(body, st);
  window.__hpo.view = name;
  window.__hpo.drawn = 0;
  const feed = studyFeed(st.id, 5000).on(async (s) => {
    const trials = await st.store.refresh();
    if (st.stopped) return;
    st.study = s;
    title.replaceChildren(`${s.name}: ${view.title} `, stateBadge(studyState(s)));
    await draw(s, studySpace(s), trials);
    window.__hpo.drawn++;
  });
  const stop = () => { st.stopped = true; feed.stop(); };
  feed.onGone((seen) => { stop(); gonePage(main, "study", id, seen); }).start();
  return stop;
}

const Views = {
  contour: {
    title: "Contour",
    build(body, st) {
      const xs = h("select", { id: "contour-x" }), ys = h("select", { id: "contour-y" });
      const note = h("span", { class: "note", id: "contour-note" });
      const chart = h("div", { class: "chart tall", id: "chart-contour" });
      body.append(h("section", { class: "panel" },
        h("h2", {}, "Objective over two parameters", note, h("span", { class: "tools" }, h("label", {}, "x ", xs), " ", h("label", {}, "y ", ys))), chart));
      let last = null, names = "";
      const redraw = () => {
        const [s, space, trials] = last;
        if (Object.keys(space).length < 2) return chartNote(chart, "The search space has fewer than two parameters.");
        const c = Charts.show("contour", chart, Charts.contour(space, trials, xs.value, ys.value, isMax(s)));
        const n = c ? c.getOption().series[1].data.length : 0;
        note.textContent = `${n} complete trials (dots); the colours between them are interpolated (inverse distance)`;
      };
      xs.onchange = ys.onchange = () => last && redraw();
      return (s, space, trials) => {
        const keys = Object.keys(space);
        if (keys.join() !== names) {
          names = keys.join();
          const opts = () => keys.map((k) => h("option", { value: k }, `${k}${space[k].log ? " (log)" : ""}`));
          xs.replaceChildren(...opts());
          ys.replaceChildren(...opts());
          xs.value = keys[0] || "";
          ys.value = keys[1] || "";
        }
        last = [s, space, trials];
        redraw();
      };
    },
  },

  slice: {
    title: "Slice",
    build(body, st) {
      const grid = h("div", { class: "slice-grid", id: "slices" });
      body.append(h("section", { class: "panel" },
        h("h2", {}, "Objective against each parameter", h("span", { class: "note" }, "complete trials; darker = later trial")), grid));
      let names = "";
      return (s, space, trials) => {
        const keys = Object.keys(space);
        if (keys.join() !== names) {
          names = keys.join();
          grid.replaceChildren(...keys.map((k, i) => h("div", { class: "slice" }, h("div", { class: "slice-name" }, k, space[k].log ? h("span", { class: "muted" }, " (log)") : ""),
            h("div", { class: "chart small", id: `chart-slice-${i}`, "data-param": k }))));
        }
        if (!keys.length) return chartNote(grid, "The search space is empty.");
        const lastNumber = trials.length ? trials.length - 1 : 0;
        keys.forEach((k, i) => Charts.show(`slice:${k}`, $(`#chart-slice-${i}`, grid), Charts.slice(k, space[k], trials, lastNumber)));
      };
    },
  },

  edf: {
    title: "EDF",
    build(body) {
      const chart = h("div", { class: "chart tall", id: "chart-edf" });
      const note = h("span", { class: "note", id: "edf-note" });
      body.append(h("section", { class: "panel" }, h("h2", {}, "Empirical distribution of the objective", note), chart));
      return (s, space, trials) => {
        const values = trials.filter((t) => t && t.state === "complete" && typeof t.value === "number").map((t) => t.value).sort((a, b) => a - b);
        note.textContent = values.length
          ? `${values.length} complete trials; median ${fmt(values[Math.floor((values.length - 1) / 2)])}, best ${fmt(isMax(s) ? values[values.length - 1] : values[0])}`
          : "no complete trial yet";
        Charts.show("edf", chart, Charts.edf(trials, isMax(s)));
      };
    },
  },

  timeline: {
    title: "Timeline",
    build(body) {
      const chart = h("div", { class: "chart", id: "chart-timeline" });
      body.append(h("section", { class: "panel" },
        h("h2", {}, "Trials per worker slot", h("span", { class: "note" }, "a bar per trial from its start to its end, coloured by state")), chart));
      return (s, space, trials) => {
        const slots = new Set(trials.filter((t) => t && t.state !== "queued").map((t) => t.slot || "")).size;
        chart.style.height = `${Math.max(260, 120 + 44 * slots)}px`;
        const c = Charts.show("timeline", chart, Charts.timeline(trials, Date.now() / 1000));
        if (c) c.resize();
      };
    },
  },

  lineage: {
    title: "Lineage",
    build(body) {
      const chart = h("div", { class: "chart", id: "chart-lineage" });
      const note = h("span", { class: "note", id: "lineage-note" });
      body.append(h("section", { class: "panel" },
        h("h2", {}, "Population-based training", note), chart));
      return (s, space, trials) => {
        const bred = trials.filter((t) => t && t.lineage);
        if (s.algorithm !== "pbt") return chartNote(chart, "Not a population-based study (tuner.algorithm \"pbt\"): its trials have no lineage.");
        note.textContent = `a bar per trial over the epochs it trained, coloured by state; ${bred.length} trials bred from a better member's checkpoint (dashed: the copy at its epoch)`;
        const rows = trials.filter(Boolean).length;
        chart.style.height = `${Math.max(260, 100 + 26 * rows)}px`;
        const c = Charts.show("lineage", chart, Charts.lineage(trials, isMax(s)));
        if (c) c.resize();
      };
    },
  },

  compare: {
    title: "Compare",
    build(body, st) {
      const input = h("input", { type: "text", id: "compare-input", size: 30, placeholder: "trial numbers, e.g. 3, 7, 12" });
      const go = () => {
        const nums = input.value.split(/[\s,]+/).filter((x) => /^\d+$/.test(x));
        location.hash = `#/studies/${st.id}/compare/${nums.join(",")}`;
      };
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
      const chart = h("div", { class: "chart", id: "chart-compare" });
      const table = h("table", { class: "grid compare", id: "compare-table" });
      body.append(
        h("section", { class: "panel" }, h("h2", {}, "Trials", h("span", { class: "note" }, "tick trials in the overview's table and press \"Compare\", or type their numbers"),
          h("span", { class: "tools" }, input, " ", h("button", { id: "compare-go", onclick: go }, "Compare"))),
        table),
        h("section", { class: "panel" }, h("h2", {}, "Learning curves", h("span", { class: "note" }, "intermediate values of the trials compared")), chart));
      const cache = new Map();
      return async (s, space, trials) => {
        let nums = (st.arg || "").split(",").filter((x) => x !== "").map(Number);
        if (!nums.length) { /* by default the three best complete trials */
          nums = trials.filter((t) => t && t.state === "complete" && typeof t.value === "number")
            .sort((a, b) => (isMax(s) ? b.value - a.value : a.value - b.value)).slice(0, 3).map((t) => t.number);
        }
        const chosen = nums.slice(0, MAX_COMPARE).map((n) => trials[n]).filter(Boolean);
        if (document.activeElement !== input) input.value = chosen.map((t) => t.number).join(", ");
        const full = await Promise.all(chosen.map(async (t) => {
          const c = cache.get(t.trial_id);
          if (c && TrialStore.finished(c)) return c;
          const got = await Api.trial(t.trial_id).catch(() => t);
          cache.set(t.trial_id, got);
          return got;
        }));
        if (st.stopped) return;
        compareTable(table, space, full);
        window.__hpo.compared = full.map((t) => t.number);
        const withCurves = full.filter((t) => (t.intermediate || []).length);
        if (withCurves.length) Charts.show("compare", chart, Charts.curves(withCurves));
        else chartNote(chart, chosen.length ? "These trials reported no intermediate values." : "No trial chosen.");
      };
    },
  },
};

/* Rows: the trials' facts, then every parameter; a row whose values differ
 * between the trials is marked. */
function compareTable(table, space, trials) {
  const names = [...new Set([...Object.keys(space), ...trials.flatMap((t) => Object.keys(t.params || {}))])];
  const rows = [
    ["state", (t) => t.state, (t) => stateBadge(t.state)],
    ["value", (t) => fmt(t.value)],
    ["last step", (t) => (t.last_step === null ? "–" : String(t.last_step))],
    ["duration", (t) => dur((t.finished || Date.now() / 1000) - t.started)],
    ["slot", (t) => t.slot || "–"],
    ...names.map((n) => [n, (t) => (t.params && n in t.params ? fmt(t.params[n], 6) : "–"), null, true]),
  ];
  table.replaceChildren(
    h("thead", {}, h("tr", {}, h("th", {}, ""), trials.map((t) => h("th", { "data-trial": t.trial_id }, h("a", { href: `#/trials/${t.trial_id}` }, `#${t.number}`))))),
    h("tbody", {}, rows.map(([label, text, cell, isParam]) => {
      const texts = trials.map(text);
      const differs = new Set(texts).size > 1;
      return h("tr", { class: `${differs ? "diff" : ""}${isParam ? " param" : ""}`, "data-row": label },
        h("th", {}, label), trials.map((t, i) => h("td", { class: "num" }, cell ? cell(t) : texts[i])));
    })));
}
