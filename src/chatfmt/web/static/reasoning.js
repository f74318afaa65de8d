// A model's reasoning (its chain of thought) as a collapsible box above its answer.
//
// Why: reasoning is untrusted model output like the answer, and it is shown as plain text: it
// goes into a Text node (appendData), never through the Markdown renderer or any HTML, so
// nothing it holds becomes markup. While it streams the box is open and says "Thinking…";
// once the answer or a call begins it collapses to a one-line summary the reader can expand.
// A box the reader opened or closed meanwhile is left as they set it.

import { el } from "./dom.js";

const THINKING = "Thinking…";

// The summary of finished reasoning that took `ms` milliseconds.
export function thoughtFor(ms) {
  const s = Math.round(ms / 1000);
  return s < 1 ? "Thought for less than a second" : `Thought for ${s} s`;
}

// A reasoning box. `live`: it is streaming now (open, "Thinking…", timed); otherwise it shows
// stored reasoning, collapsed (how long it took is not kept with the conversation).
export function reasoningBlock(live, text = "") {
  const details = el("details", "reasoning");
  const summary = el("summary", "", live ? THINKING : "Thoughts");
  const body = el("div", "reasoning-text");
  const node = document.createTextNode(text);
  body.append(node);
  details.append(summary, body);
  details.open = live;
  details.classList.toggle("live", live);
  let thinking = live;
  let since = live ? performance.now() : 0;
  let spent = 0; // milliseconds of thinking before `since`
  let touched = false; // the reader opened or closed it themselves
  summary.addEventListener("click", () => { touched = true; });
  return {
    details,
    get text() { return node.data; },
    append(more) {
      if (!thinking) { // reasoning resumed after the answer began: the box is live again
        thinking = true;
        since = performance.now();
        summary.textContent = THINKING;
        details.classList.add("live");
      }
      node.appendData(more);
    },
    // The answer (or a call, or the end of the turn) has come: collapse to the summary.
    finish() {
      if (!thinking) return;
      thinking = false;
      spent += performance.now() - since;
      summary.textContent = thoughtFor(spent);
      details.classList.remove("live");
      if (!touched) details.open = false;
    },
  };
}
