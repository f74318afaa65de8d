// chatfmt web chat: the entry module, which wires the page's controls to the other modules.
// No build step, no dependencies, nothing fetched from other origins: the page loads this file
// as <script type="module">, and the browser fetches its imports from /static/ (the CSP's
// script-src 'self' covers module scripts and their imports).
//
// The browser owns the conversation (store.js): each request sends the whole conversation; the
// server keeps nothing between requests except the code interpreter's kernel for this
// conversation id.
//
// Safety: model and user text only ever reaches the DOM as textContent, or as HTML that the
// server rendered from Markdown and sanitized (POST /api/markdown, through markup.js and
// dom.js's setHtml(), the page's only HTML sink). No eval, no new Function, no innerHTML of
// raw text.
//
// Modules: markup.js (Markdown to HTML, by the server), sse.js (event-stream parsing),
// store.js (persistence), conversation.js (message rules), api.js (requests), dom.js (the
// ways text reaches the DOM), view.js and calls.js (blocks), reasoning.js (a model's
// reasoning, as plain text in a collapsible box), live.js (the streamed message's render),
// reply.js (a streaming reply's DOM), run.js (one agent run), meter.js (the token meter).

import { authHeaders, errorText, onUnauthorized } from "./api.js";
import { cutAfterLastUser, lastUserIndex } from "./conversation.js";
import { el } from "./dom.js";
import { createFiles } from "./files.js";
import { createHistory } from "./history.js";
import { refreshCount } from "./meter.js";
import { runAgent } from "./run.js";
import {
  conversationId, emptyState, loadState, pruneStored, saveState, setApiKey, startConversation,
  useConversation,
} from "./store.js";
import { drawConversation, errorBlock, noteBlock, userBlock } from "./view.js";

const $ = (id) => document.getElementById(id);

// ==== Page state ====

let state = loadState(conversationId());
let info = { context: 0, tools: [], modes: ["chat"], interpreter_tool: null, system_prompts: {} };
let controller = null; // AbortController of the running request
let countTimer = 0;

const log = $("log");
const system = $("system");
const main = $("main");
const prompt = $("prompt");

function setStatus(text) { $("status").textContent = text; }

function save() {
  const warning = saveState(state);
  if (warning) setStatus(warning);
  saved.save(state);
}

function nearBottom() { return main.scrollHeight - main.scrollTop - main.clientHeight < 80; }

// Follow the stream while the reader is at the bottom; stop following once they scroll up.
let stick = true;
main.addEventListener("scroll", () => { stick = nearBottom(); });

function scrollDown(force) {
  if (force || stick) {
    main.scrollTop = main.scrollHeight;
    stick = true;
  }
}

const follow = () => scrollDown(false);

function showError(message) {
  log.append(errorBlock(message));
  scrollDown(true);
}

function showNote(text) {
  log.append(noteBlock(text));
  scrollDown(false);
}

// Draw the whole stored conversation (on load, after Regenerate and New chat).
function renderAll() {
  log.setAttribute("aria-busy", "true");
  log.textContent = "";
  drawConversation(log, state, follow);
  $("empty").hidden = state.messages.length > 0;
  log.setAttribute("aria-busy", "false");
  updateButtons();
}

const saved = createHistory({
  section: $("history"),
  list: $("history-list"),
  status: setStatus,
  currentId: () => state.id,
  onOpen(data) {
    if (controller) controller.abort();
    controller = null;
    if (!useConversation(data.id)) return;
    state = {
      ...emptyState(data.id),
      messages: Array.isArray(data.messages) ? data.messages : [],
      images: data.images && typeof data.images === "object" ? data.images : {},
      ok: data.ok && typeof data.ok === "object" ? data.ok : {},
      mode: typeof data.mode === "string" ? data.mode : "chat",
      system: typeof data.system === "string" ? data.system : "",
    };
    saveState(state);
    files.clear();
    applyMode(false);
    renderAll();
    setStatus("Conversation opened.");
    refreshCount(state);
  },
  onDeleted(id) {
    if (id === state.id) newChat();
  },
});

const files = createFiles({
  list: $("file-list"),
  status: setStatus,
  conversation: () => state.id,
  maxBytes: () => info.max_upload_bytes || 0,
});

// ==== Talking to the server ====

function askForKey() {
  $("key-form").hidden = false;
  $("api-key").focus();
  setStatus("This server needs an API key.");
}
onUnauthorized(askForKey);

function scheduleCount() {
  clearTimeout(countTimer);
  countTimer = setTimeout(() => refreshCount(state), 300);
}

// What run.js sees of the page; `state` is read when used, so it is always the current one.
const page = { get state() { return state; }, log, follow, note: showNote };

async function startRun() {
  const own = state; // the conversation this run writes to, even if a new chat is opened
  controller = new AbortController();
  updateButtons();
  setStatus("Generating…");
  log.setAttribute("aria-busy", "true");
  $("empty").hidden = true;
  const { error, stopped } = await runAgent(page, controller.signal);
  saveState(own);
  saved.save(own);
  if (own !== state) return; // "New chat" took over the page (and the controller) meanwhile
  if (error) showError(error);
  if (stopped) showNote("Stopped.");
  controller = null;
  log.setAttribute("aria-busy", "false");
  setStatus(error ? "Failed." : stopped ? "Stopped." : "");
  updateButtons();
  refreshCount(state);
  if (state.mode === "interpreter") files.refresh();
}

// ==== Controls ====

function updateButtons() {
  const busy = controller !== null;
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("regenerate").disabled = busy || lastUserIndex(state.messages) < 0;
}

