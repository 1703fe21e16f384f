"""Entry point: ``python3 -m bench.peers [--quick] [--ops ...] [--out-dir DIR]``."""

import sys

from bench.peers.cli import main

sys.exit(main())
