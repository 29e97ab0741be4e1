"""`Dag` — a run's jobs keyed by id, in insertion order, with the graph questions the scheduler asks.

Insertion order is part of the contract: among jobs that are ready at the same moment, the one
added first launches first, so two runs of one graph always start their jobs in the same order. :meth:`Dag.validate` refuses a graph before anything runs: unknown
dependencies, routers on unknown jobs or aimed at unknown jobs, and cycles.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence

from .errors import DagError
from .job import Job, JobId
from .states import JobState


class Dag:
    """Jobs keyed by id, in insertion order, with reverse edges for cascading."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._jobs: dict[JobId, Job] = {}
        self._position: dict[JobId, int] = {}
        self._dependents: dict[JobId, list[JobId]] = {}
        self._next_position = 0
        for job in jobs:
            self.add(job)

    def add(self, job: Job, *, position: int | None = None) -> None:
        """Append ``job`` (``position`` is for reloading a stored run); refuses a duplicate id."""
        if job.id in self._jobs:
            raise DagError(f"two jobs share the id `{job.id}` — job ids must be unique within a run")
        pos = self._next_position if position is None else position
        self._jobs[job.id] = job
        self._position[job.id] = pos
        self._next_position = max(self._next_position, pos + 1)
        for dep in dict.fromkeys(job.deps):
            self._dependents.setdefault(dep, []).append(job.id)

    # -- mapping-like access

    def __getitem__(self, job_id: JobId) -> Job:
        return self._jobs[job_id]

    def get(self, job_id: JobId) -> Job | None:
        return self._jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[Job]:
        return iter(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def ids(self) -> list[JobId]:
        return list(self._jobs)

    def position(self, job_id: JobId) -> int:
        """Insertion index: the launch order among jobs ready at the same time."""
        return self._position[job_id]

    def dependents(self, job_id: JobId) -> list[JobId]:
        """Jobs that list ``job_id`` among their deps, in insertion order."""
        return list(self._dependents.get(job_id, ()))

    # -- the scheduler's questions

    def deps_satisfied(self, job_id: JobId) -> bool:
        """Every dependency exists and has succeeded."""
        jobs = self._jobs
        return all(dep in jobs and jobs[dep].state is JobState.SUCCEEDED for dep in jobs[job_id].deps)

    def blocking_dep(self, job_id: JobId) -> tuple[JobId, str] | None:
        """The first dependency that can never succeed now, and why (dead-lettered, cancelled, missing)."""
        for dep in self._jobs[job_id].deps:
            found = self._jobs.get(dep)
            if found is None:
                return dep, "missing"
            if found.state in (JobState.DEAD_LETTERED, JobState.CANCELLED):
                return dep, found.state.label()
        return None

    def deps_blocked(self, job_id: JobId) -> bool:
        return self.blocking_dep(job_id) is not None

    def downstream_of(self, job_id: JobId) -> list[JobId]:
        """``job_id`` and every job that depends on it, directly or not, in insertion order."""
        seen = {job_id}
        queue = deque([job_id])
        while queue:
            for child in self._dependents.get(queue.popleft(), ()):
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
        return sorted((j for j in seen if j in self._jobs), key=self._position.__getitem__)

    def find_cycle(self) -> list[JobId] | None:
        """A dependency cycle as a path that ends where it starts (``[a, b, a]``), or None.

        Three-colour depth-first search, iterative so a long chain cannot hit the recursion limit.
        """
        grey, black = 1, 2
        colour: dict[JobId, int] = {}
        for start in self._jobs:
            if start in colour:
                continue
            colour[start] = grey
            path = [start]
            stack: list[tuple[JobId, Iterator[JobId]]] = [(start, iter(self._jobs[start].deps))]
            while stack:
                node, deps = stack[-1]
                for dep in deps:
                    if dep not in self._jobs:
                        continue
                    seen = colour.get(dep)
                    if seen == grey:
                        return path[path.index(dep):] + [dep]
                    if seen is None:
                        colour[dep] = grey
                        path.append(dep)
                        stack.append((dep, iter(self._jobs[dep].deps)))
                        break
                else:
                    colour[node] = black
                    path.pop()
                    stack.pop()
        return None

    def validate(
        self, routes: Iterable[JobId] = (), targets: Mapping[JobId, Iterable[JobId]] | None = None
    ) -> None:
        """Refuse the graph (DagError) for an unknown dep, route or route target, or a cycle."""
        problems = [
            f"job `{job.id}` depends on unknown job `{dep}`"
            for job in self._jobs.values()
            for dep in job.deps
            if dep not in self._jobs
        ]
        problems += [f"a router is attached to unknown job `{r}`" for r in routes if r not in self._jobs]
        for source, aims in (targets or {}).items():
            problems += [
                f"the router of `{source}` may go to unknown job `{t}`" for t in aims if t not in self._jobs
            ]
        if problems:
            raise DagError("; ".join(problems))
        cycle = self.find_cycle()
        if cycle:
            raise DagError(f"the jobs form a cycle: {' → '.join(cycle)} — use a router's Goto for loops")

    def check_additions(self, jobs: Sequence[Job]) -> None:
        """Refuse (DagError) jobs that would overwrite an id, depend on unknown jobs, or close a cycle."""
        trial = Dag()
        for job in self._jobs.values():
            trial.add(job, position=self._position[job.id])
        for job in jobs:
            if job.id in self._jobs:
                raise DagError(f"a new job reuses the id `{job.id}` of an existing job")
            trial.add(job)
        trial.validate()
