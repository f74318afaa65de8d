// The context meter: the exact prompt size of the conversation against the model's context.
//
// Why ask the server: only it has the model's tokenizer and chat format, so the count it
// returns is the prompt the next request would send (system prompt and tools included).
// Numbers are shown as textContent.

import { errorText, postJson } from "./api.js";

const $ = (id) => document.getElementById(id);

export async function refreshCount(state) {
  try {
    const res = await postJson("/api/count", { messages: state.messages, mode: state.mode, system: state.system });
    if (!res.ok) throw new Error(await errorText(res));
    const data = await res.json();
    const fmt = new Intl.NumberFormat();
    $("tokens").textContent = `${fmt.format(data.tokens)} / ${fmt.format(data.context)} tokens`;
    const meter = $("tokens-meter");
    meter.max = data.context || 1;
    meter.value = data.tokens;
    meter.low = 0.7 * meter.max;
    meter.high = 0.9 * meter.max;
    meter.optimum = 0;
    $("tokens-box").title = `The prompt of this conversation is ${data.tokens} tokens; the model holds ${data.context}.`;
  } catch (err) {
    $("tokens").textContent = "– tokens";
  }
}
