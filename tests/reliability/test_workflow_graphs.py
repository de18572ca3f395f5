"""Random graphs of jobs with random outcomes, on both backends, checked against what the
contract says of each job: a job runs only once its dependencies completed (or, in run
mode, ended), every job is finished once its ancestors are, and no job both runs and is
cancelled."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuelog.models import TERMINAL, ApiKey, DependencyFailure, Job, JobStatus
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from tests.conftest import KeyMaker, run_blocking

OUTCOMES = ("complete", "fail", "retry")  # retry: one retryable failure, then complete


@dataclass(frozen=True)
class Node:
    deps: tuple[int, ...]  # indices of earlier nodes
    mode: DependencyFailure
    outcome: str


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    in_one_batch: bool  # by depends_on_items in one request, else job by job by id


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    nodes = []
    for index in range(draw(st.integers(1, 8))):
        earlier = st.lists(st.integers(0, index - 1), unique=True, max_size=3)
        deps = draw(earlier) if index else []
        mode = draw(st.sampled_from(list(DependencyFailure)))
        nodes.append(Node(tuple(deps), mode, draw(st.sampled_from(OUTCOMES))))
    return Graph(tuple(nodes), draw(st.booleans()))


def expected(graph: Graph) -> list[JobStatus]:
    """Each node's end, by the contract."""
    ends: list[JobStatus] = []
    for node in graph.nodes:
        held = any(ends[dep] is not JobStatus.COMPLETED for dep in node.deps)
        if node.mode is DependencyFailure.CANCEL and held:
            ends.append(JobStatus.CANCELLED)
        else:
            ends.append(JobStatus.FAILED if node.outcome == "fail" else JobStatus.COMPLETED)
    return ends


async def enqueue(service: JobService, shop: ApiKey, graph: Graph) -> list[int]:
    if graph.in_one_batch:
        specs = [
            EnqueueSpec("noop", depends_on_items=n.deps, on_dependency_failure=n.mode)
            for n in graph.nodes
        ]
        return [job.id for job, _ in await service.enqueue_many(shop, specs, batch=True)]
    ids: list[int] = []
    for node in graph.nodes:
        deps = tuple(ids[dep] for dep in node.deps)
        spec = EnqueueSpec("noop", depends_on=deps, on_dependency_failure=node.mode)
        ids.append((await service.enqueue(shop, spec))[0].id)
    return ids


async def play(service: JobService, shop: ApiKey, mailer: ApiKey, graph: Graph) -> None:
    ids = await enqueue(service, shop, graph)
    index_of = {job_id: index for index, job_id in enumerate(ids)}
    ran: set[int] = set()
    attempts: Counter[int] = Counter()
    for _ in range(4 * len(ids) + 2):  # each round runs at least one job, or ends
        claimed = await service.claim(mailer, limit=10)
        if not claimed:
            break
        for job in claimed:
            index = index_of[job.id]  # never a job of another graph
            node = graph.nodes[index]
            await check_ready(service, node, [ids[dep] for dep in node.deps])
            ran.add(index)
            await report(service, mailer, job, node, attempts[index])
            attempts[index] += 1
    found = {job.id: job for job in await service.storage.job_get_many(ids)}
    ends = [found[job_id].status for job_id in ids]
    assert all(status in TERMINAL for status in ends), ends
    assert ends == expected(graph)
    assert not any(ends[index] is JobStatus.CANCELLED for index in ran), "ran and cancelled"


async def check_ready(service: JobService, node: Node, dep_ids: list[int]) -> None:
    """A job claimed now: each of its dependencies completed (in run mode: ended)."""
    deps = await service.storage.job_get_many(dep_ids)
    assert len(deps) == len(dep_ids)
    done = {JobStatus.COMPLETED} if node.mode is DependencyFailure.CANCEL else TERMINAL
    assert all(dep.status in done for dep in deps), [dep.status for dep in deps]


async def report(service: JobService, mailer: ApiKey, job: Job, node: Node, tries: int) -> None:
    assert job.lease_token is not None
    if node.outcome == "retry" and tries == 0:
        spec = FinishSpec(job.id, job.lease_token, error="again", retry_in_seconds=0)
    elif node.outcome == "fail":
        spec = FinishSpec(job.id, job.lease_token, error="broken", retryable=False)
    else:
        spec = FinishSpec(job.id, job.lease_token, result={"node": job.id})
    await service.finish(mailer, spec)


@settings(
    max_examples=40,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graph=graphs())
def test_random_graphs_end_as_the_contract_says(
    service: JobService, make_key: KeyMaker, graph: Graph
) -> None:
    shop = make_key("shop-graphs", "producer")[0]
    mailer = make_key("mailer-graphs", "worker")[0]
    run_blocking(play(service, shop, mailer, graph))
