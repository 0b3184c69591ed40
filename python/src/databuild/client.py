"""A typed client for ``databuild serve`` (contract section 6), on the standard library alone.

Answers come back as small dataclasses with the fields most code reads, and the whole JSON answer
in ``raw`` for the rest (the service's OpenAPI document, ``GET /api/v1/openapi.json``, names every
field). Errors are :class:`ClientError`, with the HTTP status and the service's error code.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence

#: Build request states after which nothing more happens to a build that runs.
ENDED = frozenset({"completed", "failed", "refused", "cancelled"})


class ClientError(Exception):
    """The service refused or failed a request: ``status`` is the HTTP status, ``code`` the
    service's error code (``unplannable``, ``unauthorized``, ``not_found``, ...), ``message`` what it said."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class BuildAnswer:
    """A build request as the service reports it."""

    build_request_id: str
    status: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def ended(self) -> bool:
        """The build's final status is known. ``analysis_completed`` ends only an analysis (a dry
        run): a build that runs passes through it on its way to executing."""
        if self.status == "analysis_completed":
            return bool(self.raw.get("analyze_only"))
        return self.status in ENDED

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "BuildAnswer":
        return cls(raw["build_request_id"], raw.get("status", "received"), raw)


@dataclass(frozen=True)
class PartitionStatus:
    """A partition's state: ``live``, ``stale``, ``missing``, ``building``, ``failed``, ..."""

    ref: str
    status: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "PartitionStatus":
        return cls(raw["ref"], raw["status"], raw)


@dataclass(frozen=True)
class LogEvent:
    """One event of the build event log (contract section 5)."""

    idx: int
    kind: str
    status: str
    partition_ref: Optional[str]
    job_run_id: Optional[str]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "LogEvent":
        return cls(
            raw["idx"],
            raw["kind"],
            raw["status"],
            raw.get("partition_ref"),
            raw.get("job_run_id"),
            raw,
        )


class Client:
    """Talks to one service. ``token`` is the write token (or the read token, for reads only)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- plumbing ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, accept: str = "application/json"):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                answer = json.loads(text)
                raise ClientError(e.code, answer.get("code", "error"), answer.get("error", text)) from None
            except (json.JSONDecodeError, AttributeError):
                raise ClientError(e.code, "error", text) from None

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        with self._request(method, path, body) as response:
            return json.load(response)

    @staticmethod
    def _segment(text: str) -> str:
        return urllib.parse.quote(text, safe="")

    # -- builds -----------------------------------------------------------------------------

    def build(
        self,
        refs: Sequence[str],
        force: bool = False,
        allow_stale: bool = False,
        keep_going: bool = False,
        parallel: Optional[int] = None,
    ) -> str:
        """Requests a build of ``refs`` (braces expand, as on the command line); answers at once
        with the build request's id."""
        body: dict[str, Any] = {
            "partitions": list(refs),
            "force": force,
            "allow_stale": allow_stale,
            "keep_going": keep_going,
        }
        if parallel is not None:
            body["parallel"] = parallel
        return self._json("POST", "/api/v1/builds", body)["build_request_id"]

    def get_build(self, build_request_id: str) -> BuildAnswer:
        return BuildAnswer.of(self._json("GET", f"/api/v1/builds/{self._segment(build_request_id)}"))

    def wait(self, build_request_id: str, timeout: float = 600.0, poll: float = 0.2) -> BuildAnswer:
        """Waits until the build has ended (completed, failed, refused or cancelled)."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.get_build(build_request_id)
            if answer.ended:
                return answer
            if time.monotonic() > deadline:
                raise TimeoutError(f"build {build_request_id} still {answer.status} after {timeout} s")
            time.sleep(poll)

    def cancel(self, build_request_id: str) -> None:
        self._json("DELETE", f"/api/v1/builds/{self._segment(build_request_id)}")

    def events(self, build_request_id: str) -> Iterator[LogEvent]:
        """A build's events as they are appended (its SSE stream), ending when the build ends."""
        path = f"/api/v1/builds/{self._segment(build_request_id)}/events/stream"
        with self._request("GET", path, accept="text/event-stream") as response:
            data: list[str] = []
            for raw_line in response:
                line = raw_line.decode().rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif line == "" and data:
                    yield LogEvent.of(json.loads("\n".join(data)))
                    data = []

    # -- partitions -------------------------------------------------------------------------

    def status(self, ref: str) -> PartitionStatus:
        return PartitionStatus.of(self._json("GET", f"/api/v1/partitions/{self._segment(ref)}/status"))

    def explain(self, ref: str) -> Mapping[str, Any]:
        """Why ``ref`` is in its state, and what must run to build it."""
        return self._json("GET", f"/api/v1/partitions/{self._segment(ref)}/explain")

    def partitions(
        self,
        pattern: Optional[str] = None,
        status: Optional[str] = None,
        limit: int = 100,
    ) -> Iterator[Mapping[str, Any]]:
        """Every partition matching ``pattern`` (a glob) and ``status`` (``live``, ``stale``, ...),
        page after page."""
        after: Optional[str] = None
        while True:
            query = {"pattern": pattern, "status": status, "limit": limit, "after": after}
            params = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
            page = self._json("GET", f"/api/v1/partitions?{params}")
            yield from page["partitions"]
            after = page.get("next")
            if not after:
                return

    def taint(self, refs: Sequence[str], reason: Optional[str] = None) -> None:
        self._json("POST", "/api/v1/partitions/taint", {"partitions": list(refs), "reason": reason})

    # -- wants ------------------------------------------------------------------------------

    def want(self, refs: Sequence[str], **options: Any) -> Mapping[str, Any]:
        """Records a want for ``refs`` (options as the API's want body: ``sla``, ``ttl``, ...)."""
        return self._json("POST", "/api/v1/wants", {"partitions": list(refs), **options})

    def wants(self) -> Sequence[Mapping[str, Any]]:
        return self._json("GET", "/api/v1/wants")["wants"]
