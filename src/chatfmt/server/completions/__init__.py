"""The small endpoints beside chat: OpenAI's legacy ``/v1/completions`` (a text or token-id
prompt, no chat template), ``/detokenize`` and ``/v1/chat/render``."""
