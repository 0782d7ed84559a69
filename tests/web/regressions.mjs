// regressions.mjs - what an audit of the dashboard found, checked in the
// browser; called by dashboard.mjs with {ctx, page, cfg, check, shot}:
// client strings in chart tooltips shown as text (never run as HTML), a
// study deleted while its page is open, the importance chart catching up
// with trials finished during its throttle, the trial store not fetching
// the whole study again for one early trial left running, the learning
// curves' ticks, exports of a study with several objectives and of strings
// a spreadsheet would run as formulas, disposing a chart in the middle
// of a progressive paint, and the charts of a 200,000-trial study. The slow ones (pages that poll) run side by side.

const PAYLOAD = (flag) => `<img src=x onerror=${flag}=1>`; /* fits a 64-character metric name */
const SPACE = { x: { type: "float", low: 0, high: 1 }, y: { type: "float", low: 0, high: 1 } };

/* the REST API beside the page (its console stays clean of expected 404s) */
function rest(page, base) {
  const call = async (method, path, body) => {
    const r = await page.request.fetch(`${base}/api/v1${path}`, { method, data: body });
    if (!r.ok()) throw new Error(`${method} ${path}: ${r.status()} ${await r.text()}`);
    return r.status() === 204 ? null : r.json();
  };
  return {
    call,
    study: (body) => call("POST", "/studies", { tuner: { algorithm: "random", max_trials: 1000 }, objective: { direction: "minimize" }, ...body }),
    add: (sid, body) => call("POST", `/studies/${sid}/trials`, { state: "complete", ...body }),
    ask: (sid) => call("POST", `/studies/${sid}/ask`),
    tell: (tid, body) => call("POST", `/trials/${tid}/tell`, body),
  };
}

/* a page of its own, with its uncaught errors */
async function openPage(ctx, url) {
  const p = await ctx.newPage();
  const errors = [];
  p.on("pageerror", (e) => errors.push(String(e)));
  await p.goto(url);
  return { p, errors };
}
const ready = (p) => p.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
/* waits for fn in the page; false when it did not come in time */
const within = (p, fn, arg, timeout) => p.waitForFunction(fn, arg, { timeout }).then(() => true, () => false);

/* shows the tooltip of a chart's point; returns its HTML and text, and whether the payload ran */
const tooltip = (p, chart, seriesIndex, dataIndex) => p.evaluate(async ([n, s, d]) => {
  const c = window.Charts.all[n];
  c.dispatchAction({ type: "showTip", seriesIndex: s, dataIndex: d });
  await new Promise((r) => setTimeout(r, 300));
  const tip = [...c.getDom().querySelectorAll("div")].find((e) => e.style.position === "absolute" && e.style.zIndex && e.innerHTML);
  return { html: tip ? tip.innerHTML : "", text: tip ? tip.textContent : "", ran: window.__pwn !== undefined };
}, [chart, seriesIndex, dataIndex]);

/* A study deleted while its overview and one of its views are open: both
 * say so, stop polling, and the badge does not say "offline". */
async function deletedStudy({ ctx, cfg, check }, api) {
  const made = await Promise.all(["", "/contour"].map(async (view) => {
    const s = await api.study({ name: "to be deleted", space: SPACE });
    for (let i = 0; i < 3; i++) await api.add(s.id, { params: { x: i / 3, y: 0.5 }, value: i });
    const { p, errors } = await openPage(ctx, `${cfg.url}/#/studies/${s.id}${view}`);
    await p.waitForFunction(() => window.__hpo.ready || window.__hpo.drawn > 0, null, { timeout: 15000 });
    /* the API calls the page makes once it was told 404 (polling on) */
    const after404 = { seen: false, requests: 0 };
    p.on("request", (r) => { if (after404.seen && r.url().includes("/api/")) after404.requests++; });
    p.on("response", (r) => { if (r.status() === 404) after404.seen = true; });
    await api.call("DELETE", `/studies/${s.id}`);
    return { s, view, p, errors, after404 };
  }));
  return async () => {
    const said = await Promise.all(made.map(({ s, p }) => within(p, (id) => {
      const g = document.querySelector("#gone h1");
      return g && g.textContent === `Study ${id} was deleted` && document.querySelector('#gone a[href="#/"]');
    }, s.id, 12000)));
    for (const [i, { s, view, p, errors, after404 }] of made.entries()) {
      const badge = await p.textContent("#live");
      check(said[i] && after404.seen && after404.requests === 0 && badge !== "offline" && errors.length === 0,
        `study deleted while its ${view ? "contour view" : "overview"} is open: "Study ${s.id} was deleted" with a link to the list, ` +
        `polling stopped (${after404.requests} API requests after the first 404), badge "${badge}"${errors.length ? ", errors: " + errors.join(" | ") : ""}`);
      await p.close();
    }
  };
}

