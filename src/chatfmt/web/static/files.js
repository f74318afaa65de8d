// Files of the code interpreter's conversation: upload (button or drag and drop), list, download.
//
// Why this shape: a file goes up as its raw bytes (application/octet-stream, which another site
// cannot send without a preflight) into this conversation's working directory on the server;
// the next message tells the model where it is. Downloads are fetched with the API key and
// saved through a blob URL (the server sends them as attachments, never as pages). Names and
// sizes reach the DOM as text only.

import { authHeaders, errorText } from "./api.js";
import { el } from "./dom.js";

function size(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} kB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function createFiles({ list, status, conversation, maxBytes }) {
  const pending = []; // notes of the files uploaded since the last message, sent with it

  async function refresh() {
    const res = await fetch(`/api/files/${conversation()}`, { headers: authHeaders() });
    if (!res.ok) return;
    const data = await res.json();
    list.textContent = "";
    for (const f of data.files) {
      const item = el("li");
      const button = el("button", "link", f.name);
      button.type = "button";
      button.title = "Download " + f.name;
      button.addEventListener("click", () => download(f.name));
      item.append(button, " ", el("span", "file-size", size(f.size)));
      list.append(item);
    }
  }

  async function upload(file) {
    if (maxBytes() && file.size > maxBytes()) {
      status(`${file.name} is ${size(file.size)}; the upload limit is ${size(maxBytes())}.`);
      return;
    }
    status(`Uploading ${file.name}…`);
    const res = await fetch(`/api/files/${conversation()}/${encodeURIComponent(file.name)}`, {
      method: "POST",
      headers: { "Content-Type": "application/octet-stream", ...authHeaders() },
      body: file,
    });
    if (!res.ok) {
      status(`Upload of ${file.name} failed: ${await errorText(res)}`);
      return;
    }
    const saved = await res.json();
    pending.push(saved.note);
    status(`Uploaded ${saved.name} (${size(saved.size)}); your next message tells the model.`);
    await refresh();
  }

  async function download(name) {
    const res = await fetch(`/api/files/${conversation()}/${name.split("/").map(encodeURIComponent).join("/")}`,
      { headers: authHeaders() });
    if (!res.ok) {
      status(`Download of ${name} failed: ${await errorText(res)}`);
      return;
    }
    const url = URL.createObjectURL(await res.blob());
    const a = el("a");
    a.href = url;
    a.download = name.split("/").pop();
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // The user's message with the uploads since the last one named first.
  function withUploads(text) {
    if (!pending.length) return text;
    const lines = pending.join("\n");
    pending.length = 0;
    return lines + "\n\n" + text;
  }

  async function uploadAll(files) {
    for (const file of files) await upload(file);
  }

  return { refresh, uploadAll, withUploads, clear: () => { pending.length = 0; list.textContent = ""; } };
}
