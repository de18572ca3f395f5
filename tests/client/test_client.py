"""Client and AsyncClient against a real server: results, every error slug, retries."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from queuelog.client import (
    AsyncClient,
    Client,
    Job,
    RetryPolicy,
    ServerError,
    ServerUnavailable,
    Worker,
    calls,
    enqueue_body,
)
from queuelog.client.errors import BodyTooLarge
from queuelog.client.policy import Connection
from queuelog.client.running import Running
from queuelog.client.transport import Answer
from queuelog.client.worker import Run
from queuelog.errors import (
    Forbidden,
    IdempotencyKeyReused,
    InvalidState,
    NotFound,
    NotLeaseHolder,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    UnknownJobType,
    ValidationFailed,
)
from queuelog.models import JobStatus, Priority
from tests.client.pools import Scripted, answer
from tests.realserver import RealServer, free_port, wait_until

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


def client(server: RealServer, name: str, **options: Any) -> Client:
    return Client(server.url, server.keys[name], **options)


def test_enqueue_get_and_events_return_typed_values(real_server: RealServer) -> None:
    with client(real_server, "shop") as shop:
        job = shop.enqueue("send_email", {"to": "a@example.com"}, priority="high")
        assert job.status is JobStatus.PENDING and job.priority is Priority.HIGH
        assert job.idempotency_key  # made by the client, so a resend never duplicates
        assert shop.get(job.id) == job
        (event,) = shop.events(job)
        assert event.event == "enqueued" and event.to_status is JobStatus.PENDING


def test_events_reads_every_page_of_a_long_history_sync_and_async(
    real_server: RealServer,
) -> None:
    """A history of more events than a page holds (500) comes back whole, in order."""
    with client(real_server, "shop") as shop:
        made = shop.enqueue_many(
            enqueue_body("noop", {"n": n}, unique_key="long", on_duplicate="replace")
            for n in range(500)
        )
        job = made[0].job
        shop.enqueue("noop", {"n": 500}, unique_key="long", on_duplicate="replace")
        events = shop.events(job)
        history = [e.event for e in events]
        assert history == ["enqueued"] + ["replaced"] * 500
        page = shop.events_page(job, cursor=events[-3].id, limit=1)
        assert page.events == events[-2:-1] and page.next_cursor == str(events[-2].id)

    async def read_async() -> list[str]:
        async with AsyncClient(real_server.url, real_server.keys["shop"]) as shop:
            return [e.event for e in await shop.events(job.id)]

    assert asyncio.run(read_async()) == history


def test_enqueue_with_the_same_idempotency_key_returns_the_same_job(
    real_server: RealServer,
) -> None:
    with client(real_server, "shop") as shop:
        first = shop.enqueue("noop", {"n": 1}, idempotency_key="same-request")
        again = shop.enqueue("noop", {"n": 1}, idempotency_key="same-request")
        assert again.id == first.id
        with pytest.raises(IdempotencyKeyReused):
            shop.enqueue("noop", {"n": 2}, idempotency_key="same-request")


def test_list_follows_next_cursor_across_pages(real_server: RealServer) -> None:
    with client(real_server, "root") as root, client(real_server, "shop") as shop:
        made = shop.enqueue_many([{"type": "noop", "payload": {"i": i}} for i in range(7)])
        assert all(item.created for item in made)
        listed = [job.id for job in root.list(type="noop", page_size=2)]
        assert {item.job.id for item in made} <= set(listed)
        assert listed == sorted(listed, reverse=True)


def test_claim_heartbeat_complete_many_and_fail(real_server: RealServer) -> None:
    with client(real_server, "shop") as shop, client(real_server, "mailer") as worker:
        for i in range(3):
            shop.enqueue("send_email", {"to": f"{i}@example.com"}, priority="high")
        jobs = worker.claim(types=["send_email"], limit=3, lease_seconds=60, instance="t-1")
        assert len(jobs) == 3 and all(j.lease_token for j in jobs)
        assert jobs[0].worker_id == "mailer/t-1" and jobs[0].lease_seconds == 60
        beat = worker.heartbeat(jobs[0], lease_seconds=120)
        assert beat.lease_expires_at is not None
        failed = worker.fail(jobs[2], "smtp down", retryable=False)
        assert failed.status is JobStatus.FAILED
        stale = jobs[1].__class__(**{**_fields(jobs[1]), "lease_token": "0" * 32})
        answers = worker.complete_many([(jobs[0], {"ok": True}), stale])
        assert answers[0].ok and answers[0].job is not None
        assert answers[0].job.result == {"ok": True}
        assert not answers[1].ok and isinstance(answers[1].error, NotLeaseHolder)
        # Without the jobs: the same answers, and the completion landed.
        shop.enqueue("send_email", {"to": "3@example.com"})
        jobs = worker.claim(types=["send_email"], lease_seconds=60)
        minimal = worker.complete_many([(jobs[0], {"n": 1}), stale], return_jobs=False)
        assert [(a.id, a.status, a.job) for a in minimal[:1]] == [(jobs[0].id, 200, None)]
        assert isinstance(minimal[1].error, NotLeaseHolder)
        assert shop.get(jobs[0].id).result == {"n": 1}


def claim_job(worker: Client, job: Job) -> Job:
    """Claim ``job``, completing any older job of its type claimed on the way."""
    for _ in range(20):
        for claimed in worker.claim(types=[job.type], limit=100):
            if claimed.id == job.id:
                return claimed
            worker.complete(claimed)
    raise AssertionError(f"job {job.id} was never claimed")


def _fields(job: Any) -> dict[str, Any]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda c: c["shop"].get(999_999), NotFound),
        (lambda c: c["shop"].enqueue("no_such_type"), UnknownJobType),
        (lambda c: c["shop"].enqueue("send_email", {"no": "to"}), ValidationFailed),
        (lambda c: c["shop"].enqueue("noop", {"x": "y" * 4000}), PayloadTooLarge),
        (lambda c: c["shop"].enqueue("noop", {"x": "y" * 1_100_000}), BodyTooLarge),
        (lambda c: c["shop"].enqueue("noop", priority="critical"), Forbidden),
        (lambda c: c["shop"].create_key("x", ["worker"]), Forbidden),
        (lambda c: c["nobody"].get(1), Unauthenticated),
    ],
)
def test_each_problem_type_raises_its_own_exception(
    real_server: RealServer, action: Any, error: type[Exception]
) -> None:
    clients = {"shop": client(real_server, "shop"), "nobody": Client(real_server.url, "ql_bad")}
    try:
        with pytest.raises(error) as raised:
            action(clients)
    finally:
        for each in clients.values():
            each.close()
    assert raised.value.detail  # type: ignore[attr-defined]


def test_invalid_state_and_not_lease_holder(real_server: RealServer) -> None:
    with client(real_server, "shop") as shop, client(real_server, "mailer") as worker:
        job = shop.enqueue("noop")
        claimed = claim_job(worker, job)
        with pytest.raises(InvalidState):
            shop.cancel(job)
        with pytest.raises(NotLeaseHolder):
            worker.complete(claimed, lease_token="f" * 32)
        worker.complete(claimed)
        with pytest.raises(InvalidState):
            worker.complete(claimed)


def test_validation_error_keeps_the_field_errors(real_server: RealServer) -> None:
    with client(real_server, "mailer") as worker, pytest.raises(ValidationFailed) as raised:
        worker.claim(limit=1000)
    assert raised.value.extra["errors"]


def test_admin_manages_keys(real_server: RealServer) -> None:
    with client(real_server, "root") as root:
        key = root.create_key("reporter", ["producer"], max_priority="low", types=["noop"])
        assert key.key and key.key.startswith("ql_")
        assert key.id in {k.id for k in root.list_keys()}
        with Client(real_server.url, key.key) as reporter:
            reporter.enqueue("noop")
            root.revoke_key(key.id)
            with pytest.raises(Unauthenticated):
                reporter.enqueue("noop")


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1:21", "file:///etc/passwd", "http://", "127.0.0.1:8000"]
)
def test_hardening_27_a_url_that_cannot_name_a_server_is_refused_before_any_request(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libcurl would speak FTP, or read a local file, for another scheme."""
    with pytest.raises(ValueError, match="an http:// or https:// URL"):
        Client(url, "ql_x")
    with pytest.raises(ValueError, match="an http:// or https:// URL"):
        AsyncClient(url, "ql_x")
    monkeypatch.setenv("QUEUELOG_URL", url)
    with pytest.raises(ValueError, match="an http:// or https:// URL"):
        Client()


