"""``python -m tts_knee``: the ``tts-knee`` command (see :mod:`tts_knee.cli`)."""

import sys

from tts_knee.cli import main

sys.exit(main())
