"""The pure parts under the reactor: admission, the store's correction by a re-list, the merge patch
of a status write, the conflict backoff, kstatus conditions and the settings object."""

from __future__ import annotations

import asyncio

import pytest

from spx.api.conditions import kstatus_conditions
from spx.controller.decide.admission import admit
from spx.controller.decide.store import Store
from spx.controller.settings import ENV_VARS, load_settings
from spx.controller.writes import Backoff, merge_patch_for

A, B, C = ("ml", "a"), ("ml", "b"), ("ml", "c")


@pytest.mark.parametrize(("key", "limit", "active", "waiting", "synced", "admitted"), [
    (A, 2, set(), [A], False, False),       # FM4: before the lists, nobody starts
    (A, 0, {B, C}, [], False, False),       # … not even without a limit
    (A, 0, {B, C}, [], True, True),         # no limit
    (A, 2, {B}, [A], True, True),           # a free slot
    (A, 2, {B, C}, [A], True, False),       # full
    (B, 1, set(), [A, B], True, False),     # FIFO: A first
    (A, 1, set(), [A, B], True, True),
    (A, 1, {A}, [], True, True),            # already holds its slot
    (B, 3, set(), [A, B, C], True, False),  # first come, first served: B waits for A's Job though 3 slots are free
    (C, 3, {A}, [A, B, C], True, False),    # … and C for B's
    (B, 3, {A}, [A, B, C], True, True),     # A holds its slot (its Job exists): B is the head now
])
def test_admission(key: tuple[str, str], limit: int, active: set, waiting: list, synced: bool, admitted: bool) -> None:
    v = admit(key, limit, active, waiting, synced)
    assert v.admitted == admitted and v.synced == synced and v.active == len(active)


@pytest.mark.parametrize(("key", "admitting", "admitted"), [
    (B, {A}, False),   # A was admitted and is creating its Job: B waits (their Jobs are created in order)
    (A, {A}, True),    # its own reservation does not hold it back
    (A, set(), True),
])
def test_admission_waits_for_the_job_ahead(key: tuple[str, str], admitting: set, admitted: bool) -> None:
    active = admitting  # (a reservation holds a slot)
    waiting = [k for k in (A, B, C) if k not in active]
    v = admit(key, 3, active, waiting, True, admitting)
    assert v.admitted == admitted and v.active == len(active)


def _job(name: str, rv: int, uid: str | None = None) -> dict:
    return {"metadata": {"namespace": "ml", "name": name, "uid": uid or f"{name}-uid", "resourceVersion": str(rv),
                         "ownerReferences": [{"kind": "ShardedProjectionExperiment", "uid": "exp-uid"}]}}


def test_fm1_a_relist_drops_jobs_deleted_while_the_watch_was_down() -> None:
    store = Store()
    for j in (_job("kept", 5), _job("deleted-during-410", 6), _job("created-after-the-list", 12)):
        store.put_job(j)
    removed = store.reconcile_list("job", [_job("kept", 7)], list_rv="10")
    assert [r["metadata"]["name"] for r in removed] == ["deleted-during-410"]
    assert sorted(k[1] for k in store.jobs) == ["created-after-the-list", "kept"]
    assert [j["metadata"]["name"] for j in store.jobs_of("exp-uid")] == ["created-after-the-list", "kept"]
    assert store.jobs[("ml", "kept")]["metadata"]["resourceVersion"] == "7"


def test_the_store_keeps_jobs_and_pods_without_what_the_operator_never_reads() -> None:
    store = Store()
    job = {**_job("j", 3), "spec": {"activeDeadlineSeconds": 60, "suspend": False,
                                    "template": {"spec": {"containers": [{"name": "bench", "env": [{"name": "X"}]}]}}},
           "status": {"active": 1}}
    job["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    pod = {"metadata": {"namespace": "ml", "name": "j-abc", "uid": "p1", "resourceVersion": "4",
                        "ownerReferences": [{"kind": "Job", "uid": "j-uid"}]},
           "spec": {"nodeName": "gpu-1", "containers": [{"name": "bench"}], "volumes": [{"name": "shm"}]},
           "status": {"phase": "Running"}}
    store.put_job(job)
    store.put_pod(pod)
    assert store.jobs[("ml", "j")]["spec"] == {"activeDeadlineSeconds": 60, "suspend": False}
    assert "managedFields" not in store.jobs[("ml", "j")]["metadata"] and store.jobs[("ml", "j")]["status"] == {"active": 1}
    assert store.pods[("ml", "j-abc")]["spec"] == {"nodeName": "gpu-1"}
    assert store.pods_of("j-uid")[0]["status"] == {"phase": "Running"}
    assert job["spec"]["template"] and pod["spec"]["containers"] and job["metadata"]["managedFields"]  # the events' own dicts


