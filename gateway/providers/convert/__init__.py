"""Conversions the translators share: Chat Completions <-> Anthropic Messages (requests, streams,
bodies), each in one place; a translator file (`providers/<api>_<type>.py`) is one cell of the matrix."""
