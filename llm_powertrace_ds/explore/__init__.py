"""The interactive explorer: a self-contained static site for any LLM-PowerTrace dataset.

``build_site(DIR, SITE)`` writes a catalog of runs, a zoomable run page, a compare view and a
sweep view, drawn with BokehJS (shipped inside the ``bokeh`` Python package, the ``explore``
extra). See :mod:`llm_powertrace_ds.explore.site` for the layout of the folder.
"""

from .site import SiteReport, build_site

__all__ = ["SiteReport", "build_site"]
