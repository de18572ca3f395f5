"""The W3C trace context of an enqueue (single or batch) reaches the worker that claims
the job; a malformed one is ignored, never refused, as the Trace Context spec says."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def claimed_trace(producer: Api, worker: Api, headers: Any, batch: bool = False) -> Any:
    """Enqueue one job (or a batch of two) with ``headers``; the claimed jobs' contexts."""
    sent = [*producer.headers.items(), *(headers.items() if isinstance(headers, dict) else headers)]
    if batch:
        body = {"jobs": [{"type": "noop"}, {"type": "send_email", "payload": {"to": "a@b.c"}}]}
        answer = producer.client.post("/jobs/batch", json=body, headers=sent)
        assert answer.status_code == 200, answer.text
    else:
        answer = producer.client.post("/jobs", json={"type": "noop"}, headers=sent)
        assert answer.status_code == 201, answer.text
        assert "trace_context" not in answer.json()  # a claim's answer carries it
    jobs = worker.post("/jobs/claim", json={"limit": 10}).json()["jobs"]
    contexts = [job["trace_context"] for job in jobs]
    return contexts if batch else contexts[0]


def test_a_claimed_job_carries_its_enqueue_s_trace_context(producer: Api, worker: Api) -> None:
    headers = {"traceparent": PARENT, "tracestate": STATE}
    assert claimed_trace(producer, worker, headers) == {"traceparent": PARENT, "tracestate": STATE}


def test_a_job_enqueued_without_one_has_none(producer: Api, worker: Api) -> None:
    assert claimed_trace(producer, worker, {}) is None
    assert claimed_trace(producer, worker, {"tracestate": STATE}) is None  # no traceparent


def test_every_job_of_a_batch_carries_the_request_s_trace_context(
    producer: Api, worker: Api
) -> None:
    contexts = claimed_trace(producer, worker, {"traceparent": PARENT}, batch=True)
    assert contexts == [{"traceparent": PARENT, "tracestate": None}] * 2


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "not a traceparent",
        PARENT.upper(),  # hex is lowercase
        "ff" + PARENT[2:],  # version ff is forbidden
        PARENT + "-extra",  # version 00 has exactly four fields
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero parent id
        "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",  # short trace id
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01",  # not hex
        "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "x" * 30,  # no "-"
    ],
)
def test_a_malformed_traceparent_is_ignored_and_the_job_made(
    producer: Api, worker: Api, traceparent: str
) -> None:
    headers = {"traceparent": traceparent, "tracestate": STATE}
    assert claimed_trace(producer, worker, headers) is None


def test_a_malformed_traceparent_in_a_batch_is_ignored_too(producer: Api, worker: Api) -> None:
    assert claimed_trace(producer, worker, {"traceparent": "junk"}, batch=True) == [None, None]


def test_two_traceparent_headers_are_ignored(producer: Api, worker: Api) -> None:
    headers = [("traceparent", PARENT), ("traceparent", PARENT)]
    assert claimed_trace(producer, worker, headers) is None


@pytest.mark.parametrize("tail", ["", "-what-comes-next", "-\x7f<script>" + "x" * 300])
def test_a_later_version_s_traceparent_is_kept_as_the_version_00_it_extends(
    producer: Api, worker: Api, tail: str
) -> None:
    later = "cc" + PARENT[2:] + tail
    assert claimed_trace(producer, worker, {"traceparent": later})["traceparent"] == PARENT


def _state(producer: Api, worker: Api, *tracestates: str) -> Any:
    headers = [("traceparent", PARENT), *(("tracestate", t) for t in tracestates)]
    context = claimed_trace(producer, worker, headers)
    assert context["traceparent"] == PARENT  # whatever the tracestate, the trace goes on
    return context["tracestate"]


def test_tracestate_headers_make_one_list_without_blanks(producer: Api, worker: Api) -> None:
    assert _state(producer, worker, " congo=t61rcWkgMzE ,, ", "rojo=00f067aa0ba902b7\t") == STATE


@pytest.mark.parametrize(
    "tracestate",
    [
        "Congo=t61rcWkgMzE",  # keys are lowercase
        "congo",  # no value
        "congo=a=b",  # "=" in a value
        "congo=t61,congo=again",  # a key twice
        "1congo=t61",  # a simple key starts with a letter
        "tenant@Vendor=x",  # a system id is lowercase
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
    ],
)
def test_a_malformed_tracestate_is_ignored_whole(
    producer: Api, worker: Api, tracestate: str
) -> None:
    assert _state(producer, worker, tracestate) is None


def test_thirty_two_members_and_a_multi_tenant_key_are_kept(producer: Api, worker: Api) -> None:
    members = ",".join(["tenant-1@vendor=x", *(f"k{i}=v" for i in range(31))])
    assert _state(producer, worker, members) == members


def test_a_long_tracestate_is_cut_to_512_characters_long_members_first(
    producer: Api, worker: Api
) -> None:
    long = "big=" + "x" * 200  # over 128 characters: dropped first
    short = [f"k{i:02}=" + "v" * 36 for i in range(14)]  # 40 characters each
    kept = _state(producer, worker, ",".join([short[0], long, *short[1:]]))
    assert kept == ",".join(short[:12])  # then from the end: 12 * 41 - 1 = 491 characters
    assert len(kept) <= 512


def test_the_description_names_both_headers_on_both_enqueues(producer: Api) -> None:
    document = producer.get("/openapi.json").json()
    for path in ("/jobs", "/jobs/batch"):
        parameters = document["paths"][path]["post"]["parameters"]
        headers = {p["name"]: p for p in parameters if p["in"] == "header"}
        assert {"traceparent", "tracestate"} <= set(headers)
        assert all(not headers[h]["required"] for h in ("traceparent", "tracestate"))
    claimed = document["components"]["schemas"]["ClaimedJobOut"]
    assert "trace_context" in claimed["required"]