function send() {
  const text = prompt.value;
  if (controller || !text.trim()) return;
  const content = state.mode === "interpreter" ? files.withUploads(text) : text;
  state.messages.push({ role: "user", content });
  prompt.value = "";
  save();
  $("empty").hidden = true;
  log.append(userBlock(content));
  scrollDown(true);
  startRun();
}

function regenerate() {
  if (controller || lastUserIndex(state.messages) < 0) return;
  cutAfterLastUser(state);
  save();
  renderAll();
  startRun();
}

function newChat() {
  if (controller) controller.abort();
  controller = null;
  log.setAttribute("aria-busy", "false");
  const id = startConversation();
  const keep = { mode: state.mode, system: state.system };
  state = { ...emptyState(id), ...keep };
  save();
  pruneStored(id);
  files.clear();
  renderAll();
  setStatus("New chat.");
  refreshCount(state);
  prompt.focus();
}

// ==== The system prompt: each mode's default, shown and editable ====

function defaultPrompt(mode) {
  const prompts = info.system_prompts || {};
  return typeof prompts[mode] === "string" ? prompts[mode] : "";
}

// The field holds nothing the reader wrote: it is empty or some mode's default.
function promptIsDefault(text) {
  return text === "" || Object.values(info.system_prompts || {}).includes(text);
}

// Give the field the mode's default unless the reader wrote their own. `switched`: the reader
// chose the mode; otherwise (a page load, a reopened chat) an empty field stays empty in a
// conversation already under way: it was sent that way.
function followModePrompt(switched) {
  if (!promptIsDefault(state.system)) return;
  if (!switched && state.system === "" && state.messages.length) return;
  state.system = defaultPrompt(state.mode);
}

function showSystem() {
  const text = state.system;
  if (system.value !== text) system.value = text; // (an equal value would still move the caret)
  const first = text.split("\n", 1)[0];
  $("system-preview").textContent = text ? ": " + first : ": none";
}

// The sandbox's one-line summary (its words up to the first colon); the rest on request.
function showSandbox(text) {
  $("sandbox").hidden = !text;
  const head = text.split(/:\s/, 1)[0];
  $("sandbox-summary").textContent = "Code runs in: " + (head.length <= 60 ? head : head.slice(0, 57) + "…");
  $("sandbox-detail").textContent = "Code runs in: " + text;
}

// `switched`: the reader chose the mode (see followModePrompt).
function applyMode(switched) {
  const available = info.modes || ["chat"];
  if (!available.includes(state.mode)) state.mode = "chat";
  followModePrompt(switched);
  showSystem();
  for (const radio of document.querySelectorAll('input[name="mode"]')) {
    radio.disabled = !available.includes(radio.value);
    radio.checked = radio.value === state.mode;
    radio.parentElement.title = radio.disabled ? "Not available on this server" : "";
  }
  $("tool-list").hidden = state.mode !== "tools" || !info.tools.length;
  $("files").hidden = state.mode !== "interpreter";
  showSandbox(info.sandbox || "");
  if (state.mode === "interpreter") files.refresh();
}

async function loadInfo() {
  try {
    const res = await fetch("/api/info", { headers: authHeaders() });
    if (res.status === 401) {
      $("model").textContent = "API key needed";
      askForKey();
      return;
    }
    if (!res.ok) throw new Error(await errorText(res));
    info = await res.json();
    $("model").textContent = `${info.model} · ${info.dialect}`;
    const list = $("tools");
    list.textContent = "";
    for (const t of info.tools) {
      const fn = t.function || t;
      const li = el("li");
      li.append(el("code", "", fn.name || "?"));
      if (fn.description) li.append(" — " + fn.description);
      list.append(li);
    }
    $("tool-count").textContent = String(info.tools.length);
  } catch (err) {
    $("model").textContent = "server unavailable";
    showError("could not load the server's info: " + err.message);
  }
  applyMode(false);
}

$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  setApiKey($("api-key").value.trim());
  $("api-key").value = "";
  $("key-form").hidden = true;
  setStatus("");
  loadInfo().then(() => {
    refreshCount(state);
    saved.refresh();
  });
  prompt.focus();
});
$("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
prompt.addEventListener("keydown", (e) => {
  // Enter sends; Shift+Enter is a new line; never while an IME is composing (CJK input).
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
    e.preventDefault();
    send();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("regenerate").addEventListener("click", regenerate);
$("new-chat").addEventListener("click", newChat);
for (const radio of document.querySelectorAll('input[name="mode"]')) {
  radio.addEventListener("change", () => {
    state.mode = radio.value;
    applyMode(true);
    save();
    scheduleCount();
  });
}
$("file-input").addEventListener("change", async (e) => {
  await files.uploadAll(Array.from(e.target.files));
  e.target.value = "";
});
main.addEventListener("dragover", (e) => {
  if (state.mode !== "interpreter") return;
  e.preventDefault();
  main.classList.add("dropping");
});
main.addEventListener("dragleave", () => main.classList.remove("dropping"));
main.addEventListener("drop", (e) => {
  main.classList.remove("dropping");
  if (state.mode !== "interpreter") return;
  e.preventDefault();
  files.uploadAll(Array.from(e.dataTransfer.files));
});
system.addEventListener("input", () => {
  state.system = system.value;
  showSystem();
  save();
  scheduleCount();
});

showSystem();
// Open on wide screens when it holds something; on a phone its summary line shows it.
if (state.system && matchMedia("(min-width: 641px)").matches) $("system-box").open = true;
renderAll();
scrollDown(true);
loadInfo().then(() => {
  refreshCount(state);
  saved.refresh();
});
prompt.focus();

// For tests and the curious: the conversation as the page keeps it.
window.chatfmt = { get state() { return state; } };
