"""Where the JSON schemas offsetlake ships are: ``schemas/records`` and ``schemas/tables``.

Why a module of its own: both the decoder (record formats) and the lake (table contracts)
read these files, and neither should import the other to find them. It sits below every
package and imports nothing of ``pipelines``.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

# schemas/ at the top of the repository, installed as this package (pyproject.toml): read
# through importlib.resources, so a wheel, an editable install and a --py-files zip all work.
SCHEMAS_PACKAGE = "pipelines.schemas"


class MissingSchemas(RuntimeError):
    """The record formats or table contracts the package ships are not there (a broken
    install or build). Raised before any work: decoding without them would call every
    record ``unknown_type`` and exit 0."""


def schema_dir(kind: str) -> Traversable:
    """``schemas/<kind>`` (``records`` or ``tables``) as shipped inside the package."""
    try:
        root = resources.files(SCHEMAS_PACKAGE)
    except ModuleNotFoundError as exc:
        raise MissingSchemas(f"the package {SCHEMAS_PACKAGE} is not installed beside pipelines "
                             "(a build without schemas/): reinstall offsetlake") from exc
    return root / kind


def schema_files(directory: Traversable) -> list[Traversable]:
    """The ``*.json`` files of ``directory`` sorted by name; MissingSchemas when there are none."""
    if not directory.is_dir():
        raise MissingSchemas(f"{directory} is missing: offsetlake was built or installed without "
                             "its schemas (reinstall it; a build must include pipelines.schemas)")
    files = sorted((f for f in directory.iterdir() if f.is_file() and f.name.endswith(".json")),
                   key=lambda f: f.name)
    if not files:
        raise MissingSchemas(f"{directory} holds no *.json files: offsetlake was built or "
                             "installed without its schemas (reinstall it)")
    return files
