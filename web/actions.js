/* actions.js - what the dashboard changes: a study's pause / resume /
 * cancel / delete, refits and ensembles (embedded studies), through the
 * REST routes (api.js), and the bearer token hpod --token wants for them.
 *
 * A call refused with 401 opens the token dialog (the error's text on top;
 * "the token was refused" when one had been given) and is retried with the
 * token typed, which stays in sessionStorage for the tab's life (Token in
 * api.js); the header's "token" button sets or forgets it at any time.
 * Every other error (403 from a foreign Origin, 409 for a state that does
 * not allow the action, ...) is shown with its status and code beside the
 * buttons. Cancel and delete ask for confirmation first.
 */
"use strict";

const Actions = {
  /* Resolves to the token typed, or null when the dialog was cancelled. */
  askToken(message) {
    let dlg = $("#token-dialog");
    if (!dlg) {
      dlg = h("dialog", { id: "token-dialog", class: "dialog" },
        h("form", { method: "dialog" },
          h("h2", {}, "hpod wants a token"),
          h("p", { class: "error", id: "token-error" }),
          h("p", { class: "muted" }, "This hpod was started with --token: changes need it (it is kept for this tab only)."),
          h("label", {}, "Token ", h("input", { type: "password", id: "token-input", autocomplete: "off", size: 32 })),
          h("div", { class: "dialog-buttons" },
            h("button", { value: "cancel", id: "token-cancel", formnovalidate: true }, "Cancel"),
            h("button", { value: "ok", id: "token-ok", class: "primary" }, "Use token"))));
      document.body.append(dlg);
    }
    $("#token-error", dlg).textContent = message || "";
    $("#token-input", dlg).value = "";
    return new Promise((resolve) => {
      dlg.addEventListener("close", () => {
        const t = $("#token-input", dlg).value.trim();
        resolve(dlg.returnValue === "ok" && t ? t : null);
      }, { once: true });
      dlg.returnValue = "";
      dlg.showModal();
    });
  },

  errorText(e) { return e.status ? `${e.status}${e.code ? " " + e.code : ""}: ${e.message}` : String(e.message || e); },

  /* Runs fn() (an Api call), asking for the token on 401; reports to
   * say(text, ok): "label: done", or "label: " + doneText(answer). */
  async run(label, fn, say, doneText) {
    for (;;) {
      try {
        const r = await fn();
        say(`${label}: ${doneText && r ? doneText(r) : "done"}`, true);
        return r === undefined || r === null ? true : r; /* a 204 has no body */
      } catch (e) {
        if (e.status !== 401) { say(`${label} failed — ${Actions.errorText(e)}`, false); return null; }
        const had = !!Token.get();
        if (had) { Token.set(""); Actions.showToken(); } /* a refused token is forgotten */
        say(`${label} failed — ${Actions.errorText(e)}${had ? " (the token was refused)" : ""}`, false);
        const t = await Actions.askToken(`${Actions.errorText(e)}${had ? " — the token given was refused." : ""}`);
        if (t === null) return null;
        Token.set(t);
        Actions.showToken();
      }
    }
  },

  /* The header's token button: "token set" when there is one. */
  showToken() {
    const b = $("#token-button");
    if (!b) return;
    b.textContent = Token.get() ? "token set" : "token";
    b.title = Token.get() ? "forget the token" : "give the token hpod was started with (--token)";
  },
  initToken() {
    const b = $("#token-button");
    if (!b) return;
    b.addEventListener("click", async () => {
      if (Token.get()) Token.set("");
      else { const t = await Actions.askToken(""); if (t) Token.set(t); }
      Actions.showToken();
    });
    Actions.showToken();
  },

  /* The buttons of a study's page. refresh(): reload the page's data after
   * a change; modelsChanged(): a refit or an ensemble was queued (the page
   * shows it and follows it). Returns {el, update(study)}. */
  studyBar(refresh, modelsChanged) {
    const msg = h("span", { class: "action-msg", id: "action-msg", role: "status" });
    const say = (text, ok) => { msg.textContent = text; msg.className = `action-msg ${ok ? "ok" : "error"}`; };
    const buttons = h("span", { class: "action-buttons" });
    const topN = h("input", { type: "number", id: "models-top-n", min: 1, max: 64, value: 2, title: "how many of the best trials", class: "small" });
    const method = h("select", { id: "ensemble-method", title: "how the ensemble combines its members" },
      ...["mean", "weighted", "greedy"].map((m) => h("option", { value: m }, m)));
    const el = h("div", { class: "actions", id: "study-actions" }, buttons, msg);
    let study = null;
    const act = async (label, fn, after, doneText) => {
      for (const b of buttons.querySelectorAll("button")) b.disabled = true;
      const r = await Actions.run(label, fn, say, doneText);
      if (r && after) after(r);
      else await refresh();
      for (const b of buttons.querySelectorAll("button")) b.disabled = false;
    };
    const confirmed = (text) => window.confirm(text);
    /* a refit or an ensemble is only queued when the call returns: say so */
    const jobsText = (models) => models.map((m) => `model ${m.id} ${m.state}`).join(", ");
    const update = (s) => {
      study = s;
      const b = (id, label, title, onclick) => h("button", { id, title, onclick }, label);
      const running = s.state === "running", paused = s.state === "paused";
      const done = (s.trials_by_state || {}).complete || 0;
      buttons.replaceChildren(...[
        running ? b("act-pause", "Pause", "stop asking for new trials (embedded trials stop at their next epoch)", () => act("pause", () => Api.pause(study.id))) : null,
        paused ? b("act-resume", "Resume", "run again", () => act("resume", () => Api.resume(study.id))) : null,
        running || paused ? b("act-cancel", "Cancel", "stop for good; running and queued trials are cancelled", () => {
          if (confirmed(`Cancel study "${study.name}" for good? Its running and queued trials are cancelled.`)) act("cancel", () => Api.cancel(study.id));
        }) : null,
        b("act-delete", "Delete", "delete the study and all its trials", () => {
          if (confirmed(`Delete study "${study.name}" and all its trials? This cannot be undone.`))
            act("delete", () => Api.deleteStudy(study.id), () => { location.hash = "#/"; });
        }),
        s.kind === "embedded" && done ? h("span", { class: "models-tools" },
          h("label", {}, "best ", topN),
          b("act-refit", "Refit", "retrain the best trials on train+validation, then test them", () =>
            act("refit", () => Api.refit(study.id, Number(topN.value) || 1), modelsChanged, (r) => jobsText(r.refits))),
          method,
          b("act-ensemble", "Ensemble", "ensemble the best trials' models", () =>
            act("ensemble", () => Api.ensemble(study.id, Number(topN.value) || 1, method.value), modelsChanged, (m) => jobsText([m])))) : null].filter(Boolean));
    };
    return { el, update, say };
  },
};
