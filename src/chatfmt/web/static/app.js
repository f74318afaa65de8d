// chatfmt web chat. No build step, no dependencies, nothing fetched from other origins.
//
// The browser owns the conversation: it is kept in localStorage under the conversation id, and
// the id in sessionStorage, so a reload keeps the chat and every tab has its own. Each request
// sends the whole conversation; the server keeps nothing between requests except the code
// interpreter's kernel for this conversation id.
//
// Safety: model and user text only ever reaches the DOM as textContent, or as HTML built by
// renderMarkdown() from text that was HTML-escaped first. No eval, no new Function.
"use strict";

(() => {
  const SESSION_KEY = "chatfmt.conversation";
  const API_KEY = "chatfmt.apiKey"; // sessionStorage: a server's key is not kept after the tab
  const STORE_PREFIX = "chatfmt.conv.";
  const MAX_STORED = 20; // conversations kept in localStorage, newest first

  const $ = (id) => document.getElementById(id);

  // ==== Markdown (escape first, then add a fixed set of tags) ====

  function escapeHtml(text) {
    return text
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  function unescapeHtml(text) {
    return text
      .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'").replace(/&amp;/g, "&");
  }

  function safeUrl(escapedUrl) {
    // Only web and mail links; javascript:, data: and the like are rendered as text.
    const url = unescapeHtml(escapedUrl).trim();
    return /^(https?:\/\/|mailto:)/i.test(url) ? escapedUrl.trim() : null;
  }

  // Inline Markdown of one block of raw text: code spans, links, bold, italics, strikethrough.
  function renderInline(raw) {
    const stash = [];
    const hold = (html) => "\u0000" + (stash.push(html) - 1) + "\u0000";
    let text = raw.replace(/\u0000/g, "");
    // Code spans first: nothing inside them is Markdown.
    text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) =>
      hold("<code>" + escapeHtml(code.trim() === "" ? code : code.replace(/^ (.*) $/s, "$1")) + "</code>"));
    text = escapeHtml(text);
    text = text.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, label, url) => {
      const href = safeUrl(url);
      return href === null ? m : hold(`<a href="${href}" target="_blank" rel="noopener noreferrer">`) + label + hold("</a>");
    });
    text = text.replace(/(^|[\s(])(https?:\/\/[^\s\u0000]+?)(?=[.,;:!?)]*(?:\s|$|\u0000))/g, (m, pre, url) =>
      pre + hold(`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
    text = text.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>");
    text = text.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>");
    text = text.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, "$1<em>$2</em>");
    text = text.replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
    text = text.replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
    return text.replace(/\u0000(\d+)\u0000/g, (_, i) => stash[Number(i)]);
  }

  // Block Markdown: code fences, headings, lists, block quotes, paragraphs.
  function renderMarkdown(src) {
    const lines = src.replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let para = [];
    const flush = () => {
      if (para.length) out.push("<p>" + para.map(renderInline).join("<br>") + "</p>");
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(/^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/);
      if (fence) {
        flush();
        const close = new RegExp("^ {0,3}" + fence[1][0] + "{" + fence[1].length + ",}\\s*$");
        const body = [];
        i++;
        while (i < lines.length && !close.test(lines[i])) body.push(lines[i++]);
        // An unclosed fence (still streaming) runs to the end.
        const lang = fence[2] ? `<span class="lang">${escapeHtml(fence[2])}</span>` : "";
        out.push(`<pre>${lang}<code>${escapeHtml(body.join("\n"))}</code></pre>`);
        continue;
      }
      const heading = line.match(/^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/);
      if (heading) {
        flush();
        const level = Math.min(heading[1].length + 1, 6); // the page's h1 stays the only h1
        out.push(`<h${level}>${renderInline(heading[2])}</h${level}>`);
        continue;
      }
      const item = line.match(/^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/);
      if (item && !/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flush();
        const ordered = /\d/.test(item[1]);
        const items = [];
        let current = [item[2]];
        while (++i < lines.length) {
          const next = lines[i].match(/^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/);
          if (next && /\d/.test(next[1]) === ordered) {
            items.push(current);
            current = [next[2]];
          } else if (/^\s+\S/.test(lines[i]) || (/^\S/.test(lines[i]) && !next && lines[i - 1].trim() !== "" && !/^ {0,3}(`{3,}|~{3,}|#|>)/.test(lines[i]))) {
            current.push(lines[i].trim()); // continuation of the item
          } else {
            break;
          }
        }
        i--;
        items.push(current);
        const tag = ordered ? "ol" : "ul";
        const start = ordered && parseInt(item[1], 10) !== 1 ? ` start="${parseInt(item[1], 10)}"` : "";
        out.push(`<${tag}${start}>` + items.map((it) => "<li>" + it.map(renderInline).join("<br>") + "</li>").join("") + `</${tag}>`);
        continue;
      }
      if (/^ {0,3}>/.test(line)) {
        flush();
        const quoted = [];
        while (i < lines.length && /^ {0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^ {0,3}> ?/, ""));
        i--;
        out.push("<blockquote>" + renderMarkdown(quoted.join("\n")) + "</blockquote>");
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flush();
        out.push("<hr>");
        continue;
      }
      if (line.trim() === "") flush();
      else para.push(line);
    }
    flush();
    return out.join("");
  }

  // ==== Persistence ====

  function newId() {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes); // works on plain http too, unlike randomUUID()
    return "c" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function conversationId() {
    let id = sessionStorage.getItem(SESSION_KEY);
    if (!id || !/^[A-Za-z0-9_-]{8,64}$/.test(id)) {
      id = newId();
      sessionStorage.setItem(SESSION_KEY, id);
    }
    return id;
  }

  function emptyState(id) {
    // images and ok (did the call succeed) are per tool call id: OpenAI messages lack them.
    return { id, messages: [], images: {}, ok: {}, mode: "chat", system: "" };
  }

  function loadState(id) {
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

  function pruneStored(keep) {
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

  function saveState() {
    const data = { ...state, updated: Date.now() };
    try {
      localStorage.setItem(STORE_PREFIX + state.id, JSON.stringify(data));
    } catch (err) {
      // Over quota: old conversations go first, then this one's images.
      try {
        pruneStored(STORE_PREFIX + state.id);
        localStorage.setItem(STORE_PREFIX + state.id, JSON.stringify({ ...data, images: {} }));
        setStatus("Storage is full: images of this conversation will not survive a reload.");
      } catch (_) {
        setStatus("Storage is full: this conversation will not survive a reload.");
      }
    }
  }

  // ==== Page state ====

  let state = loadState(conversationId());
  let info = { context: 0, tools: [], modes: ["chat"], interpreter_tool: null };
  let controller = null; // AbortController of the running request
  let countTimer = 0;

  const log = $("log");
  const main = $("main");
  const prompt = $("prompt");

  function setStatus(text) { $("status").textContent = text; }

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

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ==== Rendering messages ====

  function userBlock(text) {
    const block = el("div", "msg user");
    block.append(el("div", "who", "You"));
    const body = el("div", "content");
    body.style.whiteSpace = "pre-wrap";
    body.textContent = text;
    block.append(body);
    return block;
  }

  function assistantBlock(label) {
    const block = el("div", "msg assistant");
    if (label) block.append(el("div", "who", "Assistant"));
    const body = el("div", "content");
    block.append(body);
    return { block, body };
  }

  function isPng(b64) { return typeof b64 === "string" && /^[A-Za-z0-9+/=\s]+$/.test(b64); }

  // A collapsible tool call or code cell; returns handles to fill in as events arrive.
  function callBlock(id, name) {
    const code = name === "interpreter";
    const details = el("details", "call" + (code ? " code-cell" : ""));
    details.dataset.id = id;
    if (code) details.open = true; // code and plots are the point of interpreter mode
    const summary = el("summary");
    summary.append(el("span", "", code ? "Code" : "Tool"), " ");
    if (!code) summary.append(el("code", "", name), " ");
    const badge = el("span", "badge run", "running…");
    summary.append(badge);
    const body = el("div", "body");
    body.append(el("div", "label", code ? "Python" : "Arguments"));
    const argsPre = el("pre");
    const args = el("code", code ? "source" : "args");
    argsPre.append(args);
    body.append(argsPre);
    const outLabel = el("div", "label", code ? "Output" : "Result");
    const output = el("pre", "output");
    outLabel.hidden = output.hidden = true;
    const images = el("div", "images");
    body.append(outLabel, output, images);
    details.append(summary, body);
    const handle = {
      details, code, name,
      setArguments(json) {
        if (code) {
          try {
            const parsed = JSON.parse(json);
            if (typeof parsed.code === "string") { args.textContent = parsed.code; return; }
          } catch (_) { /* fall through: show the raw arguments */ }
          args.textContent = json;
        } else {
          try { args.textContent = JSON.stringify(JSON.parse(json), null, 2); } catch (_) { args.textContent = json; }
        }
      },
      appendCode(text) { args.textContent += text; },
      setResult(content, ok, pngs) {
        let text = content || "";
        if (code) {
          // The model reads "[Image]" placeholders; the reader sees the images themselves.
          text = text.replace(/^```result\n/, "").replace(/\n```$/, "");
          if ((pngs || []).length) text = text.split("\n").filter((l) => l !== "[Image]").join("\n");
        }
        output.textContent = text;
        outLabel.hidden = output.hidden = text === "";
        badge.className = "badge " + (ok ? "ok" : "fail");
        badge.textContent = ok ? "done" : "failed";
        images.textContent = "";
        (pngs || []).filter(isPng).forEach((b64, i) => {
          const img = el("img");
          img.alt = `Image ${i + 1} from the code interpreter`;
          img.src = "data:image/png;base64," + b64;
          img.addEventListener("load", () => scrollDown(false));
          images.append(img);
        });
      },
    };
    return handle;
  }

  // Draw the whole stored conversation (on load, after Regenerate and New chat).
  function renderAll() {
    log.setAttribute("aria-busy", "true");
    log.textContent = "";
    const calls = new Map();
    let labelled = false;
    for (const m of state.messages) {
      if (m.role === "user") {
        log.append(userBlock(typeof m.content === "string" ? m.content : ""));
        labelled = false;
      } else if (m.role === "assistant") {
        const { block, body } = assistantBlock(!labelled);
        labelled = true;
        if (m.content) body.innerHTML = renderMarkdown(m.content);
        for (const c of m.tool_calls || []) {
          const fn = c.function || {};
          const handle = callBlock(c.id, fn.name || "?");
          handle.setArguments(fn.arguments || "{}");
          calls.set(c.id, handle);
          block.append(handle.details);
        }
        log.append(block);
      } else if (m.role === "tool") {
        const handle = calls.get(m.tool_call_id);
        const ok = m.tool_call_id in state.ok ? state.ok[m.tool_call_id] : !/^Error: /.test(m.content || "");
        if (handle) handle.setResult(m.content, ok, state.images[m.tool_call_id]);
      }
    }
    $("empty").hidden = state.messages.length > 0;
    log.setAttribute("aria-busy", "false");
    updateButtons();
  }

  // ==== Talking to the server ====

  function authHeaders() {
    const key = sessionStorage.getItem(API_KEY);
    return key ? { Authorization: "Bearer " + key } : {};
  }

  function askForKey() {
    $("key-form").hidden = false;
    $("api-key").focus();
    setStatus("This server needs an API key.");
  }

  async function postJson(url, body, signal) {
    const res = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body),
      signal,
    });
    if (res.status === 401) askForKey();
    return res;
  }

  async function errorText(res) {
    try {
      const data = await res.json();
      return (data.error && data.error.message) || data.detail || res.statusText;
    } catch (_) {
      return `${res.status} ${res.statusText}`;
    }
  }

  async function refreshCount() {
    try {
      const res = await postJson("/api/count", { messages: state.messages, mode: state.mode, system: state.system });
      if (!res.ok) throw new Error(await errorText(res));
      const data = await res.json();
      const fmt = new Intl.NumberFormat();
      $("tokens").textContent = `${fmt.format(data.tokens)} / ${fmt.format(data.context)} tokens`;
      const meter = $("tokens-meter");
      meter.max = data.context || 1;
      meter.value = data.tokens;
      meter.low = 0.7 * meter.max;
      meter.high = 0.9 * meter.max;
      meter.optimum = 0;
      $("tokens-box").title = `The prompt of this conversation is ${data.tokens} tokens; the model holds ${data.context}.`;
    } catch (err) {
      $("tokens").textContent = "– tokens";
    }
  }

  function scheduleCount() {
    clearTimeout(countTimer);
    countTimer = setTimeout(refreshCount, 300);
  }

  // Messages safe to keep after a stop or an error: drop a trailing assistant turn whose tool
  // calls have no results yet (the next request would be rejected for the unpaired call).
  function consistent(messages) {
    const out = messages.slice();
    for (let i = out.length - 1; i >= 0; i--) {
      const m = out[i];
      if (m.role !== "assistant" || !m.tool_calls || !m.tool_calls.length) continue;
      const answered = new Set(out.slice(i + 1).filter((t) => t.role === "tool").map((t) => t.tool_call_id));
      if (!m.tool_calls.every((c) => answered.has(c.id))) out.splice(i);
      break;
    }
    return out;
  }

  async function runAgent() {
    const base = state.messages.slice();
    controller = new AbortController();
    const signal = controller.signal;
    updateButtons();
    setStatus("Generating…");
    log.setAttribute("aria-busy", "true");
    $("empty").hidden = true;

    const run = { block: null, body: null, text: "", labelled: false, calls: new Map(), committed: [], done: false, error: null, frame: 0 };
    const ensureBlock = () => {
      if (!run.block) {
        const { block, body } = assistantBlock(!run.labelled);
        run.labelled = true;
        run.block = block;
        run.body = body;
        log.append(block);
      }
      return run;
    };
    const paint = () => {
      run.frame = 0;
      if (run.body) run.body.innerHTML = renderMarkdown(run.text);
      scrollDown(false);
    };
    const handle = (ev) => {
      switch (ev.type) {
        case "text":
          ensureBlock();
          run.text += ev.text;
          if (!run.frame) run.frame = requestAnimationFrame(paint);
          break;
        case "tool_call_start": {
          ensureBlock();
          const call = callBlock(ev.id, ev.name);
          run.calls.set(ev.id, call);
          run.block.append(call.details);
          scrollDown(false);
          break;
        }
        case "code_delta": {
          const call = run.calls.get(ev.id);
          if (call) call.appendCode(ev.text);
          scrollDown(false);
          break;
        }
        case "tool_call": {
          let call = run.calls.get(ev.stream_id || ev.id);
          if (!call) {
            ensureBlock();
            call = callBlock(ev.id, ev.name);
            run.block.append(call.details);
          }
          run.calls.set(ev.id, call);
          call.details.dataset.id = ev.id;
          call.setArguments(ev.arguments);
          break;
        }
        case "tool_result": {
          const call = run.calls.get(ev.id);
          if (call) call.setResult(ev.content, ev.ok, ev.images);
          if (ev.images && ev.images.length) state.images[ev.id] = ev.images;
          state.ok[ev.id] = Boolean(ev.ok);
          if (ev.message) run.committed.push(ev.message);
          scrollDown(false);
          break;
        }
        case "turn":
          if (run.frame) { cancelAnimationFrame(run.frame); paint(); }
          run.committed.push(...(ev.messages || []));
          if (ev.warnings && ev.warnings.length) console.info("parser warnings:", ev.warnings);
          run.block = null; // the next model turn gets its own block
          run.body = null;
          run.text = "";
          break;
        case "done":
          run.done = true;
          state.messages = base.concat(ev.messages || []);
          if (ev.stopped === "max_steps") showNote("Stopped after the maximum number of steps.");
          if (ev.stopped === "length") showNote("The reply was cut at the token limit.");
          if (ev.stopped === "repeated_call") {
            showNote("The model repeated a call it had already made; it was not run again.");
          }
          // A call the loop did not run (a repeat, or one cut off) must not look busy forever.
          document.querySelectorAll(".call .badge.run").forEach((b) => {
            b.className = "badge skip";
            b.textContent = "not run";
          });
          break;
        case "error":
          run.error = ev.message;
          break;
        default:
          break;
      }
    };

    try {
      const res = await postJson("/api/agent", {
        messages: base, mode: state.mode, system: state.system, conversation_id: state.id,
      }, signal);
      if (!res.ok) throw new Error(await errorText(res));
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const chunk = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = chunk.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          if (data) handle(JSON.parse(data));
        }
      }
      if (!run.done && !run.error) run.error = "the connection closed before the reply finished";
    } catch (err) {
      if (signal.aborted) run.stopped = true;
      else run.error = err && err.message ? err.message : String(err);
    } finally {
      if (run.frame) { cancelAnimationFrame(run.frame); paint(); }
      if (!run.done) {
        // Keep what completed, plus the text of an unfinished turn.
        const kept = consistent(run.committed);
        if (run.text.trim() && kept.length === run.committed.length) kept.push({ role: "assistant", content: run.text });
        state.messages = base.concat(kept);
      }
      if (run.error) showError(run.error);
      if (run.stopped) showNote("Stopped.");
      controller = null;
      saveState();
      log.setAttribute("aria-busy", "false");
      setStatus(run.error ? "Failed." : run.stopped ? "Stopped." : "");
      updateButtons();
      refreshCount();
    }
  }

  function showError(message) {
    const block = el("div", "msg error");
    block.setAttribute("role", "alert");
    block.textContent = "Error: " + message;
    log.append(block);
    scrollDown(true);
  }

  function showNote(text) {
    log.append(el("div", "msg note", text));
    scrollDown(false);
  }

  // ==== Controls ====

  function lastUserIndex() {
    for (let i = state.messages.length - 1; i >= 0; i--) if (state.messages[i].role === "user") return i;
    return -1;
  }

  function updateButtons() {
    const busy = controller !== null;
    $("send").disabled = busy;
    $("stop").disabled = !busy;
    $("regenerate").disabled = busy || lastUserIndex() < 0;
  }

  function send() {
    const text = prompt.value;
    if (controller || !text.trim()) return;
    state.messages.push({ role: "user", content: text });
    prompt.value = "";
    saveState();
    $("empty").hidden = true;
    log.append(userBlock(text));
    scrollDown(true);
    runAgent();
  }

  function regenerate() {
    const i = lastUserIndex();
    if (controller || i < 0) return;
    state.messages = state.messages.slice(0, i + 1);
    for (const key of Object.keys(state.images)) {
      if (!state.messages.some((m) => m.role === "tool" && m.tool_call_id === key)) delete state.images[key];
    }
    for (const key of Object.keys(state.ok)) {
      if (!state.messages.some((m) => m.role === "tool" && m.tool_call_id === key)) delete state.ok[key];
    }
    saveState();
    renderAll();
    runAgent();
  }

  function newChat() {
    if (controller) controller.abort();
    const id = newId();
    sessionStorage.setItem(SESSION_KEY, id);
    const keep = { mode: state.mode, system: state.system };
    state = { ...emptyState(id), ...keep };
    saveState();
    pruneStored(STORE_PREFIX + id);
    renderAll();
    setStatus("New chat.");
    refreshCount();
    prompt.focus();
  }

  function applyMode() {
    const available = info.modes || ["chat"];
    if (!available.includes(state.mode)) state.mode = "chat";
    for (const radio of document.querySelectorAll('input[name="mode"]')) {
      radio.disabled = !available.includes(radio.value);
      radio.checked = radio.value === state.mode;
      radio.parentElement.title = radio.disabled ? "Not available on this server" : "";
    }
    $("tool-list").hidden = state.mode !== "tools" || !info.tools.length;
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
    applyMode();
  }

  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(API_KEY, $("api-key").value.trim());
    $("api-key").value = "";
    $("key-form").hidden = true;
    setStatus("");
    loadInfo().then(refreshCount);
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
      applyMode();
      saveState();
      scheduleCount();
    });
  }
  const system = $("system");
  system.value = state.system;
  if (state.system) system.closest("details").open = true;
  system.addEventListener("input", () => {
    state.system = system.value;
    saveState();
    scheduleCount();
  });

  renderAll();
  scrollDown(true);
  loadInfo().then(refreshCount);
  prompt.focus();

  // For tests and the curious: the renderer is pure and safe to call.
  window.chatfmt = { renderMarkdown, escapeHtml, get state() { return state; } };
})();
