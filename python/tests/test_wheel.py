"""The wheel's `databuild` binary (on PATH) with jobs written with the helper, and the client
against a real `databuild serve`."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from databuild import Client, ClientError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python_jobs"
BINARY = shutil.which("databuild")
pytestmark = pytest.mark.skipif(BINARY is None, reason="no databuild on PATH (install the wheel)")


@pytest.fixture
def project(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "p", ignore=shutil.ignore_patterns("data", ".databuild"))
    return tmp_path / "p"


def databuild(project, *args, check=True):
    out = subprocess.run([BINARY, *args], cwd=project, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"databuild {' '.join(args)} exited {out.returncode}: {out.stderr}")
    return out


def test_the_wheel_binary_is_the_crate_version():
    out = subprocess.run([BINARY, "--version"], capture_output=True, text=True, check=True)
    from importlib.metadata import version
    assert out.stdout.split() == ["databuild", version("databuild")]


def test_the_example_builds_with_the_helper(project):
    databuild(project, "build", "best/date={2024-03-01..2024-03-03}")
    data = project / "data"
    # numbers/date=D holds 1..day; totals sum the trailing three days; best the larger of two.
    assert (data / "numbers/date=2024-03-03").read_text() == "1\n2\n3\n"
    totals = json.loads((data / "totals/date=2024-03-03").read_text())
    assert totals == {"date": "2024-03-03", "total": 1 + 3 + 6, "days": 3}
    before = json.loads((data / "totals/date=2024-03-02").read_text())["total"]
    best = json.loads((data / "best/date=2024-03-03").read_text())
    assert best == {"date": "2024-03-03", "best": max(before, totals["total"])}
    # The report the job wrote is recorded with its run.
    explained = json.loads(databuild(project, "--json", "explain", "totals/date=2024-03-03").stdout)
    assert "total" in json.dumps(explained)
    # Built once: a second build runs nothing.
    again = json.loads(databuild(project, "--json", "build", "best/date={2024-03-01..2024-03-03}").stdout)
    assert again["built"] == []
    assert sorted(again["skipped"]) == [f"best/date=2024-03-0{d}" for d in (1, 2, 3)]


def test_the_client_builds_watches_and_asks_a_real_service(project):
    service = subprocess.Popen(
        [BINARY, "serve", "--bind", "127.0.0.1:0"],
        cwd=project, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "DATABUILD_TOKEN"},
    )
    try:
        for line in service.stderr:
            if line.startswith("databuild service listening on "):
                url = line.split()[-1]
                break
        client = Client(url)
        # wait() right after build(): it returns on the build's final status, never while the
        # build is only planned (`analysis_completed`), so what it built is live at once.
        first = client.wait(client.build(["totals/date=2024-02-26"]))
        assert first.status == "completed"
        assert client.status("totals/date=2024-02-26").status == "live"
        build = client.build(["totals/date={2024-02-27..2024-02-28}"])
        events = list(client.events(build))
        assert events[0].kind == "build_request" and events[0].status == "received"
        assert events[-1].kind == "build_request" and events[-1].status == "completed"
        assert {e.partition_ref for e in events if e.status == "available"} >= {
            "totals/date=2024-02-27", "totals/date=2024-02-28"}
        assert client.wait(build).status == "completed"
        assert client.status("totals/date=2024-02-28").status == "live"
        assert client.status("totals/date=2024-02-01").status == "missing"
        listed = [p["ref"] for p in client.partitions(pattern="numbers/*", status="live", limit=2)]
        # totals reads three days of numbers: 24-26 for the first build, then 27 and 28.
        assert listed == [f"numbers/date=2024-02-{d}" for d in (24, 25, 26, 27, 28)]
        explained = client.explain("totals/date=2024-02-28")
        assert explained["status"] == "live" and explained["report"]["total"] > 0
        want = client.want(["numbers/date=2024-02-20"])
        assert want["refs"] == ["numbers/date=2024-02-20"]
        assert want["want_id"] in [w["want_id"] for w in client.wants()]
        with pytest.raises(ClientError) as refused:
            client.build(["nothing/builds/this"])
        assert refused.value.status == 400
    finally:
        service.terminate()
        service.wait(timeout=30)
