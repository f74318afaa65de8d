// Where the conversation lives: this browser's storage, never the server.
//
// Why: the browser owns the conversation, so requests are independent and nothing leaks
// between tabs or users. The conversation id is kept in sessionStorage (a reload keeps the
// chat, every tab has its own); the messages in localStorage under "chatfmt.conv.<id>" (the
// MAX_STORED newest are kept). A server's API key lives in sessionStorage only, so it is not
// kept after the tab. Saved data is parsed with JSON.parse and checked field by field; it is
// text like any other and reaches the page only through the view.

const SESSION_KEY = "chatfmt.conversation";
const API_KEY = "chatfmt.apiKey";
const STORE_PREFIX = "chatfmt.conv.";
const MAX_STORED = 20; // conversations kept in localStorage, newest first
const ID = /^[A-Za-z0-9_-]{8,64}$/; // what the server accepts as a conversation id

function newId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes); // works on plain http too, unlike randomUUID()
  return "c" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// This tab's conversation id (a new one when there is none yet).
export function conversationId() {
  let id = sessionStorage.getItem(SESSION_KEY);
  if (!id || !ID.test(id)) {
    id = newId();
    sessionStorage.setItem(SESSION_KEY, id);
  }
  return id;
}

// Make `id` this tab's conversation (one reopened from the server).
export function useConversation(id) {
  if (!ID.test(id)) return false;
  sessionStorage.setItem(SESSION_KEY, id);
  return true;
}

// Start a new conversation in this tab; returns its id.
export function startConversation() {
  const id = newId();
  sessionStorage.setItem(SESSION_KEY, id);
  return id;
}

export function emptyState(id) {
  // images and ok (did the call succeed) are per tool call id: OpenAI messages lack them.
  return { id, messages: [], images: {}, ok: {}, mode: "chat", system: "" };
}

export function loadState(id) {
  const state = emptyState(id);
  try {
    const saved = JSON.parse(localStorage.getItem(STORE_PREFIX + id) || "null");
    if (saved && Array.isArray(saved.messages)) {
      state.messages = saved.messages;
      state.images = saved.images && typeof saved.images === "object" ? saved.images : {};
      state.ok = saved.ok && typeof saved.ok === "object" ? saved.ok : {};
      state.mode = typeof saved.mode === "string" ? saved.mode : "chat";
      state.system = typeof saved.system === "string" ? saved.system : "";
    }
  } catch (err) {
    console.warn("could not read the saved conversation", err);
  }
  return state;
}

// Drop the oldest stored conversations other than `keepId`, leaving room for it.
export function pruneStored(keepId) {
  const keep = STORE_PREFIX + keepId;
  const entries = [];
  for (let i = 0; i < localStorage.length; i++) {
    const key = localStorage.key(i);
    if (!key || !key.startsWith(STORE_PREFIX) || key === keep) continue;
    let updated = 0;
    try { updated = JSON.parse(localStorage.getItem(key)).updated || 0; } catch (_) { /* corrupt: oldest */ }
    entries.push([updated, key]);
  }
  entries.sort((a, b) => b[0] - a[0]);
  entries.slice(MAX_STORED - 1).forEach(([, key]) => localStorage.removeItem(key));
}

// Save `state`; returns null, or a sentence for the reader when storage is full.
export function saveState(state) {
  const key = STORE_PREFIX + state.id;
  const data = { ...state, updated: Date.now() };
  try {
    localStorage.setItem(key, JSON.stringify(data));
    return null;
  } catch (err) {
    // Over quota: old conversations go first, then this one's images.
    try {
      pruneStored(state.id);
      localStorage.setItem(key, JSON.stringify({ ...data, images: {} }));
      return "Storage is full: images of this conversation will not survive a reload.";
    } catch (_) {
      return "Storage is full: this conversation will not survive a reload.";
    }
  }
}

export function apiKey() {
  return sessionStorage.getItem(API_KEY);
}

export function setApiKey(key) {
  sessionStorage.setItem(API_KEY, key);
}
