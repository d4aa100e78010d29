"""Typed values that cross the boundary between providers, the pure cores and the I/O shell.

Providers turn upstream bytes into these; the pipeline, assembler, redaction window and retry
policy consume them. They are dataclasses with slots and no validation layer. The per-event ones
(OutputDelta, ToolCallDelta, Finish) are treated as immutable but not declared frozen: a frozen class's
constructor sets each field through `object.__setattr__`, a generic call where a plain one's compiled
constructor stores it directly (docs/compiled.md), and one is built for every upstream event.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeltaKind(StrEnum):
    """The three kinds of output text a client can read (docs/extensions.md, "Streams"; docs/extensions.md,
    "Redaction in every script" `scope`)."""

    CONTENT = "content"
    REASONING = "reasoning"
    REFUSAL = "refusal"


@dataclass(slots=True)
class OutputDelta:
    """A piece of output text for one choice. Its arrival is an *output token*."""

    choice: int
    kind: DeltaKind
    text: str

    def __init__(self, choice: int, kind: DeltaKind, text: str) -> None:  # compiled (docs/compiled.md)
        self.choice, self.kind, self.text = choice, kind, text


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of a tool call, keyed by (choice, index). Also an output token."""

    choice: int
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def __init__(self, choice: int, index: int, id: str | None = None, name: str | None = None,
                 arguments: str = "") -> None:
        self.choice, self.index, self.id, self.name, self.arguments = choice, index, id, name, arguments


@dataclass(slots=True)
class Finish:
    choice: int
    reason: str

    def __init__(self, choice: int, reason: str) -> None:
        self.choice, self.reason = choice, reason


# A token count no answer comes near (2**40, about 10**12). An upstream's larger one (JSON numbers up to
# 2**64 - 1 parse as ints) is read as this, and a negative one as 0, so that a sum of a few counts (a
# chat usage's `total_tokens`, an answer's charge with its unanswered attempts') stays inside the 64-bit
# integers the JSON encoder and the databases take: an absurd count is a bounded charge, not a crash.
MAX_TOKEN_COUNT = 2**40