/* Trials finished within the importance chart's throttle (10 s) are drawn
 * once it has passed, though nothing changes after them. */
async function importanceCatchesUp({ ctx, cfg, check }, api) {
  const s = await api.study({ name: "importance catches up", space: SPACE });
  let n = 0;
  const add = async (k) => { for (let i = 0; i < k; i++, n++) await api.add(s.id, { params: { x: (n * 0.37) % 1, y: (n * 0.61) % 1 }, value: 10 * ((n * 0.37) % 1) }); };
  await add(3);
  const { p, errors } = await openPage(ctx, `${cfg.url}/#/studies/${s.id}`);
  await ready(p);
  await add(20);
  return async () => {
    const ok = await within(p, () => window.__hpo.study.importanceAt === 23 &&
      (window.Charts.all.importance.getOption().series[0] || { data: [] }).data.length === 2, null, 16000);
    const at = await p.evaluate(() => window.__hpo.study.importanceAt);
    check(ok && errors.length === 0, `importance: the 20 trials told just after the page drew it are drawn once its 10 s throttle passes (it shows ${at} complete trials, want 23)`);
    await p.close();
  };
}

/* One early trial left running: a refresh asks for it and the new tail,
 * not for every trial again; its end still reaches the page. */
async function stuckRunning({ ctx, cfg, check }, api) {
  const s = await api.study({ name: "one trial stuck running", space: SPACE });
  const stuck = await api.ask(s.id);
  for (let i = 0; i < 120; i++) await api.add(s.id, { params: { x: (i * 0.37) % 1, y: 0.5 }, value: i });
  const { p, errors } = await openPage(ctx, `${cfg.url}/#/studies/${s.id}`);
  await ready(p);
  const asked = [];
  p.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname === `/api/v1/studies/${s.id}/trials` && u.searchParams.get("order") === "number" && !u.searchParams.has("desc"))
      asked.push({ offset: Number(u.searchParams.get("offset")), limit: Number(u.searchParams.get("limit")) });
  });
  await api.add(s.id, { params: { x: 0.5, y: 0.5 }, value: -1 });
  await api.tell(stuck.trial_id, { value: 0.25 });
  return async () => {
    const got = await within(p, () => window.__hpo.study.store.byNumber.length === 122 &&
      window.__hpo.study.store.byNumber[0].state === "complete", null, 10000);
    const whole = asked.filter((q) => q.offset === 0 && q.limit > 1).length;
    check(got && whole === 0 && asked.length > 0 && errors.length === 0,
      `trial store: with trial #0 left running, a refresh asks for it and the new tail (${JSON.stringify(asked)}), ` +
      `not for all 122 trials again (${whole} times); the new trial and #0's end ${got ? "arrived" : "did not arrive"}`);
    await p.close();
  };
}

/* Client strings (a choice value, an objective's metric name) in the
 * tooltips of slice, contour and Pareto: shown as text, never run. */
async function tooltips({ page, cfg, check, shot }, choice, mo) {
  const cases = [
    ["slice (a choice value)", `#/studies/${choice.id}/slice`, "slice:c", 0, null],
    ["contour (a choice value)", `#/studies/${choice.id}/contour`, "contour", 1, () => page.selectOption("#contour-y", "c")],
    ["Pareto front (a metric's name)", `#/studies/${mo.id}`, "pareto", 0, null],
  ];
  for (const [what, hash, chart, series, prep] of cases) {
    await page.goto(`${cfg.url}/${hash}`);
    await page.waitForFunction((n) => window.Charts.all[n], chart, { timeout: 15000 });
    if (prep) { await prep(); await page.waitForTimeout(300); }
    const t = await tooltip(page, chart, series, 0);
    check(!t.ran && t.text.includes(PAYLOAD("__pwn")) && !/<img/i.test(t.html),
      `tooltip of the ${what}: the payload shown as text, not run (${JSON.stringify(t.text.slice(0, 90))})`);
  }
  await shot("regression-tooltip.png");
  const objective = await page.textContent(".summary dl");
  check(objective.includes(`minimize ${PAYLOAD("__pwn")}, minimize b`), "a study with two objectives: the summary names both objectives and directions");
  /* the lineage's (params a copy changed) and timeline's (worker slots) formatters, on made-up trials */
  const made = await page.evaluate((pay) => {
    const now = Date.now() / 1000;
    const lin = Charts.lineage([
      { trial_id: 1, number: 0, state: "complete", last_step: 2 },
      { trial_id: 2, number: 1, state: "complete", last_step: 4, lineage: { parent_trial_id: 1, parent_number: 0, parent_epoch: 2,
        params_before: { [pay]: pay }, params_after: { [pay]: "b" } } }], false);
    const edge = lin.series.find((s) => s.name === "copied from").data[0];
    const tl = Charts.timeline([{ trial_id: 1, number: 0, state: "complete", started: now - 5, finished: now, slot: pay, value: 1 }], now);
    return [lin.tooltip.formatter({ seriesName: "copied from", data: edge }), tl.tooltip.formatter({ seriesName: "complete", data: tl.series[0].data[0] })];
  }, PAYLOAD("__pwn"));
  check(made.every((html) => !/<img/i.test(html) && html.includes("&lt;img")), `lineage and timeline tooltips escape a param's name and value, a slot (${JSON.stringify(made)})`);
}

