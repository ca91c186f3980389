"""``python -m testbed.sim``: see :mod:`testbed.sim`."""
import sys

from testbed.sim import main

sys.exit(main())
