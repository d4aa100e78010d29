"""A scripted OpenAI-compatible upstream with a prompt cache per deployment, for the session-affinity tests.

Each upstream model name is one deployment with a cache of its own. Like a provider's prompt cache
(Anthropic's cache breakpoints, OpenAI's automatic prefix caching), a deployment writes an entry for the
prefixes a coding agent marks: the end of the system prompt (the same for every session of the agent,
so shared across sessions) and the end of each request. A request reads, as cached input, the longest
prefix of its messages that this deployment has an entry for, and nothing that only another deployment
has seen. A token is a character of message content, to keep the arithmetic plain.

`failing` names deployments that answer 503 (an overloaded upstream) until they are taken out of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.loopback_app import serve_on_loopback


def _key(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(messages)


@dataclass
class Served:
    deployment: str
    input_tokens: int
    cached_tokens: int


@dataclass
class CachingUpstream:
    cache: dict[str, set[bytes]] = field(default_factory=dict)  # deployment -> prefixes it has seen
    served: list[Served] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, self.port = await serve_on_loopback(app)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        deployment, messages = body["model"], body["messages"]
        if deployment in self.failing:
            return web.json_response({"error": {"message": "Overloaded", "type": "server_error", "code": None}},
                                     status=503)
        sizes = [len(m["content"]) for m in messages]
        seen = self.cache.setdefault(deployment, set())
        cached = max((sum(sizes[:k]) for k in range(1, len(messages) + 1) if _key(messages[:k]) in seen), default=0)
        seen.update((_key(messages[:1]), _key(messages)))  # the system prompt's end and the request's end
        self.served.append(Served(deployment, sum(sizes), cached))
        return web.json_response({
            "id": "chatcmpl-cache", "object": "chat.completion", "created": 0, "model": deployment,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": sum(sizes), "completion_tokens": 1, "total_tokens": sum(sizes) + 1,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        })
