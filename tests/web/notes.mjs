// notes.mjs - study and trial notes and user_attrs in the dashboard, checked
// in the browser; called by dashboard.mjs with {ctx, page, cfg, check, shot}.
// Notes are edited through the page and read back from the REST API;
// user_attrs are set through the API (PATCH) and read from the page and the
// CSV download; on the hpod started with --token, saving asks for the token.
import fs from "node:fs";

const apiGet = async (page, url) => (await page.request.get(url)).json();
const patch = async (page, url, body, token) => {
  const r = await page.request.fetch(url, { method: "PATCH", data: body, headers: token ? { Authorization: `Bearer ${token}` } : {} });
  if (r.status() !== 200) throw new Error(`PATCH ${url}: ${r.status()} ${await r.text()}`);
  return r.json();
};
/* RFC 4180: fields may be quoted, holding commas, quotes ("") and line breaks */
function parseCsv(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\r" && text[i + 1] === "\n") { row.push(field); rows.push(row); row = []; field = ""; i++; }
    else field += c;
  }
  if (field || row.length) { row.push(field); rows.push(row); }
  return rows;
}
/* what the page shows: the note's text, its HTML elements, line breaks, and the attributes table */
const shown = (page) => page.evaluate(() => {
  const t = document.querySelector("#note-text");
  return {
    text: t.dataset.empty ? "" : t.textContent,
    elements: t.querySelectorAll("*").length - (t.dataset.empty ? 1 : 0),
    lines: t.innerText.split("\n").length,
    attrs: document.querySelector("#user-attrs").hidden ? null
      : [...document.querySelectorAll("#user-attrs tr")].map((r) => [r.dataset.key, r.children[1].textContent]),
  };
});
const wantAttrs = (obj) => Object.entries(obj.user_attrs || {}).map(([k, v]) => [k, JSON.stringify(v)]);
/* Edit -> type -> Save, then wait until the panel shows the note again (saved) */
async function editNote(page, text) {
  await page.click("#note-edit");
  await page.fill("#note-input", text);
  await page.click("#note-save");
}
const noteShown = (page, text, timeout = 10000) => page.waitForFunction((t) => {
  const el = document.querySelector("#note-text");
  return el && !el.hidden && el.textContent === t;
}, text, { timeout });

