"""Workflows as the service sees them: which jobs an enqueue may wait for, and a job's
dependencies. The storage keeps the graph and moves waiting jobs in the transactions
that end their dependencies (storage/workflows.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from queuelog.errors import ValidationFailed
from queuelog.models import ApiKey, Job
from queuelog.specs import EnqueueSpec
from queuelog.storage.protocol import Storage

Owns = Callable[[ApiKey, Job], bool]


class Workflows:
    def __init__(self, storage: Storage, owns: Owns) -> None:
        """Args:
        storage: the backend.
        owns: whether a caller sees a job for good (the service's rule): its own, or
            any for an admin.
        """
        self.storage = storage
        self._owns = owns

    async def check(self, caller: ApiKey, specs: Sequence[EnqueueSpec], batch: bool) -> None:
        """Refuse (422, naming the batch item) a ``depends_on`` id that names no job the
        caller owns: a job of another producer is refused as a missing one is, so the
        answer never tells that it exists. A job it only holds as a worker is refused too:
        waiting for a job lets its producer read the job's outcome for good
        (``/dependencies``), and keeps it from retention while the dependent is active.
        A request sent again whose dependency is gone (pruned since) is not refused here:
        its idempotency key names its job, which the storage answers with. (Had that job
        gone too, the insert finds the dependency missing in its own transaction, and
        refuses it: ids are never used again, so a missing one stays missing.)"""
        wanted = sorted({dep for spec in specs for dep in spec.depends_on})
        if not wanted:
            return
        found = {job.id: job for job in await self.storage.job_get_many(wanted)}
        for index, spec in enumerate(specs):
            resent: bool | None = None  # looked up once, if a dependency is gone
            for place, dep in enumerate(spec.depends_on):
                job = found.get(dep)
                if job is not None and self._owns(caller, job):
                    continue
                if job is None and resent is None:
                    resent = await self._sent_before(caller, spec)
                if job is None and resent:
                    continue
                # Another's job is refused even so: the request may make a new job.
                raise _unseen(dep, place, index if batch else None)

    async def _sent_before(self, caller: ApiKey, spec: EnqueueSpec) -> bool:
        """Whether ``spec``'s idempotency key names a job of the caller's already: its
        request, checked when it was first sent, or another that the storage refuses."""
        key = spec.idempotency_key
        return key is not None and (
            await self.storage.job_by_idempotency_key(caller.name, key) is not None
        )

    async def dependencies(self, job: Job) -> list[Job]:
        """The jobs ``job`` depends on, in the order it named them (a pruned one left out:
        retention keeps them only while a job that depends on them is active)."""
        found = {dep.id: dep for dep in await self.storage.job_get_many(job.depends_on)}
        return [found[dep] for dep in job.depends_on if dep in found]


def _unseen(dep: int, place: int, index: int | None) -> ValidationFailed:
    where: dict[str, Any] = {}
    loc: list[str | int] = ["body", "depends_on", place]
    if index is not None:
        where["index"] = index
        loc = ["body", "jobs", index, "depends_on", place]
    return ValidationFailed(
        f"depends_on names no job of this key's: {dep}",
        errors=[{"loc": loc, "msg": "no such job"}],
        **where,
    )
