// A tool call or code cell in a reply: a collapsible box filled in as its events arrive.
//
// Why: arguments, code and results are model or tool output, so they are set as textContent
// only (pretty-printed JSON is text too). Images are shown only when the payload is plain
// base64, as data:image/png URLs (the page's CSP allows data: for images and nothing else).

import { el } from "./dom.js";

function isPng(b64) { return typeof b64 === "string" && /^[A-Za-z0-9+/=\s]+$/.test(b64); }

// Returns handles to fill in; `onImage` runs when an image has loaded (to keep scrolling).
export function callBlock(id, name, onImage) {
  const code = name === "interpreter";
  const details = el("details", "call" + (code ? " code-cell" : ""));
  details.dataset.id = id;
  if (code) details.open = true; // code and plots are the point of interpreter mode
  const summary = el("summary");
  summary.append(el("span", "", code ? "Code" : "Tool"), " ");
  if (!code) summary.append(el("code", "", name), " ");
  const badge = el("span", "badge run", "running…");
  summary.append(badge);
  const body = el("div", "body");
  body.append(el("div", "label", code ? "Python" : "Arguments"));
  const argsPre = el("pre");
  const args = el("code", code ? "source" : "args");
  argsPre.append(args);
  body.append(argsPre);
  const outLabel = el("div", "label", code ? "Output" : "Result");
  const output = el("pre", "output");
  outLabel.hidden = output.hidden = true;
  const images = el("div", "images");
  body.append(outLabel, output, images);
  details.append(summary, body);
  return {
    details, code, name,
    setArguments(json) {
      if (code) {
        try {
          const parsed = JSON.parse(json);
          if (typeof parsed.code === "string") { args.textContent = parsed.code; return; }
        } catch (_) { /* fall through: show the raw arguments */ }
        args.textContent = json;
      } else {
        try { args.textContent = JSON.stringify(JSON.parse(json), null, 2); } catch (_) { args.textContent = json; }
      }
    },
    appendCode(text) { args.textContent += text; },
    setResult(content, ok, pngs) {
      let text = content || "";
      if (code) {
        // The model reads "[Image]" placeholders; the reader sees the images themselves.
        text = text.replace(/^```result\n/, "").replace(/\n```$/, "");
        if ((pngs || []).length) text = text.split("\n").filter((l) => l !== "[Image]").join("\n");
      }
      output.textContent = text;
      outLabel.hidden = output.hidden = text === "";
      badge.className = "badge " + (ok ? "ok" : "fail");
      badge.textContent = ok ? "done" : "failed";
      images.textContent = "";
      (pngs || []).filter(isPng).forEach((b64, i) => {
        const img = el("img");
        img.alt = `Image ${i + 1} from the code interpreter`;
        img.src = "data:image/png;base64," + b64;
        img.addEventListener("load", onImage);
        images.append(img);
      });
    },
  };
}
