"""Unique ids without a system call each: 16 random hex digits drawn once per process (again in a
forked worker), then a counter. As unique as uuid4's 32 digits for what they name, without its
`getrandom` per id."""

from __future__ import annotations

import itertools
import os


class ProcessIds:
    def __init__(self, counter_digits: int) -> None:
        assert counter_digits % 2 == 0, "the counter is written as whole bytes in hex (2^(4 * digits) ids)"
        self._bytes = counter_digits // 2
        self.renew()
        os.register_at_fork(after_in_child=self.renew)

    def renew(self) -> None:
        self.prefix, self.next = os.urandom(8).hex(), itertools.count().__next__

    def new(self) -> str:
        # `to_bytes().hex()`, not `format(n, "016x")`: the same digits, without the format-spec machinery's
        # code on a request's first step (issue #34: a cold hop's cost is the code it runs)
        return self.prefix + self.next().to_bytes(self._bytes, "big").hex()


REQUEST_IDS = ProcessIds(16)  # `x-request-id` when the client sent none usable
SPEND_ROW_IDS = ProcessIds(12)  # the spend ledger's row ids (a retried batch never counts twice)
