"""ukjax's compiled C++ kernels: built once per machine and source with the system's C++
compiler (`CXX`, default `g++`) into `~/.cache/ukjax/kernels` (`XDG_CACHE_HOME` moves it), and
registered as XLA FFI targets for the CPU; all but `M` and `Q` alone also with CUDA's compiler
for an NVIDIA GPU (`built_cuda`), where JAX runs on one. Which programs call them is the
backends' choice (`_backend`); `UKJAX_KERNELS=0` at import makes `AutoBackend` choose XLA.

- `_robots/kernels.cc`: the U-K solve of a rigid-body tree (`_robots/kernels.py`), its `M`
  and `Q` alone, and its contact dynamics in given modes (`kernels.in_modes`), built for chunks
  of `LANES` states and for one, and (all but `M` and `Q`) for a GPU; and the contact solve at
  fixed modes alone (`_unilateral.solve_modes`), built for one lane and for a GPU.
- `_contact_solve.h`: the linear algebra of a contact solve at fixed modes, host and device
  code, which `kernels.cc` includes.
"""

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import jax

_NATIVE = Path(__file__).with_name("native")
_SOURCES = (_NATIVE / "kernels.cc",)  # one unit; the headers beside it, which it includes
# `C` and `TAIL` in kernels.cc: a batch runs in chunks of `LANES` states, what is left in chunks
# of `TAIL`, to which it is padded (`benchmarks/arm_batches.py`). One state runs on a build of
# one lane.
LANES = 32
TAIL = 8
CONTACT_SOLVE = "ukjax_contact_solve"
# a tree's acceleration with its limits and plane contacts in given modes (`kernels.in_modes`)
TREE_CONTACTS = "ukjax_tree_contacts"
# the work space of a GPU's build (and of the CPU's build of one lane in the GPU's layout), at
# most: slices past the batch at which a GPU's throughput stops growing (`benchmarks/gpu.py`)
SPACE = 1 << 31
# `AutoBackend`'s default, read once at import: `UKJAX_KERNELS=0` keeps it on XLA (a machine
# without a C++ compiler, or the routes compared from the command line).
KERNELS_DEFAULT = os.environ.get("UKJAX_KERNELS", "1") != "0"


