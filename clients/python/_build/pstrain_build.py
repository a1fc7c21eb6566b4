"""A PEP 517 build backend for the pstrain client, standard library only.

It writes a pure-Python wheel (the `pstrain` package, its metadata and RECORD) and an sdist; the
version and description come from pyproject.toml. There is nothing to compile, so nothing else is
needed: pip builds it offline, with build isolation, from an empty requirement list.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "pstrain"
TAG = "py3-none-any"


def _project():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    section = text.split("[project]", 1)[1]
    field = lambda name: re.search(r'^%s\s*=\s*"([^"]*)"' % name, section, re.M).group(1)
    return field("name"), field("version"), field("description"), field("requires-python")


def _metadata():
    name, version, description, requires = _project()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {description}\n"
            f"Requires-Python: {requires}\nLicense: Apache-2.0\n"
            "Provides-Extra: numpy\nProvides-Extra: pandas\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _package_files():
    base = os.path.join(ROOT, PACKAGE)
    for directory, _, files in os.walk(base):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(directory, f)
                yield path, os.path.relpath(path, ROOT).replace(os.sep, "/")


def _dist_info():
    name, version, _, _ = _project()
    return f"{name}-{version}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _, _ = _project()
    wheel_name = f"{name}-{version}-{TAG}.whl"
    info = _dist_info()
    records = []

    def add(zf, arcname, data):
        zf.writestr(zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0)), data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        records.append(f"{arcname},sha256={digest},{len(data)}")

    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in _package_files():
            add(zf, arcname, open(path, "rb").read())
        add(zf, f"{info}/METADATA", _metadata().encode())
        add(zf, f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: pstrain_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode())
        records.append(f"{info}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{name}-{version}"
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "_build/pstrain_build.py"] + [a for _, a in _package_files()]:
            tf.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tf.addfile(ti, io.BytesIO(pkg_info))
    return os.path.basename(out)