@pytest.mark.parametrize(
    "url",
    [f"http://127.0.0.1:8000/{path}" for path in ("caf\u00e9", "a b", "\r\nX: 1")],
)
def test_hardening_33_a_url_libcurl_cannot_send_as_it_is_is_refused_before_any_request(
    url: str,
) -> None:
    """libcurl takes ASCII only: the SDK raised UnicodeEncodeError from inside it."""
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match="visible ASCII"):
            client(url, "ql_x")


@pytest.mark.parametrize("key", ["cl\u00e9", "ql_a\nb", "ql_a\r\nX-Admin: 1", "ql_a b", "ql_\x7f"])
def test_hardening_33_a_key_no_header_can_carry_is_refused_before_any_request(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line break in the key split the Authorization header (or added one); a key
    outside ASCII raised UnicodeEncodeError from inside libcurl."""
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match="visible ASCII") as refused:
            client("http://127.0.0.1:8000", key)
        assert key not in str(refused.value)  # a secret: never in a message
    monkeypatch.setenv("QUEUELOG_API_KEY", key)
    with pytest.raises(ValueError, match="visible ASCII"):
        Client("http://127.0.0.1:8000")


def test_url_and_key_come_from_the_environment(
    real_server: RealServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUELOG_URL", real_server.url)
    monkeypatch.setenv("QUEUELOG_API_KEY", real_server.keys["shop"])
    with Client() as shop:
        assert shop.enqueue("noop").status is JobStatus.PENDING


def test_async_client_speaks_the_same_calls(real_server: RealServer) -> None:
    async def scenario() -> list[int]:
        async with (
            AsyncClient(real_server.url, real_server.keys["shop"]) as shop,
            AsyncClient(real_server.url, real_server.keys["mailer"]) as worker,
        ):
            job = await shop.enqueue("send_email", {"to": "async@example.com"})
            claimed = next(j for j in await worker.claim(limit=100) if j.id == job.id)
            done = await worker.complete(claimed, {"sent": True})
            assert done.status is JobStatus.COMPLETED
            with pytest.raises(NotFound):
                await shop.get(999_999)
            return [j.id async for j in shop.list(type="send_email", page_size=1)]

    ids = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert ids and ids == sorted(ids, reverse=True)


# -- errors that need a scripted answer --------------------------------------------


def scripted(
    status: int, body: Any, headers: dict[str, str] | None = None, retry: RetryPolicy = FAST
) -> Client:
    pool = Scripted(lambda _: answer(status, body, headers))
    return Client("http://127.0.0.1:1", "ql_x", retry_policy=retry, transport=pool)


def test_a_rate_limited_claim_is_sent_again_after_retry_after() -> None:
    answers = [
        answer(429, {"type": "rate-limited"}, {"Retry-After": "0"}),
        answer(200, {"jobs": []}),
    ]
    pool = Scripted(lambda _: answers[len(pool.sent) - 1])
    with Client("http://127.0.0.1:1", "ql_x", retry_policy=FAST, transport=pool) as worker:
        assert worker.claim() == []
    assert len(pool.sent) == 2  # refused before anything happened, so even a claim is safe


def test_a_503_is_sent_again_no_sooner_than_its_retry_after() -> None:
    """The server's Retry-After is the least wait before a send goes again: the backoff
    alone would have sent it at once."""
    answers = [
        answer(503, {"type": "unavailable"}, {"Retry-After": "1"}),
        answer(200, {"jobs": []}),
    ]
    pool = Scripted(lambda _: answers[len(pool.sent) - 1])
    policy = RetryPolicy(attempts=2, base_delay=0.001, max_delay=5)
    with Client("http://127.0.0.1:1", "ql_x", retry_policy=policy, transport=pool) as worker:
        started = time.monotonic()
        assert list(worker.list()) == []
        assert time.monotonic() - started >= 1.0
    assert len(pool.sent) == 2


def test_a_5xx_retry_after_is_waited_up_to_max_delay_only() -> None:
    policy, call = RetryPolicy(base_delay=0.001, max_delay=1.5), calls.get(1)
    where = Connection.resolve("http://127.0.0.1:1")
    for asked, waited in ((1, 1.0), (3600, 1.5)):  # a proxy may ask for an hour
        error = ServerError(status=503, retry_after=asked)
        assert policy.retry_or_raise(call, error, 1, where) == waited
    assert policy.retry_or_raise(call, ServerError(status=503), 1, where) <= 0.001


def test_server_error_carries_retry_after() -> None:
    problem = {"type": "unavailable", "title": "Database unavailable", "status": 503}
    failing = scripted(503, problem, {"Retry-After": "5"}, RetryPolicy(attempts=1))
    with failing, pytest.raises(ServerError) as raised:
        failing.get(1)
    assert (raised.value.status, raised.value.retry_after) == (503, 5)
    without = scripted(503, problem, None, RetryPolicy(attempts=1))
    with without, pytest.raises(ServerError) as raised:
        without.get(1)
    assert raised.value.retry_after is None


def test_rate_limited_carries_retry_after() -> None:
    problem = {"type": "rate-limited", "title": "Too many", "status": 429, "detail": "slow"}
    limited = scripted(429, problem, {"Retry-After": "7"}, RetryPolicy(attempts=1))
    with limited, pytest.raises(RateLimited) as raised:
        limited.get(1)
    assert raised.value.retry_after == 7


def test_a_429_asking_for_longer_than_a_call_should_hang_is_raised_at_once() -> None:
    problem = {"type": "rate-limited", "detail": "slow"}
    for asked in ("301", "99999999999999999"):  # a proxy's, or nonsense: sleep would overflow
        limited = scripted(429, problem, {"Retry-After": asked})
        with limited, pytest.raises(RateLimited) as raised:
            limited.get(1)
        assert raised.value.retry_after == int(asked)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_hardening_61_a_redirect_is_not_taken_for_success(status: int) -> None:
    # A proxy sending http to https answers 301, with no body or with one: nothing was done.
    for body in (None, {"id": 1}):
        with scripted(status, body, {"Location": "https://127.0.0.1:1/"}) as redirected:
            with pytest.raises(ServerError) as raised:
                redirected.revoke_key(5)  # its own answer has no body
            assert (raised.value.status, raised.value.slug) == (status, "unexpected-status")
            with pytest.raises(ServerError):
                redirected.get(1)


def test_hardening_61_an_empty_answer_to_a_call_that_reads_one_is_a_server_error() -> None:
    with scripted(204, None) as empty:
        empty.revoke_key(5)  # the API's own answer: 204
        with pytest.raises(ServerError, match="cannot be read"):
            empty.get(1)


@pytest.mark.parametrize(
    "body",
    [
        {"ok": True},
        [],
        "job",
        {"jobs": [{"id": "7; rm", "type": "noop"}], "next_cursor": None},
        {"jobs": [{"id": 7}], "next_cursor": None},
    ],
)
def test_hardening_61_json_of_another_shape_is_a_server_error(body: Any) -> None:
    with scripted(200, body) as odd:
        with pytest.raises(ServerError) as raised:
            odd.list_page()
        assert raised.value.slug == "unreadable" and "GET /jobs" in str(raised.value)
        with pytest.raises(ServerError, match="cannot be read"):
            odd.enqueue("noop")


def test_hardening_61_a_call_the_server_answered_is_not_sent_again_though_unreadable() -> None:
    # Answered 2xx, the server acted: sent again (as a 502 was), a complete that landed
    # would be refused the second time, and the real trouble hidden.
    pool = Scripted(lambda _: answer(200, {"x": 1}))
    odd = Client("http://127.0.0.1:1", "ql_x", transport=pool)
    with odd, pytest.raises(ServerError) as raised:
        odd.get(1)
    assert len(pool.sent) == 1
    assert (raised.value.status, raised.value.slug) == (200, "unreadable")
    assert isinstance(raised.value.__cause__, KeyError)  # what the client could not read


@pytest.mark.parametrize("content", [b"[" * 100_000 + b"]" * 100_000, b'{"id": NaN}', b"{"])
def test_hardening_61_an_answer_that_is_not_json_is_a_server_error(content: bytes) -> None:
    pool = Scripted(lambda _: Answer(200, content, None))
    odd = Client("http://127.0.0.1:1", "ql_x", retry_policy=FAST, transport=pool)
    with odd, pytest.raises(ServerError) as raised:
        odd.get(1)
    assert raised.value.slug == "not-json"


def test_a_problem_whose_detail_is_not_text_is_told_by_its_title() -> None:
    problem = {"type": "conflict-ish", "title": "Odd", "detail": {"a": "\x1b[2J"}}
    odd = scripted(409, problem, retry=RetryPolicy(attempts=1))
    with odd, pytest.raises(ServerError) as raised:
        odd.get(1)
    assert str(raised.value) == "Odd"


def test_server_failure_is_a_server_error_with_its_status() -> None:
    problem = {"type": "internal", "title": "Internal", "status": 500, "detail": "oops"}
    failing = scripted(500, problem)
    with failing, pytest.raises(ServerError) as raised:
        failing.get(1)
    assert raised.value.status == 500


def test_unreachable_server_raises_server_unavailable_after_retries() -> None:
    nowhere = Client(f"http://127.0.0.1:{free_port()}", "ql_x", retry_policy=FAST)
    with nowhere, pytest.raises(ServerUnavailable) as raised:
        nowhere.claim()
    assert "cannot reach" in raised.value.detail


def test_hardening_07_sdk_repr_hides_the_api_key(real_server: RealServer) -> None:
    """No repr or str of a client object shows a key, a lease token or a URL's password:
    tracebacks with locals, debuggers and error trackers print them."""
    secret = real_server.keys["mailer"]
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        shop.enqueue("noop")
    with Client(real_server.url, real_server.keys["root"]) as root:
        made = root.create_key("repr-probe", ["worker"])
    assert made.key is not None
    mailer = Client(real_server.url, secret)
    (job,) = mailer.claim(types=["noop"], limit=1)
    assert job.lease_token is not None
    worker = Worker(concurrency=1)
    worker.handler("noop")(lambda job: None)
    loop = asyncio.new_event_loop()
    run = Run(mailer, worker.handlers, worker.options, loop)
    unreachable = Client(
        f"http://probe:pw-{secret}@127.0.0.1:{free_port()}",
        secret,
        retry_policy=RetryPolicy(attempts=1),
    )
    with pytest.raises(ServerUnavailable) as refused:
        unreachable.get(1)
    async_client = AsyncClient(real_server.url, secret)
    objects: list[object] = [
        mailer, mailer.connection, mailer.retry_policy, unreachable, unreachable.connection,
        async_client, async_client.connection,
        worker, worker.options, run, run.claimer, run.leases, run.acknowledger, run.handlers,
        Running(job, 30.0), job, made, refused.value,
    ]  # fmt: skip
    try:
        for thing in objects:
            for shown in (repr(thing), str(thing)):
                for hidden in (secret, made.key, job.lease_token):
                    assert hidden not in shown, (type(thing).__name__, shown)
                assert "pw-" not in shown, (type(thing).__name__, shown)
    finally:
        mailer.release(job)
        mailer.close()
        unreachable.close()
        loop.run_until_complete(async_client.aclose())
        loop.close()


def test_a_lingering_claim_takes_the_jobs_enqueued_while_it_lingers(
    real_server: RealServer,
) -> None:
    with client(real_server, "shop") as shop, client(real_server, "mailer") as worker:
        first = shop.enqueue("send_email", {"to": "a@example.com"})
        with ThreadPoolExecutor(1) as pool:
            claimed = pool.submit(worker.claim, types=["send_email"], limit=2, linger_ms=1000)
            wait_until(lambda: shop.get(first.id).status == "running", "the first claimed")
            second = shop.enqueue("send_email", {"to": "b@example.com"})
            jobs = claimed.result(timeout=30)
    assert [j.id for j in jobs] == [first.id, second.id] and all(j.lease_token for j in jobs)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_each_verb_reads_as_a_method_of_its_class(cls: type[Any]) -> None:
    for name in ("claim", "get", "complete_many", "revoke_key", "wait", "result"):
        signature = inspect.signature(getattr(cls, name))
        assert next(iter(signature.parameters)) == "self", name
        assert "Call" not in str(signature.return_annotation), name
        assert "Awaiting" not in str(signature.return_annotation), name
    assert inspect.signature(Client.claim).return_annotation == list[Job]
    assert inspect.signature(Client.revoke_key).return_annotation is None
    assert "limit" in inspect.signature(Client.claim).parameters
    assert Client.claim.__doc__ and "claim" in Client.claim.__doc__.lower()


def test_a_verb_called_on_the_class_sends_for_the_client_given(
    real_server: RealServer,
) -> None:
    with client(real_server, "shop") as shop:
        job = Client.enqueue(shop, "noop", {"n": 1})
        bound = inspect.signature(shop.get)
        assert "self" not in bound.parameters and bound.return_annotation is Job
        assert Client.get(shop, job.id) == job
        (event,) = Client.events(shop, job)
        assert event.event == "enqueued"


class _LateAnswers(BaseHTTPRequestHandler):
    """Answers every read with a job, 1.5 s late (a busy server)."""

    def do_GET(self) -> None:
        time.sleep(1.5)
        body = json.dumps({"id": 7, "type": "noop", "payload": {}, "priority": "low",
                           "status": "pending", "retry_count": 0, "max_retries": 3,
                           "run_at": "2026-11-30T03:32:31Z", "created_at": "2026-11-30T03:32:31Z",
                           "updated_at": "2026-11-30T03:32:31Z"}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_both_clients_take_an_answer_that_comes_within_their_timeout_alike() -> None:
    """``timeout`` is seconds to connect, and again to be answered: an answer 1.5 s late
    with ``timeout=1`` reached ``Client`` but was a ReadTimeout for ``AsyncClient``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LateAnswers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with Client(url, "ql_x", timeout=1, retry_policy=RetryPolicy(attempts=1)) as blocking:
            assert blocking.get(7).id == 7

        async def read() -> int:
            policy = RetryPolicy(attempts=1)
            async with AsyncClient(url, "ql_x", timeout=1, retry_policy=policy) as awaited:
                return (await awaited.get(7)).id

        assert asyncio.run(read()) == 7
    finally:
        server.shutdown()
        server.server_close()


def test_a_closed_client_of_either_kind_sends_nothing() -> None:
    pool = Scripted(lambda _: answer(200, {"jobs": [], "next_cursor": None}))
    blocking = Client("http://127.0.0.1:1", "ql_x", transport=pool)
    blocking.close()
    with pytest.raises(RuntimeError, match="Client is closed"):
        blocking.list_page()
    assert pool.sent == []

    async def after_close() -> None:
        awaited = AsyncClient("http://127.0.0.1:1", "ql_x")
        await awaited.aclose()
        with pytest.raises(RuntimeError, match="AsyncClient is closed"):
            await awaited.list_page()

    asyncio.run(after_close())


def test_a_copy_with_other_options_sends_nothing_once_its_original_is_closed() -> None:
    original = Client("http://127.0.0.1:1", "ql_x")
    copy = original.with_options(timeout=1, retry_policy=RetryPolicy(attempts=1))
    original.close()  # the transport they share: closed, it opens no connection again
    with pytest.raises(RuntimeError, match="Client is closed"):
        copy.get(1)
