"""llama-server's ``/completion`` events and the ids it leaves out.

llama-server sends no event for a token that ends inside a UTF-8 character; the event of the
token that completes the character carries only its own id, the whole character as its
content, and the count of every token so far. ``NativeEvents`` puts the missing ids back from
that content, or passes the event on as text where they cannot be known; either way the
reply's text is the model's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatfmt.engines.base import GenerationChunk
from chatfmt.engines.remote import NativeEvents
from profiles import examples

IM_END, NEWLINE, HI = 151645, 198, 13048
DRAGON = (82912, 246)  # "龘" as the model writes it: b"\xe9\xbe", b"\x98"


def event(
    content: str, tokens: list[int], predicted: int, stop: str | None = None
) -> dict[str, Any]:
    """One event as llama-server sends it."""
    data: dict[str, Any] = {"content": content, "tokens": tokens, "tokens_predicted": predicted}
    data["stop"] = stop is not None
    if stop is not None:
        data["stop_type"] = stop
    return data


def llama_server_events(tok: Any, ids: list[int]) -> list[dict[str, Any]]:
    """What llama-server sends for ``ids``: an event for each token after which the text is
    whole UTF-8 (its content: the text since the last event), then the final event."""
    out, pending = [], b""
    for n, token in enumerate(ids, start=1):
        name = tok.control_name(token)
        pending += b"" if name is not None else tok.token_bytes(token)
        try:
            content = pending.decode("utf-8")
        except UnicodeDecodeError:
            continue  # an incomplete character: no event
        out.append(event(content, [token], n))
        pending = b""
    out.append(event("", [], len(ids), "limit"))
    return out


def read(tok: Any, events: list[dict[str, Any]]) -> list[GenerationChunk]:
    native = NativeEvents(tok)
    return [c for c in (native.chunk(e) for e in events) if c is not None]


def text_of(tok: Any, chunks: list[GenerationChunk]) -> str:
    """The reply's text: exact chunks by their ids, the others by their text."""
    data = b""
    for c in chunks:
        if c.exact_ids:
            data += b"".join(tok.token_bytes(t) for t in c.token_ids if tok.control_name(t) is None)
        else:
            data += (c.text or "").encode()
    return data.decode("utf-8")


def test_a_token_left_out_inside_a_character_is_put_back(qwen) -> None:
    # Seen from the real server: "Hi", then "龘" with only its second token, then the stop.
    chunks = read(qwen, [event("Hi", [HI], 1), event("龘", [246], 3), event("", [IM_END], 4),
                         event("", [], 4, "eos")])  # fmt: skip
    assert [t for c in chunks for t in c.token_ids] == [HI, *DRAGON, IM_END]
    assert all(c.exact_ids for c in chunks)


def test_several_left_out_are_put_back_when_their_bytes_split_one_way(qwen) -> None:
    clef = [qwen.split_bytes(bytes([b]), 1)[0] for b in "𝄞".encode()]  # 4 byte tokens
    chunks = read(qwen, llama_server_events(qwen, [HI, *clef, IM_END]))
    assert [t for c in chunks for t in c.token_ids] == [HI, *clef, IM_END]
    assert all(c.exact_ids for c in chunks)


def test_ids_that_cannot_be_known_go_on_as_text(qwen) -> None:
    # Two tokens left out whose bytes split two ways: their ids are unknown.
    ambiguous = next(
        w
        for w in ("the", "and", "ing", "ion")
        if qwen.split_bytes(w.encode(), 2) is None
        and len(qwen.encode_text(w[:2])) == 1
        and len(qwen.encode_text(w[1:])) == 1
    )
    d = qwen.encode_text("d")
    chunks = read(qwen, [event(ambiguous + "d", d, 3), event("", [IM_END], 4)])
    assert not chunks[0].exact_ids and chunks[0].text == ambiguous + "d"
    assert chunks[1].exact_ids and chunks[1].token_ids == (IM_END,)  # exact again after it


def test_bytes_that_are_not_utf8_are_never_given_ids(qwen) -> None:
    # The model wrote b"\xe9", "a", "bc": llama-server waits while the lead byte may still
    # start a character, then sends U+FFFD for it. A split of those bytes is not the model's.
    chunks = read(qwen, [event("Hi", [HI], 1), event("\ufffdabc", qwen.encode_text("bc"), 4)])
    assert not chunks[1].exact_ids and chunks[1].text == "\ufffdabc"


def test_a_split_must_leave_each_token_inside_a_character(qwen) -> None:
    # "aé" as "a" then "é": llama-server would have sent "a" on its own, so two tokens left
    # out before "é"'s last byte cannot be "a" and "é"'s first byte.
    e_acute = "é".encode()
    first, last = (qwen.split_bytes(e_acute[:1], 1)[0], qwen.split_bytes(e_acute[1:], 1)[0])
    assert qwen.split_bytes(b"a" + e_acute[:1], 2) == (qwen.encode_text("a")[0], first)
    chunks = read(qwen, [event("aé", [last], 3)])
    assert not chunks[0].exact_ids and chunks[0].text == "aé"


def test_a_stop_token_that_completes_nothing_is_written_out_for_the_text_decoder(qwen) -> None:
    # Content held back (as llama-server does while a stop string may be starting): the
    # missing bytes are not in the event, so it goes on as text, its control token written
    # out for the decoder.
    chunks = read(qwen, [event("Hi", [HI], 1), event("", [IM_END], 3)])
    assert not chunks[1].exact_ids and chunks[1].text == "<|im_end|>"