/* CSV and JSON (as the download buttons make them) of a study with two
 * objectives: every objective's value and the metrics told; a string a
 * spreadsheet would run is quoted with '. */
async function exports({ page, check }, mo, choice) {
  const made = (sid, json) => page.evaluate(async ([sid, json]) => {
    const s = await Api.study(sid), trials = (await Api.trials(sid, { order: "number", limit: 100000 })).trials;
    return { text: json ? Export.json(s, trials) : Export.csv(s, trials), trials };
  }, [sid, json]);
  let { text, trials } = await made(mo.id, false);
  let rows = text.trimEnd().split("\r\n").map((l) => l.split(","));
  const col = (name) => rows[0].indexOf(name);
  check(col("value_b") > 0 && col("metric_size") > 0 && rows.length === trials.length + 1 &&
    trials.every((t, i) => Number(rows[i + 1][col("value_b")]) === t.values[1] && Number(rows[i + 1][col("metric_size")]) === t.metrics.size),
    `CSV of a study with two objectives: a value_<metric> column per objective and the metrics told (${rows[0].slice(0, 10)})`);
  const doc = JSON.parse((await made(mo.id, true)).text);
  check((doc.study.objectives || []).length === 2 && doc.trials.length === trials.length &&
    doc.trials.every((t, i) => JSON.stringify(t.values) === JSON.stringify(trials[i].values) && (t.metrics || {}).size === trials[i].metrics.size),
    "JSON of a study with two objectives: each trial's values and metrics, the study's objectives");
  rows = (await made(choice.id, false)).text.trimEnd().split("\r\n").map((l) => l.split(","));
  const c = rows.slice(1).map((r) => r[col("param_c")]), v = rows.slice(1).map((r) => r[col("value")]);
  check(c.includes("'=1+2") && c.includes("'@SUM(A1)") && c.includes("'-x") && c.includes("b") && v.includes("-0.5"),
    `CSV: strings starting with = + - @ get a ' (not formulas), numbers do not (param_c ${JSON.stringify(c)}, value ${JSON.stringify(v)})`);
}

/* The learning curves chosen by default are the ones ticked in the table,
 * and "Compare ticked" compares those. */
async function curveTicks({ page, cfg, check }) {
  await page.goto(`${cfg.url}/#/studies/${cfg.finished}`);
  await ready(page);
  const r = await page.evaluate(() => {
    const drawn = new Set(window.Charts.all.curves.getOption().series.map((s) => s.name.split(" ")[0]));
    const rows = [...document.querySelectorAll("#trials tbody tr")].map((tr) => [`#${tr.children[1].textContent.trim()}`, tr.querySelector("input").checked]);
    return { ticked: rows.filter(([, on]) => on).map(([n]) => n), unticked: rows.filter(([, on]) => !on).map(([n]) => n), wrong: rows.filter(([n, on]) => on !== drawn.has(n)).map(([n]) => n), drawn: drawn.size };
  });
  check(r.ticked.length > 0 && r.wrong.length === 0,
    `learning curves: the table ticks the ${r.drawn} trials drawn by default (ticked ${r.ticked}; wrong ${r.wrong})`);
  await page.evaluate(() => { window.__hpo.compared = null; });
  await page.click("#compare-ticked");
  await page.waitForFunction(() => window.__hpo.view === "compare" && window.__hpo.compared, null, { timeout: 15000 });
  const compared = (await page.evaluate(() => window.__hpo.compared)).map((n) => `#${n}`);
  /* every ticked trial, and none the table showed unticked */
  check(r.ticked.length > 0 && r.ticked.every((n) => compared.includes(n)) && !compared.some((n) => r.unticked.includes(n)),
    `"Compare ticked" compares the ticked trials (${compared})`);
}

/* A chart disposed while ECharts still paints a large series over several
 * frames (leaving a big study's timeline): no error in the next frame. */
