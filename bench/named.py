"""What bench/stream_locustfile.py, session_locustfile.py and grpc_locustfile.py share: tts-knee's
real TTSUser whose records also carry ``sim_request_id``, the id its transport's latest request
gave the simulator, so the simulator's ``--chunk-log`` can be joined to the records."""

from collections.abc import Callable
from typing import Any

from tts_knee.locustfiles import attempt, user as user_mod  # the module: Locust runs every User class it sees
from tts_knee.locustfiles.transports import Ask, Transport


def named_user(
    request_id: Callable[[Any], str | None], make_transport: Callable[[attempt.Caller], Transport] | None = None
) -> type[user_mod.TTSUser]:
    """A TTSUser class whose records carry ``request_id(transport)`` (the transport
    ``make_transport`` makes, whose own attribute it reads: hence Any); ``make_transport(caller)``
    (None: the caller's own) makes the transport that sends the id."""

    class NamedCaller(attempt.Caller):
        def __init__(self, user: user_mod.TTSUser, no: int) -> None:
            super().__init__(user, no)
            if make_transport is not None:
                self.transport.close()
                self.transport = make_transport(self)

        def _attempt(self, words: str, ask: Ask, sent: dict[str, Any] | None) -> attempt.Attempt:
            out = super()._attempt(words, ask, sent)
            out.record["sim_request_id"] = request_id(self.transport)
            return out

    class NamedAttemptUser(user_mod.TTSUser):
        def on_start(self) -> None:
            super().on_start()
            self.caller.close()
            self.caller = NamedCaller(self, self.no)

    return NamedAttemptUser
