// Requests to this page's own server (/api/*), with the API key when the server needs one.
//
// Why: the page talks only to its own origin (the CSP's connect-src 'self'), and POSTs only
// application/json, which the server requires (a cross-site page cannot send it without a
// preflight). Error bodies are read as JSON and shown as text, never as HTML.

import { apiKey } from "./store.js";

let unauthorized = () => {};

// What to do when the server answers 401 (ask the reader for a key).
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: "Bearer " + key } : {};
}

export async function postJson(url, body, signal) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(body),
    signal,
  });
  if (res.status === 401) unauthorized();
  return res;
}

// The message of an error response.
export async function errorText(res) {
  try {
    const data = await res.json();
    return (data.error && data.error.message) || data.detail || res.statusText;
  } catch (_) {
    return `${res.status} ${res.statusText}`;
  }
}
