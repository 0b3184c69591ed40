"""The job helper against the environment DataBuild gives a run (no binary needed)."""
import datetime
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from databuild import Job, JobError


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def env_for(tmp_path: Path, outputs, inputs=(), **extra) -> dict:
    env = {
        "DATABUILD_OUTPUTS": json.dumps(list(outputs)),
        "DATABUILD_INPUTS": json.dumps(list(inputs)),
        "DATABUILD_DATA_DIR": str(tmp_path / "data"),
        "DATABUILD_JOB_RUN_ID": "run-1",
        "DATABUILD_BUILD_REQUEST_ID": "br-1",
        "DATABUILD_REPORT": str(tmp_path / "report.json"),
    }
    env.update(extra)
    return env


def test_fields_are_typed_as_the_pattern_declares_them(tmp_path):
    job = Job(env_for(
        tmp_path,
        ["sales/region=eu/n=7/date=2024-03-05"],
        DATABUILD_FIELD_REGION="eu",
        DATABUILD_FIELD_N="7",
        DATABUILD_FIELD_DATE="2024-03-05",
        DATABUILD_TYPES=json.dumps({"region": "str", "n": "int", "date": "date"}),
        DATABUILD_ATTEMPT="2",
    ))
    assert job.fields == {"region": "eu", "n": 7, "date": datetime.date(2024, 3, 5)}
    assert job.attempt == 2
    assert job.output == "sales/region=eu/n=7/date=2024-03-05"
    assert job.output_path() == tmp_path / "data" / job.output


def test_an_hour_is_a_utc_datetime(tmp_path):
    job = Job(env_for(
        tmp_path, ["events/hour=2026-12-01T23"], DATABUILD_FIELD_HOUR="2026-12-01T23",
        DATABUILD_TYPES=json.dumps({"hour": "hour"}),
    ))
    assert job.fields == {
        "hour": datetime.datetime(2026, 12, 1, 23, tzinfo=datetime.timezone.utc)
    }


def test_outputs_are_written_where_databuild_stages_them(tmp_path):
    staging = tmp_path / "data" / ".databuild-staging" / "run-1"
    job = Job(env_for(tmp_path, ["x/n=1"], DATABUILD_OUTPUT_DIR=str(staging)))
    assert job.output_path() == staging / "x/n=1"
    job.write_text("staged\n")
    assert (staging / "x/n=1").read_text() == "staged\n"
    assert not (tmp_path / "data" / "x/n=1").exists()


def test_a_field_that_is_not_of_its_type_is_named(tmp_path):
    job = Job(env_for(
        tmp_path, ["x/d=soon"], DATABUILD_FIELD_D="soon",
        DATABUILD_TYPES=json.dumps({"d": "date"}),
    ))
    with pytest.raises(JobError, match="field `d` = 'soon' is not of its type date"):
        job.fields


def test_outside_a_run_the_error_says_what_is_missing():
    with pytest.raises(JobError, match="`DATABUILD_OUTPUTS` is not set"):
        Job({}).outputs


def test_an_output_written_in_a_block_that_fails_is_not_there(tmp_path):
    job = Job(env_for(tmp_path, ["a/1"]))
    with pytest.raises(RuntimeError):
        with job.open_output() as f:
            f.write("half")
            raise RuntimeError("the job failed mid-write")
    assert not job.output_path().exists()
    assert list(job.output_path().parent.iterdir()) == []  # no temporary file left either
    job.write_text("whole\n")
    assert job.output_path().read_text() == "whole\n"
    # Readable as any file the job would have written itself.
    assert job.output_path().stat().st_mode & 0o777 == 0o666 & ~current_umask()


def test_a_job_killed_mid_write_leaves_no_partial_output(tmp_path):
    env = {**os.environ, **env_for(tmp_path, ["big/1"])}
    script = textwrap.dedent("""
        import sys
        from databuild import job
        with job.open_output() as f:
            f.write("x" * 1000)
            f.flush()
            print("writing", flush=True)
            sys.stdin.read()  # held open until killed
            f.write("the rest")
    """)
    child = subprocess.Popen([sys.executable, "-c", script], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"writing\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    out = tmp_path / "data" / "big" / "1"
    assert not out.exists(), "a killed writer left a partial partition"
    # What it had written is only in a hidden temporary file beside it.
    assert [p.name.startswith(".1.") for p in out.parent.iterdir()] == [True]


def test_report_missing_and_configs_speak_the_contract(tmp_path, capsys):
    job = Job(env_for(tmp_path, ["a/1"]))
    job.report({"rows": 3})
    assert json.loads((tmp_path / "report.json").read_text()) == {"rows": 3}
    with pytest.raises(SystemExit) as exit:
        job.missing(["raw/1", "raw/2"])
    assert exit.value.code == 1
    assert capsys.readouterr().out == 'DATABUILD_MISSING_DEPS ["raw/1", "raw/2"]\n'

    out = io.StringIO()
    job.configs(
        lambda ref: {"inputs": [f"raw/{ref[-1]}", {"ref": "lookup", "dep": "query"}], "args": [1], "env": {"K": 2}},
        argv=["a/1", "a/2"],
        out=out,
    )
    assert json.loads(out.getvalue()) == {"configs": [
        {"outputs": ["a/1"], "inputs": [{"ref": "raw/1"}, {"ref": "lookup", "dep": "query"}], "args": ["1"], "env": {"K": "2"}},
        {"outputs": ["a/2"], "inputs": [{"ref": "raw/2"}, {"ref": "lookup", "dep": "query"}], "args": ["1"], "env": {"K": "2"}},
    ]}
    with pytest.raises(JobError, match="unknown keys"):
        job.configs(lambda ref: {"input": []}, argv=["a/1"], out=io.StringIO())


def test_refs_too_long_for_the_environment_are_read_from_their_file(tmp_path):
    inputs = [f"leaf/date={i:05}" for i in range(30000)]
    listed = tmp_path / "run-1.inputs.json"
    listed.write_text(json.dumps(inputs))
    env = env_for(tmp_path, ["total/n=1"], DATABUILD_INPUTS_FILE=str(listed))
    del env["DATABUILD_INPUTS"]
    assert Job(env).inputs == inputs
    env["DATABUILD_INPUTS_FILE"] = str(tmp_path / "gone.json")
    with pytest.raises(JobError, match="DATABUILD_INPUTS_FILE"):
        Job(env).inputs


def test_query_inputs_are_the_present_ones_the_run_was_given(tmp_path):
    env = env_for(tmp_path, ["sum/1"], ["raw/1"], DATABUILD_QUERY_INPUTS=json.dumps(["lookup/a"]))
    assert Job(env).inputs == ["raw/1"]
    assert Job(env).query_inputs == ["lookup/a"]
    # A run of an older DataBuild was given none.
    del env["DATABUILD_QUERY_INPUTS"]
    assert Job(env).query_inputs == []


def test_report_metric_merges_numbers_of_outputs_into_the_report(tmp_path):
    job = Job(env_for(tmp_path, ["a/1"]))
    job.report_metric("a/1", "rows", 1234)
    job.report_metric("a/1", "nulls", 3)
    job.report({"source": "x"})
    assert json.loads((tmp_path / "report.json").read_text()) == {
        "source": "x",
        "metrics": {"a/1": {"rows": 1234, "nulls": 3}},
    }
    with pytest.raises(JobError, match="not one of the run's outputs"):
        job.report_metric("b/1", "rows", 1)
    with pytest.raises(JobError, match="must be a number"):
        job.report_metric("a/1", "rows", "12")
