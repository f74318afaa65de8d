"""HTTP plumbing shared by the APIs and the web chat: JSON bodies and authentication
(:mod:`.bodies`), OpenAI-shaped errors (:mod:`.errors`), server-sent events, disconnects and the
one in-stream error path (:mod:`.sse`), what one request or client may take (:mod:`.limits`,
:mod:`.protocol`) and the published schema (:mod:`.openapi`). Nothing here knows an API."""
