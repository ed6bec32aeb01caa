"""The jobs' credit kept in the cluster, so that a new leader (or a restarted trimtab) goes on from it.

Owns CreditKeeper and `credit_of`. A job's credit is the attained GPU-seconds and the executed seconds it had
before its current run, or, pending, before it was preempted: what `las` and `steady` order by, and what a job's
run time resumes from. Running pods give a new leader their start times, not this. The credit lives in one
ConfigMap beside the Lease (`<scheduler-name>-credit` in the Lease's namespace, key `credit.json`), written by
the leader when it changed, at most every CREDIT_S, through the same fence as every write; read once when a term
begins. Beside it, what the plugins learned (Plugin.kept: drf's decayed usage, key `plugins`).
docs/kubernetes.md ("One Scheduler while leading") has the reasoning."""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Executor
from typing import Any, Protocol

from trimtab.scheduler import Scheduler

log = logging.getLogger(__name__)

CREDIT_S = 5.0  # the leader writes the credit at most this often
KEY = "credit.json"
Credit = dict[str, tuple[float, float]]  # job id -> (attained GPU-seconds, executed seconds) before its current run
Kept = dict[str, dict[str, Any]]  # plugin name -> what it learned (Plugin.kept: drf's decayed usage)


class CreditApi(Protocol):
    def read_config(self, namespace: str, name: str, key: str) -> str | None: ...

    def write_config(self, namespace: str, name: str, key: str, text: str) -> None: ...


def credit_of(scheduler: Scheduler) -> Credit:
    """Every job with credit: pending ones (preempted, or held while their controller recreates their pods) and
    running ones that ran before their current run. Another scheduler's pods (`bound:`) have none."""
    credit = {jid: (round(gpu_s, 1), round(scheduler.prior_executed_s.get(jid, 0.0), 1))
              for jid, gpu_s in scheduler.prior_attained_gpu_s.items() if gpu_s > 0}
    credit.update({jid: (round(run.prior_attained_gpu_s, 1), round(run.prior_executed_s, 1))
                   for jid, run in scheduler.running.items()
                   if run.prior_attained_gpu_s > 0 and not jid.startswith("bound:")})
    return credit


def plugins_kept(scheduler: Scheduler) -> Kept:
    """What each of the Scheduler's plugins learned (Plugin.kept), by plugin name; those with nothing left out."""
    return {p.name: kept for p in scheduler.framework.plugins if (kept := p.kept())}


def keep_plugins_on(scheduler: Scheduler, kept: Kept) -> None:
    """Give each plugin of the Scheduler what a plugin of its name kept before (Plugin.keep_on)."""
    for plugin in scheduler.framework.plugins:
        if plugin.name in kept:
            plugin.keep_on(kept[plugin.name])


class CreditKeeper:
    """`load()` the credit the last leader wrote (empty when there is none or it cannot be read); `save(scheduler)`
    after a cycle, which writes on `pool` when the credit changed and CREDIT_S has passed since the last write."""

    def __init__(self, api: CreditApi, namespace: str, name: str, pool: Executor) -> None:
        self.api, self.namespace, self.name, self.pool = api, namespace, name, pool
        self._written: str | None = None  # the text last written (None: unknown, write at the next chance)
        self._due_s = 0.0
        self.writes = 0

    def load(self) -> tuple[Credit, Kept]:
        """The jobs' credit and what the plugins kept, as the last leader wrote them."""
        try:
            text = self.api.read_config(self.namespace, self.name, KEY)
        except Exception as exc:  # a new term must not wait on it: the credit starts from zero, as before
            log.warning("cannot read the credit from ConfigMap %s/%s: %s", self.namespace, self.name, exc)
            return {}, {}
        self._written = text
        try:
            data = json.loads(text) if text else {}
            jobs, kept = data.get("jobs") or {}, data.get("plugins") or {}
            return ({str(jid): (float(v[0]), float(v[1])) for jid, v in jobs.items()},
                    {str(k): dict(v) for k, v in kept.items()})
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            log.warning("ConfigMap %s/%s: %s is not trimtab's credit (%s); starting from zero", self.namespace,
                        self.name, KEY, exc)
            return {}, {}

    def save(self, scheduler: Scheduler) -> None:
        if time.monotonic() < self._due_s:
            return
        credit = credit_of(scheduler)
        text = json.dumps({"version": 1, "jobs": {jid: list(v) for jid, v in sorted(credit.items())},
                           **({"plugins": kept} if (kept := plugins_kept(scheduler)) else {})},
                          separators=(",", ":"), sort_keys=True)
        if text == self._written:
            return
        self._written, self._due_s = text, time.monotonic() + CREDIT_S
        self.pool.submit(self._write, text)

    def _write(self, text: str) -> None:
        try:
            self.api.write_config(self.namespace, self.name, KEY, text)
            self.writes += 1
        except Exception as exc:  # written again after CREDIT_S
            log.warning("cannot write the credit to ConfigMap %s/%s: %s", self.namespace, self.name, exc)
            if self._written == text:
                self._written = None
