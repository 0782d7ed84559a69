/* notes.js - a study's or a trial's note and user_attrs (Optuna's
 * study/trial notes and set_user_attr), on the study and trial pages.
 *
 * Notes.panel(save) -> {el, update(obj)}: a "Note" panel showing obj.note as
 * plain text (a text node in a white-space: pre-wrap block: newlines kept,
 * never parsed as HTML), an Edit button opening a textarea, Save and Cancel.
 * save(text) is the PATCH (Api.updateStudy / Api.updateTrial, note only);
 * it runs through Actions.run, so a 401 from hpod --token asks for the token
 * and retries as the study actions do. update(obj) follows the page's feed:
 * the text shown follows the stored note, and an open editor is never
 * overwritten.
 * Notes.attrs() -> {el, update(obj)}: a "User attributes" table (key, value
 * as compact JSON), hidden while obj.user_attrs is empty.
 * Both are made once per page and kept in place across its redraws.
 */
"use strict";

const Notes = {
  panel(save) {
    const text = h("div", { class: "note-text", id: "note-text" });
    const input = h("textarea", { id: "note-input", rows: 6, maxlength: 65536, spellcheck: "true", hidden: true });
    const msg = h("span", { class: "action-msg", id: "note-msg", role: "status" });
    const say = (t, ok) => { msg.textContent = t; msg.className = `action-msg ${ok ? "ok" : "error"}`; };
    let stored = "", editing = false, saving = false;
    const show = () => {
      text.replaceChildren(stored ? stored : h("span", { class: "muted" }, "No note."));
      text.dataset.empty = stored ? "" : "1";
    };
    const btn = (id, label, onclick, primary) => h("button", { id, class: primary ? "primary" : "", onclick }, label);
    const edit = btn("note-edit", "Edit", () => setEditing(true));
    const ok = btn("note-save", "Save", async () => {
      if (saving) return;
      saving = true;
      ok.disabled = cancel.disabled = true;
      const r = await Actions.run("note", () => save(input.value), say);
      saving = false;
      ok.disabled = cancel.disabled = false;
      if (!r) return; /* refused or failed: the editor stays open with the text */
      stored = typeof r.note === "string" ? r.note : input.value;
      setEditing(false);
    }, true);
    const cancel = btn("note-cancel", "Cancel", () => { msg.textContent = ""; setEditing(false); });
    function setEditing(on) {
      editing = on;
      if (on) { input.value = stored; msg.textContent = ""; }
      text.hidden = on;
      input.hidden = !on;
      edit.hidden = on;
      ok.hidden = cancel.hidden = !on;
      if (on) input.focus();
      else show();
    }
    const el = h("section", { class: "panel note-panel", id: "note" },
      h("h2", {}, "Note", h("span", { class: "tools" }, msg, edit, ok, cancel)), text, input);
    setEditing(false);
    return {
      el,
      update(obj) {
        stored = typeof obj.note === "string" ? obj.note : "";
        if (!editing) show();
      },
    };
  },

  attrs() {
    const body = h("tbody");
    const el = h("section", { class: "panel user-attrs", id: "user-attrs", hidden: true },
      h("h2", {}, "User attributes", h("span", { class: "note" }, "user_attrs; values as JSON")),
      h("table", { class: "grid attrs" }, body));
    return {
      el,
      update(obj) {
        const entries = Object.entries(obj.user_attrs || {});
        el.hidden = !entries.length;
        body.replaceChildren(...entries.map(([k, v]) => h("tr", { "data-key": k },
          h("th", {}, k), h("td", { class: "wrap json" }, JSON.stringify(v)))));
      },
    };
  },

  /* The note and the attributes side by side: {el, update(obj)}. */
  row(save) {
    const note = Notes.panel(save), attrs = Notes.attrs();
    const el = h("div", { class: "notes-row" }, note.el, attrs.el);
    return {
      el,
      update(obj) {
        note.update(obj);
        attrs.update(obj);
        el.classList.toggle("with-attrs", !attrs.el.hidden);
      },
    };
  },
};