export async function notes({ page, cfg, check, shot }) {
  const sid = cfg.finished;
  const base = `${cfg.url}/api/v1`;
  const trials = (await apiGet(page, `${base}/studies/${sid}/trials?order=number&limit=100000`)).trials;
  const [t0, t1] = trials;

  // ---- user_attrs set through the API
  await patch(page, `${base}/studies/${sid}`, { user_attrs: { owner: "ana", config: { layers: [64, 32], bn: true } } });
  await patch(page, `${base}/trials/${t0.trial_id}`, { user_attrs: { fold: 1, "source, sheet": 'a "quoted" value' } });
  await patch(page, `${base}/trials/${t1.trial_id}`, { user_attrs: { fold: 2, tags: ["x", "y"] } });

  // ---- study page: the attributes table, then a note written through the page
  await page.goto(`${cfg.url}/#/`); /* the page may be on this study already: open it afresh */
  await page.goto(`${cfg.url}/#/studies/${sid}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  let study = await apiGet(page, `${base}/studies/${sid}`);
  let s = await shown(page);
  check(JSON.stringify(s.attrs) === JSON.stringify(wantAttrs(study)) && s.attrs.length === 2,
    `study page: a user attributes table of the keys set through the API, values as JSON (${JSON.stringify(s.attrs)})`);
  const studyNote = "Baseline sweep, 60 trials.\nSee <b>x</b> & <script>alert(1)</script> below.";
  await editNote(page, studyNote);
  await noteShown(page, studyNote);
  study = await apiGet(page, `${base}/studies/${sid}`);
  s = await shown(page);
  check(study.note === studyNote, "study note: edited and saved through the page, stored (GET /studies/{id} note)");
  check(s.text === studyNote && s.elements === 0 && s.lines === 2,
    `study note: shown as plain text (no element made of <b>x</b> or <script>), its line break kept (${s.elements} elements, ${s.lines} lines)`);
  await shot("notes-study.png");
  // cancel drops what was typed
  await page.click("#note-edit");
  await page.fill("#note-input", "not to be kept");
  await page.click("#note-cancel");
  await noteShown(page, studyNote);
  check((await apiGet(page, `${base}/studies/${sid}`)).note === studyNote, "study note: Cancel keeps the stored note and changes nothing");

  // ---- the CSV download: a user_attr_<key> column per key any trial has
  const [d] = await Promise.all([page.waitForEvent("download", { timeout: 10000 }), page.click("#download-csv")]);
  const rows = parseCsv(fs.readFileSync(await d.path(), "utf8"));
  const head = rows[0];
  const fresh = (await apiGet(page, `${base}/studies/${sid}/trials?order=number&limit=100000`)).trials;
  const keys = [...new Set(fresh.flatMap((t) => Object.keys(t.user_attrs || {})))];
  const cell = (v) => (v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));
  const attrCols = head.filter((c) => c.startsWith("user_attr_"));
  const cellsOk = fresh.every((t, i) => rows[i + 1] && rows[i + 1][head.indexOf("number")] === String(t.number) &&
    keys.every((k) => rows[i + 1][head.indexOf(`user_attr_${k}`)] === cell((t.user_attrs || {})[k])));
  check(keys.includes("fold") && keys.includes("source, sheet") && keys.includes("tags") &&
    attrCols.length === keys.length && keys.every((k) => head.includes(`user_attr_${k}`)) && rows.length === fresh.length + 1 && cellsOk,
    `CSV download: the user_attr columns ${JSON.stringify(attrCols)}, each trial's values (strings as such, others as JSON, quoted where needed)`);

  // ---- trial page: its attributes and a note
  await page.goto(`${cfg.url}/#/trials/${t0.trial_id}`);
  await page.waitForFunction((id) => window.__hpo.trial === id, t0.trial_id, { timeout: 10000 });
  let trial = await apiGet(page, `${base}/trials/${t0.trial_id}`);
  s = await shown(page);
  check(JSON.stringify(s.attrs) === JSON.stringify(wantAttrs(trial)) && s.text === "" && await page.isVisible("text=No note."),
    `trial page: its user attributes table (${JSON.stringify(s.attrs)}) and "No note."`);
  const trialNote = "lr too high? <i>diverged</i> at step 3\n\nretry with lr=1e-3";
  await editNote(page, trialNote);
  await noteShown(page, trialNote);
  trial = await apiGet(page, `${base}/trials/${t0.trial_id}`);
  s = await shown(page);
  check(trial.note === trialNote && s.text === trialNote && s.elements === 0 && s.lines === 3,
    "trial note: edited and saved through the page, stored (GET /trials/{id} note), shown as plain text with its blank line");
  await shot("notes-trial.png");

  // ---- hpod --token: saving a note asks for the token, then stores it
  const tk = cfg.token;
  await page.goto(`${tk.url}/#/studies/${tk.study}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  await page.evaluate(() => { sessionStorage.removeItem("hpo.token"); Actions.showToken(); });
  const tokNote = "saved with the token";
  await editNote(page, tokNote);
  await page.waitForSelector("#token-dialog[open]", { timeout: 10000 });
  const asked = await page.textContent("#token-error");
  const before = (await apiGet(page, `${tk.url}/api/v1/studies/${tk.study}`)).note;
  await page.fill("#token-input", tk.token);
  await page.click("#token-ok");
  await noteShown(page, tokNote);
  const after = (await apiGet(page, `${tk.url}/api/v1/studies/${tk.study}`)).note;
  check(/401/.test(asked) && before === "" && after === tokNote,
    `hpod --token: saving the note is refused (401), the token asked for, then the note stored (${JSON.stringify(after)})`);
  /* the actions check after this one starts with no token */
  await page.evaluate(() => { sessionStorage.removeItem("hpo.token"); Actions.showToken(); });
}
