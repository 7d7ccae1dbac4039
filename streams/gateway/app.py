"""The gateway's HTTP API (FastAPI): ``/run_code``, ``/v1/rewards``, ``/get_reward``, ``/health``, ``/metrics``.

Every answer is JSON. Validation errors are FastAPI's 422 (``{"detail": [{"loc": ["body", "generations", 3,
"task_id"], "msg": ..., "type": ...}]}``: the pydantic location names the field; a lone surrogate anywhere in a
JSON body is one too, ``strict_json``), the door's are 401/403/408/413/429 (``streams.gateway.guard``), Kafka
unreachable is 503, a run or reward that did not come back in time is 504 (verl's sandbox client retries
those). Nothing here holds state another replica would need: runs and rewards are in Kafka.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pydantic_core
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from schemas.codec import encode
from schemas.errors import ValidationError
from schemas.events import GenerationEvent, RewardEvent
from schemas.runs import COMPILE_FLOOR_MAX_S, RunReply, RunRequest
from streams.gateway.bridge import KafkaUnavailableError, Publisher, ReplyTail, RewardTail
from streams.gateway.config import GatewayConfig
from streams.gateway.guard import ASGIApp, Guard
from streams.gateway.metrics import GatewayMetrics
from streams.gateway.rewards_api import (
    LabelError,
    OpenRlhfRequest,
    OpenRlhfResponse,
    RewardOut,
    RewardsRequest,
    RewardsResponse,
    completion_code,
    parse_label,
)
from streams.gateway.sandbox_fusion import RunCodeRequest, RunCodeResponse, response_of
from streams.gateway.strict_json import CheckedRoute, validation_handler
from streams.gateway.surrogates import lone_surrogate_at

#: A run's reply may come this long after the run's own time limits (sandbox start, files, the transaction).
RUN_GRACE_S = 15.0
_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


def _unpinned(_task_id: str) -> str | None:
    return None


@dataclass
class GatewayDeps:
    """What the app talks to; the CLI builds them (``task_exists`` and ``task_version`` read the task
    registry: whether a task exists, its latest version, which each generation is pinned to when published)."""

    config: GatewayConfig
    publisher: Publisher
    replies: ReplyTail
    rewards: RewardTail
    task_exists: Callable[[str], bool]
    metrics: GatewayMetrics
    task_version: Callable[[str], str | None] = _unpinned


def _invalid(loc: Sequence[str | int], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": tuple(loc), "msg": message, "type": "value_error", "input": None}])


def _not_unicode(loc: Sequence[str | int], value: object) -> RequestValidationError:
    """The 422 for text no encoder takes, at the first lone surrogate in ``value`` (else at ``loc``)."""
    found = lone_surrogate_at(value)
    if found is None:
        return _invalid(loc, "not valid Unicode")
    where, problem = found
    return _invalid((*loc, *where), problem)


def _unavailable(why: str) -> HTTPException:
    return HTTPException(503, f"Kafka is unreachable: {why}")


class _Published:
    """Generation ids this replica published and has not seen rewarded: what ``GET`` calls pending."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, ids: Sequence[str]) -> None:
        for gid in ids:
            self._ids[gid] = None
            self._ids.move_to_end(gid)
        while len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def __contains__(self, gid: str) -> bool:
        return gid in self._ids


