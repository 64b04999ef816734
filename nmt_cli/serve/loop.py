"""The one thread that owns a model and decodes every request to it, batched continuously.

Requests (:class:`Job`) wait in a queue. Before every decoder step the loop moves waiting
sentences into the running batch while the batch's source tokens stay within the budget; every
step returns the sentences that finished, and a job is answered as soon as its last sentence is.
Sentences are grouped by their search settings (beam, alpha, ...): one
:class:`..decode.continuous.ContinuousSearch` per setting ("lane"), stepped in turn.

Nothing a request does stops the loop: a step that raises fails the jobs in its lane, with the
reason, and the loop goes on.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..config import DecodeConfig
from ..decode.constrained import Constraint
from ..decode.continuous import ContinuousSearch
from ..decode.search import Hypothesis
from ..decode.steering import StepProcessor
from ..decode.translation import SearchRequest, SearchService
from ..errors import NmtError, reason
from ..model.transformer import Transformer
from .metrics import ServerMetrics

log = logging.getLogger("nmt.serve")

SentenceKey = tuple[int, int]  # (job id, sentence index)
T = TypeVar("T")


class QueueFull(Exception):
    """More sentences wait than the queue allows (HTTP 429)."""


class ShuttingDown(Exception):
    """The server is draining (HTTP 503)."""


class Cancelled(Exception):
    """The searches were called off (their client went away)."""


@dataclass(eq=False)
class Job:
    """One request's sentences (source ids, already truncated to the model's length) and settings.

    ``on_done`` is called once, from the loop's thread, when every sentence has its n-best list or
    the job failed (``error`` set).
    """

    sentences: list[list[int]]
    config: DecodeConfig
    nbest: int
    on_done: Callable[[Job], None]
    results: list[list[Hypothesis]] = field(default_factory=list)
    # called in the loop's thread once every sentence has its n-best list (the model is the loop's alone: word
    # alignments and assessments read it), with the sources and their results; returns what ``finished`` keeps
    finish: Callable[[list[list[int]], list[list[Hypothesis]]], Any] | None = None
    finished: Any = None
    # "glossary": per sentence, the terms its translation must hold (decode/constrained.py); None: no glossary
    constraints: list[tuple[Constraint, ...]] | None = None
    # a multilingual model whose decoder reads the target tag: the token every output starts with (left out)
    first_token: int | None = None
    error: str | None = None
    ident: int = 0
    remaining: int = 0
    cancelled: bool = False


class DecodingLoop:
    """Continuous batching for one model (see the module docstring).

    ``batch_tokens`` bounds the running batch's source tokens (each sentence counts its length + EOS);
    ``batching=False`` decodes one job at a time, the baseline the load test compares with.
    """

    def __init__(
        self,
        model: Transformer,
        name: str,
        metrics: ServerMetrics,
        batch_tokens: int = 6000,
        max_queue: int = 1024,
        batching: bool = True,
        rules: Sequence[StepProcessor] = (),
    ) -> None:
        self.model, self.name, self.metrics = model, name, metrics
        self.rules = list(rules)  # the model's own rules of what a step may write (LoadedModel.rules)
        self.batch_tokens, self.max_queue, self.batching = batch_tokens, max_queue, batching
        self._waiting: deque[tuple[Job, int]] = deque()  # (job, sentence index), first come first served
        self._lanes: dict[tuple[DecodeConfig, int], ContinuousSearch] = {}
        self._jobs: dict[int, Job] = {}  # jobs with sentences waiting or running
        self._source_tokens: dict[SentenceKey, int] = {}  # running sentences' budget share
        self._ids = itertools.count(1)
        self._tasks: deque[tuple[Callable[[], Any], Future[Any]]] = deque()  # run alone, between two steps
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"decode-{name}", daemon=True)

    # ------------------------------------------------------------------ called from request handlers

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue a job; raises :class:`QueueFull` or :class:`ShuttingDown` instead of queueing it."""
        with self._wake:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            if len(self._waiting) + len(job.sentences) > self.max_queue:
                raise QueueFull(f"{len(self._waiting)} sentences are waiting (limit {self.max_queue})")
            job.ident, job.remaining = next(self._ids), len(job.sentences)
            job.results = [[] for _ in job.sentences]
            self._jobs[job.ident] = job
            self._waiting.extend((job, i) for i in range(len(job.sentences)))
            self.metrics.queue_length.labels(self.name).set(len(self._waiting))
            self._wake.notify()

    def run_alone(self, task: Callable[[], T]) -> T:
        """Run ``task`` in the loop's thread between two steps, the running batch waiting meanwhile, and return
        what it returns: a search the loop cannot batch (sampling draws from one generator in sequence) on the
        model that is the loop's alone."""
        done: Future[T] = Future()
        with self._wake:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            self._tasks.append((task, done))
            self._wake.notify()
        return done.result()

    def cancel(self, job: Job) -> None:
        """The client went away: its waiting sentences are dropped, its running rows leave at the next step."""
        with self._wake:
            job.cancelled = True
            self._wake.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new jobs, finish the queued and running ones, then end the thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)

    @property
    def queued_sentences(self) -> int:
        return len(self._waiting)

    @property
    def running_sentences(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    # ------------------------------------------------------------------ the loop's thread

    def _run(self) -> None:
        while True:
            with self._wake:
                self._drop_cancelled_waiting()
                tasks = list(self._tasks)
                self._tasks.clear()
                if not self._lanes and not self._waiting and not tasks:
                    if self._stopping:
                        return
                    self._wake.wait()
                    continue
                admitted = self._admit()
            for task, done in tasks:
                _run_task(task, done)
            for settings, sentences in admitted.items():
                self._join(settings, sentences)
            for settings in list(self._lanes):
                self._step(settings)
            self.metrics.running.labels(self.name).set(self.running_sentences)
            self.metrics.occupancy.labels(self.name).set(sum(self._source_tokens.values()) / self.batch_tokens)

    def _drop_cancelled_waiting(self) -> None:
        """Waiting sentences of cancelled or failed jobs leave the queue; a cancelled job with no
        running sentences left is closed (the caller holds the lock)."""
        if any(self._closed(job) for job, _ in self._waiting):
            self._waiting = deque(item for item in self._waiting if not self._closed(item[0]))
            self.metrics.queue_length.labels(self.name).set(len(self._waiting))  # the loop may now wait idle
        running = {key[0] for key in self._source_tokens}
        for job in [job for job in self._jobs.values() if job.cancelled and job.ident not in running]:
            self._finish(job, "cancelled")

    def _closed(self, job: Job) -> bool:
        return job.cancelled or job.ident not in self._jobs

    def _admit(self) -> dict[tuple[DecodeConfig, int], list[tuple[Job, int]]]:
        """Waiting sentences that fit the budget, by search settings (the caller holds the lock)."""
        admitted: dict[tuple[DecodeConfig, int], list[tuple[Job, int]]] = {}
        used = sum(self._source_tokens.values())
        if not self.batching and (self._lanes or used):
            return admitted
        first_job = self._waiting[0][0] if self._waiting else None
        while self._waiting:
            job, index = self._waiting[0]
            cost = len(job.sentences[index]) + 1
            if used and used + cost > self.batch_tokens:
                break
            if not self.batching and job is not first_job:
                break
            self._waiting.popleft()
            used += cost
            self._source_tokens[(job.ident, index)] = cost
            admitted.setdefault((job.config, job.nbest), []).append((job, index))
        self.metrics.queue_length.labels(self.name).set(len(self._waiting))
        return admitted

    def _join(self, settings: tuple[DecodeConfig, int], sentences: list[tuple[Job, int]]) -> None:
        lane = self._lanes.get(settings)
        if lane is None:
            lane = self._lanes[settings] = ContinuousSearch(self.model, *settings, rules=self.rules)
        try:
            lane.add(
                [job.sentences[i] for job, i in sentences],
                [(job.ident, i) for job, i in sentences],
                [job.constraints[i] if job.constraints is not None else () for job, i in sentences],
                [job.first_token if job.first_token is not None else -1 for job, _ in sentences],
            )
        except (RuntimeError, ValueError) as err:  # e.g. out of memory: these jobs fail, the loop goes on
            log.exception("encoding failed")
            for job, i in sentences:
                self._source_tokens.pop((job.ident, i), None)
                self._fail(job, f"decoding failed: {reason(err)}")

    def _step(self, settings: tuple[DecodeConfig, int]) -> None:
        lane = self._lanes[settings]
        cancelled = {key for key in lane.keys if key[0] not in self._jobs or self._jobs[key[0]].cancelled}
        try:
            finished = lane.step(cancelled)
        except (RuntimeError, ValueError) as err:
            log.exception("decoder step failed")
            del self._lanes[settings]
            for key in lane.keys:
                self._source_tokens.pop(key, None)
                if key[0] in self._jobs:
                    self._fail(self._jobs[key[0]], f"decoding failed: {reason(err)}")
            return
        self.metrics.steps.labels(self.name).inc()
        self.metrics.step_sentences.labels(self.name).observe(len(lane) + len(finished) + len(cancelled))
        for key in cancelled:
            self._source_tokens.pop(key, None)
        for done in finished:
            self._source_tokens.pop(done.key, None)
            job = self._jobs.get(done.key[0])
            if job is not None and not job.cancelled:
                job.results[done.key[1]] = done.hypotheses
                job.remaining -= 1
                if job.remaining == 0:
                    self._finish_with_model_work(job)
        if not len(lane):
            del self._lanes[settings]

    def _finish_with_model_work(self, job: Job) -> None:
        if job.finish is not None:
            try:
                job.finished = job.finish(job.sentences, job.results)
            except (RuntimeError, ValueError) as err:  # e.g. out of memory: this job fails, the loop goes on
                log.exception("finishing failed")
                self._fail(job, f"aligning or assessing the translations failed: {reason(err)}")
                return
        self._finish(job, "ok")

    def _fail(self, job: Job, reason: str) -> None:
        if job.ident in self._jobs:
            job.error = reason
            self._finish(job, "error")

    def _finish(self, job: Job, status: str) -> None:
        self._jobs.pop(job.ident, None)
        self.metrics.sentences.labels(self.name, status).inc(len(job.sentences))
        try:
            job.on_done(job)
        except Exception:  # a broken callback must not stop the loop
            log.exception("request callback failed")


def _run_task(task: Callable[[], Any], done: Future[Any]) -> None:
    try:
        done.set_result(task())
    except BaseException as err:  # the caller's to handle; the loop goes on
        done.set_exception(err)


class LoopSearches:
    """One request's searches, sent to decoding loops and waited for in the request's worker thread; called off
    together (:meth:`cancel`) when its client goes away. ``wait_for_room``: a full queue is waited out (a
    document's sentences, in blocks) rather than refused with :class:`QueueFull` (a text request's 429)."""

    def __init__(self, wait_for_room: bool = False) -> None:
        self.wait_for_room = wait_for_room
        self._lock = threading.Lock()
        self._running: list[tuple[DecodingLoop, Job]] = []
        self._cancelled = False

    def on(self, loop: DecodingLoop) -> SearchService:
        """These searches on ``loop`` (a pivoted request's two steps may run on two models' loops)."""
        return _OnLoop(self, loop)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            for loop, job in self._running:
                loop.cancel(job)

    def run(self, loop: DecodingLoop, job: Job) -> tuple[list[list[Hypothesis]], Any]:
        """Queue ``job`` on ``loop`` and wait for it; its hypotheses and what its ``finish`` made of them."""
        done = threading.Event()
        job.on_done = lambda _job: done.set()
        self._submit(loop, job)
        done.wait()
        with self._lock:
            self._running.remove((loop, job))
        if job.cancelled:
            raise Cancelled()
        if job.error:
            raise NmtError(job.error)
        return job.results, job.finished

    def _submit(self, loop: DecodingLoop, job: Job) -> None:
        while True:
            with self._lock:
                if self._cancelled:
                    raise Cancelled()
                try:
                    loop.submit(job)
                    self._running.append((loop, job))
                    return
                except QueueFull:
                    if not self.wait_for_room:
                        raise
            time.sleep(0.05)  # the queue is full of requests: wait for room


@dataclass
class _OnLoop:
    """:class:`LoopSearches` on one loop, as a Translator's :class:`~nmt_cli.decode.translation.SearchService`."""

    searches: LoopSearches
    loop: DecodingLoop

    def search(self, request: SearchRequest) -> tuple[list[list[Hypothesis]], Any]:
        job = Job(
            request.sources, request.config, request.nbest, _nobody, finish=request.finish,
            constraints=request.constraints, first_token=request.first_token,
        )  # fmt: skip
        return self.searches.run(self.loop, job)


def _nobody(_job: Job) -> None:
    """A job's ``on_done`` until :meth:`LoopSearches.run` sets its own."""
