"""Whether the broker still carries our messages, told by our own reports coming back.

A broker that is frozen (SIGSTOP, a stuck JVM, a full GC, a partitioned disk)
keeps its TCP connections open: the Pulsar client goes on saying "connected",
sends simply never complete and nothing is delivered. Every daemon subscribes to
the topic it publishes on, so each report we publish comes back to us within a
delivery time; one that has not come back within `deadline` means the topic is
not carrying messages, whatever the socket says. The same rule covers a publish
that is never acknowledged (it never comes back either) and a consumer that
stopped receiving.

What the daemon does with the answer: while the broker does not answer, it is
an outage like a lost connection (not ready, `rgd_broker_connected` 0). Its
limits hold until its lease ends, then it admits nothing until peers acknowledge
it again (docs/design/protocol.md, P4); `heard_at`, the last time one of our
reports came back, is what the "nothing heard" part of the reason reports.

Pure bookkeeping (no I/O, no clock of its own): the daemon tells it what it
published and what came back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["ECHO_DEADLINE_MIN_S", "BrokerLiveness", "echo_deadline"]

ECHO_DEADLINE_MIN_S = 0.5  # below this, scheduling noise on a busy machine would read as an outage
MAX_OUTSTANDING = 256  # reports awaiting their echo we keep track of (the oldest matter; see `published`)


def echo_deadline(tick_seconds: float) -> float:
    """How long a report may take to come back: a tick and a half, at least
    ECHO_DEADLINE_MIN_S. A report is published every tick and checked at the next ones, so a
    frozen broker is still known within two ticks; the extra half tick is the margin for a
    busy machine, whose tick loop runs late and whose inbox is drained late. With exactly a
    tick there was none: on a loaded 2-core CI machine a late drain read as an outage, and a
    daemon stopped in that moment skipped its leaving report."""
    return max(ECHO_DEADLINE_MIN_S, 1.5 * tick_seconds)


@dataclass
class BrokerLiveness:
    deadline: float
    heard_at: float  # when our own report last came back (or the session opened)
    _outstanding: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=MAX_OUTSTANDING))

    def reset(self, now: float) -> None:
        """A new session: nothing is awaited, and it counts as heard from now (a session
        that just opened has exchanged messages with the broker)."""
        self._outstanding.clear()
        self.heard_at = now

    def published(self, sequence: int, now: float) -> None:
        """We are about to publish report `sequence`. When more than MAX_OUTSTANDING wait,
        the oldest is forgotten; the remaining oldest is then at most that many reports
        younger, still far past the deadline in an outage."""
        self._outstanding.append((sequence, now))

    def echoed(self, sequence: int, now: float) -> None:
        """Our report `sequence` came back. Reports are delivered in order, so any earlier one
        still awaited was lost (non-persistent topic) and is no longer awaited either."""
        self.heard_at = now
        while self._outstanding and self._outstanding[0][0] <= sequence:
            self._outstanding.popleft()

    def unresponsive(self, now: float) -> str | None:
        """Why the broker counts as not answering now, or None when it answers."""
        if not self._outstanding:
            return None
        sequence, at = self._outstanding[0]
        waited = now - at
        if waited <= self.deadline:
            return None
        return (f"report {sequence} published {waited:.1f} s ago has not come back "
                f"(deadline {self.deadline:.1f} s); nothing heard from the topic for {now - self.heard_at:.1f} s")
