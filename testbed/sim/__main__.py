"""``python -m tts_knee.testbed.sim``, which ``tts-knee sim`` is: see :mod:`tts_knee.testbed.sim`."""

import sys

from tts_knee.testbed.sim import main

sys.exit(main())