def test_merge_patch_removes_what_the_new_status_drops() -> None:
    old = {"phase": "Running", "kernel": {"points": [1], "gemmBackend": "x"}, "jobName": "j"}
    new = {"phase": "Pending", "kernel": {"points": [1]}, "message": "m"}
    assert merge_patch_for(old, new) == {"phase": "Pending", "jobName": None, "kernel": {"gemmBackend": None},
                                         "message": "m"}
    assert merge_patch_for(new, new) == {}


def test_conflict_backoff_grows_with_full_jitter_and_is_capped() -> None:
    draws = iter([1.0, 1.0, 1.0, 0.5, 1.0] + [1.0] * 20)
    b = Backoff(base_s=0.2, cap_s=2.0, rng=lambda: next(draws))
    delays = [b.next_delay("k") for _ in range(6)]
    assert delays[:5] == pytest.approx([0.2, 0.4, 0.8, 0.8, 2.0]) and delays[5] == 2.0
    b.reset("k")
    assert b.next_delay("k") == pytest.approx(0.2)
    real = Backoff(base_s=0.2, cap_s=30.0)
    assert all(0 <= real.next_delay("x") <= 30.0 for _ in range(40))


@pytest.mark.parametrize(("phase", "reason", "ready", "reconciling", "stalled"), [
    ("Pending", None, "False", "True", "False"),
    ("Running", None, "False", "True", "False"),
    ("Succeeded", "Pass", "True", "False", "False"),
    ("Succeeded", "Fail", "True", "False", "False"),
    ("Failed", "InfraFailed", "False", "False", "True"),
    ("Failed", "InvalidSpec", "False", "False", "True"),
])
def test_kstatus_conditions(phase: str, reason: str | None, ready: str, reconciling: str, stalled: str) -> None:
    got = {t: s for t, s, _, _ in kstatus_conditions(phase, reason, "m")}
    assert got == {"Ready": ready, "Reconciling": reconciling, "Stalled": stalled}


def test_settings_parse_every_variable_by_type() -> None:
    s = load_settings({"SPX_MAX_CONCURRENT_EXPERIMENTS": "2", "SPX_BENCH_IMAGE": "img:1", "SPX_SCHEDULE_TIMEOUT_SECONDS": "30",
                       "SPX_BENCH_COMMAND": "python -m spx run", "SPX_BENCH_SERVICE_ACCOUNT": "", "SPX_METRICS_PORT": "",
                       "SPX_BENCH_ENV_NCCL_DEBUG": "INFO", "SPX_KUBE_INSECURE": "true"})
    assert s.max_concurrent == 2 and s.bench_image == "img:1" and s.schedule_timeout_s == 30.0
    assert s.bench_command == ("python", "-m", "spx", "run") and s.bench_service_account is None
    assert s.metrics_port == 8080 and s.extra_env == {"NCCL_DEBUG": "INFO"} and s.kube_insecure is True
    assert load_settings({}, max_concurrent=9).max_concurrent == 9  # `spx operator --max-concurrent`
    assert "SPX_RESYNC_SECONDS" in ENV_VARS.values() and len(ENV_VARS) == len(set(ENV_VARS.values()))


