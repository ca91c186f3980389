"""tts-knee, installed as one package: its parts are subpackages, each a folder at the top of
the repository (``tts_knee.locustfiles`` is ``locustfiles/``, and so on).

The ``tts-knee`` command (:mod:`tts_knee.cli`) is one entry point for the load run, the report,
the collector and the simulator. It only dispatches: each subcommand is the part's own command
line, loaded when asked for, so ``tts-knee report`` never imports Locust."""
