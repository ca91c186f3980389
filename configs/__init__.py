"""tts-knee's data, no code: Locust ``.conf`` presets, the text corpora (``texts/``) and the
protocol presets (``presets/``). A regular package, so that ``tts_knee.configs`` imports from a
clone's editable install as it does installed (setuptools' editable finder cannot find a
namespace package it maps to a folder of its own)."""
