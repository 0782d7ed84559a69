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

/* hpod --token T wants "Authorization: Bearer T" on every call that
 * changes something (reads need none). The dashboard asks for it when a call
 * is refused (401) and keeps it for the tab's life in sessionStorage. */
const Token = {
  KEY: "hpo.token",
  get() { try { return sessionStorage.getItem(Token.KEY) || ""; } catch (e) { return ""; } },
  set(t) { try { if (t) sessionStorage.setItem(Token.KEY, t); else sessionStorage.removeItem(Token.KEY); } catch (e) { /* storage off */ } },
};

const Api = {
  async call(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (method !== "GET" && Token.get()) headers.Authorization = `Bearer ${Token.get()}`;
    const r = await fetch(path, { method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    let parsed = null;
    try { parsed = text ? JSON.parse(text) : null; } catch (e) { parsed = null; }
    if (!r.ok) {
      const e = parsed && parsed.error;
      const err = new Error(e ? e.message : `${r.status} ${r.statusText}`);
      err.status = r.status;
      err.code = e ? e.code : "";
      err.field = e ? e.field : "";
      throw err;
    }
    return parsed;
  },
  get(path) { return Api.call("GET", path); },
  post(path, body = {}) { return Api.call("POST", path, body); },
  del(path) { return Api.call("DELETE", path); },
  patch(path, body) { return Api.call("PATCH", path, body); },
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
  best(id) { return Api.get(`/api/v1/studies/${id}/best`); },
  models(id) { return Api.get(`/api/v1/studies/${id}/models`).then((b) => b.models); },
  /* study actions (routes of api/control.c and api/models.c) */
  pause(id) { return Api.post(`/api/v1/studies/${id}/pause`); },
  resume(id) { return Api.post(`/api/v1/studies/${id}/resume`); },
  cancel(id) { return Api.post(`/api/v1/studies/${id}/cancel`); },
  deleteStudy(id) { return Api.del(`/api/v1/studies/${id}`); },
  refit(id, topN) { return Api.post(`/api/v1/studies/${id}/refits`, { top_n: topN }); },
  ensemble(id, topN, method) { return Api.post(`/api/v1/studies/${id}/ensembles`, { top_n: topN, method }); },
  /* notes and user_attrs (notes.js): {note, user_attrs} (merged; null deletes a key) */
  updateStudy(id, body) { return Api.patch(`/api/v1/studies/${id}`, body); },
  updateTrial(id, body) { return Api.patch(`/api/v1/trials/${id}`, body); },
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
  /* fn(seen) once the API answers 404 (what the page follows was deleted;
   * seen: it had loaded before): the feed stops. */
  onGone(fn) { this.gone = fn; return this; }
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
      "trial_cancelled", "trial_requeued", "trial_enqueued", "trial_added", "trial_bred", "study_paused", "study_resumed", "model_queued", "model_started",
      "model_epoch", "model_complete", "model_failed", "study_updated", "trial_updated", ...final];
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
      if (e.status === 404 && this.gone && !this.stopped) {
        this.stop();
        Live.gone();
        this.gone(this.last !== undefined);
      } else Live.error(e);
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
 * densely from 0 and only the unfinished ones change, so a refresh asks
 * (order=number, offset, limit) for the runs of unfinished trials (close
 * ones joined) and the tail of new ones. One trial left running early on
 * costs a one-trial request, not the whole study again. */
class TrialStore {
  constructor(studyId) {
    this.studyId = studyId;
    this.byNumber = [];
  }
  static finished(t) { return t.state !== "running" && t.state !== "queued"; }
  /* [from, to) ranges of numbers to ask for; to null: to the end */
  ranges() {
    const n = this.byNumber.length, out = [];
    for (let i = 0; i < n; i++) {
      if (!this.byNumber[i] || TrialStore.finished(this.byNumber[i])) continue;
      const last = out[out.length - 1];
      if (last && i - last[1] <= TrialStore.GAP) last[1] = i + 1;
      else out.push([i, i + 1]);
    }
    const last = out[out.length - 1];
    if (last && n - last[1] <= TrialStore.GAP) last[1] = null;
    else out.push([n, null]);
    /* many scattered ones: one request from the first on */
    return out.length > TrialStore.MAX_REQUESTS ? [[out[0][0], null]] : out;
  }
  async refresh() {
    const pages = await Promise.all(this.ranges().map(([from, to]) =>
      Api.trials(this.studyId, { order: "number", offset: from, limit: to === null ? 100000 : to - from })));
    for (const page of pages) for (const t of page.trials) this.byNumber[t.number] = t;
    return this.byNumber;
  }
}
TrialStore.GAP = 50; /* finished trials between two unfinished ones asked again rather than one more request */
TrialStore.MAX_REQUESTS = 8;

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
  /* hpod answers, but what the page followed is gone: nothing to follow */
  gone() {
    const el = document.getElementById("live");
    if (el) { el.className = "live"; el.textContent = "stopped"; el.title = "what this page showed no longer exists"; }
  },
};
