"""What a sandbox allows: the ``Sandbox`` settings, what is always hidden, which variables pass.

Values only (and the one look at the environment that says where the user's secrets are):
the mechanisms (``bwrap.py``, ``_landlock_exec.py``) turn them into rules.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from tether.paths import default_locations, oauth_dir

SandboxMode: TypeAlias = Literal["auto", "bwrap", "landlock", "none"]
MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "landlock", "none")

# The user's secrets under $HOME: keys, cloud and cluster credentials, tokens.
HOME_SECRETS: tuple[str, ...] = (
    ".ssh", ".gnupg", ".aws", ".config/gcloud", ".azure", ".kube", ".docker", ".netrc",
    ".git-credentials", ".pypirc",
    # Tokens other tools keep: GitHub's CLI, package registries, clouds, vaults.
    ".config/gh", ".config/hub", ".npmrc", ".yarnrc.yml", ".cargo/credentials",
    ".cargo/credentials.toml", ".gem/credentials", ".terraform.d", ".vault-token",
    ".config/op", ".oci", ".config/rclone", ".pgpass", ".my.cnf",
    # Stores of passwords and sessions: keyrings, browsers' profiles, shells' histories.
    ".password-store", ".local/share/keyrings", ".mozilla", ".config/google-chrome",
    ".config/chromium", ".bash_history", ".zsh_history", ".python_history",
    ".psql_history", ".mysql_history",
)

# What a command that does not read everything reads of the system: programs, libraries,
# configuration (/etc; /run's resolver only, as /etc/resolv.conf may point there: the rest
# of /run holds sockets such as Docker's).
SYSTEM_READ: tuple[str, ...] = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
    "/run/systemd/resolve", "/nix", "/home/linuxbrew/.linuxbrew",
)

# What a confined command inherits of tether's environment (plus ``Sandbox.env``).
ALLOWED_ENV: tuple[str, ...] = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How a tool's commands are confined.

    ``mode``: ``"auto"`` (the first mechanism that works here: bubblewrap, then Landlock),
    ``"bwrap"``, ``"landlock"``, or ``"none"`` (no sandbox, only when asked for).
    ``network``: whether the command may open connections. ``read``: more paths it may read
    (everything but the hidden secrets is readable already); ``write``: paths it may write
    besides the workspace (and a private ``/tmp``). ``env``: names of more environment
    variables it gets, beyond ``ALLOWED_ENV`` and ``LC_*``. ``hide``: more paths hidden as
    the user's secrets are (the configuration hands a server tether's own files this way).
    ``read_all``: it reads everything but what is hidden (the shell); ``False`` (a stdio
    server's default): only the system's folders (``SYSTEM_READ``), its own program (the
    installation its executable and path arguments are in), its working folder, ``read``
    and ``write``.

    >>> Sandbox(network=True, write=("~/.cache/pip",))  # doctest: +SKIP
    """

    mode: SandboxMode = "auto"
    network: bool = False
    read: Sequence[str | Path] = ()
    write: Sequence[str | Path] = ()
    env: Sequence[str] = field(default_factory=tuple)
    hide: Sequence[str | Path] = ()
    read_all: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            # A leaf cannot raise ConfigError's callers' way; ValueError names the choices.
            raise ValueError(f"sandbox mode {self.mode!r}: choose one of {', '.join(MODES)}")
        for name in ("read", "write", "env", "hide"):
            value = getattr(self, name)
            if isinstance(value, str | Path):
                value = (value,)
            object.__setattr__(self, name, tuple(value))


def expand(paths: Sequence[str | Path]) -> tuple[str, ...]:
    """Absolute, ``~``-expanded, symlink-resolved paths (a mount or a rule names the real
    place), in order, without repeats."""
    out: dict[str, None] = {}
    for p in paths:
        out[str(Path(p).expanduser().resolve())] = None
    return tuple(out)


def hidden_paths(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """What no confined command can read: the user's credentials (``HOME_SECRETS``) and
    tether's own files (its configuration folder, session store, OAuth tokens, cache),
    wherever the environment puts them. tether's code is not among them: it is no secret,
    and the file tools keep it from being written."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    return protected_paths([*(home / s for s in HOME_SECRETS), *default_locations(env),
                            oauth_dir(env)])


def protected_paths(paths: Sequence[str | Path]) -> tuple[str, ...]:
    """``paths`` as the sandbox hides them (``expand``, then ``files_only``), without
    tether's own package: a command may run Python that imports tether (its tests, in a
    checkout of it), and the package is not a secret."""
    package = str(Path(__file__).resolve().parent.parent)
    return tuple(p for p in files_only(expand(paths)) if p != package)


def files_only(paths: Sequence[str]) -> tuple[str, ...]:
    """``paths`` without devices and process files: one named as a secret or a protected
    file (``TETHER_CONFIG=/dev/null``) is neither, and hiding it, or making it read-only,
    would take ``/dev/null`` from every command."""
    return tuple(p for p in paths if not p.startswith(("/dev/", "/proc/")))


def confined_environment(extra: Sequence[str] = (),
                         parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a confined command gets: ``ALLOWED_ENV``, every ``LC_*``, and the
    ``extra`` names, as far as ``parent`` (default: ``os.environ``) sets them."""
    parent = os.environ if parent is None else parent
    names = (*ALLOWED_ENV, *extra)
    return {k: v for k, v in parent.items() if k in names or k.startswith("LC_")}


def program_paths(argv: Sequence[str], cwd: str | Path) -> tuple[str, ...]:
    """What running ``argv`` reads of its own: the installation holding its executable (the
    folder above a ``bin``; a virtual environment's, and the interpreter's it links to),
    and the folder of each argument that names an existing file (a script and its
    modules), or the argument itself when it names a folder (one a server serves)."""
    found: list[Path] = []
    exe = shutil.which(argv[0]) if argv else None
    if exe is not None:
        for path in (Path(exe).absolute(), Path(exe).resolve()):
            folder = path.parent
            found.append(folder.parent if folder.name == "bin" else folder)
    for arg in argv[1:]:
        path = Path(cwd, arg).expanduser()
        if path.is_file():
            found.append(path.parent)
        elif path.is_dir():
            found.append(path)
    return expand(found)
