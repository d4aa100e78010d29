"""Response ids and their output items bound to their creator (docs/responses-bridge.md, ownership): an
answer an upstream keeps under an id (the Responses API's, from an OpenAI Responses upstream) is recorded
in the state backend with the key and team that asked for it, by their counters (a stored key's and team's
ids, so a key or team created later under a revoked one's name owns none of it), and with the ids of its
output items; a request that continues an id (`previous_response_id`) is served only for that key or
another key of the same team, and one whose input names a stored item (`item_reference`) only when the
item was given to its tenant (its team, else its key: `state.base.tenant_of`); otherwise it is a 404
before any upstream is asked. An id with no record (never relayed by the gateway, expired, forgotten) is
unknown too.

Recording never delays a byte to the client: a stream's is scheduled for the loop's next turn when the
answer has ended (its output items are all known then), before its end is written, so a follow-up the
client sends on reading it finds the record; a shared store's write runs in the background, bounded
(`state.base.StateBackend.record_response_owner`). A request that names no item pays no lookup.
"""

from __future__ import annotations

from gateway.config.types import Deployment
from gateway.core.stream import StreamCore
from gateway.errors import ItemNotFound, ResponseNotFound
from gateway.observe.context import RequestContext
from gateway.pipeline.api import Owned
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import keeps_answers
from gateway.state.base import MAX_RESPONSE_ID_CHARS, ResponseOwner, StateBackend, tenant_of


def caller(ctx: RequestContext) -> ResponseOwner:
    """The caller as its counters name it (`ApiKey.counter`, `TeamLimits.counter`), not by its names: a
    stored key's or team's id, which a new key or team under a revoked one's name does not inherit."""
    key = ctx.key
    if key is None:
        return ResponseOwner(key=None)
    return ResponseOwner(key=key.counter, team=key.team.counter if key.team is not None else None)


async def check(state: StateBackend, owned: Owned, ctx: RequestContext) -> None:
    """Before any attempt, whatever the provider: the id the request continues, and the items it names."""
    await check_continued(state, owned, ctx)
    await check_items(state, owned, ctx)


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


async def check_items(state: StateBackend, owned: Owned, ctx: RequestContext) -> None:
    """Raises ItemNotFound for the first stored item the input names that its tenant was not given (one
    lookup for them all). Only requests that name one pay for it."""
    ids = owned.referenced(ctx.body)
    if not ids:
        return
    ids = list(dict.fromkeys(ids))  # a conversation may name one twice
    unknown = next((i for i in ids if len(i) > MAX_RESPONSE_ID_CHARS), None)  # never recorded
    if unknown is None:
        me = caller(ctx)
        unknown = await state.unowned_item(tenant_of(me.key, me.team), ids)
    if unknown is not None:
        raise ItemNotFound.named(unknown)


def record(rt: Runtime, state: StateBackend, ctx: RequestContext, owned: Owned, d: Deployment,
           response_id: str | None, items: list[str]) -> None:
    """Remember who created `response_id` and was given its output `items`, when `d`'s upstream keeps it
    (a bridge keeps nothing) and the request asked it to (`store` not false)."""
    if not response_id or len(response_id) > MAX_RESPONSE_ID_CHARS or not owned.stored(ctx.body):
        return
    if keeps_answers(rt.translator(ctx.schema, d)):
        kept = [i for i in items if len(i) <= MAX_RESPONSE_ID_CHARS]  # a longer one is unknown, unrecorded
        state.record_response_owner(response_id, caller(ctx), rt.config.state.response_owner_ttl_s, kept)


def record_streamed(rt: Runtime, state: StateBackend, ctx: RequestContext, owned: Owned,
                    opened: Opened[StreamCore]) -> None:
    """At the stream's end (`pipeline.relay.Relay`'s accounting): the held preamble (`response.created`)
    named the id, the stream its output items."""
    stream = opened.stream
    record(rt, state, ctx, owned, opened.deployment, owned.stream_id(stream), owned.stream_items(stream))
