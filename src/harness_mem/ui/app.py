"""The memory browser's routes: pages that read (GET) and actions that change (two POSTs each).

Every action is a form that POSTs to a confirmation page (what will happen: what a forget takes
along, what consolidation would write), whose own form POSTs again with ``confirm=yes`` to do it and
redirects to the result (post/redirect/get). Every POST goes through :func:`action`, which checks the
CSRF token first; :class:`~harness_mem.ui.security.Guarded` has already checked Host, access and
Origin. The store has one connection, so its calls take turns (:class:`StoreCalls`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..cliutils import shown
from ..errors import HarnessMemError, NotFoundError
from ..models import Hit, format_time
from ..provenance import cited_ids
from ..store import MemoryStore
from . import actions, pages
from .security import CSRF_FIELD, Guard, Guarded

__all__ = ["StoreCalls", "action", "build_app"]

HERE = Path(__file__).parent
T = TypeVar("T")
#: Notices shown after an action redirects (by code: the query string cannot put words on the page).
NOTICES = {
    "forgotten": "Forgotten: it and what was derived from it are no longer recalled (purge removes the bytes).",
    "purged": "Forgotten and purged: the text is gone from the file.",
    "corrected": "Corrected: this is the new version; the old one is kept in its history.",
    "noted": "Note stored.",
    "consolidated": "Session consolidated.",
}


class StoreCalls:
    """The store's calls, one at a time, off the event loop (the store has one connection)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._lock = threading.Lock()

    async def run(self, call: Callable[[MemoryStore], T]) -> T:
        def locked() -> T:
            with self._lock:
                return call(self.store)

        return await anyio.to_thread.run_sync(locked)


Handler = Callable[[Request], Awaitable[Response]]


