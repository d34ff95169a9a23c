"""Where a lake's Iceberg tables are: its catalog (SQLite by default, or ``_tiering/lake.json``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fluss_spark.errors import FlussError

TIERING_DIR = "_tiering"
LAKE_FILE = "lake.json"
LAKE_FILE_VERSION = 1
CATALOG_NAME = "fluss_lake"

_NAME = re.compile(r"[A-Za-z0-9_\-]+")


class LakeError(FlussError):
    """A lake table is missing, foreign, corrupt, or belongs to another table or query."""


class CommitConflict(LakeError):
    """Another writer committed the lake table between this round's read and its commit."""

def default_catalog_properties(lake_root: str | Path) -> dict[str, str]:
    """The embedded default: SQLite catalog and local warehouse inside the lake directory."""
    root = Path(lake_root).absolute()
    return {"type": "sql", "uri": f"sqlite:///{root / TIERING_DIR / 'catalog.db'}",
            "warehouse": root.as_uri()}


_SECRET = re.compile(r"secret|password|token|credential|session", re.IGNORECASE)
#: pyiceberg's environment variables of the lake's catalog (``PYICEBERG_CATALOG__<NAME>__<KEY>``).
ENV_PREFIX = f"PYICEBERG_CATALOG__{CATALOG_NAME.upper()}__"


def is_secret(key: str) -> bool:
    """Whether a catalog property holds a secret (it comes from the environment only)."""
    return bool(_SECRET.search(key))


def env_variable(key: str) -> str:
    """The environment variable of catalog property ``key``: ``s3.secret-access-key`` ->
    ``PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY``."""
    return ENV_PREFIX + key.replace(".", "__").replace("-", "_").upper()


def env_properties(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The catalog properties in ``PYICEBERG_CATALOG__FLUSS_LAKE__*`` variables, read now.

    Read here, not by pyiceberg: pyiceberg reads its variables once, at import, and turns the
    ``_`` of the catalog name into ``-`` too (``fluss-lake``), so it never finds this catalog's.
    The key is mapped as pyiceberg maps it (``__`` -> ``.``, ``_`` -> ``-``, lower case)."""
    env = os.environ if environ is None else environ
    return {k[len(ENV_PREFIX):].lower().replace("__", ".").replace("_", "-"): v
            for k, v in env.items() if k.upper().startswith(ENV_PREFIX)}


def write_lake_file(lake_root: str | Path, catalog: dict[str, str]) -> None:
    """Record the lake's catalog (without secrets) so readers of the lake find it."""
    secret = sorted(k for k in catalog if is_secret(k))
    if secret:
        raise LakeError(f"catalog properties {', '.join(secret)} look secret: pass them as "
                        f"{ENV_PREFIX}<NAME> environment "
                        "variables, not as options")
    d = Path(lake_root) / TIERING_DIR
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{LAKE_FILE}.tmp"
    tmp.write_text(json.dumps({"version": LAKE_FILE_VERSION, "catalog": catalog},
                              sort_keys=True))
    tmp.replace(d / LAKE_FILE)


def catalog_properties(lake_root: str | Path) -> dict[str, str]:
    """The catalog of a lake: ``_tiering/lake.json`` (versions: **1** ``{version, catalog}``),
    else the embedded default."""
    p = Path(lake_root) / TIERING_DIR / LAKE_FILE
    if not p.exists():
        return default_catalog_properties(lake_root)
    try:
        doc = json.loads(p.read_text())
        if doc.get("version") != LAKE_FILE_VERSION:
            raise LakeError(f"{p} has version {doc.get('version')!r}; upgrade fluss_spark")
        return {str(k): str(v) for k, v in doc["catalog"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise LakeError(f"{p} is corrupt ({e}); fix or remove it (the default is the SQLite "
                        "catalog in _tiering/catalog.db)") from None


_CATALOGS: dict[tuple, Any] = {}


def connection_properties(lake_root: str | Path,
                          properties: dict[str, str] | None = None) -> dict[str, str]:
    """What opens the lake's catalog: its recorded properties (or ``properties``) over those of
    the ``PYICEBERG_CATALOG__FLUSS_LAKE__*`` variables (the secrets)."""
    return {**env_properties(), **(properties or catalog_properties(lake_root))}


def open_catalog(lake_root: str | Path, properties: dict[str, str] | None = None):
    """The pyiceberg catalog of a lake (one per process and lake: it holds a connection pool)."""
    from pyiceberg.catalog import load_catalog
    props = connection_properties(lake_root, properties)
    key = (str(Path(lake_root).absolute()), tuple(sorted(props.items())))
    cat = _CATALOGS.get(key)
    if cat is None:
        if props.get("type") == "sql" and str(props.get("uri", "")).startswith("sqlite:///"):
            Path(props["uri"][len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        try:
            cat = load_catalog(CATALOG_NAME, **props)
        except Exception as e:  # noqa: BLE001 - pyiceberg raises many kinds here
            raise LakeError(f"cannot open the Iceberg catalog of lake {lake_root} "
                            f"({type(e).__name__}: {e}); check its catalog properties") from None
        _CATALOGS[key] = cat
    return cat


def identifier(table: str) -> tuple[str, str]:
    """Fluss ``db.name`` -> Iceberg (namespace, name)."""
    parts = table.split(".")
    if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
        raise LakeError(f"table name {table!r} is not db.name (letters, digits, _ and -)")
    return parts[0], parts[1]


def table_dir(lake_root: str | Path, table: str) -> Path:
    """Where the lake copy of ``db.name`` lives with a local warehouse: ``<lake>/<db>/<name>``."""
    return Path(lake_root).joinpath(*identifier(table))


def find_lake_root(path: str | Path) -> Path:
    """The lake directory above a table directory (the one holding ``_tiering``)."""
    p = Path(path).absolute()
    for d in (p, *p.parents):
        if (d / TIERING_DIR).is_dir():
            return d
    raise LakeError(f"{path} is not inside a lake directory (no {TIERING_DIR}/ above it); "
                    "run the tiering job first")


__all__ = ["CATALOG_NAME", "ENV_PREFIX", "LAKE_FILE", "TIERING_DIR", "CommitConflict",
           "LakeError", "catalog_properties", "connection_properties", "default_catalog_properties",
           "env_properties", "env_variable", "find_lake_root", "identifier", "is_secret",
           "open_catalog", "table_dir", "write_lake_file"]
