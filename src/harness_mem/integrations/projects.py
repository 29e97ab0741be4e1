"""Which project a coding agent works in: its git repository, not its directory's name.

Two checkouts named ``myproj`` (``clientA/myproj``, ``clientB/myproj``) are two projects, and one
repository cloned twice (or opened from one of its subdirectories, or from a ``git worktree``) is
one. So a project is named by, in order:

1. the URL of the repository's ``origin`` remote, normalised: no scheme, user or ``.git``, the host
   in lower case, scp-style ``git@host:owner/repo`` read as ``host/owner/repo`` — the same name on
   every machine and in every clone;
2. else the repository's root directory (the main worktree's, for a linked worktree);
3. else the directory itself.

Hooks run on every prompt, so this reads ``.git`` and its ``config`` itself (a few small files, no
``git`` process) and imports only the standard library.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TAG_PREFIX", "Project", "find_project", "find_repository", "normalise_remote"]

#: Entries of a project carry the tag ``project:<key>``.
TAG_PREFIX = "project:"

_SECTION = re.compile(r'^\s*\[\s*remote\s+"origin"\s*\]\s*$')
_ANY_SECTION = re.compile(r"^\s*\[")
_URL = re.compile(r"^\s*url\s*=\s*(.+?)\s*$", re.IGNORECASE)
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")  # git@github.com:owner/repo.git


@dataclass(frozen=True)
class Project:
    """A project: ``key`` names it everywhere (see the module), ``name`` is the short one people say."""

    key: str
    name: str

    @property
    def tag(self) -> str:
        return TAG_PREFIX + self.key


def find_repository(cwd: object) -> Project | None:
    """The project of ``cwd`` only when it lies in a git repository (a server started in a home
    directory or ``/`` works in no project)."""
    if not isinstance(cwd, str) or not cwd.strip():
        return None
    if _repository_root(Path(os.path.abspath(os.path.expanduser(cwd)))) is None:
        return None
    return find_project(cwd)


def find_project(cwd: object) -> Project | None:
    """The project of the directory ``cwd`` (a path string); None for no usable directory."""
    if not isinstance(cwd, str) or not cwd.strip():
        return None
    start = Path(os.path.abspath(os.path.expanduser(cwd)))
    root = _repository_root(start)
    if root is None:
        return Project(str(start), start.name or str(start))
    top, common = root
    remote = _origin_url(common / "config")
    if remote:
        key = normalise_remote(remote)
        return Project(key, key.rstrip("/").rsplit("/", 1)[-1] or top.name)
    return Project(str(top), top.name or str(top))


def normalise_remote(url: str) -> str:
    """``url`` as one name for every way of writing it: ``https://github.com/Acme/shop.git``,
    ``git@github.com:Acme/shop`` and ``ssh://git@github.com/Acme/shop/`` are all ``github.com/Acme/shop``."""
    url = url.strip()
    scp = _SCP.match(url) if "://" not in url else None
    if scp:
        host, path = scp.group(1), scp.group(2)
    elif "://" in url:
        rest = url.split("://", 1)[1]
        host, _, path = rest.partition("/")
        host = host.rsplit("@", 1)[-1]  # no user or token
        if host.count(":") == 1 and host.split(":")[1].isdigit():
            host = host.split(":")[0]  # the port is how, not what
    else:  # a local path used as a remote
        return os.path.normpath(url).removesuffix(".git")
    path = path.strip("/").removesuffix(".git").strip("/")
    return f"{host.lower()}/{path}" if path else host.lower()


def _repository_root(start: Path) -> tuple[Path, Path] | None:
    """The worktree's top directory and the repository's common git directory; None outside git."""
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return directory, dot_git
        if dot_git.is_file():  # a linked worktree or a submodule: "gitdir: <path>"
            git_dir = _gitdir_of(dot_git)
            if git_dir is None:
                return directory, dot_git
            common = _common_dir(git_dir)
            # A linked worktree belongs to its main checkout: the project is that repository's.
            top = common.parent if common != git_dir and common.name == ".git" else directory
            return top, common
    return None


def _gitdir_of(dot_git: Path) -> Path | None:
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:"):].strip())
    return target if target.is_absolute() else (dot_git.parent / target).resolve()


def _common_dir(git_dir: Path) -> Path:
    try:
        pointer = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return git_dir
    common = Path(pointer)
    return common if common.is_absolute() else (git_dir / common).resolve()


def _origin_url(config: Path) -> str | None:
    try:
        lines = config.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        if _ANY_SECTION.match(line):
            inside = bool(_SECTION.match(line))
        elif inside and (found := _URL.match(line)):
            return found.group(1).strip('"')
    return None
