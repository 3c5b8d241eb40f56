"""Public sources: recipes, checked resumable downloads, safe unpacking, provenance, ``get``.

See :mod:`.get` for the road from a recipe to a loaded dataset folder; :mod:`.provenance` for
what a folder records of its sources (licence, citation, URL, digests).
"""
