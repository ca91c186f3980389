"""Inference slots handed to waiters first-come, first-served: the simulator's capacity
(:mod:`testbed.sim.capacity`) and each stage of a pipeline (:mod:`testbed.sim.stages`) hold them."""

from __future__ import annotations

from collections import deque

from gevent.event import Event


class Slots:
    """``n`` inference slots (None: unlimited) handed to waiters strictly first-come,
    first-served."""

    def __init__(self, n: int | None):
        self.n = n
        self.busy = 0
        self._waiters: deque[Event] = deque()

    @property
    def free(self) -> int | None:
        return None if self.n is None else self.n - self.busy

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def acquire(self) -> None:
        if self.n is None or (self.busy < self.n and not self._waiters):
            self.busy += 1
            return
        turn = Event()
        self._waiters.append(turn)
        try:
            turn.wait()
        except BaseException:
            if turn.is_set():  # handed a slot while being killed: pass it on
                self.release()
            else:
                self._waiters.remove(turn)
            raise

    def release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the slot passes straight to the next in line
        else:
            self.busy -= 1
