// The DOM of a reply while it streams: one assistant block per model turn, with its tool calls.
//
// Why: the reply is built incrementally from the agent's events, so nothing already shown is
// rebuilt. Text goes through LiveMarkdown (the turn being streamed is rendered by the server
// at most four times a second; earlier turns and messages are never re-rendered); call boxes
// are calls.js's, textContent only; a turn's reasoning is reasoning.js's box above its text,
// plain text only.

import { callBlock } from "./calls.js";
import { LiveMarkdown } from "./live.js";
import { reasoningBlock } from "./reasoning.js";
import { assistantBlock } from "./view.js";

export class ReplyView {
  // `log`: the conversation element to append to; `follow()`: keep the newest content in view.
  constructor(log, follow) {
    this.log = log;
    this.follow = follow;
    this.block = null; // the assistant block of the current model turn
    this.body = null; // its text's element
    this.live = null; // its Markdown
    this.thoughts = null; // its reasoning box, once reasoning came
    this.labelled = false; // only a reply's first block says "Assistant"
    this.calls = new Map(); // tool call id (and streaming id) -> callBlock handle
    this.renders = []; // the last renders of finished turns (promises)
  }

  // Text of the current turn so far ("" between turns).
  get text() { return this.live ? this.live.text : ""; }

  // Reasoning of the current turn so far ("" between turns).
  get reasoning() { return this.thoughts ? this.thoughts.text : ""; }

  ensureBlock() {
    if (!this.block) {
      const { block, body } = assistantBlock(!this.labelled);
      this.labelled = true;
      this.block = block;
      this.body = body;
      this.live = new LiveMarkdown(body, this.follow);
      this.log.append(block);
    }
  }

  appendText(text) {
    this.ensureBlock();
    if (text.trim()) this.stopThinking(); // the answer has begun
    this.live.append(text);
  }

  // More of the turn's reasoning, shown above its text (which may not have begun).
  appendReasoning(text) {
    this.ensureBlock();
    if (!this.thoughts) {
      this.thoughts = reasoningBlock(true);
      this.block.insertBefore(this.thoughts.details, this.body);
    }
    this.thoughts.append(text);
    this.follow();
  }

  // The reasoning is over for now: its box collapses to "Thought for N s".
  stopThinking() {
    if (this.thoughts) this.thoughts.finish();
  }

  // A call the model has started to write (its code streams in with appendCode()).
  startCall(id, name) {
    this.ensureBlock();
    this.stopThinking();
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
    this.stopThinking();
    this.block = null;
    this.body = null;
    this.live = null;
    this.thoughts = null;
  }

  flush() {
    if (this.live) this.renders.push(this.live.flush());
  }

  // Resolves once every turn's last render is on the page.
  settled() {
    return Promise.all(this.renders);
  }

  // A call the loop did not run (a repeat, or one cut off) must not look busy forever.
  markNotRun() {
    document.querySelectorAll(".call .badge.run").forEach((b) => {
      b.className = "badge skip";
      b.textContent = "not run";
    });
  }
}