class _Service:
    """The routes' work, apart from FastAPI's wiring."""

    def __init__(self, deps: GatewayDeps) -> None:
        self.deps = deps
        self.config = deps.config
        self.published = _Published(deps.config.reward_cache)

    # ---- /run_code ------------------------------------------------------------------------------------
    async def run_code(self, body: RunCodeRequest) -> RunCodeResponse:
        deps, cfg = self.deps, self.config
        if not deps.replies.ready.is_set():
            deps.metrics.runs.labels("unavailable").inc()
            raise _unavailable(deps.replies.problem or "the replies tail is not ready")
        request_id = uuid.uuid4().hex
        value = self._run_request(body, request_id)
        future = deps.replies.expect(request_id)
        try:
            await self._deliver([deps.publisher.send(cfg.run_requests_topic, request_id.encode(), value)])
            # a language's compile floor may raise the compile timeout, and a build SandboxFusion times as part
            # of the run (go_test) may take the run's timeout
            build_s = max(body.compile_timeout, body.run_timeout, COMPILE_FLOOR_MAX_S)
            wait_s = cfg.run_queue_s + build_s + body.run_timeout + RUN_GRACE_S
            try:
                reply: RunReply = await asyncio.wait_for(future, timeout=wait_s)
            except TimeoutError:
                deps.metrics.runs.labels("timeout").inc()
                raise HTTPException(
                    504,
                    f"no executor answered run {request_id} within {wait_s:.0f}s (RS_GATEWAY_RUN_QUEUE_S "
                    f"{cfg.run_queue_s:g}s of queueing plus the run's own limits): the executors are busy or down",
                ) from None
        finally:
            deps.replies.forget(request_id, future)
        response = response_of(reply)
        deps.metrics.runs.labels(response.status).inc()
        return response

    def _run_request(self, body: RunCodeRequest, request_id: str) -> bytes:
        cfg = self.config
        try:
            request = RunRequest(
                request_id=request_id,
                reply_to=cfg.instance_id,
                reply_partition=cfg.reply_partition,
                language=body.language,
                code=body.code,
                stdin=body.stdin,
                files=body.written_files(),
                fetch_files=list(body.fetch_files),
                compile_timeout_s=float(body.compile_timeout),
                run_timeout_s=float(body.run_timeout),
                memory_mb=body.memory_limit_MB if body.memory_limit_MB > 0 else None,
                deadline=datetime.now(UTC) + timedelta(seconds=cfg.run_queue_s),
            )
        except pydantic.ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            raise _invalid(("body", *(str(p) for p in first["loc"])), str(first["msg"])) from None
        try:
            return encode(request)
        except ValidationError as exc:  # over the message cap
            raise HTTPException(413, f"the run request does not fit one Kafka message: {exc}") from None
        except pydantic_core.PydanticSerializationError:  # a lone surrogate the body check did not see
            raise _not_unicode(("body",), body.model_dump()) from None

    async def _deliver(self, deliveries: Sequence[asyncio.Future[None]]) -> None:
        try:
            await asyncio.wait_for(asyncio.gather(*deliveries), timeout=self.config.kafka_timeout_s + 2.0)
        except KafkaUnavailableError as exc:
            raise _unavailable(str(exc)) from None
        except TimeoutError:
            raise _unavailable(f"no acknowledgement within {self.config.kafka_timeout_s:g}s") from None

    # ---- rewards --------------------------------------------------------------------------------------
    def _generations(self, body: RewardsRequest) -> list[GenerationEvent]:
        if len(body.generations) > self.config.max_batch:
            raise _invalid(("body", "generations"), f"at most {self.config.max_batch} generations per request")
        seen: set[str] = set()
        events = []
        for i, gen in enumerate(body.generations):
            if not self.deps.task_exists(gen.task_id):
                raise _invalid(("body", "generations", i, "task_id"), f"unknown task {gen.task_id!r}")
            gid = gen.generation_id or uuid.uuid4().hex
            if gid in seen:
                raise _invalid(("body", "generations", i, "generation_id"), f"{gid!r} appears twice in the batch")
            seen.add(gid)
            try:
                events.append(
                    GenerationEvent(
                        generation_id=gid,
                        episode_id=gid,
                        run_id=body.run_id,
                        task_id=gen.task_id,
                        task_version=self.deps.task_version(gen.task_id),
                        policy_version=body.policy_version,
                        language=gen.language,
                        code=gen.code,
                        group_id=gen.group_id,
                        sample_index=gen.sample_index,
                        metadata=dict(gen.metadata),
                    )
                )
            except pydantic.ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                raise _invalid(("body", "generations", i, *(str(p) for p in first["loc"])), str(first["msg"])) from None
        return events

    async def publish(self, events: Sequence[GenerationEvent], route: str) -> dict[str, asyncio.Future[RewardEvent]]:
        """Register a waiter per generation, then publish them all; 503 if Kafka does not take them."""
        deps = self.deps
        if not deps.rewards.ready.is_set():
            raise _unavailable(deps.rewards.problem or "the rewards tail is not ready")
        try:
            values = [(e.key(), encode(e)) for e in events]
        except ValidationError as exc:
            raise HTTPException(413, str(exc)) from None
        except pydantic_core.PydanticSerializationError:  # a lone surrogate the body check did not see
            dumped = {"generations": [e.model_dump() for e in events]}
            raise _not_unicode(("body",), dumped) from None
        futures = {e.generation_id: deps.rewards.expect(e.generation_id) for e in events}
        try:
            await self._deliver([deps.publisher.send(self.config.generations_topic, k, v) for k, v in values])
        except BaseException:
            self.forget(futures)
            raise
        self.published.add([e.generation_id for e in events])
        deps.metrics.rewards.labels(route).inc(len(events))
        return futures

    def forget(self, futures: dict[str, asyncio.Future[RewardEvent]]) -> None:
        for gid, future in futures.items():
            self.deps.rewards.forget(gid, future)
            if not future.done():
                future.cancel()

    async def rewards(self, body: RewardsRequest, response: Response) -> RewardsResponse:
        events = self._generations(body)
        futures = await self.publish(events, "/v1/rewards")
        try:
            if not body.wait:
                response.status_code = 202
                pending = [RewardOut.pending(e.generation_id) for e in events]
                return RewardsResponse(run_id=body.run_id, complete=False, rewards=pending)
            timeout = min(body.timeout_s or self.config.reward_wait_s, self.config.reward_wait_s)
            await asyncio.wait(list(futures.values()), timeout=timeout)
            out = [
                RewardOut.of(f.result()) if f.done() and not f.cancelled() else RewardOut.pending(gid)
                for gid, f in futures.items()
            ]
            return RewardsResponse(run_id=body.run_id, complete=all(r.status == "rewarded" for r in out), rewards=out)
        finally:
            self.forget(futures)

    def reward(self, generation_id: str) -> RewardOut:
        found = self.deps.rewards.get(generation_id)
        if found is not None:
            return RewardOut.of(found)
        if generation_id in self.published:
            return RewardOut.pending(generation_id)
        raise HTTPException(
            404,
            f"no reward for {generation_id} has reached this gateway: not rewarded yet (another replica may have "
            "published it: poll again), or older than what it keeps",
        )

    async def openrlhf(self, body: OpenRlhfRequest, run_id: str) -> OpenRlhfResponse:
        n = len(body.query)
        if n > self.config.max_batch:
            raise _invalid(("body", "query"), f"at most {self.config.max_batch} samples per request")
        if body.labels is None:
            raise _invalid(("body", "labels"), "required: each sample's label names its task (see the docs)")
        for name, values in (("labels", body.labels), ("prompts", body.prompts)):
            if values is not None and len(values) != n:
                raise _invalid(("body", name), f"has {len(values)} entries for {n} queries")
        batch = uuid.uuid4().hex[:12]
        generations = []
        for i, label in enumerate(body.labels):
            try:
                task_id, language = parse_label(label)
            except LabelError as exc:
                raise _invalid(("body", "labels", i), str(exc)) from None
            prompt = body.prompts[i] if body.prompts is not None else None
            generations.append(
                {
                    "task_id": task_id,
                    "language": language,
                    "code": completion_code(body.query[i], prompt),
                    "generation_id": f"openrlhf-{batch}-{i}",
                    "sample_index": i,
                }
            )
        try:
            request = RewardsRequest.model_validate({"run_id": run_id, "generations": generations})
        except pydantic.ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = ["labels" if p == "generations" else p for p in first["loc"]]
            raise _invalid(("body", *(str(p) for p in loc)), str(first["msg"])) from None
        events = self._generations(request)
        futures = await self.publish(events, "/get_reward")
        try:
            await asyncio.wait(list(futures.values()), timeout=self.config.reward_wait_s)
            missing = [gid for gid, f in futures.items() if not f.done() or f.cancelled()]
            if missing:
                raise HTTPException(
                    504, f"{len(missing)} of {n} rewards did not arrive within {self.config.reward_wait_s:g}s"
                )
            rewards = [f.result().reward for f in futures.values()]
        finally:
            self.forget(futures)
        return OpenRlhfResponse(rewards=rewards, scores=rewards, extra_logs={})

    def health(self) -> tuple[int, dict[str, Any]]:
        deps = self.deps
        tails = {"replies": deps.replies, "rewards": deps.rewards}
        ready = all(t.ready.is_set() for t in tails.values())
        body = {
            "status": "ok" if ready else "degraded",
            "instance_id": self.config.instance_id,
            "reply_partition": self.config.reply_partition,
            "kafka": {name: {"ready": t.ready.is_set(), "problem": t.problem} for name, t in tails.items()},
        }
        return (200 if ready else 503), body


