// The ways text reaches the page's DOM.
//
// Why one small module: model and user text is untrusted. It becomes DOM either as
// textContent (el(), setPlain()), or as HTML that the server rendered from Markdown and
// sanitized (setHtml(), given only what markup.js's renderHtml() got from POST /api/markdown,
// by markup.js and live.js). This is
// the page's only HTML sink: no other module assigns innerHTML or outerHTML or writes HTML any
// other way, and no module evaluates code (no eval, no new Function).

// A new element with an optional class and text (as textContent, never parsed as HTML).
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Show `text` as plain text with its line breaks, until (or instead of) its rendered HTML.
export function setPlain(node, text) {
  node.classList.add("plain");
  node.textContent = text;
}

// Replace `node`'s children with `html`: the server's sanitized rendering (markup.js).
export function setHtml(node, html) {
  node.classList.remove("plain");
  node.innerHTML = html;
  // A fence's language (class="language-python") is shown above its code, as text.
  for (const code of node.querySelectorAll('pre > code[class^="language-"]')) {
    code.before(el("span", "lang", code.className.slice("language-".length)));
  }
}
