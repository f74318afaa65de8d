// The two ways text reaches the page's DOM.
//
// Why one small module: model and user text is untrusted. It becomes DOM either as
// textContent (el()), or as HTML built by the escape-first Markdown renderer (setMarkdown()).
// This is the page's only HTML sink: no other module assigns innerHTML or outerHTML or writes
// HTML any other way, and no module evaluates code (no eval, no new Function).

import { renderMarkdown } from "./markdown.js";

// A new element with an optional class and text (as textContent, never parsed as HTML).
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Replace `node`'s children with the Markdown rendering of `source`.
export function setMarkdown(node, source) {
  node.innerHTML = renderMarkdown(source);
}