def _cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ukjax/kernels` (default `~/.cache/...`), or a directory of this process's
    own where that cannot be written."""
    directory = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ukjax" / "kernels"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return Path(tempfile.mkdtemp(prefix="ukjax-kernels-"))
    return directory


def _processor() -> str:
    # `-march=native` ties the library to this kind of processor: a cache shared between
    # machines keeps one build per kind
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line
    except OSError:
        pass
    return platform.processor()


def _build(compiler: str, command: list[str], sources: tuple[Path, ...], variants: dict[str, list[str]], identity: str):
    """The libraries that `command` builds from `sources`, one per variant (its extra flags), in
    the cache (built there once per machine, sources and their header, JAX and command), loaded."""
    text = "\0".join(source.read_text() for source in (*sources, *sorted(_NATIVE.glob("*.h"))))
    key = hashlib.sha256("\0".join([text, jax.__version__, " ".join(command), identity]).encode()).hexdigest()[:16]
    directory = _cache_dir()
    libraries = {name: directory / f"kernels-{key}-{name}.so" for name in variants}
    if not all(library.exists() for library in libraries.values()):
        print(f"ukjax: compiling its kernels with {compiler}, once, into {directory} ...", file=sys.stderr, flush=True)
        # built aside and renamed into place: processes building at once never load half a file
        with tempfile.TemporaryDirectory(dir=directory) as scratch:
            builds = {
                name: subprocess.Popen(
                    [*command, *flags, *(str(source) for source in sources), "-o", str(Path(scratch) / libraries[name].name)],
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for name, flags in variants.items()
            }
            for name, build in builds.items():
                _, errors = build.communicate()  # read while waiting: a full pipe would stall it
                if build.returncode:
                    raise subprocess.CalledProcessError(build.returncode, command, stderr=errors)
                os.replace(Path(scratch) / libraries[name].name, libraries[name])
    return {name: ctypes.cdll.LoadLibrary(str(library)) for name, library in libraries.items()}


def _reason(error: Exception) -> str:
    if isinstance(error, subprocess.CalledProcessError):
        return (error.stderr or "").strip()[-1000:] or f"exit status {error.returncode}"
    return str(error)


@functools.cache
def built() -> bool:
    """Build the CPU kernels (once per machine, source, JAX and compiler), for chunks of `LANES`
    states and for one, and register them as FFI targets; False, with a warning that says why,
    where that fails."""
    compiler = os.environ.get("CXX", "g++")
    command = [compiler, "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", f"-I{jax.ffi.include_dir()}"]
    try:
        handles = _build(
            compiler,
            command,
            _SOURCES,
            {str(lanes): [f"-DUKJAX_LANES={lanes}"] for lanes in (LANES, 1)},
            f"{platform.machine()} {_processor()}",
        )
    except (OSError, subprocess.CalledProcessError) as error:
        warnings.warn(
            f"ukjax could not build its kernels with {compiler!r} ({_reason(error)}). Robot trees and contact "
            "solves run on the XLA route, several times slower and longer to compile; set CXX to a "
            "C++17 compiler, or pass backend=ukjax.XLABackend() (UKJAX_KERNELS=0 before importing ukjax) to choose the XLA route.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    for lanes in (LANES, 1):
        jax.ffi.register_ffi_target(tree_target(lanes), jax.ffi.pycapsule(handles[str(lanes)].UkTree), platform="cpu")
        jax.ffi.register_ffi_target(
            dynamics_target(lanes), jax.ffi.pycapsule(handles[str(lanes)].UkTreeDynamics), platform="cpu"
        )
    jax.ffi.register_ffi_target(CONTACT_SOLVE, jax.ffi.pycapsule(handles["1"].UkContactSolve), platform="cpu")
    jax.ffi.register_ffi_target(TREE_CONTACTS, jax.ffi.pycapsule(handles["1"].UkTreeContacts), platform="cpu")
    return True


@functools.cache
def built_cuda() -> bool:
    """Build the tree kernel, its contact dynamics and the contact solve for this machine's
    NVIDIA GPU with CUDA's compiler (`NVCC`, default `nvcc` on the path or in
    `/usr/local/cuda/bin`), once per GPU model, source and JAX, and register them for the CUDA
    platform under the targets of the CPU's build of one lane, whose layout they share; False,
    with one warning that says why, where that fails (the XLA route runs)."""
    compiler = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    command = [
        compiler,
        "-O3",
        "-std=c++17",
        "-arch=native",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-x",
        "cu",
        "-DUKJAX_CUDA",
        f"-I{jax.ffi.include_dir()}",
    ]
    try:
        device = jax.devices("gpu")[0]
        if "rocm" in device.client.platform_version.lower():
            raise OSError(f"the GPU is not an NVIDIA one ({device.client.platform_version})")
        handles = _build(compiler, command, _SOURCES, {"cuda": []}, device.device_kind)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        warnings.warn(
            f"ukjax could not build its kernels for this GPU with {compiler!r} ({_reason(error)}). "
            "Robot trees and contact solves run on the XLA route there; set NVCC to CUDA's compiler.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    jax.ffi.register_ffi_target(tree_target(1), jax.ffi.pycapsule(handles["cuda"].UkTreeCuda), platform="CUDA")
    jax.ffi.register_ffi_target(TREE_CONTACTS, jax.ffi.pycapsule(handles["cuda"].UkTreeContactsCuda), platform="CUDA")
    jax.ffi.register_ffi_target(CONTACT_SOLVE, jax.ffi.pycapsule(handles["cuda"].UkContactSolveCuda), platform="CUDA")
    return True


def built_for(platform: str) -> bool:
    """Whether the kernels are built (built first where needed) for `platform`, `"cpu"` or
    `"gpu"` as `jax.default_backend()` names them; False on any other platform."""
    builds = {"cpu": built, "gpu": built_cuda}
    return platform in builds and builds[platform]()


def tree_target(lanes: int) -> str:
    """The tree kernel's FFI target for chunks of `lanes` states."""
    return f"ukjax_tree_{lanes}"


def dynamics_target(lanes: int) -> str:
    """The FFI target of the tree kernel's `M` and `Q` alone, for chunks of `lanes` states (CPU)."""
    return f"ukjax_tree_dynamics_{lanes}"


def targets() -> list[str]:
    """The kernels' FFI targets, registered in this process for the CPU and, where JAX runs on
    an NVIDIA GPU, for it (built first where needed; none where they do not build): a kept
    executable with calls to them (`_cache.read_program`) runs in a process where they are
    registered."""
    if not KERNELS_DEFAULT:
        return []
    names = []
    if built():
        names = [tree_target(LANES), tree_target(1), dynamics_target(LANES), dynamics_target(1), CONTACT_SOLVE, TREE_CONTACTS]
    if jax.default_backend() == "gpu" and built_cuda():
        names += [name for name in (tree_target(1), TREE_CONTACTS, CONTACT_SOLVE) if name not in names]
    return names

