/* ui.js - what every page shares: the h() element builder, formatting of
 * times and states, the breadcrumbs, the study pages' tab bar and the
 * light/dark theme.
 *
 * Theme: an explicit choice (the header's toggle) is kept in localStorage;
 * without one the page follows prefers-color-scheme, live. The CSS reads
 * <html data-theme>, the charts are re-created with ECharts' "dark" theme
 * (Charts.setTheme).
 */
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

function when(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function dur(sec) {
  if (sec === null || sec === undefined || !isFinite(sec) || sec < 0) return "–";
  if (sec < 60) return `${sec.toFixed(sec < 10 ? 1 : 0)} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
  return `${Math.floor(sec / 3600)} h ${Math.round((sec % 3600) / 60)} min`;
}
function finishedCount(s) {
  const b = s.trials_by_state || {};
  return (b.complete || 0) + (b.pruned || 0) + (b.failed || 0) + (b.cancelled || 0);
}
function stateBadge(state) { return h("span", { class: `badge ${state}` }, state); }
/* An external study stays "running" in the API; once max_trials trials have
 * finished (and none runs) nothing more will happen: show it as finished. */
function studyState(s) {
  const b = s.trials_by_state || {};
  if (s.state === "running" && s.max_trials && finishedCount(s) >= s.max_trials && !b.running && !b.queued) return "finished";
  return s.state;
}
function progress(s) {
  const done = finishedCount(s);
  const max = s.max_trials;
  const pct = max ? Math.min(100, (100 * done) / max) : null;
  return h("div", { class: "progress", title: max ? `${done} of ${max} trials finished` : `${done} trials finished (no max_trials)` },
    h("div", { class: "bar" }, h("span", { style: `width:${pct === null ? 100 : pct}%`, class: pct === null ? "open" : "" })),
    h("span", { class: "ptext" }, max ? `${done}/${max}` : `${done}`));
}
function paramsText(p) {
  return Object.entries(p || {}).map(([k, v]) => `${k}=${fmt(v, 4)}`).join(", ");
}
function setCrumbs(...items) {
  const nav = $("#crumbs");
  nav.replaceChildren(...items.flatMap((it, i) => (i ? [h("span", { class: "sep" }, "/"), it] : [it])));
}


/* The tab bar of a study's pages (#/studies/{id} and its views). */
const STUDY_VIEWS = [
  ["", "Overview"], ["contour", "Contour"], ["slice", "Slice"], ["edf", "EDF"], ["timeline", "Timeline"], ["compare", "Compare"], ["lineage", "Lineage"],
];
function studyTabs(id, current) {
  return h("nav", { class: "tabs", id: "study-tabs" }, STUDY_VIEWS.map(([view, label]) =>
    h("a", { href: `#/studies/${id}${view ? "/" + view : ""}`, class: view === current ? "on" : "", "data-view": view || "overview" }, label)));
}
/* What a study's or a trial's page shows once the API answers 404 for it
 * (kind "study" or "trial"): deleted while the page was open (seen), or
 * never there. */
function gonePage(main, kind, id, seen) {
  Charts.disposeAll();
  const what = `${kind} ${id}`;
  setCrumbs(h("a", { href: "#/" }, "studies"), h("span", {}, what));
  main.replaceChildren(h("section", { class: "summary", id: "gone" },
    h("h1", {}, seen ? `${what[0].toUpperCase()}${what.slice(1)} was deleted` : `There is no ${what}`),
    h("p", {}, h("a", { href: "#/" }, "Back to the list of studies"))));
}

/* A chart's place holder saying why it is empty. */
function chartNote(el, text) { el.replaceChildren(h("p", { class: "muted chart-note" }, text)); }

const Theme = {
  KEY: "hpo.theme",
  media: window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null,
  stored() { try { return localStorage.getItem(Theme.KEY); } catch (e) { return null; } },
  current() {
    const s = Theme.stored();
    if (s === "dark" || s === "light") return s;
    return Theme.media && Theme.media.matches ? "dark" : "light";
  },
  apply() {
    const t = Theme.current();
    document.documentElement.dataset.theme = t;
    const b = $("#theme-toggle");
    if (b) {
      b.textContent = t === "dark" ? "☀ light" : "☾ dark";
      b.title = `switch to the ${t === "dark" ? "light" : "dark"} theme${Theme.stored() ? "" : " (now following the system's)"}`;
    }
    Charts.setTheme(t);
  },
  toggle() {
    try { localStorage.setItem(Theme.KEY, Theme.current() === "dark" ? "light" : "dark"); } catch (e) { /* storage off */ }
    Theme.apply();
  },
  init() {
    const b = $("#theme-toggle");
    if (b) b.addEventListener("click", Theme.toggle);
    if (Theme.media && Theme.media.addEventListener) Theme.media.addEventListener("change", () => { if (!Theme.stored()) Theme.apply(); });
    Theme.apply();
  },
};
