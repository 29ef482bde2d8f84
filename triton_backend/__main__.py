"""``python -m triton_backend`` is ``fusion-compile``."""
import sys

from triton_backend.cli import main

sys.exit(main())
