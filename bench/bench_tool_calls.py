"""Tool-calling accuracy on the default model: chatfmt with and without call grammars, and
llama.cpp's own ``llama-server --jinja`` (its chat template and tool-call handling) on the
same GGUF.

    python bench/bench_tool_calls.py            # 110 cases, three servers, one after another

Categories (all greedy, one request per case, four at a time):

- **single** (40): one tool offered, the request needs it. Correct: exactly that tool called
  once with the expected arguments (strings match case-insensitively as substrings, numbers
  exactly).
- **choose** (40): the same requests with all eight tools offered. Correct: as above.
- **no call** (30): all eight tools offered, the request needs none. Correct: no call.

A reply whose call does not parse counts as wrong, as do invented tools and extra calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section
from bench_concurrency import start_chatfmt, start_raw, stop

PARALLEL = 4


def fn(name: str, description: str, props: dict[str, Any], *optional: str) -> dict[str, Any]:
    required = [k for k in props if k not in optional]
    params = {"type": "object", "properties": props, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


S, NUM, INT = {"type": "string"}, {"type": "number"}, {"type": "integer"}
CURRENCIES = {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]}
TOOLS = {
    "get_weather": fn("get_weather", "Current weather in a city.", {"city": S}),
    "add": fn("add", "Add two numbers.", {"a": NUM, "b": NUM}),
    "search_web": fn("search_web", "Search the web for a query.", {"query": S}),
    "send_email": fn("send_email", "Send an email.", {"to": S, "subject": S, "body": S}, "body"),
    "set_alarm": fn("set_alarm", "Set an alarm (24-hour clock).", {"hour": INT, "minute": INT}),
    "convert_currency": fn(
        "convert_currency",
        "Convert an amount of money.",
        {"amount": NUM, "from_currency": CURRENCIES, "to_currency": CURRENCIES},
    ),
    "get_time": fn("get_time", "Current local time in a city.", {"city": S}),
    "translate": fn(
        "translate",
        "Translate text.",
        {"text": S, "target_language": {"type": "string", "description": "e.g. French"}},
    ),
}

CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("get_weather", "What's the weather in Paris right now?", {"city": "Paris"}),
    ("get_weather", "Is it raining in Tokyo?", {"city": "Tokyo"}),
    ("get_weather", "How cold is it in Oslo today?", {"city": "Oslo"}),
    ("get_weather", "Weather forecast for Buenos Aires please", {"city": "Buenos Aires"}),
    ("get_weather", "Should I wear a coat in Berlin today? Check the weather.", {"city": "Berlin"}),
    ("add", "What is 17 plus 25?", {"a": 17, "b": 25}),
    ("add", "Add 3.5 and 4.25.", {"a": 3.5, "b": 4.25}),
    ("add", "Compute 1000 + 234.", {"a": 1000, "b": 234}),
    ("add", "Sum 8 and -3 for me.", {"a": 8, "b": -3}),
    ("add", "I have 12 apples and buy 30 more. Use the tool to add them.", {"a": 12, "b": 30}),
    ("search_web", "Search the web for the latest Mars rover news.", {"query": "mars rover"}),
    ("search_web", "Look up who won the 2018 World Cup.", {"query": "world cup"}),
    ("search_web", "Find recipes for vegan lasagna online.", {"query": "lasagna"}),
    ("search_web", "Search for Python asyncio tutorials.", {"query": "asyncio"}),
    ("search_web", "Google the population of Canada.", {"query": "canada"}),
    (
        "send_email",
        "Email bob@example.com with subject 'Lunch' saying see you at noon.",
        {"to": "bob@example.com", "subject": "Lunch"},
    ),
    (
        "send_email",
        "Send an email to alice@example.org titled 'Report'.",
        {"to": "alice@example.org", "subject": "Report"},
    ),
    (
        "send_email",
        "Write to team@corp.com, subject Release, body: v2 is out.",
        {"to": "team@corp.com", "subject": "Release"},
    ),
    (
        "send_email",
        "Email dan@mail.com subject 'Rent' to remind him about rent.",
        {"to": "dan@mail.com", "subject": "Rent"},
    ),
    (
        "send_email",
        "Send mia@school.edu an email with the subject 'Homework'.",
        {"to": "mia@school.edu", "subject": "Homework"},
    ),
    ("set_alarm", "Set an alarm for 6:30.", {"hour": 6, "minute": 30}),
    ("set_alarm", "Wake me up at 7:45.", {"hour": 7, "minute": 45}),
    ("set_alarm", "Alarm at 22:10 please.", {"hour": 22, "minute": 10}),
    ("set_alarm", "Set an alarm for 5 o'clock in the morning, 5:00.", {"hour": 5, "minute": 0}),
    ("set_alarm", "I need an alarm at 13:15.", {"hour": 13, "minute": 15}),
    (
        "convert_currency",
        "Convert 100 USD to EUR.",
        {"amount": 100, "from_currency": "USD", "to_currency": "EUR"},
    ),
    (
        "convert_currency",
        "How much is 50 GBP in USD?",
        {"amount": 50, "from_currency": "GBP", "to_currency": "USD"},
    ),
    (
        "convert_currency",
        "Change 2000 JPY into EUR.",
        {"amount": 2000, "from_currency": "JPY", "to_currency": "EUR"},
    ),
    (
        "convert_currency",
        "Convert 12.5 EUR to GBP.",
        {"amount": 12.5, "from_currency": "EUR", "to_currency": "GBP"},
    ),
    (
        "convert_currency",
        "What is 75 USD in JPY?",
        {"amount": 75, "from_currency": "USD", "to_currency": "JPY"},
    ),
    ("get_time", "What time is it in Sydney?", {"city": "Sydney"}),
    ("get_time", "Tell me the current time in New York.", {"city": "New York"}),
    ("get_time", "Local time in Mumbai?", {"city": "Mumbai"}),
    ("get_time", "Is it night in Honolulu? Check the time there.", {"city": "Honolulu"}),
    ("get_time", "What's the time in Cairo now?", {"city": "Cairo"}),
    (
        "translate",
        "Translate 'good morning' into French.",
        {"text": "good morning", "target_language": "French"},
    ),
    (
        "translate",
        "How do you say 'thank you' in Japanese? Use the translator.",
        {"text": "thank you", "target_language": "Japanese"},
    ),
    (
        "translate",
        "Translate 'where is the station' to German.",
        {"text": "station", "target_language": "German"},
    ),
    (
        "translate",
        "Translate 'I love cats' into Spanish.",
        {"text": "cats", "target_language": "Spanish"},
    ),
    (
        "translate",
        "Put 'happy birthday' into Italian.",
        {"text": "birthday", "target_language": "Italian"},
    ),
]

NO_CALLS = [
    "Hi! How are you?",
    "Write a haiku about autumn leaves.",
    "Tell me a joke about cats.",
    "What does 'idempotent' mean?",
    "Explain recursion in one sentence.",
    "Write a Python function that reverses a string.",
    "Thanks, that's all for now.",
    "Give me three names for a pet goldfish.",
    "What is a prime number?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Who are you?",
    "Write a limerick about a programmer.",
    "What's the difference between a list and a tuple?",
    "Suggest a title for my blog about gardening.",
    "Explain what an API is to a child.",
    "Rewrite this more politely: 'send me the file now'.",
    "What rhymes with 'orange'?",
    "Describe the color blue to someone who cannot see.",
    "Good night!",
    "Write a short motivational quote.",
    "How do I center a div in CSS?",
    "Give me a synonym for 'happy'.",
    "What is the Pythagorean theorem?",
    "Write a two-line poem about the sea.",
    "Explain what a hash map is.",
    "List three benefits of exercise.",
    "What does HTTP stand for?",
    "Compose a tweet announcing a bake sale.",
    "Is a tomato a fruit or a vegetable?",
    "Say hello in a pirate voice.",
]


def cases() -> list[tuple[str, list[dict[str, Any]], str, tuple[str, dict[str, Any]] | None]]:
    out: list[tuple[str, list[dict[str, Any]], str, tuple[str, dict[str, Any]] | None]] = []
    out += [("single", [TOOLS[name]], q, (name, args)) for name, q, args in CALLS]
    out += [("choose", list(TOOLS.values()), q, (name, args)) for name, q, args in CALLS]
    out += [("no call", list(TOOLS.values()), q, None) for q in NO_CALLS]
    return out


def matches(want: dict[str, Any], got: dict[str, Any]) -> bool:
    for key, value in want.items():
        if key not in got:
            return False
        if isinstance(value, str):
            if not isinstance(got[key], str) or value.lower() not in got[key].lower():
                return False
        elif not isinstance(got[key], int | float) or float(got[key]) != float(value):
            return False
    return True


def correct(expected: tuple[str, dict[str, Any]] | None, message: dict[str, Any]) -> bool:
    calls = message.get("tool_calls") or []
    if expected is None:
        return not calls
    if len(calls) != 1 or calls[0]["function"]["name"] != expected[0]:
        return False
    try:
        args = json.loads(calls[0]["function"]["arguments"])
    except ValueError:
        return False
    return isinstance(args, dict) and matches(expected[1], args)


async def score(url: str) -> dict[str, tuple[int, int]]:
    sem = asyncio.Semaphore(PARALLEL)
    results: dict[str, list[bool]] = {}

    async def one(client: httpx.AsyncClient, case: Any) -> None:
        category, tools, question, expected = case
        body = {
            "model": "default",
            "messages": [{"role": "user", "content": question}],
            "tools": tools,
            "temperature": 0,
            "max_tokens": 200,
        }
        async with sem:
            r = await client.post(url + "/v1/chat/completions", json=body)
        ok = r.status_code == 200 and correct(expected, r.json()["choices"][0]["message"])
        results.setdefault(category, []).append(ok)

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(one(client, c) for c in cases()))
    return {k: (sum(v), len(v)) for k, v in results.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print only, leave docs alone")
    args = ap.parse_args()
    from chatfmt.engines.default_model import ensure_default_model

    model = ensure_default_model(progress=False)
    runs = {
        "chatfmt serve (call grammars)": lambda: start_chatfmt(PARALLEL, args.threads),
        "chatfmt serve --no-call-grammar": lambda: start_chatfmt(
            PARALLEL, args.threads, "llama-server", "--no-call-grammar"
        ),
        "llama-server --jinja": lambda: start_raw(model, PARALLEL, args.threads, "--jinja"),
    }
    table: dict[str, dict[str, tuple[int, int]]] = {}
    for label, start in runs.items():
        proc, url = start()
        try:
            table[label] = asyncio.run(score(url))
        finally:
            stop(proc)
        print(label, table[label], flush=True)
    categories = ["single", "choose", "no call"]
    lines = [
        "| server | " + " | ".join(categories) + " | all |",
        "|---" * (len(categories) + 2) + "|",
    ]
    for label, res in table.items():
        cells = [f"{res[c][0]}/{res[c][1]}" for c in categories]
        total = sum(res[c][0] for c in categories), sum(res[c][1] for c in categories)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {total[0]}/{total[1]} |")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section(
            "Tool-calling accuracy",
            "Default model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M), greedy, 110 cases written for "
            "this benchmark: correct tool and arguments, or no call when none is needed "
            "(`bench/bench_tool_calls.py` explains the scoring). Four requests at a time, so "
            "batching makes a case or two differ between runs.\n\n" + body + "\n\n"
            "`llama-server --jinja` (the model's own chat template, llama.cpp's Hermes-style "
            "call handling) returns this model's calls as text: it writes them bare or in a "
            '```` ```json ```` fence, not in `<tool_call>` tags, e.g. `content: "{\\"name\\": '
            '\\"add\\", \\"arguments\\": {\\"a\\": 17, \\"b\\": 25}}"` with no `tool_calls`; '
            "chatfmt's parser reads those forms, and its grammar constrains them.",
            "bench/bench_tool_calls.py",
        )


if __name__ == "__main__":
    main()
