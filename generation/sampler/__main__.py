"""``python -m generation.sampler``: the sampler process (started by ``Sampler.start``)."""

from __future__ import annotations

import sys

from .process import child_main

if __name__ == "__main__":
    sys.exit(child_main())
