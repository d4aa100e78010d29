"""The request's row in the spend ledger (docs/keys-teams-spend.md), crash-safe before its last byte is written:
in the ledger's journal (SQLite: no wait), else committed (the request waits for its group commit).

Called once per request, where the answer's end is known and the last write is next: a stream's end
(before its terminator), a cache hit, and for whole responses by the middleware before the body leaves.
Without a store it does nothing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache

from gateway.observe.context import RequestContext
from gateway.observe.record import stream_outcome
from gateway.pipeline.ids import SPEND_ROW_IDS
from gateway.pipeline.runtime import Runtime
from gateway.store.types import SpendRow


async def commit_spend(rt: Runtime, ctx: RequestContext, outcome: str | None = None) -> None:
    """`outcome` None: a stream's, from how it ended (`ctx.stream_error`)."""
    control = rt.control
    if control is None or ctx.spend_recorded:
        return
    ctx.spend_recorded = True
    if outcome is None:
        outcome = stream_outcome(ctx.stream_error)
    row = spend_row(ctx, outcome, time.time())
    if row.team is not None:
        ctx.rec.team_spend(row.team, row.model, row.cost_usd)
    ledger = control.ledger
    if not ledger.journaled(row):  # crash-safe in the journal: nothing to wait for
        await ledger.record(row)


def spend_row(ctx: RequestContext, outcome: str, now: float) -> SpendRow:
    u = ctx.usage
    key = ctx.key
    d = ctx.deployment
    # positional, in SpendRow's field order: keywords cost a named tuple's __new__ over a µs a request
    return SpendRow(
        SPEND_ROW_IDS.new(), ctx.request_id, now, _utc_day(int(now // 86400)),
        key.name if key is not None else None,
        key.team.name if key is not None and key.team is not None else None,
        ctx.model.name, d.label if d is not None else _unanswered_on(ctx), ctx.api, outcome,
        u.input if u else 0, u.output if u else 0, u.cached_input if u else 0,
        u.cache_creation_input if u else 0, u.reasoning if u else 0, ctx.cost_usd,
        key.id if key is not None else None, key.subject if key is not None else None,
        key.team.id if key is not None and key.team is not None else None,
    )


def _unanswered_on(ctx: RequestContext) -> str | None:
    """A request no attempt answered: the deployment of the last that billed it (`pipeline.unanswered`)."""
    return ctx.unanswered[-1].deployment if ctx.unanswered else None


@lru_cache(maxsize=2)
def _utc_day(days: int) -> str:
    """YYYY-MM-DD of a UTC day (days since the epoch): formatted once a day, not per request."""
    return datetime.fromtimestamp(days * 86400, UTC).strftime("%Y-%m-%d")
