/* api.js - the dashboard's only contact with hpod: JSON reads of the REST
 * API and the "feeds" that tell pages when something changed.
 *
 * Feeds poll (every few seconds, paused while the tab is hidden). A feed may
 * also listen to a server-sent event stream (feed.listen(url), used for
 * embedded studies: GET /api/v1/studies/{id}/events): every event triggers a
 * refresh (coalesced), and while the stream is open polling slows down to a
 * safety net. External studies' ask/tell emit no events, so they poll.
 * Pages only ever see feed.on(fn) with fresh data.
 */
"use strict";

const Api = {
  async get(path) {
    const r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
    const text = await r.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
    if (!r.ok) {
      const msg = body && body.error ? body.error.message : `${r.status} ${r.statusText}`;
      const err = new Error(msg);
      err.status = r.status;
      throw err;
    }
    return body;
  },
  health() { return Api.get("/healthz"); },
  studies() { return Api.get("/api/v1/studies").then((b) => b.studies); },
  study(id) { return Api.get(`/api/v1/studies/${id}`); },
  /* q: {state, order: "number"|"value", desc, limit, offset} */
  trials(id, q = {}) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== "") p.set(k, String(v));
    return Api.get(`/api/v1/studies/${id}/trials?${p}`);
  },
  trial(id) { return Api.get(`/api/v1/trials/${id}`); },
  importance(id) { return Api.get(`/api/v1/studies/${id}/importance`); },
  models(id) { return Api.get(`/api/v1/studies/${id}/models`).then((b) => b.models); },
};

/* Calls fn(data) with the value of load() now and whenever its signature
 * changes. One feed per page; stop() when leaving it. */
class Feed {
  constructor(load, signature, intervalMs = 3000) {
    this.load = load;
    this.signature = signature;
    this.interval = intervalMs;
    this.fns = [];
    this.last = undefined;
    this.timer = null;
    this.stopped = false;
    this.busy = false;
    this.onVisibility = () => { if (!document.hidden) this.refresh(); };
  }
  on(fn) { this.fns.push(fn); return this; }
  start() {
    document.addEventListener("visibilitychange", this.onVisibility);
    this.refresh();
    return this;
  }
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.soon);
    if (this.source) this.source.close();
    document.removeEventListener("visibilitychange", this.onVisibility);
  }
  /* Refreshes on every event of an SSE stream (at most every 300 ms); the
   * stream is closed after an event named in `final` (the server ends it
   * there, and EventSource would otherwise reconnect forever). */
  listen(url, final = [], slowIntervalMs = 15000) {
    if (typeof EventSource === "undefined") return this;
    const fast = this.interval;
    const src = new EventSource(url);
    this.source = src;
    const poke = () => {
      if (this.soon) return;
      this.soon = setTimeout(() => { this.soon = null; this.refresh(); }, 300);
    };
    src.onopen = () => { this.interval = slowIntervalMs; };
    src.onerror = () => { this.interval = fast; };
    src.onmessage = poke;
    const types = ["trial_started", "trial_resumed", "epoch", "trial_complete", "trial_pruned", "trial_failed",
      "trial_cancelled", "trial_requeued", "trial_enqueued", "trial_added", "study_paused", "study_resumed", "model_queued", "model_started",
      "model_epoch", "model_complete", "model_failed", ...final];
    for (const t of types) {
      src.addEventListener(t, () => {
        poke();
        if (final.includes(t)) { src.close(); this.interval = fast; }
      });
    }
    return this;
  }
  async refresh() {
    if (this.stopped || this.busy) return;
    clearTimeout(this.timer);
    this.busy = true;
    try {
      const data = await this.load();
      const sig = this.signature(data);
      if (!this.stopped && sig !== this.last) {
        this.last = sig;
        for (const fn of this.fns) await fn(data);
      }
      Live.ok();
    } catch (e) {
      Live.error(e);
    } finally {
      this.busy = false;
      if (!this.stopped && !document.hidden) this.timer = setTimeout(() => this.refresh(), this.interval);
    }
  }
}

/* A study changes when a trial is asked, reported on or finished: its
 * "updated" time and counts say so. */
function studyFeed(id, intervalMs) {
  return new Feed(() => Api.study(id),
    (s) => `${s.updated}|${s.state}|${JSON.stringify(s.trials_by_state)}`, intervalMs);
}

function studiesFeed(intervalMs) {
  return new Feed(() => Api.studies(),
    (list) => list.map((s) => `${s.id}:${s.updated}:${s.n_trials}:${s.state}`).join(","), intervalMs);
}

/* All trials of a study, kept up to date cheaply: trials are numbered
 * densely from 0 and only the unfinished ones change, so a refresh asks for
 * the tail from the first unfinished number on (order=number, offset). */
class TrialStore {
  constructor(studyId) {
    this.studyId = studyId;
    this.byNumber = [];
  }
  static finished(t) { return t.state !== "running" && t.state !== "queued"; }
  async refresh() {
    let from = 0;
    while (from < this.byNumber.length && TrialStore.finished(this.byNumber[from])) from++;
    const got = await Api.trials(this.studyId, { order: "number", offset: from, limit: 100000 });
    for (const t of got.trials) this.byNumber[t.number] = t;
    this.byNumber.length = Math.max(this.byNumber.length, from + got.trials.length);
    return this.byNumber;
  }
}

/* The "live" badge in the header. */
const Live = {
  ok() {
    const el = document.getElementById("live");
    if (el) { el.className = "live"; el.textContent = "live"; el.title = "updated " + new Date().toLocaleTimeString(); }
  },
  error(e) {
    const el = document.getElementById("live");
    if (el) { el.className = "live down"; el.textContent = "offline"; el.title = String(e && e.message || e); }
  },
};
