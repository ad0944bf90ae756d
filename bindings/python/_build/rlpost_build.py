"""PEP 517 backend of the rlpost package: `pip install bindings/python`
builds librlpost with the repository's own meson build and puts the
shared object into the wheel next to the package (rlpost/librlpost.so.0),
which rlpost/_ffi.py loads first (RLPOST_LIBRARY still overrides).

Why a small in-tree backend and not meson-python: the package is pure
ctypes and needs exactly one built file, the library of the parent meson
project. meson-python wants a meson project at the pyproject root (here a
second project reaching the library through a subproject link out of its
own tree), installs whatever that project installs (headers, pkg-config and
CMake files, the static library) and moves shared objects into a
`.rlpost.mesonpy.libs` folder that ctypes would then have to be taught to
search. This backend runs `meson setup` + `ninja` on the repository root
with everything but the library switched off, copies one file, and writes
the wheel with the standard library: no build requirement is fetched from
PyPI (`requires = []`; tomli only on Python < 3.11), so it also works
offline. It uses the `meson` and `ninja` that building librlpost needs
anyway (README's apt line).

Config settings (`pip install --config-settings KEY=VALUE`, or the
environment variable in brackets):
  library=PATH      (RLPOST_WHEEL_LIBRARY)    bundle this prebuilt librlpost.so
                                              instead of building one
  setup-args=ARGS   (RLPOST_WHEEL_SETUP_ARGS) extra `meson setup` options,
                                              split on spaces (e.g. -Dcuda=enabled)
  builddir=DIR      (RLPOST_WHEEL_BUILDDIR)   keep the meson build folder there
                                              (reused by the next install)
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: pyproject.toml lists tomli for these
    import tomli as tomllib

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python
PACKAGE = "rlpost"
WORKER_NAME = "rlpost-reward-worker"  # rlp_reward_fn_create_isolated's worker process
LIB_NAME = "librlpost.so.0"  # the SONAME; rlpost/_ffi.py tries it first next to the package
# Only the library: the package needs nothing else, and building tests,
# examples and the CUDA module would multiply the install time. werror is
# off so that a compiler newer than the project's CI cannot fail an install
# over a new warning (the project's own builds keep it on).
MESON_ARGS = ["-Dtests=false", "-Dexamples=false", "-Dpython=false", "-Dcuda=disabled", "-Dnccl=disabled",
              "-Dmicrohttpd=disabled", "-Dwerror=false"]


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _setting(settings, key, env):
    value = (settings or {}).get(key)
    if value is None:
        value = os.environ.get(env) or None
    return value


def _repository():
    """The librlpost source tree that holds this bindings folder."""
    root = os.path.dirname(os.path.dirname(HERE))
    build = os.path.join(root, "meson.build")
    if os.path.isfile(build) and os.path.isfile(os.path.join(root, "include", "rlpost.h")):
        with open(build, encoding="utf-8") as f:
            if re.search(r"project\(\s*'librlpost'", f.read()):
                return root
    raise RuntimeError(
        "rlpost: cannot build librlpost: %s is not inside a librlpost source tree (its meson.build and "
        "include/rlpost.h two folders up). Install from a clone (`pip install bindings/python`; pip >= 21.3 "
        "builds in place), or bundle a built library: pip install --config-settings library=PATH/librlpost.so "
        "(or RLPOST_WHEEL_LIBRARY=PATH)." % HERE)


def _run(cmd):
    sys.stderr.write("rlpost build: %s\n" % " ".join(cmd))
    # pip's isolated build environment points PYTHONPATH at a sitecustomize
    # that hides the system's site-packages; meson is a Python program of
    # the system's and must see its own modules
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE")}
    r = subprocess.run(cmd, stdout=sys.stderr, env=env)
    if r.returncode != 0:
        raise RuntimeError("rlpost: `%s` failed (exit %d); librlpost needs the packages of the README's "
                           "apt-get line (meson, ninja-build, libopenblas-dev, libjansson-dev, "
                           "libpcre2-dev, libicu-dev, libcurl4-openssl-dev)" % (" ".join(cmd), r.returncode))


def _build_library(settings, workdir):
    """Path of a librlpost shared object to bundle."""
    prebuilt = _setting(settings, "library", "RLPOST_WHEEL_LIBRARY")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise RuntimeError("rlpost: library=%s: no such file" % prebuilt)
        return os.path.realpath(prebuilt)
    root = _repository()
    meson = shutil.which("meson")
    ninja = shutil.which("ninja") or shutil.which("ninja-build")
    if not meson or not ninja:
        raise RuntimeError("rlpost: building librlpost needs meson and ninja on PATH "
                           "(apt-get install meson ninja-build, or pip install meson ninja)")
    builddir = _setting(settings, "builddir", "RLPOST_WHEEL_BUILDDIR") or os.path.join(workdir, "meson-build")
    extra = (_setting(settings, "setup-args", "RLPOST_WHEEL_SETUP_ARGS") or "").split()
    if os.path.isfile(os.path.join(builddir, "build.ninja")):
        _run([meson, "setup", "--reconfigure", builddir, root] + MESON_ARGS + extra)
    else:
        _run([meson, "setup", builddir, root] + MESON_ARGS + extra)
    _run([ninja, "-C", builddir])
    lib = os.path.join(builddir, "lib", LIB_NAME)
    if not os.path.exists(lib):
        raise RuntimeError("rlpost: the meson build produced no %s" % lib)
    return os.path.realpath(lib)


def _worker_beside(lib):
    """The worker process of RewardFn.isolated built beside the library
    (lib/rlpost-reward-worker, RUNPATH $ORIGIN), or None (a prebuilt
    library=PATH without one). librlpost looks for it next to itself."""
    path = os.path.join(os.path.dirname(lib), WORKER_NAME)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _dist_name():
    return re.sub(r"[-_.]+", "_", _project()["name"]).lower()


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"]]
    if "description" in p:
        lines.append("Summary: %s" % p["description"])
    if "license" in p and "text" in p["license"]:
        lines.append("License: %s" % p["license"]["text"])
    if "requires-python" in p:
        lines.append("Requires-Python: %s" % p["requires-python"])
    lines += ["Classifier: %s" % c for c in p.get("classifiers", [])]
    lines += ["Requires-Dist: %s" % d for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: %s" % extra)
        lines += ['Requires-Dist: %s ; extra == "%s"' % (d, extra) for d in deps]
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str) and os.path.isfile(os.path.join(HERE, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _tag():
    # ctypes loads the library: any Python 3, no CPython ABI, one platform
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "py3-none-" + plat


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: rlpost_build\nRoot-Is-Purelib: false\nTag: %s\n" % _tag()


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, dist_info):
        record = dist_info + "/RECORD"
        self.record.append(record + ",,")
        self.zip.writestr(zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0)),
                          "\n".join(self.record) + "\n")
        self.zip.close()


def _write_wheel(wheel_directory, files, metadata_directory=None):
    p = _project()
    dist_info = "%s-%s.dist-info" % (_dist_name(), p["version"])
    name = "%s-%s-%s.whl" % (_dist_name(), p["version"], _tag())
    w = _Wheel(os.path.join(wheel_directory, name))
    for arcname, data, mode in files:
        w.add(arcname, data, mode)
    w.add(dist_info + "/METADATA", _metadata().encode())
    w.add(dist_info + "/WHEEL", _wheel_file().encode())
    w.add(dist_info + "/top_level.txt", (PACKAGE + "\n").encode())
    w.close(dist_info)
    return name


def _package_files():
    pkg = os.path.join(HERE, PACKAGE)
    out = []
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                out.append(("%s/%s" % (PACKAGE, fn), f.read(), 0o644))
    return out


# ---- PEP 517 hooks --------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _prepare_metadata(metadata_directory):
    # pip asks for the metadata first (to resolve dependencies): answer it
    # from pyproject.toml, without building the library for it
    p = _project()
    dist_info = "%s-%s.dist-info" % (_dist_name(), p["version"])
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(metadata_directory, dist_info, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return dist_info


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory(prefix="rlpost-wheel-") as work:
        lib = _build_library(config_settings, work)
        with open(lib, "rb") as f:
            data = f.read()
        files = _package_files() + [("%s/%s" % (PACKAGE, LIB_NAME), data, 0o755)]
        worker = _worker_beside(lib)
        if worker:
            with open(worker, "rb") as f:
                files.append(("%s/%s" % (PACKAGE, WORKER_NAME), f.read(), 0o755))
        return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: the package is imported from bindings/python (a .pth file);
    the library is built and copied next to the sources (git-ignored), where
    _ffi finds it as it would in an installed wheel."""
    with tempfile.TemporaryDirectory(prefix="rlpost-wheel-") as work:
        lib = _build_library(config_settings, work)
        dest = os.path.join(HERE, PACKAGE, LIB_NAME)
        shutil.copyfile(lib, dest + ".tmp")
        os.chmod(dest + ".tmp", 0o755)
        os.replace(dest + ".tmp", dest)
        worker = _worker_beside(lib)
        if worker:
            wdest = os.path.join(HERE, PACKAGE, WORKER_NAME)
            shutil.copyfile(worker, wdest + ".tmp")
            os.chmod(wdest + ".tmp", 0o755)
            os.replace(wdest + ".tmp", wdest)
    return _write_wheel(wheel_directory, [("__editable__.rlpost.pth", (HERE + "\n").encode(), 0o644)])


def build_sdist(sdist_directory, config_settings=None):
    # an sdist of this folder alone could not build the library, whose
    # sources are the rest of the repository: say so instead of producing one
    raise RuntimeError("rlpost: no sdist of the bindings alone; install from the librlpost repository "
                       "(pip install bindings/python) or from a wheel built there (pip wheel bindings/python)")