def action(handler: Callable[[Request, FormData], Awaitable[Response]]) -> Handler:
    """A POST endpoint that runs only with the session's CSRF token in its form (403 otherwise)."""

    async def checked(request: Request) -> Response:
        form = await request.form()
        guard: Guard = request.app.state.guard
        given = form.get(CSRF_FIELD)
        if not guard.csrf_ok(request.scope["state"].get("session"), given if isinstance(given, str) else None):
            return PlainTextResponse("refused: the form's CSRF token is missing or not this session's; reload the page",
                                     status_code=403)
        return await handler(request, form)

    return checked


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def build_app(store: MemoryStore, guard: Guard) -> Any:
    """The ASGI app browsing ``store``, behind ``guard``."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(format_time=lambda t: format_time(t)[:19].replace("T", " "),
                                 marked=pages.marked, cited_ids=cited_ids,
                                 explained=pages.explained, kinds=pages.KINDS, modes=pages.MODES)
    calls = StoreCalls(store)

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        session = request.scope["state"].get("session")
        notice = NOTICES.get(request.query_params.get("notice", ""))
        return templates.TemplateResponse(request, template, {
            "csrf": guard.csrf_token(session) if session else "", "read_only": guard.read_only,
            "namespace": store.namespace, "notice": notice, **context}, status_code=status)

    def failed(request: Request, exc: HarnessMemError) -> Response:
        status = 404 if isinstance(exc, NotFoundError) else 400
        return render(request, "error.html", status, message=shown(str(exc)))

    def page(build: Callable[[Request], Awaitable[Response]]) -> Handler:
        async def guarded(request: Request) -> Response:
            try:
                return await build(request)
            except HarnessMemError as exc:  # one line on the page, never a traceback
                return failed(request, exc)

        return guarded

    def redirect(path: str, notice: str, **params: str) -> Response:
        return RedirectResponse(f"{path}?{urlencode({**params, 'notice': notice})}", status_code=303)

    # ---- pages --------------------------------------------------------------------------------

    async def search(request: Request) -> Response:
        form = pages.search_form(request.query_params)

        def searched(s: MemoryStore) -> tuple[list[Hit], frozenset[str]]:
            hits = pages.search(s, form)
            return hits, pages.revealed_in(s, pages.hit_entries(hits))

        hits, revealed = await calls.run(searched)
        return render(request, "search.html", form=form, hits=hits, revealed=revealed)

    async def entry(request: Request) -> Response:
        def read(s: MemoryStore) -> tuple[pages.EntryPage, frozenset[str]]:
            found = pages.entry_page(s, request.path_params["entry_id"])
            return found, pages.revealed_in(s, [found.entry, *found.history, *found.sources, *found.derived])

        found, revealed = await calls.run(read)
        return render(request, "entry.html", page=found, revealed=revealed)

    async def sessions(request: Request) -> Response:
        listing = await calls.run(lambda s: pages.sessions(s, request.query_params))
        return render(request, "sessions.html", listing=listing)

    async def session(request: Request) -> Response:
        name = request.path_params["session"]

        def read(s: MemoryStore) -> tuple[pages.SessionPage, frozenset[str]]:
            found = pages.session_page(s, name, request.query_params)
            return found, pages.revealed_in(s, [*found.turns.items, *found.derived])

        found, revealed = await calls.run(read)
        return render(request, "session.html", page=found, revealed=revealed)

    async def facts(request: Request) -> Response:
        listing, as_of, superseded = await calls.run(lambda s: pages.facts(s, request.query_params))
        return render(request, "facts.html", listing=listing, as_of=as_of, superseded=superseded)

    async def health(request: Request) -> Response:
        with_checks, with_sizes = (request.query_params.get(name) == "1" for name in ("checks", "sizes"))
        found = await calls.run(lambda s: pages.health_page(s, with_checks=with_checks, with_sizes=with_sizes))
        return render(request, "health.html", page=found)

    async def episodes(request: Request) -> Response:
        listing, result = await calls.run(lambda s: pages.episodes(s, request.query_params))
        return render(request, "episodes.html", listing=listing, result=result)

    async def episode(request: Request) -> Response:
        view, learnt = await calls.run(lambda s: pages.episode_page(s, request.path_params["episode_id"]))
        return render(request, "episode.html", view=view, learnt=learnt)

    async def skills(request: Request) -> Response:
        listing = await calls.run(lambda s: pages.skills(s, request.query_params))
        return render(request, "skills.html", listing=listing)

    async def skill(request: Request) -> Response:
        found = await calls.run(lambda s: pages.skill_page(s, request.path_params["name"]))
        return render(request, "skill.html", page=found)

    async def new_note(request: Request) -> Response:
        return render(request, "note.html")

    # ---- actions: the first POST previews, the second (confirm=yes) acts ------------------------

    def confirmed(form: FormData) -> bool:
        return _field(form, "confirm") == "yes"

    async def forget(request: Request, form: FormData) -> Response:
        entry_id = _field(form, "id")
        if confirmed(form):
            await calls.run(lambda s: actions.forget(s, entry_id))
            return redirect("/", "forgotten")
        taken = await calls.run(lambda s: actions.preview_forget(s, entry_id))
        return render(request, "confirm.html", verb="forget", title="Forget this memory?", fields={"id": entry_id},
                      entries=taken, explanation="These entries stop being recalled at once: the memory, its other"
                      " versions, and what was derived from them. Their text leaves the file at the next purge.")

    async def purge(request: Request, form: FormData) -> Response:
        entry_id = _field(form, "id")
        if confirmed(form):
            await calls.run(lambda s: actions.purge(s, entry_id))
            return redirect("/", "purged")
        taken = await calls.run(lambda s: actions.preview_forget(s, entry_id))
        return render(request, "confirm.html", verb="purge", title="Forget and purge this memory?",
                      fields={"id": entry_id}, entries=taken, explanation="These entries are forgotten and their"
                      " text removed from the file now, together with every entry of this namespace already"
                      " forgotten or expired. This cannot be undone.")

    async def correct(request: Request, form: FormData) -> Response:
        entry_id, content = _field(form, "id"), _field(form, "content")
        if confirmed(form):
            done = await calls.run(lambda s: actions.correct(s, entry_id, content))
            return redirect(f"/entries/{quote(done.id)}", "corrected")
        old = await calls.run(lambda s: s.get(entry_id))
        return render(request, "confirm.html", verb="correct", title="Correct this memory?",
                      fields={"id": entry_id, "content": content}, entries=[old], new_text=content,
                      explanation="The new text becomes a new version; the old one is kept in its history and no"
                      " longer recalled.")

    async def note(request: Request, form: FormData) -> Response:
        content, tags = _field(form, "content"), _field(form, "tags")
        if confirmed(form):
            done = await calls.run(lambda s: actions.add_note(s, content, tags.replace(",", " ").split()))
            return redirect(f"/entries/{quote(done.id)}", "noted")
        return render(request, "confirm.html", verb="notes", title="Store this note?",
                      fields={"content": content, "tags": tags}, entries=[], new_text=content,
                      explanation="Secrets and personal data in it are redacted before it is stored.")

    async def consolidate(request: Request, form: FormData) -> Response:
        name = _field(form, "session")
        if confirmed(form):
            await calls.run(lambda s: actions.consolidate_session(s, name, dry_run=False))
            return redirect(f"/sessions/{quote(name)}", "consolidated")
        preview = await calls.run(lambda s: actions.consolidate_session(s, name, dry_run=True))
        return render(request, "confirm.html", verb="consolidate", title="Consolidate this session now?",
                      fields={"session": name}, entries=[], preview=preview,
                      explanation="Consolidation derives summaries, facts and an episode from the session's new"
                      " turns, each citing the turns it came from.")

    routes = [
        Route("/", page(search)),
        Route("/entries/{entry_id:path}", page(entry)),
        Route("/sessions", page(sessions)),
        Route("/sessions/{session:path}", page(session)),
        Route("/facts", page(facts)),
        Route("/episodes", page(episodes)),
        Route("/episodes/{episode_id:path}", page(episode)),
        Route("/skills", page(skills)),
        Route("/skills/{name:path}", page(skill)),
        Route("/health", page(health)),
        Route("/notes/new", page(new_note)),
        *(Route(f"/{name}", page(action(handler)), methods=["POST"]) for name, handler in (
            ("forget", forget), ("purge", purge), ("correct", correct), ("notes", note),
            ("consolidate", consolidate))),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.guard = guard
    return Guarded(app, guard)
