// The Markdown of a message that is still streaming: plain text at first, then the server's
// HTML of its latest text, at most four times a second, and once more when it is complete.
//
// Why: Markdown is rendered from the whole text (a code fence or table may close later), by
// the server (markup.js), so a streamed message is rendered again as text arrives. Deltas come
// far faster than that is worth: at most one request is in flight per message, the next one
// starts no sooner than INTERVAL_MS after the last began, and it carries the text as it is
// then (the latest). Until the first HTML arrives the text is shown as plain text. Only the
// message being streamed has a LiveMarkdown; finished messages are rendered once.

import { setHtml, setPlain } from "./dom.js";
import { renderHtml } from "./markup.js";

const INTERVAL_MS = 250;

export class LiveMarkdown {
  // `body`: the element to render into; `onPaint`: runs after each render (to keep scrolling).
  constructor(body, onPaint) {
    this.body = body;
    this.onPaint = onPaint || (() => {});
    this.text = "";
    this.shown = null; // the text whose HTML is shown; null: plain text so far
    this.busy = null; // the render in flight (a promise), or null
    this.timer = 0; // the render waiting for its interval, or 0
    this.started = -Infinity; // when the last render began (performance.now())
    this.done = false; // the text is complete: no more scheduled renders
    this.failed = false; // the server did not render: plain text from here on
  }

  append(text) {
    this.text += text;
    if (this.shown === null) {
      setPlain(this.body, this.text);
      this.onPaint();
    }
    this.schedule();
  }

  schedule() {
    if (this.busy || this.timer || this.done || this.failed) return;
    const wait = Math.max(0, this.started + INTERVAL_MS - performance.now());
    this.timer = setTimeout(() => {
      this.timer = 0;
      this.render();
    }, wait);
  }

  render() {
    const text = this.text;
    this.started = performance.now();
    this.busy = renderHtml(text).then((html) => {
      this.busy = null;
      if (html === null) {
        this.failed = true;
        this.shown = null;
        setPlain(this.body, this.text);
      } else {
        setHtml(this.body, html);
        this.shown = text;
      }
      this.onPaint();
      if (this.text !== text) this.schedule();
    });
    return this.busy;
  }

  // The message is complete: render its whole text once more (unless that is what is shown).
  // Resolves once the last render is on the page.
  async flush() {
    this.done = true;
    clearTimeout(this.timer);
    this.timer = 0;
    while (this.busy) await this.busy;
    // Tried even after a failure: a network error mid-stream may have passed.
    if (this.text && this.shown !== this.text) await this.render();
  }
}