def _count(n: int) -> int:
    return n if 0 <= n <= MAX_TOKEN_COUNT else (0 if n < 0 else MAX_TOKEN_COUNT)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts normalised to OpenAI semantics (docs/reference.md, "Metrics" token types), each held
    to 0..`MAX_TOKEN_COUNT`.

    `input` includes cached and cache-creation tokens; `output` includes reasoning tokens.
    """

    input: int = 0
    output: int = 0
    cached_input: int = 0
    cache_creation_input: int = 0
    reasoning: int = 0
    cache_creation_input_1h: int = 0  # the part of `cache_creation_input` written for an hour (Anthropic)

    def __init__(self, input: int = 0, output: int = 0, cached_input: int = 0, cache_creation_input: int = 0,
                 reasoning: int = 0, cache_creation_input_1h: int = 0) -> None:
        # frozen: set as the generated __init__ sets them, here compiled (docs/compiled.md)
        object.__setattr__(self, "input", _count(input))
        object.__setattr__(self, "output", _count(output))
        object.__setattr__(self, "cached_input", _count(cached_input))
        object.__setattr__(self, "cache_creation_input", _count(cache_creation_input))
        object.__setattr__(self, "reasoning", _count(reasoning))
        object.__setattr__(self, "cache_creation_input_1h", _count(cache_creation_input_1h))

    def as_openai(self, writes_reported: bool = False) -> dict[str, object]:
        """OpenAI's usage object; cache writes (which OpenAI's caches never report) as
        `prompt_tokens_details.cache_write_tokens` when there were any, or always for an answer translated
        from a provider that reports them (`writes_reported`: Anthropic, Bedrock, Google), 0 included."""
        details: dict[str, int] = {"cached_tokens": self.cached_input}
        if self.cache_creation_input or writes_reported:
            details["cache_write_tokens"] = self.cache_creation_input
        return {
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input + self.output,
            "prompt_tokens_details": details,
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        }

    def as_anthropic(self) -> dict[str, object]:
        """Anthropic's usage object: its `input_tokens` exclude cache reads and writes; it has no field for
        the reasoning part of `output_tokens`, which goes as `output_tokens_details.thinking_tokens`, where
        the Messages stream core reads it (docs/messages.md, "Usage"), so a translated reasoning model's
        thoughts (Gemini's `thoughtsTokenCount`, OpenAI's `reasoning_tokens`) count as reasoning there too."""
        out: dict[str, object] = {"input_tokens": self.input - self.cached_input - self.cache_creation_input,
                                  "output_tokens": self.output, "cache_read_input_tokens": self.cached_input,
                                  "cache_creation_input_tokens": self.cache_creation_input}
        if self.reasoning:
            out["output_tokens_details"] = {"thinking_tokens": self.reasoning}
        return out

    def as_responses(self) -> dict[str, object]:
        """The Responses API's `ResponseUsage`: input includes cached tokens and cache writes, output
        includes reasoning; `input_tokens_details.cache_write_tokens` is always there, as OpenAI's own
        usage object has it (docs/caching.md)."""
        return {
            "input_tokens": self.input,
            "input_tokens_details": {"cached_tokens": self.cached_input,
                                     "cache_write_tokens": self.cache_creation_input},
            "output_tokens": self.output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning},
            "total_tokens": self.input + self.output,
        }


class FailureKind(StrEnum):
    """Why an upstream attempt failed. Providers classify from structured fields only."""

    CONNECT = "connect_error"  # could not connect / connection reset before a response
    HTTP_429 = "http_429"  # rate limited by status
    HTTP_5XX = "http_5xx"  # 5xx, 408, 409: transient server side
    HTTP_4XX = "http_4xx"  # other client errors: passed through, never retried
    UPSTREAM_AUTH = "upstream_auth"  # 401/403 from upstream: our credentials, not the client's: next
    CONTEXT_LENGTH = "context_length"  # context_length_exceeded: next deployment, never same
    QUOTA = "quota"  # insufficient_quota / billing: next deployment, never same
    INBAND = "inband_error"  # an error event inside an HTTP 200 stream
    EARLY_EOF = "early_eof"  # stream ended before any token / before a terminal signal
    MALFORMED = "malformed"  # an event or body we cannot parse, or over the size limit
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    STREAM_REJECTED = "stream_rejected"  # upstream refuses `stream: true` (learn once)
    STREAM_OPTIONS_REJECTED = "stream_options_rejected"  # upstream refuses stream_options
    CACHE_KEY_REJECTED = "prompt_cache_key_rejected"  # upstream refuses OpenAI's prompt_cache_key (learn once)
    NOT_FOUND = "upstream_not_found"  # the deployment has no such endpoint or model: next deployment
    EMPTY = "empty_answer"  # a clean end with no output at all: the next deployment may answer


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, classified. `message` is client-safe: no URL, address or key."""

    kind: FailureKind
    message: str
    status: int | None = None  # upstream HTTP status, when there was one
    code: str | None = None  # provider's error code (string form)
    type: str | None = None  # provider's error type
    param: str | None = None
    retry_after_s: float | None = None  # from Retry-After / retry-after-ms / error body

    @property
    def is_timeout(self) -> bool:
        return self.kind in (
            FailureKind.FIRST_TOKEN_TIMEOUT,
            FailureKind.IDLE_TIMEOUT,
            FailureKind.TOTAL_TIMEOUT,
        )


@dataclass(frozen=True, slots=True)
class InbandError:
    """An error reported inside a 200 stream; the provider has already classified it."""

    failure: Failure


StreamEvent = OutputDelta | ToolCallDelta | Finish | Usage | InbandError


def last_usage(events: list[StreamEvent]) -> Usage | None:
    """The last `Usage` of `events` (a body's, or what a provider's parser read): None without one."""
    for e in reversed(events):
        if type(e) is Usage:
            return e
    return None


class StreamFailed(Exception):
    """A stream core met a failure in the upstream's bytes (an in-band error before the first token, an
    event too large). The shell treats it as the failed read it is: before the commit the attempt fails
    (`core.policy.retry` decides), after it the stream ends with one error event."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure
