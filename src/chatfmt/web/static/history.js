// Conversations kept on the server, so that a chat started in one browser can go on in
// another: listed, reopened, deleted.
//
// Why this shape: the page stays offline-first (store.js is what it draws from); after each
// change it sends a copy (debounced) to /api/conversations, which keeps it for the API key in
// use. Titles reach the DOM as text only. PUT and DELETE are not requests another site can
// send without a preflight, which the server refuses.

import { authHeaders, errorText } from "./api.js";
import { el } from "./dom.js";

export function createHistory({ section, list, status, currentId, onOpen, onDeleted }) {
  let stored = false;
  let timer = 0;

  async function refresh() {
    let res;
    try {
      res = await fetch("/api/conversations", { headers: authHeaders() });
    } catch (_) {
      return; // offline: the page works from its own storage
    }
    if (!res.ok) return;
    const data = await res.json();
    stored = Boolean(data.stored);
    section.hidden = !stored;
    list.textContent = "";
    for (const c of data.conversations) {
      const item = el("li");
      const open = el("button", "link", c.title);
      open.type = "button";
      if (c.id === currentId()) open.setAttribute("aria-current", "true");
      open.addEventListener("click", () => load(c.id));
      const remove = el("button", "link delete", "Delete");
      remove.type = "button";
      remove.setAttribute("aria-label", "Delete " + c.title);
      remove.addEventListener("click", () => drop(c.id));
      item.append(open, " ", remove);
      list.append(item);
    }
  }

  async function load(id) {
    const res = await fetch(`/api/conversations/${id}`, { headers: authHeaders() });
    if (!res.ok) {
      status("Could not open that conversation: " + (await errorText(res)));
      return;
    }
    onOpen(await res.json());
    await refresh();
  }

  async function drop(id) {
    const res = await fetch(`/api/conversations/${id}`, { method: "DELETE", headers: authHeaders() });
    if (!res.ok && res.status !== 404) {
      status("Could not delete it: " + (await errorText(res)));
      return;
    }
    onDeleted(id);
    await refresh();
  }

  async function push(state) {
    const body = {
      messages: state.messages, images: state.images, ok: state.ok, mode: state.mode, system: state.system,
    };
    try {
      const res = await fetch(`/api/conversations/${state.id}`, {
        method: "PUT",
        headers: { "Content-Type": "application/json", ...authHeaders() },
        body: JSON.stringify(body),
      });
      if (res.ok) await refresh();
    } catch (_) { /* offline: kept in this browser, sent with the next change */ }
  }

  // Keep a copy of `state` on the server (after a short pause: typing saves often).
  function save(state) {
    if (!stored || !state.messages.length) return;
    clearTimeout(timer);
    timer = setTimeout(() => push(state), 400);
  }

  return { refresh, save };
}
