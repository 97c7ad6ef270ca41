"""A clock of named facts, for models whose flags are questions about order.

A model marks what happened ("poll", "step_end", "reset") and stamps its own records with
``tick()``; a flag such as "has the manager polled since this step began?" is then a
comparison of two times, computed when asked, never a boolean kept up to date.
"""

from __future__ import annotations

from bisect import bisect_right

from attrs import define, field

NEVER = 0                    # the time of what has not happened: the clock starts at 1


@define
class Timeline:
    now: int = NEVER
    times: dict[str, list[int]] = field(factory=dict)    # per fact, ascending

    def tick(self) -> int:
        """Advance the clock: every stamp is distinct, so any two events are ordered."""
        self.now += 1
        return self.now

    def mark(self, fact: str) -> None:
        self.times.setdefault(fact, []).append(self.tick())

    def last(self, fact: str) -> int:
        return self.times.get(fact, [NEVER])[-1]

    def first_after(self, fact: str, time: int) -> int | None:
        """When the fact first happened after ``time``; None if it has not (yet)."""
        times = self.times.get(fact, [])
        i = bisect_right(times, time)
        return times[i] if i < len(times) else None
