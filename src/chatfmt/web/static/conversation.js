// Rules about the message list (OpenAI-style messages), kept apart from storage and the DOM.
//
// Why: a request carries the whole conversation, and the server rejects one whose tool calls
// are not all answered. These pure functions keep what the page stores and sends valid.

// Index of the last user message, or -1.
export function lastUserIndex(messages) {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") return i;
  return -1;
}

// Messages safe to keep after a stop or an error: drop a trailing assistant turn whose tool
// calls have no results yet (the next request would be rejected for the unpaired call).
export function consistent(messages) {
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

// Cut `state` back to its last user message (for Regenerate), with the images and call
// outcomes of the tool results that went.
export function cutAfterLastUser(state) {
  const i = lastUserIndex(state.messages);
  if (i < 0) return;
  state.messages = state.messages.slice(0, i + 1);
  for (const key of Object.keys(state.images)) {
    if (!state.messages.some((m) => m.role === "tool" && m.tool_call_id === key)) delete state.images[key];
  }
  for (const key of Object.keys(state.ok)) {
    if (!state.messages.some((m) => m.role === "tool" && m.tool_call_id === key)) delete state.ok[key];
  }
}
