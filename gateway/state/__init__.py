"""Shared state: rate limits, token reservations, budgets and the response cache (see base.py)."""

from gateway.state.base import LimitDecision, Period, Reservation, StateBackend, create_backend
from gateway.state.cache_key import cache_key
from gateway.state.memory import MemoryBackend

__all__ = [
    "LimitDecision",
    "MemoryBackend",
    "Period",
    "Reservation",
    "StateBackend",
    "cache_key",
    "create_backend",
]
