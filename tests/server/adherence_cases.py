"""The schema-adherence suite's cases: JSON replies (``response_format`` json_schema) and forced
tool calls (``tool_choice`` naming the tool) over varied schemas — nested objects, arrays of
objects, enums, integers and numbers, optional and nullable fields, dates, unicode."""

from __future__ import annotations

from typing import Any


def obj(props: dict[str, Any], *optional: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": [k for k in props if k not in optional],
        "additionalProperties": False,
    }


STR, INT, NUM, BOOL = (
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
)


def enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


def array(item: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"type": "array", "items": item, **kw}


SCHEMAS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "person": (
        obj({"name": STR, "age": INT, "email": STR}, "email"),
        [
            "a retired teacher from Lyon",
            "Zoë Müller, 34, from Zürich",
            "a child named 李明",
            "a pilot called Ana with email ana@example.com",
            "someone you invent",
        ],
    ),
    "recipe": (
        obj(
            {
                "title": STR,
                "ingredients": array(
                    obj({"name": STR, "quantity": NUM, "unit": enum("g", "ml", "pcs")}), maxItems=6
                ),
                "steps": array(STR, minItems=1, maxItems=4),
            }
        ),
        ["pancakes", "a tomato salad", "crème brûlée", "green tea", "miso soup"],
    ),
    "weather": (
        obj(
            {
                "city": STR,
                "temperature": NUM,
                "condition": enum("sunny", "cloudy", "rain", "snow"),
                "wind": obj({"speed": NUM, "direction": enum("N", "E", "S", "W")}),
            }
        ),
        [
            "Oslo in winter",
            "Cairo at noon",
            "São Paulo in a storm",
            "Tokyo today",
            "a rainy London",
        ],
    ),
    "book": (
        obj(
            {
                "title": STR,
                "author": STR,
                "year": INT,
                "genres": array(enum("fiction", "history", "science", "poetry"), maxItems=3),
                "rating": NUM,
            },
            "rating",
        ),
        [
            "a famous Russian novel",
            "a book about black holes",
            "a poetry collection",
            "a history of Rome",
            "your favourite book",
        ],
    ),
    "event": (
        obj(
            {
                "name": STR,
                "date": {"type": "string", "format": "date"},
                "attendees": array(obj({"name": STR, "rsvp": BOOL}), maxItems=4),
            }
        ),
        [
            "a birthday party next May",
            "a team meeting on 2025-03-14",
            "a wedding in Provence",
            "a chess tournament",
            "New Year's Eve 2030",
        ],
    ),
    "translation": (
        obj({"source": STR, "target_language": enum("fr", "de", "ja", "es"), "text": STR}),
        [
            "'good morning' into Japanese",
            "'thank you very much' into German",
            "'where is the station?' into French",
            "'I love tea' into Spanish",
            "'ça va' into German",
        ],
    ),
    "inventory": (
        obj(
            {
                "warehouse": STR,
                "items": array(
                    obj({"sku": STR, "count": {"type": "integer", "minimum": 0}}), maxItems=5
                ),
            }
        ),
        ["a small bakery", "a bike shop", "a bookstore in Kraków", "a pharmacy", "a toy store"],
    ),
    "sentiment": (
        obj({"label": enum("positive", "negative", "neutral"), "confidence": NUM}),
        [
            "'I loved this film!'",
            "'The service was terrible.'",
            "'It is Tuesday.'",
            "'Not bad at all'",
            "'Je suis très déçu'",
        ],
    ),
    "address": (
        obj(
            {
                "street": STR,
                "city": STR,
                "postal_code": STR,
                "country": STR,
                "geo": obj({"lat": NUM, "lon": NUM}),
            }
        ),
        [
            "the Eiffel Tower",
            "Buckingham Palace",
            "a flat in Berlin",
            "the Sydney Opera House",
            "a house in Reykjavík",
        ],
    ),
    "todo": (
        obj(
            {
                "tasks": array(
                    obj(
                        {
                            "title": STR,
                            "done": BOOL,
                            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                        }
                    ),
                    minItems=1,
                    maxItems=4,
                )
            }
        ),
        ["moving house", "a garden in spring", "learning Python", "a trip to Japan", "exam week"],
    ),
    "answer": (
        # Bounded: unbounded, the 0.5B model once repeated itself inside the string until
        # max_tokens (greedy), which no grammar prevents; a schema's maxLength does.
        obj(
            {
                "answer": {"type": ["string", "null"], "maxLength": 300},
                "sources": array(STR, maxItems=3),
            }
        ),
        [
            "the capital of Australia",
            "who wrote Hamlet",
            "the boiling point of water",
            "an unknowable question",
            "the largest ocean",
        ],
    ),
    "movie": (
        obj(
            {
                "title": STR,
                "runtime_minutes": INT,
                "cast": array(obj({"actor": STR, "role": STR}), maxItems=3),
            }
        ),
        ["a space adventure", "a French comedy", "a silent film", "an anime film", "a thriller"],
    ),
}


