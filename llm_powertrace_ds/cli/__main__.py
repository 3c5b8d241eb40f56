"""``python -m llm_powertrace_ds.cli``: the same as the ``llm-powertrace`` command."""

import sys

from . import main

sys.exit(main())
