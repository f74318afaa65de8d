// The conversation's blocks: user and assistant messages, notes and errors.
//
// Why: every block is built with createElement and textContent (dom.js's el()); the one HTML
// path is an assistant message's Markdown, rendered and sanitized by the server (markup.js);
// its reasoning is plain text (reasoning.js). A user's message is shown as the plain text they
// typed. A stored message is rendered once, when the conversation is drawn; only a reply
// being streamed re-renders (see live.js).

import { callBlock } from "./calls.js";
import { el } from "./dom.js";
import { showMarkdown } from "./markup.js";
import { reasoningBlock } from "./reasoning.js";

export function userBlock(text) {
  const block = el("div", "msg user");
  block.append(el("div", "who", "You"));
  const body = el("div", "content plain", text);
  block.append(body);
  return block;
}

// An assistant message; `label`: show "Assistant" (only the first block of a reply does).
export function assistantBlock(label) {
  const block = el("div", "msg assistant");
  if (label) block.append(el("div", "who", "Assistant"));
  const body = el("div", "content");
  block.append(body);
  return { block, body };
}

export function errorBlock(message) {
  const block = el("div", "msg error");
  block.setAttribute("role", "alert");
  block.textContent = "Error: " + message;
  return block;
}

export function noteBlock(text) {
  return el("div", "msg note", text);
}

// Draw a whole stored conversation into the empty `log` (on load, Regenerate and New chat);
// `onPaint` runs when an image or a message's HTML has come (to keep the view scrolled).
export function drawConversation(log, state, onPaint) {
  const calls = new Map();
  let labelled = false;
  for (const m of state.messages) {
    if (m.role === "user") {
      log.append(userBlock(typeof m.content === "string" ? m.content : ""));
      labelled = false;
    } else if (m.role === "assistant") {
      const { block, body } = assistantBlock(!labelled);
      labelled = true;
      if (typeof m.reasoning_content === "string" && m.reasoning_content) {
        block.insertBefore(reasoningBlock(false, m.reasoning_content).details, body);
      }
      if (m.content) showMarkdown(body, m.content, onPaint);
      for (const c of m.tool_calls || []) {
        const fn = c.function || {};
        const handle = callBlock(c.id, fn.name || "?", onPaint);
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
}
