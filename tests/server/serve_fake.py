"""A chat server over a FakeEngine (Qwen2.5's vocabulary), in a process of its own.

For latency tests: a client in the server's process would share its GIL, and so measure its
own waits as the server's. Run as ``python serve_fake.py '<ServerLimits fields as JSON>'``;
prints the port once it is accepting, and serves until terminated.
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn
from server_helpers import loopback_config  # this file's folder is on sys.path

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.server.http.limits import ServerLimits, uvicorn_options
from chatfmt.tokenizers import load_tokenizer


async def main(limits: ServerLimits) -> None:
    engine = FakeEngine(load_tokenizer("qwen2.5"), ["Hello there!<|im_end|>"])
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", limits=limits)
    server = uvicorn.Server(loopback_config(app, **uvicorn_options(limits)))
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    print(server.servers[0].sockets[0].getsockname()[1], flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main(ServerLimits(**json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))))