@pytest.mark.parametrize(("env", "fragment"), [
    ({"SPX_MAX_CONCURRENT_EXPERIMENTS": "two"}, "SPX_MAX_CONCURRENT_EXPERIMENTS='two'"),
    ({"SPX_RECONCILE_WORKERS": "0"}, "SPX_RECONCILE_WORKERS='0': Input should be greater than or equal to 1"),
    ({"SPX_BENCH_IMAGE_PULL_POLICY": "Sometimes"}, "SPX_BENCH_IMAGE_PULL_POLICY='Sometimes'"),
])
def test_bad_settings_name_the_variable(env: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        load_settings(env)


def test_the_process_environment_is_read_by_the_settings_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPX_MAX_CONCURRENT_EXPERIMENTS", "3")
    monkeypatch.setenv("SPX_BENCH_ENV_FOO", "bar")
    s = load_settings()
    assert s.max_concurrent == 3 and s.extra_env["FOO"] == "bar"


def test_settings_of_the_policy_bind_address_and_crd_check() -> None:
    s = load_settings({"SPX_POLICY": '{"imageRegistries": ["ghcr.io/spx-dev/"]}', "SPX_METRICS_BIND_ADDRESS": "127.0.0.1",
                       "SPX_CRD_CHECK": "false"})
    assert s.policy.image_registries == ["ghcr.io/spx-dev/"] and s.metrics_bind_address == "127.0.0.1"
    assert s.crd_check is False
    d = load_settings({"SPX_POLICY": "", "SPX_METRICS_BIND_ADDRESS": ""})
    assert d.policy.image_registries == ["*"] and d.metrics_bind_address == "0.0.0.0" and d.crd_check is True
    assert {"SPX_POLICY", "SPX_METRICS_BIND_ADDRESS", "SPX_CRD_CHECK"} <= set(ENV_VARS.values())


@pytest.mark.parametrize(("raw", "fragment"), [
    ("{not json", "SPX_POLICY is not JSON"),
    ('{"imageRegistries": ["ghcr.io/spx-dev"]}', "must end in '/'"),
    ('{"imageDigests": ["sha256:abc"]}', "imageDigests.0"),
    ('{"tolerations": [{"key": "a", "effect": "Sometimes"}]}', "tolerations.0.effect"),
])
def test_a_bad_policy_names_spx_policy_and_the_field(raw: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="SPX_POLICY=") as err:
        load_settings({"SPX_POLICY": raw})
    assert fragment in str(err.value)


def test_the_process_environment_policy_is_parsed_by_spx_api_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPX_POLICY", '{"priorityClasses": ["batch-low"]}')
    assert load_settings().policy.priority_classes == ["batch-low"]
    monkeypatch.setenv("SPX_POLICY", "[]")
    with pytest.raises(ValueError, match="SPX_POLICY"):
        load_settings()


def test_the_work_queue_reports_its_depth_on_every_put_and_get() -> None:
    from spx.controller.workqueue import WorkQueue

    async def scenario() -> list[int]:
        depths: list[int] = []
        q = WorkQueue(on_depth=depths.append, hold_s=0)
        q.add(A)
        q.add(B)
        q.add(A)  # already queued: no put
        q.add(B, urgent=True)  # promoted: a put
        assert await q.get() == B
        assert await q.get() == A
        q.add(A)  # A is being processed: queued again when done, not now
        q.done(A)
        return depths

    assert asyncio.run(scenario()) == [1, 2, 2, 1, 0, 1]


def test_the_reactors_queue_sets_the_workqueue_depth_gauge() -> None:
    from spx.controller import metrics
    from spx.controller.kube import KubeClient
    from spx.controller.reactor import Reactor

    r = Reactor(settings=load_settings({}, metrics_port=0), client=KubeClient())
    r.queue.add(A)
    r.queue.add(B)
    assert metrics.REGISTRY.get_sample_value("spx_workqueue_depth") == 2
    asyncio.run(r.queue.get())
    assert metrics.REGISTRY.get_sample_value("spx_workqueue_depth") == 1


def test_every_operator_setting_is_in_the_settings_table_of_docs_operator_md() -> None:
    """docs/operator.md "Running it" lists every ``SPX_*`` variable of :class:`OperatorSettings` (a newcomer
    found five leader-election and retention variables documented nowhere but the chart)."""
    import re
    from pathlib import Path

    from spx.controller.settings import OperatorSettings

    doc = (Path(__file__).resolve().parents[3] / "docs" / "operator.md").read_text()
    tabled = set(re.findall(r"`(SPX_[A-Z_]+)`", " ".join(line for line in doc.splitlines() if line.startswith("| `SPX_"))))
    env = {str(f.validation_alias) for f in OperatorSettings.model_fields.values() if f.validation_alias}
    assert sorted(env - tabled) == []
