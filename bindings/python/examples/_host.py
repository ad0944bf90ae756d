"""What the example programs do as hosts before they use the library:
pick OpenBLAS's kernels (it must happen before the library loads) and
import rlpost, from the source tree when it is not installed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def select_blas_kernels():
    """Debian's OpenBLAS 0.3.21 picks slow generic kernels on recent Xeons;
    ask for the right ones (as examples/blas_kernels.h does for the C
    programs). A host program's business, not the library's. Opt out with
    RLPOST_KEEP_BLAS=1 or by setting OPENBLAS_CORETYPE."""
    if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("RLPOST_KEEP_BLAS"):
        return
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq")):
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif "avx2" in flags and "fma" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def import_rlpost():
    """select_blas_kernels(), then the rlpost package."""
    select_blas_kernels()
    try:
        import rlpost
    except ImportError as e:
        if "rlpost" not in str(e) or "librlpost" in str(e):
            raise
        sys.path.insert(0, os.path.join(HERE, ".."))  # run from the source tree without installing
        import rlpost
    return rlpost