def test_tokens_left_out_at_the_end_make_the_ids_inexact(qwen) -> None:
    # The budget ran out inside a character: its first token never came, nor its text.
    chunks = read(qwen, [event("Hi", [HI], 1), event("", [], 2, "limit")])
    assert chunks[-1].finish_reason == "length" and not chunks[-1].exact_ids


def test_a_count_that_runs_ahead_of_the_events_makes_the_ids_inexact(qwen) -> None:
    # A server that counted a whole batch of tokens before sending their events (not the
    # pinned llama-server): the ids put back at the first may be wrong, and the event that
    # shows more ids than counted marks the reply's ids as not known.
    chunks = read(qwen, [event("龘", [246], 3), event("x", qwen.encode_text("x"), 3)])
    assert not chunks[1].exact_ids and chunks[1].text == "x"


def test_servers_that_do_not_count_are_read_as_before(qwen) -> None:
    plain = [{"content": "Hi", "tokens": [HI], "stop": False},
             {"content": "", "tokens": [], "stop": True, "stop_type": "eos"}]  # fmt: skip
    chunks = read(qwen, plain)
    assert [c.token_ids for c in chunks] == [(HI,), ()] and all(c.exact_ids for c in chunks)


@st.composite
def replies(draw: st.DrawFn, tok: Any) -> tuple[str, list[int]]:
    """A reply's text and the ids a model wrote it with: each character in the vocabulary's
    own tokens or byte by byte (as models sometimes write rare characters)."""
    chars = draw(st.lists(st.sampled_from("ab 龘é𝄞😀\n中文"), min_size=1, max_size=12))
    ids: list[int] = []
    for ch in chars:
        if draw(st.booleans()):
            ids += [tok.split_bytes(bytes([b]), 1)[0] for b in ch.encode()]
        else:
            ids += tok.encode_text(ch)
    return "".join(chars), ids


@settings(max_examples=examples(0.75))
@given(data=st.data())
def test_the_text_is_always_the_models_and_the_ids_exact_where_they_can_be(qwen, data) -> None:
    text, ids = data.draw(replies(qwen))
    chunks = read(qwen, llama_server_events(qwen, ids))
    assert text_of(qwen, chunks) == text
    if all(c.exact_ids for c in chunks):
        assert [t for c in chunks for t in c.token_ids] == ids


# ==== The real server ====


@pytest.mark.slow
def test_the_real_llama_server_reply_keeps_every_id(
    qwen, qwen_tokenizer_json: Path, llama_server_binary: Path, tmp_path: Path
) -> None:
    """The pinned llama-server on a bigram model that writes "Hi龘𝄞" (the last character byte
    by byte): every id comes back, and the chat reply's text is whole, streamed or not."""
    import httpx

    from chatfmt.dialects import get_dialect
    from chatfmt.engines import SamplingParams
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app
    from tiny_gguf import write_bigram_gguf

    clef = [qwen.split_bytes(bytes([b]), 1)[0] for b in "𝄞".encode()]
    reply = [HI, *DRAGON, *clef, IM_END]
    gguf = write_bigram_gguf(tmp_path / "tiny.gguf", qwen_tokenizer_json, added={},
                             chains=[[NEWLINE, *reply]], eos_id=IM_END)  # fmt: skip
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 16}

    async def go() -> tuple[list[int], str, str]:
        engine = LlamaServerEngine(
            gguf, parallel=1, n_threads=1, n_ctx=4096, binary=llama_server_binary
        )
        try:
            prompt = get_dialect("qwen2.5").render(body["messages"], qwen).ids
            gen = await engine.generate(prompt, SamplingParams(max_tokens=16, temperature=0))
            app = create_app(engine, get_dialect("qwen2.5"), model_name="m")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
                whole = (await c.post("/v1/chat/completions", json=body)).json()
                streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
        finally:
            await engine.aclose()
        lines = streamed.text.splitlines()
        deltas = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        pieces = [d["choices"][0]["delta"].get("content") for d in deltas if d["choices"]]
        text = "".join(p or "" for p in pieces)
        return gen.token_ids, whole["choices"][0]["message"]["content"], text

    ids, whole, streamed = asyncio.run(go())
    assert ids == reply
    assert whole == streamed == "Hi龘𝄞"


def test_logprobs_of_a_character_split_over_tokens_stand_for_the_whole_character(qwen) -> None:
    """llama-server reports one entry for the event that completes a split character (its
    last token's), with the character's bytes; the entry says so, so that the text of the
    listed tokens is still the reply's."""
    dragon = "龘".encode()
    probability = {"id": DRAGON[1], "logprob": -0.75, "top_logprobs": [{"id": DRAGON[1],
                   "logprob": -0.75}]}  # fmt: skip
    hi = {"id": HI, "logprob": -0.5, "top_logprobs": [{"id": HI, "logprob": -0.5}]}
    events = [
        {**event("Hi", [HI], 1), "completion_probabilities": [hi]},
        {**event("龘", [DRAGON[1]], 3), "completion_probabilities": [probability]},
    ]
    native = NativeEvents(qwen, 1)
    chunks = [native.chunk(e) for e in events]
    entries = [e for c in chunks if c is not None for e in c.logprobs or ()]
    assert [(e.token_id, e.logprob, e.text) for e in entries] == [
        (HI, -0.5, None),
        (DRAGON[1], -0.75, dragon),
    ]
    assert [t for c in chunks if c is not None for t in c.token_ids] == [HI, *DRAGON]
    # Not asked for: none read.
    assert all(c is not None and c.logprobs is None for c in read(qwen, events))
