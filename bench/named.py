"""What bench/stream_locustfile.py, session_locustfile.py and grpc_locustfile.py share: tts-knee's
real TTSUser whose records also carry ``sim_request_id``, the id its transport's latest request
gave the simulator, so the simulator's ``--chunk-log`` can be joined to the records."""

from tts_knee.locustfiles import attempt, user as user_mod  # the module: Locust runs every User class it sees


def named_user(request_id, make_transport=None):
    """A TTSUser class whose records carry ``request_id(transport)``; ``make_transport(caller)``
    (None: the caller's own) makes the transport that sends the id."""

    class NamedCaller(attempt.Caller):
        def __init__(self, user, no: int):
            super().__init__(user, no)
            if make_transport is not None:
                self.transport.close()
                self.transport = make_transport(self)

        def _attempt(self, *args):
            out = super()._attempt(*args)
            out.record["sim_request_id"] = request_id(self.transport)
            return out

    class NamedAttemptUser(user_mod.TTSUser):
        def on_start(self) -> None:
            super().on_start()
            self.caller.close()
            self.caller = NamedCaller(self, self.no)

    return NamedAttemptUser
