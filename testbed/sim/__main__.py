"""``python -m testbed.sim``: see :mod:`testbed.sim`."""
import sys

from tts_knee.testbed.sim import main

sys.exit(main())
