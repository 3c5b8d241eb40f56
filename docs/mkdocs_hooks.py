"""MkDocs hook: code fences tagged for the documentation tests render as plain code.

``tests/test_readme.py`` runs the blocks whose fence reads ```` ```bash test```` or
```` ```python test````. GitHub colours them by their first word; Python-Markdown's fenced-code
extension does not accept a second word, so this hook drops `` test`` before the page is
rendered (mkdocs ``hooks:`` in ``mkdocs.yml``).
"""

from __future__ import annotations

import re
from typing import Any

_TESTED_FENCE = re.compile(r"^(\s*```)(bash|python) test[ \t]*$", re.M)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Return the page's Markdown with ``bash test``/``python test`` fences as ``bash``/``python``."""
    return _TESTED_FENCE.sub(r"\1\2", markdown)
