// The DOM of a reply while it streams: one assistant block per model turn, with its tool calls.
//
// Why: the reply is built incrementally from the agent's events, so nothing already shown is
// rebuilt. Text goes through LiveMarkdown (the turn being streamed re-renders at most once
// per frame; earlier turns and messages are never re-rendered); call boxes are calls.js's,
// textContent only.

import { callBlock } from "./calls.js";
import { LiveMarkdown } from "./live.js";
import { assistantBlock } from "./view.js";

export class ReplyView {
  // `log`: the conversation element to append to; `follow()`: keep the newest content in view.
  constructor(log, follow) {
    this.log = log;
    this.follow = follow;
    this.block = null; // the assistant block of the current model turn
    this.live = null; // its Markdown
    this.labelled = false; // only a reply's first block says "Assistant"
    this.calls = new Map(); // tool call id (and streaming id) -> callBlock handle
  }

  // Text of the current turn so far ("" between turns).
  get text() { return this.live ? this.live.text : ""; }

  ensureBlock() {
    if (!this.block) {
      const { block, body } = assistantBlock(!this.labelled);
      this.labelled = true;
      this.block = block;
      this.live = new LiveMarkdown(body, this.follow);
      this.log.append(block);
    }
  }

  appendText(text) {
    this.ensureBlock();
    this.live.append(text);
  }

  // A call the model has started to write (its code streams in with appendCode()).
  startCall(id, name) {
    this.ensureBlock();
    const call = callBlock(id, name, this.follow);
    this.calls.set(id, call);
    this.block.append(call.details);
    this.follow();
  }

  appendCode(id, text) {
    const call = this.calls.get(id);
    if (call) call.appendCode(text);
    this.follow();
  }

  // A complete call; `streamId` names the box startCall() made for it, if any.
  setCall(id, streamId, name, args) {
    let call = this.calls.get(streamId || id);
    if (!call) {
      this.ensureBlock();
      call = callBlock(id, name, this.follow);
      this.block.append(call.details);
    }
    this.calls.set(id, call);
    call.details.dataset.id = id;
    call.setArguments(args);
  }

  setResult(id, content, ok, images) {
    const call = this.calls.get(id);
    if (call) call.setResult(content, ok, images);
    this.follow();
  }

  // The model turn is complete: render its text one last time; the next turn gets its own block.
  endTurn() {
    this.flush();
    this.block = null;
    this.live = null;
  }

  flush() {
    if (this.live) this.live.flush();
  }

  // A call the loop did not run (a repeat, or one cut off) must not look busy forever.
  markNotRun() {
    document.querySelectorAll(".call .badge.run").forEach((b) => {
      b.className = "badge skip";
      b.textContent = "not run";
    });
  }
}
