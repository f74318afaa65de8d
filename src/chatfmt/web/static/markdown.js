// Markdown to HTML for model text: escape first, then add a fixed set of tags.
//
// Why this shape: model text is untrusted, and this is the only place it becomes HTML. Every
// character of the source is HTML-escaped before any tag is added; the tags added are a fixed
// list (p, br, code, pre, span, strong, em, del, a, h2-h6, ul, ol, li, blockquote, hr); a link
// keeps its href only for http(s): and mailto: URLs (javascript:, data: and the rest stay
// text). The renderer is pure (a string in, a string out): no DOM, no eval, no new Function.
// It is small on purpose; it covers what chat replies use, not all of CommonMark.

export function escapeHtml(text) {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function unescapeHtml(text) {
  return text
    .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'").replace(/&amp;/g, "&");
}

function safeUrl(escapedUrl) {
  // Only web and mail links; javascript:, data: and the like are rendered as text.
  const url = unescapeHtml(escapedUrl).trim();
  return /^(https?:\/\/|mailto:)/i.test(url) ? escapedUrl.trim() : null;
}

// Inline Markdown of one block of raw text: code spans, links, bold, italics, strikethrough.
function renderInline(raw) {
  const stash = [];
  const hold = (html) => "\u0000" + (stash.push(html) - 1) + "\u0000";
  let text = raw.replace(/\u0000/g, "");
  // Code spans first: nothing inside them is Markdown.
  text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) =>
    hold("<code>" + escapeHtml(code.trim() === "" ? code : code.replace(/^ (.*) $/s, "$1")) + "</code>"));
  text = escapeHtml(text);
  text = text.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, label, url) => {
    const href = safeUrl(url);
    return href === null ? m : hold(`<a href="${href}" target="_blank" rel="noopener noreferrer">`) + label + hold("</a>");
  });
  text = text.replace(/(^|[\s(])(https?:\/\/[^\s\u0000]+?)(?=[.,;:!?)]*(?:\s|$|\u0000))/g, (m, pre, url) =>
    pre + hold(`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
  text = text.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>");
  text = text.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>");
  text = text.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, "$1<em>$2</em>");
  text = text.replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
  text = text.replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
  return text.replace(/\u0000(\d+)\u0000/g, (_, i) => stash[Number(i)]);
}

// Block Markdown: code fences, headings, lists, block quotes, paragraphs.
export function renderMarkdown(src) {
  const lines = src.replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push("<p>" + para.map(renderInline).join("<br>") + "</p>");
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/);
    if (fence) {
      flush();
      const close = new RegExp("^ {0,3}" + fence[1][0] + "{" + fence[1].length + ",}\\s*$");
      const body = [];
      i++;
      while (i < lines.length && !close.test(lines[i])) body.push(lines[i++]);
      // An unclosed fence (still streaming) runs to the end.
      const lang = fence[2] ? `<span class="lang">${escapeHtml(fence[2])}</span>` : "";
      out.push(`<pre>${lang}<code>${escapeHtml(body.join("\n"))}</code></pre>`);
      continue;
    }
    const heading = line.match(/^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/);
    if (heading) {
      flush();
      const level = Math.min(heading[1].length + 1, 6); // the page's h1 stays the only h1
      out.push(`<h${level}>${renderInline(heading[2])}</h${level}>`);
      continue;
    }
    const item = line.match(/^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/);
    if (item && !/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      const ordered = /\d/.test(item[1]);
      const items = [];
      let current = [item[2]];
      while (++i < lines.length) {
        const next = lines[i].match(/^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/);
        if (next && /\d/.test(next[1]) === ordered) {
          items.push(current);
          current = [next[2]];
        } else if (/^\s+\S/.test(lines[i]) || (/^\S/.test(lines[i]) && !next && lines[i - 1].trim() !== "" && !/^ {0,3}(`{3,}|~{3,}|#|>)/.test(lines[i]))) {
          current.push(lines[i].trim()); // continuation of the item
        } else {
          break;
        }
      }
      i--;
      items.push(current);
      const tag = ordered ? "ol" : "ul";
      const start = ordered && parseInt(item[1], 10) !== 1 ? ` start="${parseInt(item[1], 10)}"` : "";
      out.push(`<${tag}${start}>` + items.map((it) => "<li>" + it.map(renderInline).join("<br>") + "</li>").join("") + `</${tag}>`);
      continue;
    }
    if (/^ {0,3}>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^ {0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^ {0,3}> ?/, ""));
      i--;
      out.push("<blockquote>" + renderMarkdown(quoted.join("\n")) + "</blockquote>");
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
      continue;
    }
    if (line.trim() === "") flush();
    else para.push(line);
  }
  flush();
  return out.join("");
}