def create_app(deps: GatewayDeps) -> ASGIApp:
    """The gateway's ASGI app: the FastAPI routes behind the door (``Guard``)."""
    service = _Service(deps)
    app = FastAPI(
        title="rewardstream gateway",
        version="1",
        description=__doc__,
        docs_url="/docs",
        redoc_url="/redoc",
    )
    app.router.route_class = CheckedRoute  # a JSON body with a lone surrogate is a 422 naming where it is
    app.add_exception_handler(RequestValidationError, validation_handler)
    # Documents the bearer scheme in the OpenAPI; the check itself is the Guard's (before any route runs).
    secured = [Depends(HTTPBearer(auto_error=False, description="RS_GATEWAY_TOKENS (needed unless on loopback)"))]

    @app.post(
        "/run_code", response_model=RunCodeResponse, tags=["sandbox"], dependencies=secured,
        responses={503: {"description": "Kafka unreachable"}, 504: {"description": "no executor answered in time"}},
    )  # fmt: skip
    async def run_code(body: RunCodeRequest) -> RunCodeResponse:
        """Run a program once, SandboxFusion-compatible (through Kafka, on the executors' sandboxes)."""
        return await service.run_code(body)

    @app.post(
        "/v1/rewards", response_model=RewardsResponse, tags=["rewards"], dependencies=secured,
        responses={202: {"model": RewardsResponse, "description": "published (wait=false): poll each id"}},
    )  # fmt: skip
    async def post_rewards(body: RewardsRequest, response: Response) -> RewardsResponse:
        """Reward a batch of generations against registered tasks (waits, or returns ids to poll)."""
        return await service.rewards(body, response)

    @app.get(
        "/v1/rewards/{generation_id}", response_model=RewardOut, tags=["rewards"],
        dependencies=secured, responses={404: {"description": "no reward seen for this id"}},
    )  # fmt: skip
    async def get_reward_by_id(generation_id: str = Path(pattern=_ID_PATTERN)) -> RewardOut:
        """One generation's reward: from any replica once it is rewarded; pending on the replica that published it."""
        return service.reward(generation_id)

    @app.post(
        "/get_reward", response_model=OpenRlhfResponse, tags=["rewards"], dependencies=secured
    )  # fmt: skip
    async def openrlhf_reward(
        body: OpenRlhfRequest,
        run_id: str = Query("openrlhf", pattern=_ID_PATTERN, description="run id of these generations"),
    ) -> OpenRlhfResponse:
        """OpenRLHF's remote reward (``--remote_rm_url``): labels name the tasks, queries hold the code."""
        return await service.openrlhf(body, run_id)

    @app.get("/health", tags=["ops"])
    async def health() -> JSONResponse:
        """Whether this replica reads Kafka (503 while it does not)."""
        status, body = service.health()
        return JSONResponse(body, status_code=status)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def metrics() -> Response:
        """Prometheus metrics of this replica."""
        return Response(deps.metrics.exposition(), media_type="text/plain; version=0.0.4")

    return Guard(
        app,
        tokens=deps.config.tokens,
        concurrency=deps.config.token_concurrency,
        max_body_bytes=deps.config.max_body_bytes,
        body_timeout_s=deps.config.body_timeout_s,
        peer_body_reads=deps.config.peer_body_reads,
        metrics=deps.metrics,
    )
