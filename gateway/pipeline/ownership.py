"""Response ids bound to their creator (docs/responses-bridge.md, ownership): an answer an upstream keeps
under an id (the Responses API's, from an OpenAI Responses upstream) is recorded in the state backend
with the key and team that asked for it, by their counters (a stored key's and team's ids, so a key or
team created later under a revoked one's name owns none of it); a request that continues an id
(`previous_response_id`) is served only for that key or another key of the same team, and is otherwise
a 404 before any upstream is asked. An id with no record (never relayed by the gateway, expired,
forgotten) is unknown too.

Recording never delays a byte to the client: the stream's is scheduled for the loop's next turn at the
commit (the first token is written first), and a shared store's write runs in the background, bounded
(`state.base.StateBackend.record_response_owner`).
"""

from __future__ import annotations

from gateway.config.types import Deployment
from gateway.core.stream import StreamCore
from gateway.errors import ResponseNotFound
from gateway.observe.context import RequestContext
from gateway.pipeline.api import Owned
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import keeps_answers
from gateway.state.base import MAX_RESPONSE_ID_CHARS, ResponseOwner, StateBackend


def caller(ctx: RequestContext) -> ResponseOwner:
    """The caller as its counters name it (`ApiKey.counter`, `TeamLimits.counter`), not by its names: a
    stored key's or team's id, which a new key or team under a revoked one's name does not inherit."""
    key = ctx.key
    if key is None:
        return ResponseOwner(key=None)
    return ResponseOwner(key=key.counter, team=key.team.counter if key.team is not None else None)


async def check_continued(state: StateBackend, owned: Owned, ctx: RequestContext) -> None:
    """Raises ResponseNotFound unless the id the request continues was created by this caller's key
    or team. Only requests that name one pay for the lookup."""
    response_id = owned.continued(ctx.body)
    if response_id is None:
        return
    owner = await state.response_owner(response_id) if len(response_id) <= MAX_RESPONSE_ID_CHARS else None
    me = caller(ctx)
    if owner is None or not owner.admits(me.key, me.team):
        raise ResponseNotFound.named(response_id, owned_by_another=owner is not None)


def record(rt: Runtime, state: StateBackend, ctx: RequestContext, owned: Owned, d: Deployment,
           response_id: str | None) -> None:
    """Remember who created `response_id`, when `d`'s upstream keeps it (a bridge keeps nothing) and
    the request asked it to (`store` not false)."""
    if not response_id or len(response_id) > MAX_RESPONSE_ID_CHARS or not owned.stored(ctx.body):
        return
    if keeps_answers(rt.translator(ctx.schema, d)):
        state.record_response_owner(response_id, caller(ctx), rt.config.state.response_owner_ttl_s)


def record_streamed(rt: Runtime, state: StateBackend, ctx: RequestContext, owned: Owned,
                    opened: Opened[StreamCore]) -> None:
    """At the commit the held preamble (`response.created`) has named the id."""
    record(rt, state, ctx, owned, opened.deployment, owned.stream_id(opened.stream))
