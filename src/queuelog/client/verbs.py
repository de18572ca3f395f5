"""The SDK's verbs, listed once for ``Client`` and ``AsyncClient``.

Each verb builds its call in ``calls`` and hands it to the client's ``send``: a blocking
client returns the answer, an asyncio client a coroutine of it. So a new API call is
one function in ``calls`` and one line here, and both clients have it. A wait (``wait``,
``result``, begun in ``awaiting``) and a history (``events``, in ``reads``) are many reads,
which the client follows.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, get_args, get_type_hints, overload

from queuelog.client import admin_calls, awaiting, calls, reads
from queuelog.client.calls import Call
from queuelog.client.policy import Connection, RetryPolicy
from queuelog.client.reads import ManyReads

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")
H = TypeVar("H")  # what sends the requests: libcurl's handles or httpx's client
X = TypeVar("X")  # what may be given instead (tests)
M = TypeVar("M", bound="_Method[Any, Any]")


class _Awaited(Protocol):
    def send(self, call: Call[S], /) -> Coroutine[Any, Any, S]: ...
    def follow(self, reads: ManyReads[S], /) -> Coroutine[Any, Any, S]: ...


class _Blocking(Protocol):
    def send(self, call: Call[S], /) -> S: ...
    def follow(self, reads: ManyReads[S], /) -> S: ...


class _Method(Generic[P, T]):
    """A client method: what ``made_by`` makes of its arguments, handed to the client's
    ``send`` (a Call) or ``follow`` (its ManyReads). It reads as a method of its client
    class: ``help(Client.claim)`` and ``inspect.signature`` show the call's own
    parameters (after ``self`` on the class) and what it answers, and
    ``Client.claim(client, ...)`` calls it as a method is called."""

    taken_by: str  # the client's method that takes what ``made_by`` makes

    def __init__(self, made_by: Callable[P, Any]) -> None:
        self.made_by = made_by
        self.__doc__ = made_by.__doc__
        self.__name__ = self.__qualname__ = made_by.__name__
        made = inspect.signature(made_by)
        # A Call[X] or a ManyReads[X] is answered with an X (awaited, on AsyncClient).
        (answer,) = get_args(get_type_hints(made_by)["return"])
        answer = None if answer is type(None) else answer
        self.bound_signature = made.replace(return_annotation=answer)
        self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = [self_, *made.parameters.values()]
        self.__signature__ = self.bound_signature.replace(parameters=parameters)

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__, self.__qualname__ = name, f"{owner.__qualname__}.{name}"

    @overload
    def __get__(self: M, client: None, owner: type) -> M: ...
    @overload
    def __get__(self, client: _Awaited, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: _Blocking, owner: type) -> Callable[P, T]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        return self if client is None else self.bound(client)

    def bound(self, client: Any) -> Callable[..., Any]:
        """The method of ``client``: what ``client.verb`` is."""
        made_by, take = self.made_by, getattr(client, self.taken_by)

        @functools.wraps(made_by)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return take(made_by(*args, **kwargs))

        method.__signature__ = self.bound_signature  # type: ignore[attr-defined]
        return method

    def __call__(self, client: Any, /, *args: Any, **kwargs: Any) -> Any:
        return self.bound(client)(*args, **kwargs)


class Verb(_Method[P, T]):
    """A client method that builds its call with ``build`` and sends it."""

    taken_by = "send"

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        super().__init__(build)


class Follow(_Method[P, T]):
    """A client method of many reads (a wait, a history of many pages), begun by ``start``,
    that the client ``follow``s (blocking, or awaited) until they are over."""

    taken_by = "follow"

    def __init__(self, start: Callable[P, ManyReads[T]]) -> None:
        super().__init__(start)


class Verbs(ABC, Generic[H, X]):
    """What both clients share: how they are made, and their verbs. Each adds its own
    ``send`` (blocking or awaited) and the HTTP library it sends with."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retry_policy: RetryPolicy | None = None,
        transport: X | None = None,
    ) -> None:
        """
        Args:
            url: Server address; default ``$QUEUELOG_URL``, else ``http://127.0.0.1:8000``.
            api_key: The key to send; default ``$QUEUELOG_API_KEY``.
            timeout: Seconds to connect, and again to be answered (a claim gets its
                ``wait_seconds`` and linger on top); ``Client`` fails a request whose
                answer has not fully come by then.
            retry_policy: When a send that failed is tried again (see ``RetryPolicy``).
            transport: What to send through (tests): for ``Client``, an object with
                ``send`` and ``close`` (``queuelog.client.transport.Transport``); for
                ``AsyncClient``, an httpx async transport.
        """
        self.connection = Connection.resolve(url, api_key, timeout)
        self.retry_policy = retry_policy or RetryPolicy()
        self._http = self._open(transport)
        self._closed = False

    def _check_open(self) -> None:
        """A closed client sends nothing (either client alike): RuntimeError."""
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")

    @abstractmethod
    def _open(self, transport: X | None) -> H:
        """What sends the requests to ``self.connection``: libcurl (blocking) or httpx."""

    enqueue = Verb(calls.enqueue)
    enqueue_many = Verb(calls.enqueue_many)
    get = Verb(calls.get)
    list_page = Verb(calls.list_page)
    events = Follow(reads.events)
    events_page = Verb(calls.events_page)
    dependencies = Verb(calls.dependencies)
    cancel = Verb(calls.cancel)
    retry = Verb(calls.retry)
    claim = Verb(calls.claim)
    heartbeat = Verb(calls.heartbeat)
    release = Verb(calls.release)
    complete = Verb(calls.complete)
    complete_many = Verb(calls.complete_many)
    fail = Verb(calls.fail)
    create_key = Verb(admin_calls.create_key)
    list_keys = Verb(admin_calls.list_keys)
    revoke_key = Verb(admin_calls.revoke_key)
    wait = Follow(awaiting.wait)
    result = Follow(awaiting.result)
    list_schedules = Verb(admin_calls.list_schedules)
    create_schedule = Verb(admin_calls.create_schedule)
    get_schedule = Verb(admin_calls.get_schedule)
    delete_schedule = Verb(admin_calls.delete_schedule)
    pause_schedule = Verb(admin_calls.pause_schedule)
    resume_schedule = Verb(admin_calls.resume_schedule)
    trigger_schedule = Verb(admin_calls.trigger_schedule)
    list_types = Verb(admin_calls.list_types)
    pause_type = Verb(admin_calls.pause_type)
    resume_type = Verb(admin_calls.resume_type)
