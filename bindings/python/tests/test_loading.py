"""Finding the library (RLPOST_LIBRARY, next to the package, the system
loader), refusing an incompatible major version, and `pip install`.
Each case imports rlpost in a fresh interpreter."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rlpost
from rlpost import _ffi

from conftest import HERE

PACKAGE = HERE.parent / "rlpost"


def _run(code, env_changes, cwd=None):
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def _copy_package(dest):
    shutil.copytree(PACKAGE, dest / "rlpost", ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    return dest


def _real_library():
    return os.path.realpath(_ffi.library_path)


def test_version_check_accepts_the_same_major():
    _ffi.check_version(_ffi.EXPECTED_MAJOR * 10000 + 7 * 100 + 3, _ffi.EXPECTED_ABI, "x")
    assert rlpost.version_number() // 10000 == _ffi.EXPECTED_MAJOR
    assert rlpost.version_string() == "%d.%d.%d" % (rlpost.version_number() // 10000,
                                                    rlpost.version_number() // 100 % 100,
                                                    rlpost.version_number() % 100)
    assert rlpost.abi_version() == _ffi.EXPECTED_ABI


def test_version_check_refuses_another_major():
    with pytest.raises(ImportError, match=r"version 1\.2\.3 \(major 1\).*major version 0"):
        _ffi.check_version(10203, _ffi.EXPECTED_ABI, "/x/librlpost.so")
    with pytest.raises(ImportError, match="ABI version 5"):
        _ffi.check_version(_ffi.EXPECTED_MAJOR * 10000, 5, "/x/librlpost.so")


def test_import_refuses_a_library_of_another_major(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build a fake librlpost 1.2.3")
    src = tmp_path / "fake.c"
    src.write_text('unsigned rlp_version_number(void) { return 10203; }\n'
                   'unsigned rlp_abi_version(void) { return 1; }\n'
                   'const char *rlp_version_string(void) { return "1.2.3"; }\n')
    lib = tmp_path / "librlpost.so.1"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    r = _run("import rlpost", {"RLPOST_LIBRARY": str(lib), "PYTHONPATH": str(HERE.parent)})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "version 1.2.3 (major 1)" in r.stderr, r.stderr
    assert str(lib) in r.stderr and "written for major version 0" in r.stderr


def test_rlpost_library_that_cannot_load_is_an_import_error(tmp_path):
    r = _run("import rlpost", {"RLPOST_LIBRARY": str(tmp_path / "nothing.so"), "PYTHONPATH": str(HERE.parent)})
    assert r.returncode != 0 and "RLPOST_LIBRARY=%s cannot be loaded" % (tmp_path / "nothing.so") in r.stderr


def test_library_next_to_the_package(tmp_path):
    pkg = _copy_package(tmp_path)
    copy = pkg / "rlpost" / ("librlpost.so.%d" % _ffi.EXPECTED_ABI)
    shutil.copy(_real_library(), copy)
    r = _run("import rlpost; print(rlpost.library_path); print(rlpost.version_string())",
             {"RLPOST_LIBRARY": None, "PYTHONPATH": str(pkg)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(copy)
    assert r.stdout.split()[1] == rlpost.version_string()


def test_library_from_the_system_loader(tmp_path):
    pkg = _copy_package(tmp_path)
    libdir = os.path.dirname(_real_library())
    r = _run("import rlpost; print(rlpost.library_path)",
             {"RLPOST_LIBRARY": None, "PYTHONPATH": str(pkg), "LD_LIBRARY_PATH": libdir}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.path.dirname(r.stdout.strip()) == libdir


def test_no_library_anywhere(tmp_path):
    pkg = _copy_package(tmp_path)
    probe = _run("import ctypes.util; print(ctypes.util.find_library('rlpost'))",
                 {"LD_LIBRARY_PATH": None}, cwd=tmp_path)
    if probe.stdout.strip() != "None":
        pytest.skip("a librlpost is installed system-wide here")
    r = _run("import rlpost", {"RLPOST_LIBRARY": None, "PYTHONPATH": str(pkg), "LD_LIBRARY_PATH": None},
             cwd=tmp_path)
    assert r.returncode != 0 and "librlpost not found" in r.stderr and "RLPOST_LIBRARY" in r.stderr


def test_pip_install_bundles_the_library(tmp_path):
    """The wheel carries librlpost next to the package and loads it without
    RLPOST_LIBRARY. The bindings folder is copied alone, so the backend is
    given the library just built (library=...) instead of building one; the
    meson test pip_install (suite 'install') runs the real `pip install
    bindings/python` in a fresh venv from a clean copy of the repository."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed")
    if sys.version_info < (3, 11) and importlib.util.find_spec("tomli") is None:
        pytest.skip("the build backend needs tomli on Python < 3.11 (no network here)")
    src = tmp_path / "src"
    shutil.copytree(HERE.parent, src, ignore=shutil.ignore_patterns("__pycache__", "tests", "examples", "*.so*"))
    target = tmp_path / "site"
    env = dict(os.environ, RLPOST_WHEEL_LIBRARY=_real_library())
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                        "--disable-pip-version-check", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "rlpost" / "_ffi.py").is_file()
    bundled = target / "rlpost" / ("librlpost.so.%d" % _ffi.EXPECTED_ABI)
    assert bundled.is_file()
    r = _run("import rlpost, sys; print(rlpost.__file__); print(rlpost.library_path); print(rlpost.version_string())",
             {"PYTHONPATH": str(target), "RLPOST_LIBRARY": None, "LD_LIBRARY_PATH": None}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[0].startswith(str(target)) and Path(out[0]).parent.name == "rlpost"
    assert out[1] == str(bundled)
    assert out[2] == rlpost.version_string()
    # RLPOST_LIBRARY still wins over the bundled copy
    r = _run("import rlpost; print(rlpost.library_path)",
             {"PYTHONPATH": str(target), "RLPOST_LIBRARY": _real_library()}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == _real_library()


def test_public_names():
    ns = {}
    exec("from rlpost import *", ns)
    assert all(name in ns for name in rlpost.__all__)
    assert ns.get("TimeoutError", TimeoutError) is TimeoutError  # a star import never hides a built-in
    assert issubclass(rlpost.TimeoutError, TimeoutError) and rlpost.TimeoutError is not TimeoutError
