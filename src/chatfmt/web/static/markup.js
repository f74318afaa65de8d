// Markdown as HTML, rendered by the server: POST /api/markdown (markdown-it-py, then the nh3
// sanitizer, which keeps only the tags and attributes Markdown produces).
//
// Why on the server: the page builds no HTML from text itself; two maintained libraries do it
// there. Until the HTML arrives, or when the server cannot render (an error, a text over its
// size limit, the network), the text is shown as plain text (dom.js's setPlain()).

import { postJson } from "./api.js";
import { setHtml, setPlain } from "./dom.js";

// Requests at a time: a stored conversation's messages are rendered when it is drawn.
const MAX_PARALLEL = 4;
// A render that takes longer is given up (plain text stays): a run ends only once its text is
// rendered, and a stuck request must not keep Send disabled.
const TIMEOUT_MS = 20000;
let running = 0;
const queue = []; // resolvers of requests waiting for their turn

async function turn() {
  if (running < MAX_PARALLEL) {
    running += 1;
    return;
  }
  await new Promise((resolve) => queue.push(resolve));
}

function done() {
  const next = queue.shift();
  if (next) next(); // the slot passes on: `running` stays the same
  else running -= 1;
}

// `text` as sanitized HTML, or null when the server did not render it. Never throws.
export async function renderHtml(text) {
  await turn();
  try {
    const res = await postJson("/api/markdown", { text }, AbortSignal.timeout(TIMEOUT_MS));
    if (!res.ok) return null;
    const data = await res.json();
    return typeof data.html === "string" ? data.html : null;
  } catch (_) {
    return null;
  } finally {
    done();
  }
}

// A finished message: plain text at once, its HTML once the server sends it. `onPaint` runs
// after the HTML is shown (to keep the conversation scrolled). Resolves when it is done.
export async function showMarkdown(node, text, onPaint) {
  setPlain(node, text);
  const html = await renderHtml(text);
  if (html === null) return;
  setHtml(node, html);
  if (onPaint) onPaint();
}
