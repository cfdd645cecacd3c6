"""What is kept between processes: JAX's compiled programs (its persistent cache), and for the
command line's `simulate`, `coordinated` and `scara` their compiled simulations (and the models
`simulate` reads from files), each under a key of all that makes it, so that the same command
run again starts at once.

This module imports neither the engine nor equinox nor diffrax: a command that finds its
program here runs it before the engine is imported (half a second of a start).
"""

import functools
import hashlib
import importlib.metadata
import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np


def cache_directory() -> Path | None:
    """`$UKJAX_CACHE_DIR`, else `$XDG_CACHE_HOME/ukjax/jax`, else `~/.cache/ukjax/jax`; None
    where `UKJAX_CACHE_DIR` is empty (nothing kept)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = os.environ.get("UKJAX_CACHE_DIR", str(base / "ukjax" / "jax"))
    return Path(directory) if directory else None


def compilation_cache(directory: str | os.PathLike | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache, so that a program compiled once is read
    back by the next process that needs it (the command line and the benchmarks do this).

    **Arguments:**

    - `directory`: where the compiled programs go (default: `cache_directory()`).

    **Returns:**

    The directory, or None where the cache stays off.
    """
    directory = cache_directory() if directory is None else Path(directory)
    if directory is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    # the many small programs (a projection, a shape query) are worth keeping too
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return directory


@functools.cache
def _identity() -> str:
    """ukjax's own code (its modules and its kernels' source), the versions it runs on and the
    processor and device it compiles for: what an earlier process kept under another identity
    is not read back."""
    from .._backends._build import _processor

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parents[1].rglob("*")):  # the whole package's code
        if path.suffix in (".py", ".cc", ".h"):
            digest.update(path.read_bytes())
    for name in ("jax", "jaxlib", "diffrax", "equinox", "mujoco"):
        digest.update(f"{name} {importlib.metadata.version(name)}".encode())
    device = jax.devices()[0]
    digest.update(f"{_processor()} {device.platform} {device.device_kind}".encode())
    return digest.hexdigest()


def _path(cache: Path, folder: str, name: str, key: tuple) -> Path:
    digest = hashlib.sha256(repr((key, jax.config.jax_enable_x64, _identity())).encode())
    return cache / folder / f"{name}-{digest.hexdigest()[:32]}.pickle"


def _write(path: Path, data: bytes) -> None:
    """`data` to `path`, whole or not at all to a run beside this one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}")
    part.write_bytes(data)
    part.replace(path)


def read_file(file: str):
    """MuJoCo's compiled model of an MJCF or URDF `file` (milliseconds), its kind, and a digest
    of its compiled binary, which an edit of the file or of any file it includes changes.

    **Returns:**

    `(compiled, kind, digest)`: the `mujoco.MjModel`, `"MJCF"` or `"URDF"`, a hex string.
    """
    import mujoco

    from .._robots.mjmodel import compile_model

    kind = "URDF" if file.lower().endswith(".urdf") else "MJCF"
    compiled = compile_model(file, kind)
    binary = np.empty(mujoco.mj_sizeModel(compiled), np.uint8)
    mujoco.mj_saveModel(compiled, None, binary)
    return compiled, kind, hashlib.sha256(binary.tobytes()).hexdigest()


def kept_model(cache: Path | None, file: str, keyframe: str | int | None, read: tuple | None = None):
    """The model of an MJCF or URDF `file` from `keyframe` (`from_mjcf`'s or `from_urdf`'s),
    kept in `cache` under the key of MuJoCo's compiled binary of the file and read back by a
    later run, not the start projected onto the loops and the model built anew. The first
    reading's warnings are said again on every run. `read`: the file's `read_file`, where the
    caller has it (the file is not compiled again)."""
    from .._robots.mjcf import _from_compiled

    compiled, kind, digest = read_file(file) if read is None else read
    if cache is None:
        return _from_compiled(compiled, kind, keyframe)
    path = _path(cache, "ukjax-models", Path(file).stem, (kind, keyframe, digest))
    if path.exists():
        model, said = pickle.loads(path.read_bytes())
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = _from_compiled(compiled, kind, keyframe)
        said = [(w.category, str(w.message)) for w in caught]
        _write(path, pickle.dumps((model, said)))
    for category, message in said:
        warnings.warn(message, category, stacklevel=2)
    return model


def read_program(cache: Path | None, name: str, key: tuple):
    """A compiled program and the arguments to call it with that `keep_program` kept under
    `key`, read back without tracing or importing the engine; None where there is none.

    **Returns:**

    `(program, args)`, `program(*args)` runs it; or None.
    """
    if cache is None or not (path := _path(cache, "ukjax-programs", name, key)).exists():
        return None
    from jax.experimental.serialize_executable import deserialize_and_load

    from .._backends import _build as _native

    _native.targets()  # the kernels' targets the program calls
    payload, inputs, outputs, args, lapack = pickle.loads(path.read_bytes())
    if lapack:
        # jaxlib finds its LAPACK routines where a program that calls them is first lowered
        # (the targets are registered on import without them): a program read back would call
        # a null routine
        jax.jit(jax.lax.linalg.cholesky).lower(np.eye(1))
    return deserialize_and_load(payload, inputs, outputs), args


def keep_program(cache: Path | None, name: str, key: tuple, fun: Callable, args: tuple, *, events: bool = False):
    """`fun` compiled for `args`, kept with them in `cache` under `key` for `read_program`.

    **Arguments:**

    - `cache`: where programs are kept, or None: nothing kept, `fun` is jitted.
    - `name`: the program's name, for its file.
    - `key`: the values (`repr`'d) that `fun` and `args` are made of, besides ukjax's code,
      the versions it runs on and the device.
    - `fun`: returns a pytree of dicts, lists and arrays.
    - `args`: arrays.
    - `events`: whether `fun` runs the event-driven path (its compiler options).

    **Returns:**

    `(program, args)`: `program(*args)` runs it.
    """
    from .._jit import compiler_options, jit

    if cache is None:
        return jit(fun, events=events), args
    from jax.experimental.serialize_executable import serialize

    options = compiler_options(events)
    args = tuple(np.asarray(x) for x in args)
    hits = []

    def listen(event: str, **_) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    jax.monitoring.register_event_listener(listen)
    try:
        program = jax.jit(fun).lower(*args).compile(compiler_options=options)
    finally:
        jax.monitoring.unregister_event_listener(listen)
    # An executable that JAX's persistent cache read back serializes without its compiled
    # functions (jaxlib 0.10, CPU), and a run of it fails: only one compiled here is kept (the
    # command line leaves JAX's cache off for the commands that keep their programs here).
    if not hits:
        lapack = "lapack_" in program.as_text()
        _write(_path(cache, "ukjax-programs", name, key), pickle.dumps((*serialize(program), args, lapack)))
    return program, args
