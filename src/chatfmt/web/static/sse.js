// Server-sent events from a fetch() response body, as parsed JSON objects.
//
// Why not EventSource: it can only GET, and a reply is a POST carrying the conversation (and
// an Authorization header when the server has a key). The server's /api/agent stream sends
// one JSON object per event in `data:` lines; events end with a blank line. Parsing is
// JSON.parse only: nothing received is ever evaluated.

// Yield each event of `body` (a ReadableStream of bytes) as soon as its blank line arrives.
// Bytes may split anywhere, even inside a UTF-8 character. A read error (an aborted fetch) or
// a JSON error is thrown to the caller.
export async function* readEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const chunk = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = chunk.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}