async function disposeWhilePainting({ page, check }) {
  await page.bringToFront(); /* a page behind others gets no animation frames */
  const r = await page.evaluate(async () => {
    const errors = [];
    const onError = (e) => errors.push(e.message);
    window.addEventListener("error", onError);
    const el = document.createElement("div");
    el.style.cssText = "width:900px;height:500px";
    document.body.append(el);
    const data = Array.from({ length: 5000 }, (_, i) => [i % 997, (i * 7919) % 1009]);
    /* painted in one go, each point with a shadow: longer than a frame, so the paint goes on in the next one */
    const c = window.Charts.show("probe", el, { animation: false, xAxis: { type: "value" }, yAxis: { type: "value" },
      series: [{ type: "scatter", data, symbolSize: 6, itemStyle: { shadowBlur: 8, shadowColor: "#000" }, progressive: 5000, progressiveThreshold: 1 }] });
    const painter = c.getZr().painter, paint = painter._doPaintList;
    const unfinished = await new Promise((resolve) => {
      /* disposed as soon as a frame's paint stops unfinished (once that frame's work is done) */
      painter._doPaintList = function (...a) {
        const finished = paint.apply(this, a);
        if (!finished) queueMicrotask(() => { window.Charts.disposeAll(); resolve(true); });
        return finished;
      };
      setTimeout(() => resolve(false), 3000);
    });
    await new Promise((res) => setTimeout(res, 500));
    window.removeEventListener("error", onError);
    el.remove();
    return { errors, unfinished };
  });
  check(r.unfinished && r.errors.length === 0,
    `a chart disposed in the middle of a paint (${r.unfinished ? "unfinished" : "never unfinished"} when disposed): no error${r.errors.length ? ": " + r.errors[0] : ""}`);
}

/* The option builders on a study of 200,000 trials: no RangeError from
 * spreading them into Math.min / Math.max, and the Pareto chart's split
 * in linear time. */
async function longStudy({ page, check }) {
  const r = await page.evaluate(() => {
    const n = 200000, now = Date.now() / 1000;
    const trials = Array.from({ length: n }, (_, i) => ({
      trial_id: i + 1, number: i, state: "complete", value: (i * 7919) % 1009, values: [i % 101, (i * 31) % 97, i % 7],
      params: { x: ((i * 13) % 1000) / 1000 }, started: now - n + i, finished: now - n + i + 0.5, slot: `cpu:${i % 4}`,
    }));
    const objectives = ["a", "b", "c"].map((metric) => ({ metric, direction: "minimize" }));
    const built = {}, t0 = performance.now();
    for (const [name, make] of [["parallel", () => window.Charts.parallel({ x: { type: "float", low: 0, high: 1 } }, trials, false)],
      ["slice", () => window.Charts.slice("x", { type: "float" }, trials, n - 1)],
      ["timeline", () => window.Charts.timeline(trials, now)],
      ["pareto", () => window.Charts.pareto(trials, [1, 2, 3], objectives, [])]]) {
      try { built[name] = !!make(); } catch (e) { built[name] = String(e); }
    }
    return { built, ms: performance.now() - t0 };
  });
  check(Object.values(r.built).every((v) => v === true),
    `charts of a 200,000-trial study are built (${JSON.stringify(r.built)}, ${r.ms.toFixed(0)} ms)`);
}

export async function regressions(env) {
  const { page, cfg } = env;
  const api = rest(page, cfg.url);
  /* a choice whose values are a script, formulas and plain text; an objective named by a script */
  const choice = await api.study({ name: "client strings", space: { x: SPACE.x, c: { type: "choice", values: [PAYLOAD("__pwn"), "=1+2", "@SUM(A1)", "-x", "b"] } } });
  for (const [i, c] of [PAYLOAD("__pwn"), "=1+2", "@SUM(A1)", "-x", "b", PAYLOAD("__pwn")].entries())
    await api.add(choice.id, { params: { x: (i + 0.5) / 6, c }, value: i - 0.5 });
  const mo = await api.study({ name: "two objectives", objective: undefined, space: SPACE,
    objectives: [{ metric: PAYLOAD("__pwn"), direction: "minimize" }, { metric: "b", direction: "minimize" }] });
  for (let i = 0; i < 4; i++) await api.add(mo.id, { params: { x: i / 4, y: 0.5 }, values: [i, 4 - i], metrics: { size: i / 2 } });
  /* one part's exception fails it, not the parts after it */
  const run = (name, fn) => fn().catch((e) => { env.check(false, `${name}: ${e && e.stack || e}`); return async () => {}; });
  /* the ones that wait for pages' polls, side by side */
  const pending = await Promise.all([run("importance", () => importanceCatchesUp(env, api)),
    run("deleted study", () => deletedStudy(env, api)), run("trial store", () => stuckRunning(env, api))]);
  await run("tooltips", () => tooltips(env, choice, mo));
  await run("exports", () => exports(env, mo, choice));
  await run("curve ticks", () => curveTicks(env));
  await run("dispose", () => disposeWhilePainting(env));
  await run("long study", () => longStudy(env));
  for (const finish of pending) await run("finish", finish);
}
