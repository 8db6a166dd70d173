"""A PEP 517 build backend for portcullis-sdk, standard library only.

Why not setuptools: the SDK has no dependencies, and its build should have
none either. With setuptools, `pip install ./sdk/python` needs setuptools
and wheel from the package index (or, offline, both preinstalled and
--no-build-isolation); this backend needs nothing, so installing from a
checkout works offline, in any venv, on any Python the SDK supports. It
builds exactly one pure-Python package (portcullis/) described by the
[project] table of pyproject.toml: a wheel (PEP 427), an sdist (PEP 517),
and an editable wheel (PEP 660, a .pth file).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "portcullis"
SDIST_FILES = ("pyproject.toml", "README.md", "build_backend/portcullis_build.py")
# Reproducible archives: a fixed time unless SOURCE_DATE_EPOCH says otherwise.
_EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))


def _project() -> Dict[str, object]:
    """The [project] table of pyproject.toml (tomllib where Python has it,
    else the small subset of TOML this file uses)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        return _subset_toml(raw.decode("utf-8"))["project"]
    return tomllib.loads(raw.decode("utf-8"))["project"]


def _subset_toml(text: str) -> Dict[str, Dict[str, object]]:
    """Tables of `key = "string"`, `key = []` / `["a", "b"]` and
    `key = { text = "..." }`: what pyproject.toml holds. Anything else is
    an error, never a guess."""
    out: Dict[str, Dict[str, object]] = {}
    table: Optional[Dict[str, object]] = None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", line)
        if m:
            table = out.setdefault(m.group(1), {})
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*(.+)', line)
        if not m or table is None:
            raise ValueError("pyproject.toml line %d: not understood: %s" % (n, line))
        key, val = m.group(1), m.group(2).strip()
        if re.fullmatch(r'"[^"\\]*"', val):
            table[key] = val[1:-1]
        elif re.fullmatch(r'\[\s*("[^"\\]*"\s*(,\s*"[^"\\]*"\s*)*,?)?\s*\]', val):
            table[key] = re.findall(r'"([^"\\]*)"', val)
        elif re.fullmatch(r'\{\s*text\s*=\s*"[^"\\]*"\s*\}', val):
            table[key] = {"text": re.search(r'"([^"\\]*)"', val).group(1)}
        else:
            raise ValueError("pyproject.toml line %d: value not understood: %s" % (n, val))
    return out


def _names() -> Tuple[str, str]:
    p = _project()
    name, version = str(p["name"]), str(p["version"])
    return re.sub(r"[-_.]+", "_", name).lower(), version


def _metadata() -> bytes:
    p = _project()
    lic = p.get("license")
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % p["name"],
        "Version: %s" % p["version"],
        "Summary: %s" % p.get("description", ""),
        "Requires-Python: %s" % p.get("requires-python", ">=3"),
        "License: %s" % (lic.get("text", "") if isinstance(lic, dict) else lic or ""),
    ]
    for dep in p.get("dependencies", []) or []:
        lines.append("Requires-Dist: %s" % dep)
    readme = p.get("readme")
    body = ""
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _package_files() -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed")):
                out.append(os.path.relpath(os.path.join(dirpath, fn), ROOT).replace(os.sep, "/"))
    return out


def _dist_info(extra: Dict[str, bytes]) -> Dict[str, bytes]:
    return dict(extra, **{
        "METADATA": _metadata(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: portcullis_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "top_level.txt": (PACKAGE + "\n").encode(),
    })


def _write_wheel(wheel_directory: str, files: Dict[str, bytes]) -> str:
    dist, version = _names()
    info = "%s-%s.dist-info" % (dist, version)
    for k, v in _dist_info({}).items():
        files[info + "/" + k] = v
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
    record.append("%s/RECORD,," % info)
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s-py3-none-any.whl" % (dist, version)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            zi = zipfile.ZipInfo(arc, time.gmtime(max(_EPOCH, 315532800))[:6])
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


# --- PEP 517 / 660 hooks ------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist, version = _names()
    info = "%s-%s.dist-info" % (dist, version)
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for k, v in _dist_info({}).items():
        with open(os.path.join(metadata_directory, info, k), "wb") as f:
            f.write(v)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for rel in _package_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            files[rel] = f.read()
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    dist, _ = _names()
    return _write_wheel(wheel_directory, {"%s.pth" % dist: (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    dist, version = _names()
    base = "%s-%s" % (dist, version)
    name = base + ".tar.gz"

    def add(t: tarfile.TarFile, arc: str, data: bytes) -> None:
        ti = tarfile.TarInfo("%s/%s" % (base, arc))
        ti.size, ti.mtime, ti.mode = len(data), _EPOCH, 0o644
        t.addfile(ti, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in list(SDIST_FILES) + _package_files():
            with open(os.path.join(ROOT, rel), "rb") as f:
                add(t, rel, f.read())
        add(t, "PKG-INFO", _metadata())
    return name
