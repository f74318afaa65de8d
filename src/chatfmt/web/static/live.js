// The Markdown of a message that is still streaming, re-rendered at most once per frame.
//
// Why: Markdown is rendered from the whole text (a code fence or list may close later), so a
// streamed message is re-rendered as text arrives. Deltas come far faster than the screen
// refreshes, so appends only mark the message dirty and one requestAnimationFrame callback
// renders it. Only the message being streamed has a LiveMarkdown; finished messages are
// rendered once and never touched again. The HTML comes from setMarkdown() (escape-first).

import { setMarkdown } from "./dom.js";

export class LiveMarkdown {
  // `body`: the element to render into; `onPaint`: runs after each render (to keep scrolling).
  constructor(body, onPaint) {
    this.body = body;
    this.onPaint = onPaint || (() => {});
    this.text = "";
    this.frame = 0; // the pending requestAnimationFrame, or 0
  }

  append(text) {
    this.text += text;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.paint());
  }

  // Render now if a render is pending (the message is finished, or the stream ended).
  flush() {
    if (this.frame) {
      cancelAnimationFrame(this.frame);
      this.paint();
    }
  }

  paint() {
    this.frame = 0;
    setMarkdown(this.body, this.text);
    this.onPaint();
  }
}
