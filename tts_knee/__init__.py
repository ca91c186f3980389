"""The ``tts-knee`` command: one entry point for the load run, the report, the collector and
the simulator (see :mod:`tts_knee.cli`). It only dispatches: each subcommand is the part's own
command line, loaded when asked for, so ``tts-knee report`` never imports Locust."""
