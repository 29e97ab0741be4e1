"""``harness-mem key``: the store's identity key — whether this process has it, handing it to a
teammate under a passphrase, and rotating it (see :mod:`harness_mem.keyfiles` and
:mod:`harness_mem.rotation`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .errors import IdentityKeyError, InvalidInputError

if TYPE_CHECKING:
    from .storage import Storage

__all__ = ["PASSPHRASE_ENV", "key"]

#: Where a script gives the passphrase (never on the command line, where `ps` shows it).
PASSPHRASE_ENV = "HARNESS_MEM_KEY_PASSPHRASE"

passphrase_file_option = click.option(
    "--passphrase-file", type=click.Path(dir_okay=False, path_type=Path),
    help=f"Read the passphrase from this file's first line (else ${PASSPHRASE_ENV}, else a hidden prompt).")


@click.group()
def key() -> None:
    """The store's identity key: whether this process has it, handing it to a teammate, rotating it.

    \b
    Example:
        harness-mem key status
        harness-mem key export team.key          # on a machine that has it
        harness-mem key import team.key          # on a teammate's
    """


def _location(ctx: click.Context) -> Path | str:
    return ctx.find_root().obj["db"]  # type: ignore[no-any-return]


def _exists(location: Path | str) -> bool:
    from .engines import is_url

    return is_url(location) or Path(location).exists()


@contextmanager
def _storage(location: Path | str) -> Iterator[Storage]:
    """The store's storage, opened to read its settings (a key command loads no model)."""
    from .engines import open_storage

    if not _exists(location):
        raise InvalidInputError(f"no database at {location} — give --db, or create one with `harness-mem init`")
    storage = open_storage(location, read_only=True)
    try:
        yield storage
    finally:
        storage.close()


def _passphrase(passphrase_file: Path | None, *, confirm: bool) -> str:
    if passphrase_file is not None:
        try:
            return passphrase_file.read_text(encoding="utf-8").splitlines()[0] if passphrase_file.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"cannot read the passphrase from {passphrase_file}: {exc}") from None
    if os.environ.get(PASSPHRASE_ENV):
        return os.environ[PASSPHRASE_ENV]
    if not sys.stdin.isatty():
        raise InvalidInputError(f"no passphrase: give --passphrase-file FILE or set ${PASSPHRASE_ENV} (a prompt"
                                " needs a terminal)")
    return str(click.prompt("Passphrase", hide_input=True, confirmation_prompt=confirm))


@key.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """The store's key id, and where this process finds it (or that it lacks it). Exits 1 when it lacks it.

    \b
    Example:
        harness-mem --db postgresql://alice@db/memory key status
    """
    from .keyfiles import describe_key
    from .settings import Settings

    settings = Settings.from_env()
    with _storage(_location(ctx)) as storage:
        click.echo(f"store: {storage.location}")
        try:
            click.echo(describe_key(storage, settings.identity_key, settings.config_dir(),
                                    given_as="$HARNESS_MEM_IDENTITY_KEY"))
        except IdentityKeyError as exc:
            click.echo(str(exc))
            ctx.exit(1)


@key.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@passphrase_file_option
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.pass_context
def export_key(ctx: click.Context, file: Path, passphrase_file: Path | None, force: bool) -> None:
    """Write the store's identity key to FILE, wrapped under a passphrase, for a teammate.

    The file (mode 0600) holds the key id in clear and the key sealed under the passphrase
    (scrypt, AES-GCM); send the file and the passphrase by different ways.

    \b
    Example:
        harness-mem key export team.key
        harness-mem key export team.key --passphrase-file pass.txt --force
    """
    from .identities import choose_key
    from .keyfiles import wrap_key, write_new_file
    from .pseudonyms import missing_key
    from .settings import Settings

    settings = Settings.from_env()
    with _storage(_location(ctx)) as storage:
        found = choose_key(storage, settings.identity_key, settings.config_dir(), create=False)
        if found is None:
            raise missing_key(storage, settings.config_dir())
        if file.exists() and not force:
            raise InvalidInputError(f"{file} exists — give --force to replace it")
        wrapped = wrap_key(found, _passphrase(passphrase_file, confirm=True))
        write_new_file(file, wrapped, force=force)
    click.echo(f"Wrote identity key {found.id} to {file} (0600), sealed under the passphrase — on the other"
               f" machine run `harness-mem key import {file.name}`")


@key.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@passphrase_file_option
@click.pass_context
def import_key(ctx: click.Context, file: Path, passphrase_file: Path | None) -> None:
    """Put the identity key from FILE (made by `key export`) where this machine's stores find it.

    \b
    Example:
        harness-mem key import team.key
    """
    from .identities import KEY_ID_SETTING
    from .keyfiles import install_key, unwrap_key
    from .settings import Settings

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read {file}: {exc}") from None
    found = unwrap_key(text, _passphrase(passphrase_file, confirm=False), source=str(file))
    path, written = install_key(found, Settings.from_env().config_dir())
    click.echo(f"{'Imported' if written else 'Already had'} identity key {found.id} ({path})")
    location = _location(ctx)
    if _exists(location):
        with _storage(location) as storage:
            recorded = storage.setting(KEY_ID_SETTING)
        if recorded == found.id:
            click.echo(f"It is the key of {storage.location}: its identities read as written.")
        else:
            click.echo(f"It is not the key of {storage.location}"
                       f" ({'which has none yet' if recorded is None else 'keyed with ' + recorded}).")


@key.command()
@click.pass_context
def rotate(ctx: click.Context) -> None:
    """Make a new identity key and move the store to it (or finish a rotation that was interrupted).

    Every sealed identity is sealed again and every identity pseudonym keyed again; a process
    with only the old key can then write no identity value. The old key file stays until you
    delete it; give teammates the new one (`key export`).

    \b
    Example:
        harness-mem key rotate && harness-mem key export team.key
    """
    from .store import MemoryStore

    location = _location(ctx)
    if not _exists(location):
        raise InvalidInputError(f"no database at {location} — give --db, or create one with `harness-mem init`")
    store = MemoryStore(location, embedder=None, rekey=False)
    try:
        with click.progressbar(length=1, label="Rotating the identity key", file=sys.stderr) as bar:
            def advance(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            done = store.rotate_identity_key(progress=advance)
    finally:
        store.close()
    click.echo(f"Identity key {done.old_id} -> {done.new_id} ({done.changed} rows rewritten); the new key is in"
               f" {done.new_key_file}")
    if done.old_key_file is not None:
        click.echo(f"The old key is kept in {done.old_key_file}: delete it once no copy of the store needs it.")
    if os.environ.get("HARNESS_MEM_IDENTITY_KEY"):
        click.echo("$HARNESS_MEM_IDENTITY_KEY holds the old key: set it to the new one (or unset it).")
