// One agent run: POST the conversation to /api/agent, show its events, keep its messages.
//
// Why: the server streams the reply as events (sse.js); this module turns them into the
// reply's DOM (reply.js: textContent, and HTML the server rendered) and into the messages
// the page stores. After a stop or an error only a consistent prefix of the reply is kept
// (conversation.js), so the next request is valid.

import { errorText, postJson } from "./api.js";
import { consistent } from "./conversation.js";
import { ReplyView } from "./reply.js";
import { readEvents } from "./sse.js";

const STOP_NOTES = new Map([
  ["max_steps", "Stopped after the maximum number of steps."],
  ["length", "The reply was cut at the token limit."],
  ["repeated_call", "The model repeated a call it had already made; it was not run again."],
]);

// `page`: { state (the page's current conversation), log, follow(), note(text) }.
// Resolves to { error, stopped } once the run is over and its text rendered; it never throws. The run belongs to the
// conversation that was current when it started: a chat opened meanwhile is never written to.
export async function runAgent(page, signal) {
  const state = page.state;
  const base = state.messages.slice();
  const view = new ReplyView(page.log, page.follow);
  const run = { committed: [], done: false, error: null, stopped: false };

  const handle = (ev) => {
    switch (ev.type) {
      case "text":
        view.appendText(ev.text);
        break;
      case "reasoning":
        view.appendReasoning(ev.text);
        break;
      case "tool_call_start":
        view.startCall(ev.id, ev.name);
        break;
      case "code_delta":
        view.appendCode(ev.id, ev.text);
        break;
      case "tool_call":
        view.setCall(ev.id, ev.stream_id, ev.name, ev.arguments);
        break;
      case "tool_result":
        view.setResult(ev.id, ev.content, ev.ok, ev.images);
        if (ev.images && ev.images.length) state.images[ev.id] = ev.images;
        state.ok[ev.id] = Boolean(ev.ok);
        if (ev.message) run.committed.push(ev.message);
        break;
      case "turn":
        view.endTurn();
        run.committed.push(...(ev.messages || []));
        if (ev.warnings && ev.warnings.length) console.info("parser warnings:", ev.warnings);
        break;
      case "done":
        run.done = true;
        state.messages = base.concat(ev.messages || []);
        if (STOP_NOTES.has(ev.stopped)) page.note(STOP_NOTES.get(ev.stopped));
        view.markNotRun();
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
    for await (const ev of readEvents(res.body)) handle(ev);
    if (!run.done && !run.error) run.error = "the connection closed before the reply finished";
  } catch (err) {
    if (signal.aborted) run.stopped = true;
    else run.error = err && err.message ? err.message : String(err);
  } finally {
    view.flush();
    view.stopThinking();
    if (!run.done) {
      // Keep what completed, plus the text and reasoning of an unfinished turn (reasoning
      // alone has no content, as the server writes a turn cut off while thinking).
      const kept = consistent(run.committed);
      const { text, reasoning } = view;
      if ((text.trim() || reasoning) && kept.length === run.committed.length) {
        const m = { role: "assistant", content: text.trim() ? text : null };
        if (reasoning) m.reasoning_content = reasoning;
        kept.push(m);
      }
      state.messages = base.concat(kept);
    }
  }
  await view.settled();
  return { error: run.error, stopped: run.stopped };
}