def tool(name: str, description: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


TOOLS: list[tuple[dict[str, Any], list[str]]] = [
    (
        tool(
            "get_weather",
            "Current weather in a city.",
            obj({"city": STR, "unit": enum("celsius", "fahrenheit")}, "unit"),
        ),
        [
            "Weather in Paris?",
            "Is it cold in Montréal in °F?",
            "How hot is it in Dubai?",
            "Wetter in München?",
            "東京の天気は?",
            "Do I need an umbrella in Bergen?",
        ],
    ),
    (
        tool("add", "Add two integers.", obj({"a": INT, "b": INT})),
        [
            "What is 2+3?",
            "Add 120 and -7.",
            "Sum of 999 and 1?",
            "12 plus 30",
            "Add minus five and ten",
            "What's 0 + 0?",
        ],
    ),
    (
        tool(
            "search",
            "Search the web.",
            obj(
                {"query": STR, "max_results": {"type": "integer", "minimum": 1, "maximum": 10}},
                "max_results",
            ),
        ),
        [
            "Find news about fusion power.",
            "Search for the best ramen in Osaka, 3 results.",
            "Who won the 1998 World Cup?",
            "Look up 'Straße' spelling rules",
            "Recipes with okra",
            "Search Python asyncio tutorials",
        ],
    ),
    (
        tool("send_email", "Send an email.", obj({"to": STR, "subject": STR, "body": STR})),
        [
            "Email bob@example.com that the meeting moved to 3pm.",
            "Tell alice@example.org happy birthday.",
            "Send my boss (boss@corp.com) my resignation.",
            "Write to team@x.io: release is out",
            "Email Zoë (zoe@example.fr) 'merci beaucoup'",
            "Remind dan@example.com about rent",
        ],
    ),
    (
        tool(
            "create_event",
            "Create a calendar event.",
            obj(
                {
                    "title": STR,
                    "date": {"type": "string", "format": "date"},
                    "attendees": array(STR, maxItems=4),
                }
            ),
        ),
        [
            "Lunch with Sam on 2026-12-24.",
            "Dentist on March 3rd 2027.",
            "Team offsite 2027-01-15 with Ann and Bo.",
            "Book 'Release party' for 2026-12-31",
            "Schedule yoga on 2027-02-02",
            "Plan dinner with Mei on 2027-05-05",
        ],
    ),
    (
        tool(
            "convert_currency",
            "Convert money.",
            obj(
                {
                    "amount": NUM,
                    "from": enum("USD", "EUR", "JPY", "GBP"),
                    "to": enum("USD", "EUR", "JPY", "GBP"),
                }
            ),
        ),
        [
            "Convert 100 USD to EUR.",
            "How many yen is 20 pounds?",
            "5.5 EUR in USD?",
            "1000 JPY to GBP",
            "Change 42 dollars into euros",
            "What is 3 GBP in JPY?",
        ],
    ),
    (
        tool(
            "set_alarm",
            "Set an alarm.",
            obj(
                {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "minute": {"type": "integer", "minimum": 0, "maximum": 59},
                    "label": STR,
                },
                "label",
            ),
        ),
        [
            "Wake me at 6:30.",
            "Alarm for 23:15 called 'bed'.",
            "Set an alarm at noon.",
            "Alarm at 7 am",
            "Remind me at 18:45 to cook",
            "Alarm 5:05",
        ],
    ),
    (
        tool(
            "book_flight",
            "Book a flight.",
            obj(
                {
                    "origin": STR,
                    "destination": STR,
                    "passengers": obj({"adults": INT, "children": INT}),
                }
            ),
        ),
        [
            "Fly 2 adults from Paris to Rome.",
            "Book Berlin to Lisbon for me and my 2 kids.",
            "One adult, NYC to Tokyo",
            "Flights from Oslo to Nice for a family of four",
            "From Zürich to Málaga, 1 adult 1 child",
            "Book Sydney to Auckland",
        ],
    ),
]


def json_cases(*, smoke: bool = False) -> list[tuple[str, dict[str, Any], str]]:
    """Every schema with each of its subjects (``smoke``: with its first subject only)."""
    return [
        (name, schema, f"Describe {subject} as JSON.")
        for name, (schema, subjects) in SCHEMAS.items()
        for subject in (subjects[:1] if smoke else subjects)
    ]


def call_cases(*, smoke: bool = False) -> list[tuple[dict[str, Any], str]]:
    """Every tool with each of its prompts (``smoke``: with its first prompt only)."""
    return [(t, prompt) for t, prompts in TOOLS for prompt in (prompts[:1] if smoke else prompts)]
