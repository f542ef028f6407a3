"""Record formats (``records/``) and table contracts (``tables/``) as data.

This directory stays at the top of the repository, where readers look for it, and is
installed as the package ``pipelines.schemas`` (see ``[tool.setuptools]`` in
pyproject.toml), so the wheel, an editable install and a zip shipped with
``--py-files`` all carry it. Code reads it only through :mod:`importlib.resources`
(:func:`pipelines.decode.formats.schema_files`), never through a path relative to a checkout.
"""
